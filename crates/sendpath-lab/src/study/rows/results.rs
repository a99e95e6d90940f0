//! The rows study's results (stream, rr and the sweep presets of rows): one [`Row`] per point,
//! summarised from its windows ([`Repeat`]), in one [`Results`] that every exporter of the
//! study reads (JSON, CSV, the table, `summary.md`, `report.html`).

use crate::window::*;
use serde::{Deserialize, Serialize};

/// Version of the JSON layout; bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 2;

/// A whole results file.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Results {
    /// Layout version ([`SCHEMA_VERSION`]).
    pub schema_version: u32,
    /// Where and how the numbers were taken.
    pub environment: Environment,
    /// The sweep that produced the file, when one did.
    #[serde(default)]
    pub sweep: Option<SweepInfo>,
    /// How the windows were ordered: rounds over all points, each round shuffled.
    pub schedule: Schedule,
    /// One row per measured point.
    pub results: Vec<Row>,
    /// The run stopped after a signal: rows may hold fewer repeats than `schedule.rounds`, and
    /// points of a sweep may be missing (each row's `repeats` says what it holds).
    #[serde(default)]
    pub interrupted: bool,
}

/// The order windows were measured in. Each round measures every point once, in an order
/// shuffled with a generator seeded by `seed` and the round number, so that a slow phase of a
/// shared host does not land on one point.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Schedule {
    /// Rounds (repeats per point).
    pub rounds: u32,
    /// Seed of the shuffles.
    pub seed: u64,
}

/// The sweep settings a results file was made with (what `--resume` must match).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SweepInfo {
    /// Preset name.
    pub preset: String,
    /// Measured time per repeat, seconds.
    pub duration_s: f64,
    /// Warmup per repeat, seconds.
    pub warmup_s: f64,
    /// Repeats per point.
    pub repeat: u32,
    /// Points in the whole matrix.
    pub points_total: usize,
    /// Messages per system call of `copy` (`--copy-batch`); 1 in files written before it.
    #[serde(default = "one")]
    pub copy_batch: usize,
}

/// Zero-copy accounting for the row (summed over repeats and connections).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Zerocopy {
    /// The library's counts summed over the row's repeats.
    #[serde(flatten)]
    pub counts: sendpath::ZerocopyCounts,
    /// `copied / completions` over the repeats whose completions carry the copied bit; null
    /// when unknown or not applicable.
    pub copied_fraction: Option<f64>,
    /// Send-to-completion latency: median over repeats of each repeat's median, microseconds.
    pub completion_p50_us: Option<f64>,
    /// Median over repeats of each repeat's 99th percentile, microseconds.
    #[serde(default)]
    pub completion_p99_us: Option<f64>,
    /// The largest over all repeats, microseconds.
    #[serde(default)]
    pub completion_max_us: Option<f64>,
    /// Completions per notification (`completions / notifications`): how much the kernel
    /// coalesced; null without notifications.
    #[serde(default)]
    pub completions_per_notification: Option<f64>,
    /// Why the path is not the one asked for, if it fell back at open time.
    pub note: Option<String>,
    /// What `adaptive` decided, summed over repeats and connections (sends per path,
    /// switches, back-offs, retries, cap halvings); null for the fixed paths.
    #[serde(default)]
    pub decisions: Option<sendpath::Decisions>,
}

/// The page cache state of a file path's source file.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct FileCache {
    /// `--cold`: the file was dropped from the page cache before each window, no warmup read
    /// it, and no byte range was sent twice in one window.
    pub cold: bool,
    /// The filesystem holding the file (`ext4`, `xfs`, `tmpfs`, ...).
    pub filesystem: String,
    /// Size of the source file, bytes.
    pub file_bytes: u64,
    /// Fraction of the file in the page cache at window start (`mincore`), the largest over
    /// repeats.
    pub resident_fraction: Option<f64>,
}

/// What ran on the connections.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Workload {
    /// One-way bulk transfer.
    #[default]
    Stream,
    /// Request/response.
    Rr,
}

impl Workload {
    /// The stable name, as in results files.
    pub fn name(self) -> &'static str {
        match self {
            Workload::Stream => "stream",
            Workload::Rr => "rr",
        }
    }
}

impl std::fmt::Display for Workload {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// One measured point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `stream` or `rr`.
    pub workload: Workload,
    /// Send path.
    pub strategy: sendpath::Strategy,
    /// Message size (stream) or response size (rr), bytes.
    pub size_bytes: usize,
    /// Request size (rr), bytes.
    pub request_bytes: Option<usize>,
    /// Sender threads (and receiver threads); with `connections_per_thread` 1, the number of
    /// connections.
    pub threads: usize,
    /// Connections per sender thread, multiplexed on one io_uring ring (`--connections`).
    #[serde(default = "one")]
    pub connections_per_thread: usize,
    /// Buffers per message (memory paths; 1 unless `--fields`).
    pub fields: usize,
    /// `copy`, `discard`, `verify`, or `remote`.
    pub recv_mode: Receiver,
    /// Bytes the receiver asks for per read; null when the receiver is remote.
    pub recv_size_bytes: Option<usize>,
    /// Open-loop request rate (rr), requests per second; null for closed loop.
    pub rate_per_s: Option<f64>,
    /// File paths: the source file's page cache state.
    pub file_cache: Option<FileCache>,
    /// Raw per-repeat values, one per round.
    pub repeats: Vec<Repeat>,
    /// Throughput over repeats.
    pub throughput_gbps: Spread,
    /// Messages (or transactions) per second over repeats.
    pub messages_per_s: Spread,
    /// CPU per byte by role and kind, medians over repeats; null when not measured.
    pub cpu_ns_per_byte: Option<CpuNsPerByte>,
    /// Zero-copy accounting.
    pub zerocopy: Zerocopy,
    /// Bytes sent, received and verified, summed over repeats.
    pub integrity: Integrity,
    /// Latency percentiles from the histogram merged over all repeats (rr).
    pub latency_us: Option<LatencyUs>,
    /// Per-repeat spread of p50 and p99 (rr).
    pub latency_spread_us: Option<LatencySpreadUs>,
    /// Bytes per connection in the window, the repeat with the median min/max ratio
    /// (`--connections` above 1); null otherwise.
    #[serde(default)]
    pub connection_bytes: Option<ConnectionBytes>,
    /// Warnings about this row (wide spread, fallbacks).
    pub warnings: Vec<String>,
    /// The size mix messages were drawn from (`--size-mix`, e.g. `88:70,4K:20,1M:10`); then
    /// `size_bytes` is the mix's mean, rounded. Null for a single size.
    #[serde(default)]
    pub size_mix: Option<String>,
    /// Where memory paths got message buffers: `pool` (reused) or `fresh` (allocated and
    /// filled per message).
    #[serde(default)]
    pub alloc: crate::traffic::mix::Alloc,
    /// The window each repeat was asked to measure, seconds; null in files written before it
    /// was recorded.
    #[serde(default)]
    pub window_s: Option<f64>,
    /// `tcp`, or `udp` (`stream --proto udp`).
    #[serde(default)]
    pub protocol: crate::traffic::datagram::Protocol,
    /// UDP: the GSO segment size (`--gso`): each send of `size_bytes` left as datagrams of
    /// this many bytes; null for one datagram per send.
    #[serde(default)]
    pub gso_segment_bytes: Option<usize>,
    /// The route had no receiver (`--topology blackhole`): the device freed every frame, so
    /// the figures are of the send side only.
    #[serde(default)]
    pub send_side_only: bool,
    /// SEND_ZC sent from registered buffers (`--fixed-buffers`).
    #[serde(default)]
    pub fixed_buffers: bool,
    /// The moves of the payload the path makes by construction, from its source to the NIC
    /// (`page cache -> user buffer (CPU)`); null for adaptive, which makes those of the path
    /// it picks per send. A zero-copy path's sends the kernel copied are in `zerocopy`.
    #[serde(default)]
    pub data_copies: Option<Vec<String>>,
    /// Context switches and system calls per MiB of payload, by role, medians over repeats;
    /// null when none was measured.
    #[serde(default)]
    pub per_mib: Option<PerMib>,
    /// Sent in bursts with idle gaps (`--burst`, `1000/5ms`); null when sent flat out.
    #[serde(default)]
    pub burst: Option<String>,
    /// What ran the senders: `thread` (sendpath's blocking paths), `tokio` (its async
    /// sender, a task per sender) or `tokio-write` (tokio's own writes, no sendpath code: a
    /// `copy` row). `thread` in files written before it was recorded.
    #[serde(default)]
    pub runtime: crate::traffic::Runtime,
    /// How io_uring kept the order of the sends it had in flight: `vectored` (each
    /// connection's queued sends in one `SENDMSG` or `SENDMSG_ZC`, so a TCP stream's bytes
    /// stay in order), `linked` (one request per send, in a linked chain: `--uring-order
    /// linked`, registered buffers, or a kernel without SENDMSG_ZC), `unlinked` (datagrams:
    /// each send a whole message), `linked pairs` (uring-splice: file to pipe to socket); null
    /// for the paths that do not send on a ring.
    #[serde(default)]
    pub uring_order: Option<String>,
    /// Messages per system call or io_uring request that carried payload, median over the
    /// repeats: above 1 where the path put several messages in one call (io_uring's vectored
    /// requests, `copy` with `--copy-batch`); null where the path does not count its calls.
    #[serde(default)]
    pub messages_per_call: Option<f64>,
    /// How messages reached an io_uring path: `owned` (buffers the library hands out and
    /// takes back, from the heap) or `arena` (`--arena`: written in place in slots of memory
    /// the ring registered once); null for the paths off the ring.
    #[serde(default)]
    pub uring_buffers: Option<String>,
    /// `--arena`: the share of requests sent by the arena's registration index, median over
    /// the repeats (zero-copy requests; SEND takes no registered buffer); null without one.
    #[serde(default)]
    pub arena_registered: Option<f64>,
    /// `--recv zerocopy`: the share of the bytes received that the receiver mapped
    /// (`TCP_ZEROCOPY_RECEIVE`) rather than copied, over the repeats; null for the other
    /// receivers.
    #[serde(default)]
    pub recv_mapped_fraction: Option<f64>,
    /// TCP congestion control of the senders' connections: `--congestion`, else the
    /// namespace's default (`net.ipv4.tcp_congestion_control`). `bbr` paces each connection,
    /// with a timer of its own where no `fq` qdisc does it (loopback). Null for UDP, and in
    /// files written before it was recorded.
    #[serde(default)]
    pub tcp_congestion: Option<String>,
    /// What the kernel copied between user memory and socket buffers, as BPF counted it
    /// (`--metrics copies`); null when copies were not counted.
    #[serde(default)]
    pub kernel_copies: Option<KernelCopies>,
}

/// What the kernel copied over a row's windows.
fn kernel_copies(row: &Row) -> Option<KernelCopies> {
    let w: Vec<(u64, KernelCopied)> = row
        .repeats
        .iter()
        .filter_map(|r| r.roles.kernel_copied.map(|k| (r.bytes, k)))
        .collect();
    KernelCopies::over(&w)
}

/// Context switches and system calls per MiB of payload (2^20 bytes) in a window, by role:
/// medians over a row's repeats. Each is null where it was not measured.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct PerMib {
    /// Sender threads' context switches (voluntary and involuntary).
    pub switches_sender: Option<f64>,
    /// Our receiver threads' context switches.
    pub switches_receiver: Option<f64>,
    /// Sender threads' system calls (`--metrics syscalls`).
    pub syscalls_sender: Option<f64>,
    /// Our receiver threads' system calls.
    pub syscalls_receiver: Option<f64>,
    /// Allocations the process made.
    #[serde(default)]
    pub allocations: Option<f64>,
    /// Bytes it allocated.
    #[serde(default)]
    pub allocated_bytes: Option<f64>,
}

impl PerMib {
    /// The medians over `row`'s repeats; `None` when no repeat measured any.
    fn of(row: &Row) -> Option<PerMib> {
        let med = |f: &dyn Fn(&Repeat) -> Option<u64>| row.median_of(|r| r.per_mib(f(r)));
        let p = PerMib {
            switches_sender: med(&|r| r.roles.switches_sender.map(ContextSwitches::total)),
            switches_receiver: med(&|r| r.roles.switches_receiver.map(ContextSwitches::total)),
            syscalls_sender: med(&|r| r.roles.syscalls_sender),
            syscalls_receiver: med(&|r| r.roles.syscalls_receiver),
            allocations: med(&|r| r.heap.map(|h| h.allocations)),
            allocated_bytes: med(&|r| r.heap.map(|h| h.allocated_bytes)),
        };
        (p != PerMib::default()).then_some(p)
    }
}

fn one() -> usize {
    1
}

impl Row {
    /// The size column: `64KiB`, `64KiB fresh`, or `mix 88:70,4K:20,1M:10`.
    pub fn size_label(&self) -> String {
        let size = self.size_mix.as_ref().map_or_else(
            || crate::units::fmt_size(self.size_bytes),
            |m| format!("mix {m}"),
        );
        let size = match self.variant().as_str() {
            "" => size,
            v => format!("{size} {v}"),
        };
        match self.alloc {
            crate::traffic::mix::Alloc::Pool => size,
            crate::traffic::mix::Alloc::Fresh => format!("{size} fresh"),
            crate::traffic::mix::Alloc::Shared => format!("{size} shared"),
        }
    }

    /// What tells this row from others of its path and size: `udp`, `udp gso 1400`, `fixed`
    /// (registered buffers), `burst 1000/5ms`, `recv discard`, `recv zerocopy`; empty for a
    /// TCP row from normal buffers to a receiver that copies.
    pub fn variant(&self) -> String {
        let mut v = Vec::new();
        if matches!(self.recv_mode, Receiver::Discard | Receiver::Zerocopy) {
            v.push(format!("recv {}", self.recv_mode.name()));
        }
        if self.runtime.is_tokio() {
            v.push(self.runtime.name().to_string());
        }
        if self.protocol == crate::traffic::datagram::Protocol::Udp {
            v.push("udp".to_string());
        }
        if let Some(g) = self.gso_segment_bytes {
            v.push(format!("gso {g}"));
        }
        if self.fixed_buffers {
            v.push("fixed".into());
        }
        if self.in_place() {
            v.push("arena".into());
        }
        if let Some(b) = &self.burst {
            v.push(format!("burst {b}"));
        }
        v.join(" ")
    }

    /// A UDP row's datagrams summed over its repeats; `None` for TCP.
    pub fn datagram_totals(&self) -> Option<Datagrams> {
        let sum = |a: Option<u64>, b: Option<u64>| a.zip(b).map(|(a, b)| a + b);
        self.repeats
            .iter()
            .filter_map(|r| r.datagrams)
            .reduce(|a, b| Datagrams {
                sent: a.sent + b.sent,
                received: sum(a.received, b.received),
                lost: sum(a.lost, b.lost),
                reordered: sum(a.reordered, b.reordered),
                receiver_drops: sum(a.receiver_drops, b.receiver_drops),
            })
    }

    /// One size from pooled buffers to a receiver that reads: the rows the crossover and
    /// recommendation analysis compares and the charts draw (a mix, fresh buffers or a
    /// receiver that discards or maps are other questions, shown in the table). An io_uring
    /// path written in place (`--arena`) is plain: each path is compared the way it sends.
    pub(crate) fn is_plain(&self) -> bool {
        !matches!(self.recv_mode, Receiver::Discard | Receiver::Zerocopy)
            && self.size_mix.is_none()
            && self.alloc == crate::traffic::mix::Alloc::Pool
            && self.gso_segment_bytes.is_none()
            && !self.fixed_buffers
            && self.burst.is_none()
    }

    /// Whether the path wrote its messages in place, in a registered arena (`--arena`).
    pub(crate) fn in_place(&self) -> bool {
        self.uring_buffers.as_deref() == Some("arena")
    }

    /// The median over repeats of a per-repeat value; `None` when no repeat has it.
    pub(crate) fn median_of(&self, f: impl Fn(&Repeat) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self.repeats.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| Spread::of(&v).median)
    }

    /// TCP over the repeats that read it; `None` when none did.
    pub(crate) fn tcp_totals(&self) -> Option<TcpTotals> {
        let t: Vec<(&Repeat, TcpWindow)> = self
            .repeats
            .iter()
            .filter_map(|r| r.tcp.map(|t| (r, t)))
            .collect();
        if t.is_empty() {
            return None;
        }
        let conns = self.threads * self.connections_per_thread.max(1);
        let median = Spread::of(
            &self
                .repeats
                .iter()
                .map(|r| r.throughput_gbps)
                .collect::<Vec<_>>(),
        )
        .median;
        Some(TcpTotals {
            retrans_segs: t.iter().map(|(_, w)| w.retrans_segs).sum(),
            receiver_drops: t
                .iter()
                .filter_map(|(_, w)| w.receiver_drops)
                .reduce(|a, b| a + b),
            windows: t.len(),
            // A receiver slower than its sender holds the sender at its window in a healthy
            // window too: a stall also moves less than half the median.
            rwnd_stalled_windows: t
                .iter()
                .filter(|(r, w)| {
                    w.rwnd_limited_fraction(r.elapsed_s, conns) >= 0.5
                        && r.throughput_gbps < 0.5 * median
                })
                .count(),
            zero_window_windows: t
                .iter()
                .filter(|(_, w)| w.zero_window_connections.is_some_and(|n| n > 0))
                .count(),
        })
    }

    /// The repeat measured in `round`, if any.
    pub fn in_round(&self, round: u32) -> Option<&Repeat> {
        self.repeats.iter().find(|r| r.round == round)
    }

    /// Recomputes every summary field and warning from `repeats` (and the zero-copy note).
    pub(crate) fn summarise(&mut self) {
        self.repeats.sort_by_key(|r| r.round);
        let col = |f: fn(&Repeat) -> f64| -> Vec<f64> { self.repeats.iter().map(f).collect() };
        self.throughput_gbps = Spread::of(&col(|r| r.throughput_gbps));
        self.messages_per_s = Spread::of(&col(|r| r.messages_per_s));
        let cpu: Vec<CpuNsPerByte> = self
            .repeats
            .iter()
            .filter_map(|r| r.cpu.map(|c| c.ns_per_byte))
            .collect();
        self.cpu_ns_per_byte = CpuNsPerByte::median_of(&cpu);
        self.messages_per_call = self.median_of(|r| r.messages_per_call);
        self.arena_registered = self.median_of(|r| r.arena_registered);
        self.summarise_latency();
        self.summarise_counts();
        self.per_mib = PerMib::of(self);
        self.kernel_copies = kernel_copies(self);
        self.data_copies = self
            .strategy
            .data_copies()
            .map(|c| c.iter().map(ToString::to_string).collect());
        let mut fair: Vec<ConnectionBytes> = self
            .repeats
            .iter()
            .filter_map(|r| r.connection_bytes)
            .collect();
        fair.sort_by(|a, b| {
            let k = |c: &ConnectionBytes| c.min_over_max().unwrap_or(0.0);
            k(a).total_cmp(&k(b))
        });
        self.connection_bytes = fair.get(fair.len().saturating_sub(1) / 2).copied();
        if let Some(fc) = &mut self.file_cache {
            fc.resident_fraction = self
                .repeats
                .iter()
                .filter_map(|r| r.file_resident_fraction)
                .reduce(f64::max);
        }
        self.summarise_warnings();
    }

    fn summarise_latency(&mut self) {
        let mut merged = crate::units::new_histogram();
        for r in &self.repeats {
            for &(v, c) in &r.latency_hist_ns {
                merged.saturating_record_n(v, c);
            }
        }
        self.latency_us = (!merged.is_empty()).then(|| LatencyUs::of(&merged));
        let per: Vec<LatencyUs> = self.repeats.iter().filter_map(|r| r.latency_us).collect();
        self.latency_spread_us = (!per.is_empty()).then(|| LatencySpreadUs {
            p50: Spread::of(&per.iter().map(|l| l.p50).collect::<Vec<_>>()),
            p99: Spread::of(&per.iter().map(|l| l.p99).collect::<Vec<_>>()),
        });
    }

    fn summarise_counts(&mut self) {
        let mut z = Zerocopy {
            note: self.zerocopy.note.take(),
            ..Zerocopy::default()
        };
        let (mut known_completions, mut known_copied, mut known) = (0, 0, false);
        let mut i = Integrity {
            bytes_received: None,
            ..Integrity::default()
        };
        let (mut p50s, mut p99s, mut max) = (Vec::new(), Vec::new(), None::<f64>);
        for r in &self.repeats {
            let c = &r.zerocopy;
            z.counts.add(&c.counts);
            p99s.extend(c.completion_p99_us);
            if let Some(m) = c.completion_max_us {
                max = Some(max.map_or(m, |x| x.max(m)));
            }
            if let Some(d) = &c.decisions {
                z.decisions.get_or_insert_with(Default::default).merge(d);
            }
            if c.counts.copied_known && c.counts.completions > 0 {
                known = true;
                known_completions += c.counts.completions;
                known_copied += c.counts.copied;
            }
            p50s.extend(c.completion_p50_us);
            i.bytes_sent += r.integrity.bytes_sent;
            if let Some(b) = r.integrity.bytes_received {
                *i.bytes_received.get_or_insert(0) += b;
            }
            i.bytes_verified += r.integrity.bytes_verified;
            i.mismatches += r.integrity.mismatches;
            i.first_mismatch = i.first_mismatch.or(r.integrity.first_mismatch);
            if let Some(m) = r.integrity.bytes_mapped {
                *i.bytes_mapped.get_or_insert(0) += m;
            }
        }
        z.copied_fraction = (known && known_completions > 0)
            .then(|| known_copied as f64 / known_completions as f64);
        z.completion_p50_us = (!p50s.is_empty()).then(|| Spread::of(&p50s).median);
        z.completion_p99_us = (!p99s.is_empty()).then(|| Spread::of(&p99s).median);
        z.completion_max_us = max;
        let n = &z.counts;
        z.completions_per_notification =
            (n.notifications > 0).then(|| n.completions as f64 / n.notifications as f64);
        self.recv_mapped_fraction = i
            .bytes_mapped
            .zip(i.bytes_received.filter(|&b| b > 0))
            .map(|(m, b)| m as f64 / b as f64);
        self.zerocopy = z;
        self.integrity = i;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kernel_copies_are_per_payload_byte_and_null_where_a_counter_was_missing() {
        let window = |bytes, to_user| Repeat {
            bytes,
            roles: RoleCounts {
                kernel_copied: Some(KernelCopied {
                    to_user_sender: Some(0),
                    to_user_receiver: Some(to_user),
                    ..KernelCopied::default()
                }),
                ..RoleCounts::default()
            },
            ..Repeat::default()
        };
        let mut row = Row {
            repeats: vec![window(1000, 1000), window(2000, 1000), window(1000, 900)],
            ..Row::default()
        };
        row.summarise();
        let k = row.kernel_copies.unwrap();
        assert_eq!(k.receive_per_byte, Some(0.9), "the median of 1, 0.5, 0.9");
        assert_eq!(k.receive_bytes, Some(2900));
        assert_eq!((k.send_per_byte, k.send_bytes), (None, None), "not 0");
        assert_eq!(k.deferred_per_byte, None);
        row.repeats[0].roles.kernel_copied = None;
        row.repeats[1].roles.kernel_copied = None;
        row.repeats[2].roles.kernel_copied = None;
        row.summarise();
        assert_eq!(row.kernel_copies, None, "not counted at all");
    }

    #[test]
    fn only_uring_splice_names_its_order_before_a_window_says() {
        use sendpath::Strategy::*;
        assert_eq!(uring_order(UringSplice).as_deref(), Some("linked pairs"));
        for s in [Copy, Uring, UringZc, Adaptive] {
            assert_eq!(uring_order(s), None, "{s}: the library's counters say");
        }
    }

    #[test]
    fn spread_is_median_min_max() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[1.0, 2.0, 3.0, 10.0]).median, 2.5);
        assert!((s.relative_range() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn a_window_held_back_by_the_receivers_window_is_named_a_stall() {
        // Five 100 ms windows of one connection; TCP_INFO counts in 4 ms jiffies.
        let tcp = |rwnd_ms: u64, retrans: u64| TcpWindow {
            retrans_segs: retrans,
            receiver_drops: Some(retrans),
            connection_retrans_segs: retrans,
            busy_us: 100_000,
            rwnd_limited_us: rwnd_ms * 1000,
            zero_window_connections: Some(0),
        };
        let mut r = Row {
            threads: 1,
            connections_per_thread: 1,
            ..Row::default()
        };
        for (round, (t, w)) in [
            (0.5, tcp(4, 3)),
            (0.004, tcp(96, 0)),
            (0.5, tcp(0, 0)),
            (0.45, tcp(48, 1)),
            (0.52, tcp(96, 0)),
        ]
        .into_iter()
        .enumerate()
        {
            r.repeats.push(Repeat {
                round: round as u32,
                throughput_gbps: t,
                elapsed_s: 0.1,
                tcp: Some(w),
                ..Default::default()
            });
        }
        r.summarise();
        let t = r.tcp_totals().unwrap();
        assert_eq!(t.retrans_segs, 4);
        assert_eq!(t.receiver_drops, Some(4));
        assert_eq!(
            (t.windows, t.rwnd_stalled_windows),
            (5, 1),
            "held back 96% and nearly still: a stall; 48%, or 96% at full speed (a receiver slower than its sender): not"
        );
        assert!(
            r.warnings
                .iter()
                .any(|w| w.contains("1 of 5 windows stalled")
                    && w.contains("rwnd_limited")
                    && w.contains("no receiver closed its window")
                    && w.contains("--warmup")),
            "{:?}",
            r.warnings
        );
        // A receiver that advertised a window of 0 stopped reading: said so, not the route.
        r.repeats[1].tcp.as_mut().unwrap().zero_window_connections = Some(1);
        r.summarise();
        let w: Vec<&String> = r
            .warnings
            .iter()
            .filter(|w| w.contains("stalled"))
            .collect();
        assert_eq!(w.len(), 1, "{w:?}");
        assert!(
            w[0].contains("1 window(s) ended with a receiver advertising a window of 0")
                && w[0].contains("stopped reading")
                && !w[0].contains("route"),
            "{w:?}"
        );
        // The same 48 ms over two connections is a quarter of their time.
        assert!((tcp(48, 0).rwnd_limited_fraction(0.1, 2) - 0.24).abs() < 1e-9);
        // Rows without TCP (older files, rr) neither count nor warn.
        let mut old = Row::default();
        old.repeats.push(Repeat::default());
        old.summarise();
        assert!(old.tcp_totals().is_none());
        assert!(!old.warnings.iter().any(|w| w.contains("rwnd")));
    }

    #[test]
    fn a_percentile_not_measured_is_written_null_and_read_back() {
        let l = LatencyUs {
            p50: 519.0,
            p90: 1100.0,
            p99: 4140.0,
            p999: f64::NAN,
            max: 9090.0,
        };
        let text = serde_json::to_string(&l).unwrap();
        assert!(text.contains("\"p999\":null"), "{text}");
        let back: LatencyUs = serde_json::from_str(&text).unwrap();
        assert!(back.p999.is_nan());
        assert_eq!((back.p50, back.max), (519.0, 9090.0));
        assert!(serde_json::from_str::<LatencyUs>(
            r#"{"p50":"x","p90":1,"p99":1,"p999":1,"max":1}"#
        )
        .is_err());
    }

    #[test]
    fn wide_spread_warns_with_advice() {
        let mut r = Row::default();
        for (round, t) in [10.0, 10.5, 13.0].into_iter().enumerate() {
            r.repeats.push(Repeat {
                round: round as u32,
                throughput_gbps: t,
                ..Default::default()
            });
        }
        r.summarise();
        assert_eq!(r.throughput_gbps.median, 10.5);
        assert!(r.warnings[0].contains("--repeat"), "{:?}", r.warnings);
        let mut ok = Row::default();
        for (round, t) in [10.0, 10.2, 10.4].into_iter().enumerate() {
            ok.repeats.push(Repeat {
                round: round as u32,
                throughput_gbps: t,
                ..Default::default()
            });
        }
        ok.summarise();
        assert!(ok.warnings.is_empty());
    }

    #[test]
    fn an_arena_too_small_for_its_zero_copy_sends_says_so() {
        // The share of requests by index, and of the zero-copy sends.
        let row = |requests: f64, zc: f64| {
            let mut r = Row::default();
            for round in 0..3 {
                let mut rep = Repeat {
                    round,
                    throughput_gbps: 10.0,
                    arena_registered: Some(requests),
                    ..Default::default()
                };
                rep.zerocopy.counts.attempts = 1000;
                rep.zerocopy.counts.registered = (zc * 1000.0) as u64;
                r.repeats.push(rep);
            }
            r.summarise();
            r.warnings.join("\n")
        };
        let small = row(0.02, 0.02);
        assert!(
            small.contains("only 2% of the zero-copy sends") && small.contains("--arena"),
            "{small}"
        );
        // A loaded host's slow notifications left the default arena all in flight for a
        // third of the sends: a row of two ways mixed.
        let dry = row(0.66, 0.66);
        assert!(dry.contains("only 66% of the zero-copy sends"), "{dry}");
        assert!(
            !row(0.99, 0.99).contains("--arena"),
            "an arena that served the sends is not warned of"
        );
        assert!(
            !row(0.1, 1.0).contains("--arena"),
            "an adaptive row's SENDs (never by index) are not a small arena"
        );
    }

    #[test]
    fn notifications_are_summed_and_their_latency_summarised_over_repeats() {
        let mut r = Row::default();
        for (round, (notifs, p99, max)) in [(10, 50.0, 400.0), (40, 70.0, 900.0), (0, 0.0, 0.0)]
            .into_iter()
            .enumerate()
        {
            let mut rep = Repeat {
                round: round as u32,
                ..Default::default()
            };
            // A repeat without completions has no latency at all (null, never 0).
            if notifs > 0 {
                rep.zerocopy.counts.completions = 5 * notifs;
                rep.zerocopy.counts.notifications = notifs;
                rep.zerocopy.completion_p50_us = Some(p99 / 2.0);
                rep.zerocopy.completion_p99_us = Some(p99);
                rep.zerocopy.completion_max_us = Some(max);
            }
            r.repeats.push(rep);
        }
        r.summarise();
        let z = &r.zerocopy;
        assert_eq!((z.counts.completions, z.counts.notifications), (250, 50));
        assert_eq!(z.completions_per_notification, Some(5.0));
        assert_eq!(
            z.completion_p99_us,
            Some(60.0),
            "the median of the repeats' p99"
        );
        assert_eq!(z.completion_max_us, Some(900.0), "the largest of all");
        let none = Row::default();
        assert_eq!(none.zerocopy.completions_per_notification, None);
    }

    #[test]
    fn a_row_says_when_zero_copy_went_by_copy_and_when_windows_misled() {
        let mut r = Row {
            strategy: sendpath::Strategy::MsgZerocopy,
            size_bytes: 1 << 30,
            window_s: Some(0.5),
            ..Row::default()
        };
        for round in 0..2 {
            let mut rep = Repeat {
                round,
                elapsed_s: if round == 0 { 11.0 } else { 0.5 },
                bytes: 0,
                ..Default::default()
            };
            rep.zerocopy.counts.attempts = 1;
            rep.zerocopy.counts.fallbacks.enobufs = 171;
            r.repeats.push(rep);
        }
        r.summarise();
        let all = r.warnings.join("\n");
        assert!(
            all.contains("99.4% of 344 msg-zerocopy sends went by copy (ENOBUFS x342)")
                && all.contains("ulimit -l"),
            "{all}"
        );
        assert!(
            all.contains("lasted 11.0 s against the 0.5 s asked"),
            "{all}"
        );
        assert!(
            all.contains("2 window(s) moved less than one 1GiB message"),
            "{all}"
        );
        // A row whose sends mostly went zero-copy still says what share did not (before: a
        // share under half went unsaid).
        r.repeats
            .iter_mut()
            .for_each(|p| p.zerocopy.counts.attempts = 1000);
        r.summarise();
        let all = r.warnings.join("\n");
        assert!(
            all.contains("15% of 2342 msg-zerocopy sends went by copy (ENOBUFS x342)")
                && all.contains("mixes zero-copy and copied sends"),
            "{all}"
        );
        // SEND_ZC requests that failed for memory asked first: counted once (before: 2488 of
        // 2489 counted as 2488 of 4977, under half, and unsaid).
        r.strategy = sendpath::Strategy::UringZc;
        for p in &mut r.repeats {
            p.zerocopy.counts.fallbacks.enobufs = 0;
            p.zerocopy.counts.fallbacks.enomem = 1244;
            p.zerocopy.counts.attempts = 1244 + u64::from(p.round == 0);
        }
        r.summarise();
        let all = r.warnings.join("\n");
        assert!(
            all.contains(">99.9% of 2489 uring-zc sends went by copy (ENOMEM x2488)"),
            "{all}"
        );
        // A few of many: never "0%" (before: 96 of 44464 read "0% of 44464").
        for p in &mut r.repeats {
            p.zerocopy.counts.fallbacks.enomem = 48;
            p.zerocopy.counts.attempts = 22232;
        }
        r.summarise();
        let all = r.warnings.join("\n");
        assert!(
            all.contains("0.2% of 44464 uring-zc sends went by copy (ENOMEM x96)"),
            "{all}"
        );
        // None fell back: nothing said.
        for p in &mut r.repeats {
            p.zerocopy.counts.fallbacks.enomem = 0;
        }
        r.summarise();
        assert!(
            !r.warnings.join("\n").contains("went by copy"),
            "{:?}",
            r.warnings
        );
        r.repeats[1].cut_short = Some("the receivers were still reading".into());
        r.summarise();
        assert!(
            r.warnings
                .iter()
                .any(|w| w.starts_with("1 window(s) cut short: the receivers")),
            "{:?}",
            r.warnings
        );
        // A window cut short is told once, as a stall; the other is short of a message, and
        // neither claims the bytes arrived (before: "though the bytes arrived" on every one).
        let all = r.warnings.join("\n");
        assert!(
            all.contains("1 window(s) moved less than one 1GiB"),
            "{all}"
        );
        assert!(!all.contains("arrived"), "{all}");
    }

    #[test]
    fn corrupted_bytes_are_counted_over_repeats_and_the_first_is_placed() {
        let mut r = Row::default();
        for (bad, at) in [(0, None), (3, Some(4097)), (1, Some(9))] {
            let mut rep = Repeat::default();
            rep.integrity.mismatches = bad;
            rep.integrity.first_mismatch = at;
            r.repeats.push(rep);
        }
        r.summarise();
        assert_eq!(
            (r.integrity.mismatches, r.integrity.first_mismatch),
            (4, Some(4097))
        );
        let all = r.warnings.join("\n");
        assert!(
            all.contains(
                "4 bytes arrived corrupted, the first at byte 4097 of its connection's stream"
            ),
            "{all}"
        );
    }

    #[test]
    fn lost_datagrams_are_placed_where_the_receivers_drops_put_them() {
        let told = |drops: Option<u64>| {
            let mut r = Row::default();
            r.repeats.push(Repeat {
                datagrams: Some(Datagrams {
                    sent: 1000,
                    received: Some(400),
                    lost: Some(600),
                    reordered: Some(0),
                    receiver_drops: drops,
                }),
                ..Default::default()
            });
            r.summarise();
            r.warnings
                .into_iter()
                .find(|w| w.contains("datagrams were lost"))
                .unwrap_or_default()
        };
        // None dropped by the socket: not the receiver (before: "did not keep up" with 0).
        let w = told(Some(0));
        assert!(
            w.starts_with("60.0% of 1000 datagrams were lost (none dropped"),
            "{w}"
        );
        assert!(
            w.contains("lost on the way") && !w.contains("keep up"),
            "{w}"
        );
        let w = told(Some(600));
        assert!(
            w.contains("600 dropped by the receiving socket: the receiver did not keep up"),
            "{w}"
        );
        let w = told(Some(100));
        assert!(
            w.contains("100 dropped") && w.contains("the rest lost on the way"),
            "{w}"
        );
        let w = told(None);
        assert!(w.contains("not read"), "{w}");
    }
}
