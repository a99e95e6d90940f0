//! What a row warns of, from its repeats: spread, stalls, copied zero-copy sends, fallbacks,
//! lost datagrams, short windows.

use super::{Row, Workload};

impl Row {
    /// The row's warnings, from its summaries and repeats.
    pub(super) fn summarise_warnings(&mut self) {
        self.warnings = self.zerocopy.note.iter().cloned().collect();
        if let Some(f) = self.zerocopy.copied_fraction.filter(|f| *f > 0.5) {
            self.warnings.push(format!(
                "the kernel copied {} of the zero-copy sends (it always does when the receiver is on this host): this measures zero-copy bookkeeping plus a copy",
                crate::units::percent(f)
            ));
        }
        if self.strategy == sendpath::Strategy::MsgZerocopy
            && self.zerocopy.copied_fraction.is_some()
        {
            self.warnings.push(
                "msg-zerocopy copies are counted per notification range: a merged range carries only its first send's COPIED bit, so the fraction is approximate".into(),
            );
        }
        let spread = self.throughput_gbps.relative_range();
        if self.repeats.len() > 1 && spread > 0.10 {
            self.warnings.push(format!(
                "throughput varied by {:.0}% of the median across {} rounds: close other load, pin CPUs (--cpu), or raise --duration/--repeat",
                spread * 100.0,
                self.repeats.len()
            ));
        }
        if let Some(t) = self.tcp_totals() {
            self.warnings.extend(t.stall_warning());
        }
        let cut: Vec<&str> = self
            .repeats
            .iter()
            .filter_map(|r| r.cut_short.as_deref())
            .collect();
        if let Some(why) = cut.first() {
            self.warnings
                .push(format!("{} window(s) cut short: {why}", cut.len()));
        }
        self.warnings.extend(self.datagram_warnings());
        self.warnings.extend(self.fallback_warning());
        self.warnings.extend(self.arena_warning());
        self.warnings.extend(self.window_warnings());
        if self.repeats.len() == 1 {
            self.warnings
                .push("a single repeat: no spread is known (use --repeat 3 or more)".into());
        }
        if let Some(fc) = &self.file_cache {
            if fc.cold && fc.resident_fraction.is_some_and(|f| f > 0.05) {
                self.warnings.push(format!(
                    "--cold: {} of the file was still in the page cache at window start",
                    crate::units::percent(fc.resident_fraction.unwrap_or(0.0))
                ));
            }
        }
        if self.integrity.mismatches > 0 {
            let at = self.integrity.first_mismatch.map_or(String::new(), |o| {
                format!(", the first at byte {o} of its connection's stream")
            });
            self.warnings.push(format!(
                "{} bytes arrived corrupted{at}: this path is broken here",
                self.integrity.mismatches
            ));
        }
    }

    /// `--arena` with zero-copy sends, more than a quarter of which did not go by index (they
    /// are then pinned per send, and the row measures the two ways mixed): the arena was too
    /// small for the buffers in flight (connections x depth, plus those awaiting
    /// notification), so they came from the heap; or the kernel registered only part of it.
    /// Counted over the zero-copy sends: `SEND` takes no registered buffer (an adaptive
    /// row's copies are not a sign of a small arena).
    fn arena_warning(&self) -> Option<String> {
        // Rows without an arena have no share, and no warning.
        self.arena_registered?;
        let z = &self.zerocopy.counts;
        (z.attempts > 0 && z.registered * 4 < z.attempts * 3).then(|| {
            format!(
                "--arena: only {} of the zero-copy sends went from the arena by index; the rest came from the heap, as the arena had too few slots for the buffers in flight (give --arena more bytes), or from a part of it the kernel did not register (`ulimit -l`, said above if so)",
                share(z.registered, z.attempts)
            )
        })
    }

    /// What a UDP row's figures are: the send side only on the black-hole route; what was
    /// lost or reordered on the way to our receiver.
    fn datagram_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        if self.send_side_only {
            out.push("send side only: no receiver; frames dropped at the device's queue (no carrier), before the driver; an upper bound of what a NIC with offloads allows".into());
        }
        let Some(d) = self.datagram_totals() else {
            return out;
        };
        if let Some(lost) = d.lost.filter(|l| *l * 100 > d.sent) {
            // Where they were lost, as far as the receiving socket's drop counter tells it.
            let where_ = match d.receiver_drops {
                Some(0) => "none dropped by the receiving socket: they were lost on the way (the link's rate or a queue before the receiver)".to_string(),
                Some(n) if n >= lost => format!("{n} dropped by the receiving socket: the receiver did not keep up"),
                Some(n) => format!("{n} dropped by the receiving socket (the receiver did not keep up), the rest lost on the way"),
                None => "the receiving socket's drops were not read: lost on the way or by a receiver that did not keep up".into(),
            };
            out.push(format!(
                "{:.1}% of {} datagrams were lost ({where_}); the throughput counts only what arrived",
                lost as f64 * 100.0 / d.sent as f64,
                d.sent,
            ));
        }
        out
    }

    /// When any of a zero-copy path's sends went by copy: what share, why, and what to do.
    fn fallback_warning(&self) -> Option<String> {
        let f = self.zerocopy.counts.fallbacks;
        let fell = f.total();
        if fell == 0 {
            return None;
        }
        // Sends meant to go zero-copy: those that asked the kernel, and those that did not
        // for a reason counted here. A SEND_ZC the kernel could not pin memory for (ENOMEM)
        // asked first, so it is in `attempts` already.
        let sends = self.zerocopy.counts.attempts + fell - f.enomem;
        let reasons: Vec<String> = [
            ("ENOBUFS", f.enobufs),
            ("ENOMEM", f.enomem),
            ("in-flight cap", f.inflight_cap),
            ("unsupported", f.unsupported),
        ]
        .iter()
        .filter(|(_, n)| *n > 0)
        .map(|(k, n)| format!("{k} x{n}"))
        .collect();
        let advice = if f.enobufs + f.enomem > 0 {
            "the memory the kernel may pin for this user ran out: raise `ulimit -l` (and optmem_max) or run as root"
        } else if f.inflight_cap > 0 {
            "the in-flight cap was full: raise --inflight"
        } else {
            "the socket or kernel does not take zero-copy sends here"
        };
        let measures = if fell * 2 > sends {
            "this row measures copy, not zero-copy"
        } else {
            "this row mixes zero-copy and copied sends"
        };
        Some(format!(
            "{} of {sends} {} sends went by copy ({}): {advice}; {measures}",
            share(fell, sends),
            self.strategy,
            reasons.join(", ")
        ))
    }

    /// Windows that ran much longer than asked, or moved less than one message.
    fn window_warnings(&self) -> Vec<String> {
        let mut out = Vec::new();
        let longest = self.repeats.iter().map(|r| r.elapsed_s).fold(0.0, f64::max);
        if let Some(asked) = self.window_s.filter(|a| longest > a * 1.5 + 0.5) {
            out.push(format!(
                "a window lasted {longest:.1} s against the {asked:.1} s asked: the senders could not stop sooner (a slow receiver, many connections or large messages); the figures cover the whole {longest:.1} s"
            ));
        }
        let short = self
            .repeats
            .iter()
            .filter(|r| r.bytes < self.size_bytes as u64 && r.cut_short.is_none())
            .count();
        if short > 0 && self.workload == Workload::Stream && self.size_mix.is_none() {
            out.push(format!(
                "{short} window(s) moved less than one {} message, so their throughput is coarse (a message counts only once whole): raise --duration",
                crate::units::fmt_size(self.size_bytes)
            ));
        }
        out
    }
}

/// `part` of `whole` as a [`percent`](crate::units::percent).
fn share(part: u64, whole: u64) -> String {
    crate::units::percent(part as f64 / whole.max(1) as f64)
}
