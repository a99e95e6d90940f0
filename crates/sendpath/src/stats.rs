//! What every send path and ring connection counts as it goes ([`SendStats`]), as plain data
//! for reports ([`SendStatsSummary`]), and the buffers leaked by paths dropped unclosed.

use crate::policy::adaptive::Decisions;
use crate::policy::FallbackReason;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::sync::atomic::{AtomicU64, Ordering};

/// Buffers leaked by paths and drivers dropped without being closed.
static LEAKED_ON_DROP: AtomicU64 = AtomicU64::new(0);

/// Buffers the kernel still held when a path or driver was dropped without
/// [`SendPath::close`](crate::SendPath::close) or a [`UringDriver::finish`] (over the whole
/// process, so far). A drop never waits long for the kernel: it reads the completions that
/// are in, gives the rest a short grace, and leaks what is left (never reuses or frees memory
/// the kernel may still read). Close with a deadline to get this count per path, as an error.
///
/// [`UringDriver::finish`]: crate::UringDriver::finish
///
/// ```
/// assert_eq!(sendpath::leaked_on_drop(), 0);
/// ```
pub fn leaked_on_drop() -> u64 {
    LEAKED_ON_DROP.load(Ordering::Relaxed)
}

/// The longest a dropped path waits for the kernel's last completions.
pub(crate) const DROP_GRACE: std::time::Duration = std::time::Duration::from_millis(50);

/// The clock of completion latencies (a MSG_ZEROCOPY sender's, a ring's zero-copy
/// requests'): nanoseconds since it was made, read for one zero-copy send in
/// [`SendClock::EVERY`]. Reading the clock for every send cost
/// 2-3% of the throughput at 4 KiB (measured), and one in 16 still gives tens of thousands of
/// samples a second; the largest latency is the largest of those.
#[derive(Debug)]
pub(crate) struct SendClock {
    origin: std::time::Instant,
    until_timed: u32,
}

impl SendClock {
    const EVERY: u32 = 16;

    pub(crate) fn new() -> SendClock {
        SendClock {
            origin: std::time::Instant::now(),
            until_timed: 0,
        }
    }

    /// Nanoseconds since the sender opened.
    pub(crate) fn now_ns(&self) -> u64 {
        self.origin.elapsed().as_nanos() as u64
    }

    /// The time of this zero-copy send when it is one of the timed ones.
    #[inline]
    pub(crate) fn timed(&mut self) -> Option<u64> {
        if self.until_timed > 0 {
            self.until_timed -= 1;
            return None;
        }
        self.until_timed = Self::EVERY - 1;
        Some(self.now_ns())
    }
}

/// Counts buffers a drop had to leak ([`leaked_on_drop`]).
pub(crate) fn count_leaked_on_drop(n: u64) {
    LEAKED_ON_DROP.fetch_add(n, Ordering::Relaxed);
}

/// Sends that were meant to be zero-copy but went by copy, by reason.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Fallbacks {
    /// `ENOBUFS` after draining completions and retrying once.
    pub enobufs: u64,
    /// In-flight cap full after reaping completions.
    pub inflight_cap: u64,
    /// Zero-copy not supported by the socket or kernel.
    pub unsupported: u64,
    /// io_uring SEND_ZC returned `ENOMEM`.
    pub enomem: u64,
}

impl Fallbacks {
    /// Adds one fallback.
    pub(crate) fn count(&mut self, r: FallbackReason) {
        match r {
            FallbackReason::Enobufs => self.enobufs += 1,
            FallbackReason::InflightCap => self.inflight_cap += 1,
            FallbackReason::Unsupported => self.unsupported += 1,
            FallbackReason::Enomem => self.enomem += 1,
        }
    }

    /// All fallbacks.
    pub fn total(&self) -> u64 {
        self.enobufs + self.inflight_cap + self.unsupported + self.enomem
    }

    /// Adds another set of counts (of another connection or window).
    pub fn add(&mut self, o: &Fallbacks) {
        self.enobufs += o.enobufs;
        self.inflight_cap += o.inflight_cap;
        self.unsupported += o.unsupported;
        self.enomem += o.enomem;
    }
}

/// Percentiles of a latency histogram, nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySummaryNs {
    /// Number of samples.
    pub count: u64,
    /// Median.
    pub p50_ns: u64,
    /// 90th percentile.
    pub p90_ns: u64,
    /// 99th percentile.
    pub p99_ns: u64,
    /// 99.9th percentile.
    pub p999_ns: u64,
    /// Largest sample.
    pub max_ns: u64,
}

impl LatencySummaryNs {
    /// Summarises a histogram of nanosecond samples.
    pub(crate) fn of(h: &Histogram<u64>) -> LatencySummaryNs {
        if h.is_empty() {
            return LatencySummaryNs::default();
        }
        LatencySummaryNs {
            count: h.len(),
            p50_ns: h.value_at_quantile(0.50),
            p90_ns: h.value_at_quantile(0.90),
            p99_ns: h.value_at_quantile(0.99),
            p999_ns: h.value_at_quantile(0.999),
            max_ns: h.max(),
        }
    }
}

/// The largest value histograms hold: 100 s in nanoseconds.
pub(crate) const HISTOGRAM_MAX_NS: u64 = 100_000_000_000;

/// A histogram for per-connection counters: it grows as values come ([`record_ns`]), holding
/// counts only for the range recorded, and keeps 2 significant digits (values within 1%). An
/// unused one (a copy-only connection's completion latencies) costs a few hundred bytes, a
/// used one a few KiB, where the full 1 ns..100 s range at 3 digits takes ~230 KiB. Every
/// connection's [`SendStats`] has one, and a server has thousands of connections.
pub(crate) fn growing_histogram() -> Histogram<u64> {
    let mut h = Histogram::new_with_bounds(1, 2, 2).expect("valid histogram bounds");
    h.auto(true);
    h
}

/// Records `ns` (clamped to 1 ns..100 s) into a histogram from [`growing_histogram`] or
/// [`new_histogram`].
pub(crate) fn record_ns(h: &mut Histogram<u64>, ns: u64) {
    record_ns_n(h, ns, 1);
}

/// Records `n` durations of `ns` nanoseconds each (the sends one notification completed).
pub(crate) fn record_ns_n(h: &mut Histogram<u64>, ns: u64, n: u64) {
    let v = ns.clamp(1, HISTOGRAM_MAX_NS);
    if h.record_n(v, n).is_err() {
        for _ in 0..n {
            h.saturating_record(v);
        }
    }
}

/// What the kernel said of a path's zero-copy sends, counted from its notifications as they
/// come (error-queue ranges for MSG_ZEROCOPY, notification CQEs for SEND_ZC): the one type
/// that carries these counts from the kernel to a report, as it is in [`SendStats`] and its
/// summary.
///
/// ```no_run
/// # fn f(path: &dyn sendpath::SendPath) {
/// let z = &path.stats().zerocopy;
/// println!("{} of {} zero-copy sends copied anyway", z.copied, z.completions);
/// # }
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct ZerocopyCounts {
    /// Send operations that asked the kernel for zero-copy (`MSG_ZEROCOPY` calls, SEND_ZC
    /// requests; vmsplice, sendfile and splice calls count here too: they never copy on the
    /// send side).
    #[serde(alias = "zc_attempts")]
    pub attempts: u64,
    /// Zero-copy sends whose completion has been reported.
    #[serde(alias = "zc_completions")]
    pub completions: u64,
    /// Of those, reported copied by the kernel (per range bit for MSG_ZEROCOPY, which keeps
    /// only the first send's bit of a merged range: approximate there).
    #[serde(alias = "zc_copied")]
    pub copied: u64,
    /// Whether completions say whether the kernel copied (false for SEND_ZC without usage
    /// reporting, whose notifications carry no copied bit).
    #[serde(default = "yes")]
    pub copied_known: bool,
    /// Notifications read: error-queue ranges (merged by the kernel) or notification CQEs.
    #[serde(default)]
    pub notifications: u64,
    /// Completion ids that matched no outstanding send.
    #[serde(default)]
    pub unexpected: u64,
    /// Zero-copy sends made from a registered (fixed) buffer. With
    /// [`Options::uring_fixed_buffers`](crate::Options::uring_fixed_buffers) the ring's table
    /// holds `inflight.max_sends + 2 * uring_depth` buffers per connection (16384 at most);
    /// buffers past it go unregistered (registered sends are not held to the in-flight cap,
    /// so a pool grows while notifications are slow).
    #[serde(default, alias = "registered_sends")]
    pub registered: u64,
    /// Sends meant to be zero-copy that went by copy, by reason.
    #[serde(default)]
    pub fallbacks: Fallbacks,
}

fn yes() -> bool {
    true
}

impl Default for ZerocopyCounts {
    fn default() -> Self {
        ZerocopyCounts {
            attempts: 0,
            completions: 0,
            copied: 0,
            copied_known: true,
            notifications: 0,
            unexpected: 0,
            registered: 0,
            fallbacks: Fallbacks::default(),
        }
    }
}

impl ZerocopyCounts {
    /// Fraction of completed zero-copy sends the kernel copied anyway; `None` when there were
    /// no completions or they carry no copied bit.
    ///
    /// ```
    /// let z = sendpath::ZerocopyCounts { completions: 4, copied: 1, ..Default::default() };
    /// assert_eq!(z.copied_fraction(), Some(0.25));
    /// ```
    pub fn copied_fraction(&self) -> Option<f64> {
        (self.copied_known && self.completions > 0)
            .then(|| self.copied as f64 / self.completions as f64)
    }

    /// Adds another set of counts (of another connection or window).
    ///
    /// ```
    /// let mut a = sendpath::ZerocopyCounts { attempts: 2, ..Default::default() };
    /// a.add(&a.clone());
    /// assert_eq!(a.attempts, 4);
    /// ```
    pub fn add(&mut self, o: &ZerocopyCounts) {
        self.attempts += o.attempts;
        self.completions += o.completions;
        self.copied += o.copied;
        self.copied_known &= o.copied_known;
        self.notifications += o.notifications;
        self.unexpected += o.unexpected;
        self.registered += o.registered;
        self.fallbacks.add(&o.fallbacks);
    }
}

/// How a ring connection's buffers came from its driver's arena ([`crate::ArenaConfig`]).
///
/// ```
/// let a = sendpath::ArenaCounts { slots: 90, heap: 10, registered_requests: 80 };
/// assert_eq!(a.slots + a.heap, 100); // new buffers, by where they came from
/// ```
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ArenaCounts {
    /// Buffers handed out that were slots of the arena (messages written in place).
    pub slots: u64,
    /// Buffers handed out from the heap instead: no slot was free, or the message was larger
    /// than a slot.
    pub heap: u64,
    /// Requests (SEND, SEND_ZC, vectored SENDMSG_ZC) that named their bytes by the arena's
    /// registration index, so the kernel pinned nothing per send.
    pub registered_requests: u64,
}

impl ArenaCounts {
    fn add(&mut self, o: &ArenaCounts) {
        self.slots += o.slots;
        self.heap += o.heap;
        self.registered_requests += o.registered_requests;
    }
}

/// What one send path (or one ring connection) did, counted as it went.
///
/// ```no_run
/// # fn f(path: &dyn sendpath::SendPath) {
/// let s = path.stats();
/// println!("{} bytes in {} messages, {} short sends", s.bytes, s.sends, s.short_sends);
/// println!("fell back to copying {} times", s.zerocopy.fallbacks.total());
/// # }
/// ```
#[derive(Debug, Clone)]
pub struct SendStats {
    /// Messages accepted by `send`.
    pub sends: u64,
    /// Payload bytes put on the socket.
    pub bytes: u64,
    /// What the kernel said of the zero-copy sends, and every fallback to copying.
    pub zerocopy: ZerocopyCounts,
    /// Sends the kernel accepted only in part and that were continued.
    pub short_sends: u64,
    /// Buffers never handed back because the kernel had not released them when the path was
    /// closed (the drain timed out); they are leaked rather than reused.
    pub leaked_buffers: u64,
    /// Send-call-to-completion latency of zero-copy sends, nanoseconds: of one zero-copy send
    /// in 16 on `msg-zerocopy`, of one zero-copy request in 16 on io_uring (each of its sends
    /// counted), as a clock read per send cost 2-3% of the throughput at 4 KiB; so its largest
    /// is the largest of those.
    pub completion_latency_ns: Histogram<u64>,
    /// What the adaptive sender decided; `None` for the fixed paths.
    pub decisions: Option<Decisions>,
    /// How a connection on io_uring kept its sends in order (as the driver set it up:
    /// vectored, linked, or unlinked for datagrams); `None` for the paths off the ring.
    pub uring_order: Option<crate::Order>,
    /// System calls (or io_uring requests) that carried payload, on the paths that count
    /// them: `copy`, `serialize`, `gather`, `msg-zerocopy`, `read-send`, `sendfile`, `uring`,
    /// `uring-zc`, `adaptive` and the async sender; 0 on the others (`mmap-send`, `splice`,
    /// `vmsplice`, `uring-splice`). [`SendStats::messages_per_call`] reads it.
    pub calls: u64,
    /// Where a ring connection's buffers came from, when its driver has an arena; `None`
    /// otherwise.
    pub arena: Option<ArenaCounts>,
}

impl Default for SendStats {
    fn default() -> Self {
        SendStats {
            sends: 0,
            bytes: 0,
            zerocopy: ZerocopyCounts::default(),
            short_sends: 0,
            leaked_buffers: 0,
            completion_latency_ns: growing_histogram(),
            decisions: None,
            uring_order: None,
            calls: 0,
            arena: None,
        }
    }
}

impl SendStats {
    /// Fraction of completed zero-copy sends that the kernel copied anyway; `None` when there
    /// were no completions or the completions carry no copied bit.
    pub fn copied_fraction(&self) -> Option<f64> {
        self.zerocopy.copied_fraction()
    }

    /// Messages per system call (or io_uring request) that carried payload: above 1 where a
    /// path puts several messages in one call (a vectored request, a batched `sendmsg`);
    /// `None` where the path does not count its calls (see [`SendStats::calls`]).
    pub fn messages_per_call(&self) -> Option<f64> {
        (self.calls > 0).then(|| self.sends as f64 / self.calls as f64)
    }

    /// Adds another sender's counts (for a run with several connections).
    pub fn merge(&mut self, o: &SendStats) {
        self.sends += o.sends;
        self.calls += o.calls;
        self.bytes += o.bytes;
        self.zerocopy.add(&o.zerocopy);
        self.short_sends += o.short_sends;
        self.leaked_buffers += o.leaked_buffers;
        // Both histograms grow as needed, so adding cannot fail for lack of range.
        let _ = self.completion_latency_ns.add(&o.completion_latency_ns);
        self.uring_order = self.uring_order.or(o.uring_order);
        match (&mut self.arena, &o.arena) {
            (Some(a), Some(b)) => a.add(b),
            (None, Some(b)) => self.arena = Some(*b),
            _ => {}
        }
        match (&mut self.decisions, &o.decisions) {
            (Some(d), Some(e)) => d.merge(e),
            (None, Some(e)) => self.decisions = Some(*e),
            _ => {}
        }
    }

    /// A plain-data snapshot for reports.
    pub fn summary(&self) -> SendStatsSummary {
        SendStatsSummary {
            sends: self.sends,
            bytes: self.bytes,
            zerocopy: self.zerocopy,
            copied_fraction: self.copied_fraction(),
            short_sends: self.short_sends,
            leaked_buffers: self.leaked_buffers,
            completion_latency: LatencySummaryNs::of(&self.completion_latency_ns),
            decisions: self.decisions,
            uring_order: self.uring_order,
            messages_per_call: self.messages_per_call(),
            arena: self.arena,
        }
    }
}

/// [`SendStats`] as plain data, for reports (serialisable; reads what older versions wrote).
///
/// ```no_run
/// # fn f(path: &dyn sendpath::SendPath) {
/// println!("{}", serde_json::to_string(&path.stats().summary()).unwrap());
/// # }
/// ```
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SendStatsSummary {
    /// Messages sent.
    pub sends: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// What the kernel said of the zero-copy sends, and every fallback to copying.
    #[serde(flatten)]
    pub zerocopy: ZerocopyCounts,
    /// `zerocopy.copied / zerocopy.completions`; null when unknown.
    pub copied_fraction: Option<f64>,
    /// Short sends continued.
    pub short_sends: u64,
    /// Buffers leaked because the kernel never released them.
    pub leaked_buffers: u64,
    /// Send-to-completion latency.
    pub completion_latency: LatencySummaryNs,
    /// The adaptive sender's decisions; null for the fixed paths.
    #[serde(default)]
    pub decisions: Option<Decisions>,
    /// How a ring connection kept its sends in order; null off the ring.
    #[serde(default)]
    pub uring_order: Option<crate::Order>,
    /// Messages per system call or io_uring request; null where the path does not count
    /// its calls.
    #[serde(default)]
    pub messages_per_call: Option<f64>,
    /// Where a ring connection's buffers came from; null without an arena.
    #[serde(default)]
    pub arena: Option<ArenaCounts>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_histograms_keep_the_values_recorded() {
        let mut fixed = Histogram::<u64>::new_with_bounds(1, HISTOGRAM_MAX_NS, 3).unwrap();
        let mut grow = growing_histogram();
        for v in [1_000u64, 5_000_000, 7_000_000] {
            fixed.saturating_record(v);
            record_ns(&mut grow, v);
        }
        record_ns(&mut grow, u64::MAX);
        assert_eq!(grow.max(), grow.highest_equivalent(HISTOGRAM_MAX_NS));
        let p50 = grow.value_at_quantile(0.5);
        assert!((4_950_000..=5_050_000).contains(&p50), "{p50}: within 1%");
        assert_eq!(
            fixed.value_at_quantile(0.5),
            fixed.highest_equivalent(5_000_000)
        );
        // Merging a grown one into a fixed one and back loses nothing.
        let s = SendStats {
            completion_latency_ns: grow.clone(),
            ..SendStats::default()
        };
        let mut t = SendStats::default();
        t.merge(&s);
        assert_eq!(t.completion_latency_ns.len(), 4);
        assert!(fixed.add(&grow).is_ok());
    }

    #[test]
    fn a_summary_written_before_the_counts_were_one_type_reads_the_same() {
        let old = r#"{"sends": 3, "bytes": 30, "zc_attempts": 3, "zc_completions": 2,
            "zc_copied": 2, "copied_fraction": 1.0, "notifications": 1,
            "fallbacks": {"enobufs": 0, "inflight_cap": 1, "unsupported": 0, "enomem": 0},
            "short_sends": 0, "leaked_buffers": 0, "registered_sends": 1,
            "completion_latency": {"count": 0, "p50_ns": 0, "p90_ns": 0, "p99_ns": 0,
            "p999_ns": 0, "max_ns": 0}}"#;
        let s: SendStatsSummary = serde_json::from_str(old).unwrap();
        let z = s.zerocopy;
        assert_eq!(
            (z.attempts, z.completions, z.copied, z.registered),
            (3, 2, 2, 1)
        );
        assert_eq!((z.notifications, z.fallbacks.inflight_cap), (1, 1));
        assert!(z.copied_known);
        // And what is written now reads back whole.
        let again: SendStatsSummary =
            serde_json::from_str(&serde_json::to_string(&s).unwrap()).unwrap();
        assert_eq!(again, s);
    }
}
