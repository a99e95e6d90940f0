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

/// What one send path did, counted as it went.
#[derive(Debug, Clone)]
pub struct SendStats {
    /// Messages accepted by `send`.
    pub sends: u64,
    /// Payload bytes put on the socket.
    pub bytes: u64,
    /// Send operations that asked the kernel for zero-copy (`MSG_ZEROCOPY` calls, SEND_ZC
    /// requests, vmsplice/sendfile/splice calls count here too: they never copy on the send side).
    pub zc_attempts: u64,
    /// Zero-copy sends whose completion has been reported.
    pub zc_completions: u64,
    /// Of those, reported as copied by the kernel (per range bit for MSG_ZEROCOPY: see
    /// `completion` for the approximation).
    pub zc_copied: u64,
    /// Notifications read (error-queue ranges or io_uring notification CQEs).
    pub notifications: u64,
    /// Completion ids that matched no outstanding send.
    pub unexpected_completions: u64,
    /// Whether completions say anything about copying (false for SEND_ZC without usage
    /// reporting, where a notification carries no copied bit).
    pub copied_known: bool,
    /// Zero-copy sends that went by copy, by reason.
    pub fallbacks: Fallbacks,
    /// Sends the kernel accepted only in part and that were continued.
    pub short_sends: u64,
    /// Buffers never handed back because the kernel had not released them when the path was
    /// closed (the drain timed out); they are leaked rather than reused.
    pub leaked_buffers: u64,
    /// Zero-copy sends made from a registered (fixed) buffer.
    pub registered_sends: u64,
    /// Send-call-to-completion latency of zero-copy sends, nanoseconds: of every send on
    /// io_uring, of one zero-copy send in 16 on `msg-zerocopy` (a clock read per send cost
    /// 2-3% of its throughput at 4 KiB), so its largest is the largest of those.
    pub completion_latency_ns: Histogram<u64>,
    /// What the adaptive sender decided; `None` for the fixed paths.
    pub decisions: Option<Decisions>,
    /// How a connection on io_uring kept its sends in order (as the driver set it up:
    /// vectored, linked, or unlinked for datagrams); `None` for the paths off the ring.
    pub uring_order: Option<crate::Order>,
}

impl Default for SendStats {
    fn default() -> Self {
        SendStats {
            sends: 0,
            bytes: 0,
            zc_attempts: 0,
            zc_completions: 0,
            zc_copied: 0,
            notifications: 0,
            unexpected_completions: 0,
            copied_known: true,
            fallbacks: Fallbacks::default(),
            short_sends: 0,
            leaked_buffers: 0,
            registered_sends: 0,
            completion_latency_ns: growing_histogram(),
            decisions: None,
            uring_order: None,
        }
    }
}

impl SendStats {
    /// Fraction of completed zero-copy sends that the kernel copied anyway; `None` when there
    /// were no completions or the completions carry no copied bit.
    pub fn copied_fraction(&self) -> Option<f64> {
        (self.copied_known && self.zc_completions > 0)
            .then(|| self.zc_copied as f64 / self.zc_completions as f64)
    }

    /// Adds another sender's counts (for a run with several connections).
    pub fn merge(&mut self, o: &SendStats) {
        self.sends += o.sends;
        self.bytes += o.bytes;
        self.zc_attempts += o.zc_attempts;
        self.zc_completions += o.zc_completions;
        self.zc_copied += o.zc_copied;
        self.notifications += o.notifications;
        self.unexpected_completions += o.unexpected_completions;
        self.copied_known &= o.copied_known;
        self.fallbacks.add(&o.fallbacks);
        self.short_sends += o.short_sends;
        self.leaked_buffers += o.leaked_buffers;
        self.registered_sends += o.registered_sends;
        // Both histograms grow as needed, so adding cannot fail for lack of range.
        let _ = self.completion_latency_ns.add(&o.completion_latency_ns);
        self.uring_order = self.uring_order.or(o.uring_order);
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
            zc_attempts: self.zc_attempts,
            zc_completions: self.zc_completions,
            zc_copied: self.zc_copied,
            copied_fraction: self.copied_fraction(),
            notifications: self.notifications,
            fallbacks: self.fallbacks,
            short_sends: self.short_sends,
            leaked_buffers: self.leaked_buffers,
            registered_sends: self.registered_sends,
            completion_latency: LatencySummaryNs::of(&self.completion_latency_ns),
            decisions: self.decisions,
            uring_order: self.uring_order,
        }
    }
}

/// [`SendStats`] as plain data (serialisable).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct SendStatsSummary {
    /// Messages sent.
    pub sends: u64,
    /// Payload bytes sent.
    pub bytes: u64,
    /// Zero-copy send operations attempted.
    pub zc_attempts: u64,
    /// Zero-copy completions reported.
    pub zc_completions: u64,
    /// Completions reported as copied.
    pub zc_copied: u64,
    /// `zc_copied / zc_completions`; null when unknown.
    pub copied_fraction: Option<f64>,
    /// Notifications read.
    pub notifications: u64,
    /// Fallbacks to copy, by reason.
    pub fallbacks: Fallbacks,
    /// Short sends continued.
    pub short_sends: u64,
    /// Buffers leaked because the kernel never released them.
    pub leaked_buffers: u64,
    /// Zero-copy sends from registered (fixed) buffers.
    #[serde(default)]
    pub registered_sends: u64,
    /// Send-to-completion latency.
    pub completion_latency: LatencySummaryNs,
    /// The adaptive sender's decisions; null for the fixed paths.
    #[serde(default)]
    pub decisions: Option<Decisions>,
    /// How a ring connection kept its sends in order; null off the ring.
    #[serde(default)]
    pub uring_order: Option<crate::Order>,
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
}
