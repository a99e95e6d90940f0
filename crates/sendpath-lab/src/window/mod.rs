//! What one measured window holds, shared by every study's results: a window's raw values
//! ([`Repeat`]) and its parts (CPU, TCP, zero-copy, datagrams, integrity, latency), the
//! environment a run records, and the spread of repeated figures.

use serde::{Deserialize, Serialize};

mod cpu;
pub use cpu::*;

/// Where and how the numbers were taken.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Environment {
    /// What `sendpath probe` found.
    pub probe: crate::probe::ProbeReport,
    /// `uname -r`.
    pub kernel: String,
    /// CPU model.
    pub cpu: String,
    /// The command line, as typed.
    pub command_line: Vec<String>,
    /// Start time, seconds since the Unix epoch.
    pub start_time_unix_s: u64,
    /// sendpath version.
    pub sendpath_version: String,
    /// The host profile `adaptive` decided from (null when no `adaptive` point ran).
    #[serde(default)]
    pub profile: Option<sendpath::Profile>,
    /// What the connections crossed when not loopback (`--topology netns`); null for
    /// loopback or `--connect`.
    #[serde(default)]
    pub topology: Option<crate::topology::TopologyInfo>,
    /// The `sendpath agent` that received (`--agent`), as HOST:PORT; null for our own receiver.
    #[serde(default)]
    pub agent: Option<String>,
    /// Why rows have no system-call counts (`syscalls_sender` null); null when counted.
    #[serde(default)]
    pub syscalls_unavailable: Option<String>,
    /// The kernel copy counters of `--metrics copies`, each with why it did not attach; null
    /// when copies were not counted.
    #[serde(default)]
    pub copy_counters: Option<Vec<crate::probe::CopyCounterState>>,
}

/// Median, min and max over repeats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Median of the repeats.
    pub median: f64,
    /// Smallest repeat.
    pub min: f64,
    /// Largest repeat.
    pub max: f64,
}

impl Spread {
    /// Median, min, max of `v` (empty gives zeros).
    pub(crate) fn of(v: &[f64]) -> Spread {
        if v.is_empty() {
            return Spread::default();
        }
        let mut s = v.to_vec();
        s.sort_by(|a, b| a.total_cmp(b));
        let n = s.len();
        let median = if n % 2 == 1 {
            s[n / 2]
        } else {
            (s[n / 2 - 1] + s[n / 2]) / 2.0
        };
        Spread {
            median,
            min: s[0],
            max: s[n - 1],
        }
    }

    /// (max - min) / median.
    pub(crate) fn relative_range(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / self.median
        } else {
            0.0
        }
    }
}

/// One repeat's raw values: one measured window of one point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Repeat {
    /// The round this window was measured in (0-based). Every round measures each point once,
    /// in a shuffled order; comparisons pair windows of the same round.
    pub round: u32,
    /// Payload throughput, Gbit/s (10^9 bit/s), as received (or sent, with `--connect`).
    pub throughput_gbps: f64,
    /// Messages per second.
    pub messages_per_s: f64,
    /// Payload bytes in the measured window.
    pub bytes: u64,
    /// Measured window, seconds.
    pub elapsed_s: f64,
    /// CPU time in the window by role and kind; null when not measured (`--metrics minimal`).
    pub cpu: Option<CpuWindow>,
    /// Estimated cycles per byte: sender-thread CPU ns x nominal clock. An estimate, not a count.
    pub est_cycles_per_byte: Option<f64>,
    /// Hardware cycles per byte (`perf_event_open`), when the CPU exposes counters.
    pub hw_cycles_per_byte: Option<f64>,
    /// Hardware instructions per byte.
    pub hw_instructions_per_byte: Option<f64>,
    /// Hardware LLC misses per byte.
    pub hw_llc_misses_per_byte: Option<f64>,
    /// Context switches of the process in the window; null when not measured.
    pub context_switches: Option<u64>,
    /// Context switches and system calls of the window's threads, by role (system calls with
    /// `--metrics syscalls`; the environment says why when not).
    #[serde(flatten)]
    pub roles: RoleCounts,
    /// What the whole process allocated in the window, and held at its end (the `sendpath`
    /// binary counts every allocation); null where allocations are not counted.
    #[serde(default)]
    pub heap: Option<HeapWindow>,
    /// Mean time to receive one message on one connection, microseconds.
    pub msg_time_us: f64,
    /// Latency percentiles of this window (request/response only).
    pub latency_us: Option<LatencyUs>,
    /// The window's latency histogram as (value ns, count) pairs, so that rows can merge the
    /// histograms of all their repeats (request/response only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub latency_hist_ns: Vec<(u64, u64)>,
    /// File paths: fraction of the source file in the page cache at window start (`mincore`).
    pub file_resident_fraction: Option<f64>,
    /// Zero-copy accounting of this window's connections.
    pub zerocopy: ZerocopyWindow,
    /// Messages per system call (or io_uring request) that carried payload, over the repeat;
    /// null where the path does not count its calls (`SendStats::calls`).
    #[serde(default)]
    pub messages_per_call: Option<f64>,
    /// `--arena`: the share of io_uring requests that named their bytes by the arena's
    /// registration index (zero-copy requests from its registered part); null without one.
    #[serde(default)]
    pub arena_registered: Option<f64>,
    /// Bytes sent, received and verified over the whole repeat (warmup included).
    pub integrity: Integrity,
    /// Why the repeat was cut short after its window (its receivers stopped before every byte
    /// arrived, so the arrival check was skipped); null when it ran to its end.
    #[serde(default)]
    pub cut_short: Option<String>,
    /// Bytes each connection moved in the window (min, median, max over connections), with
    /// several connections per sender thread (`--connections`); null otherwise.
    #[serde(default)]
    pub connection_bytes: Option<ConnectionBytes>,
    /// What TCP did on the window's connections, read from their sockets at the window's
    /// start and end; null where it was not read.
    #[serde(default)]
    pub tcp: Option<TcpWindow>,
    /// A UDP stream's datagrams over the whole repeat; null for TCP.
    #[serde(default)]
    pub datagrams: Option<Datagrams>,
}

impl Repeat {
    /// `n` per MiB (2^20 bytes) of the window's payload; `None` without `n` or payload.
    pub(crate) fn per_mib(&self, n: Option<u64>) -> Option<f64> {
        n.filter(|_| self.bytes > 0)
            .map(|n| n as f64 * (1u64 << 20) as f64 / self.bytes as f64)
    }

    /// Records the window's latencies: their percentiles (none when it has none) and the
    /// histogram's buckets, which rows merge over repeats.
    pub(crate) fn set_latency(&mut self, h: &hdrhistogram::Histogram<u64>) {
        self.latency_us = (!h.is_empty()).then(|| LatencyUs::of(h));
        self.latency_hist_ns = hist_pairs(h);
    }
}

/// A UDP stream's datagrams over a whole repeat (warmup, window and the drain after it); each
/// GSO segment counts as one datagram.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Datagrams {
    /// Datagrams the senders put on their sockets.
    pub sent: u64,
    /// Datagrams our receivers read; null when no receiver of ours read them (the black-hole
    /// route, `--connect`).
    pub received: Option<u64>,
    /// Sent but not read: `sent - received`.
    pub lost: Option<u64>,
    /// Datagrams that arrived after one with a higher sequence number.
    pub reordered: Option<u64>,
    /// Datagrams the receiving sockets dropped, mostly for a full receive buffer
    /// (`SK_MEMINFO_DROPS`).
    pub receiver_drops: Option<u64>,
}

/// TCP over a row's repeats.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TcpTotals {
    /// Segments retransmitted in the windows.
    pub(crate) retrans_segs: u64,
    /// Packets the receiving sockets dropped in the windows (null when not ours).
    pub(crate) receiver_drops: Option<u64>,
    /// Windows that read TCP.
    pub(crate) windows: usize,
    /// Windows in which the receivers' windows held the senders back half the time or more
    /// and that moved less than half the median of the row: stalls.
    pub(crate) rwnd_stalled_windows: usize,
    /// Windows that ended with a receiver advertising a window of 0 (it stopped reading).
    pub(crate) zero_window_windows: usize,
}

impl TcpTotals {
    /// What the stalls were, by what TCP reported: a receiver that closed its window stopped
    /// reading; a window held back while still open is bytes queued on a link or in buffers
    /// slower than the sender (`rwnd_limited` alone cannot tell these apart).
    pub(crate) fn stall_warning(&self) -> Option<String> {
        let (n, of) = (self.rwnd_stalled_windows, self.windows);
        let zero = self.zero_window_windows;
        if n == 0 && zero == 0 {
            return None;
        }
        let head = format!(
            "{n} of {of} windows stalled at the receiver's advertised window (rwnd_limited in TCP_INFO, half the window or more) and moved less than half the median"
        );
        Some(if zero > 0 {
            format!(
                "{head}; {zero} window(s) ended with a receiver advertising a window of 0 (tcpi_snd_wnd): the receiver stopped reading, so those windows measure the receiver, not the path"
            )
        } else {
            format!(
                "{head}; no receiver closed its window, so bytes queued faster than the route or the receive buffer drains them: those windows measure TCP and the route, not the path; a longer --warmup lets the window grow first"
            )
        })
    }
}

/// What TCP did on one window's connections, read from the sockets themselves.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpWindow {
    /// Segments the senders retransmitted in the window (`tcpi_total_retrans` of `TCP_INFO`).
    pub retrans_segs: u64,
    /// Packets the receivers' sockets dropped in the window (`SO_MEMINFO`, what `ss -m`
    /// prints as `d`); null when the receiver is not in this process.
    pub receiver_drops: Option<u64>,
    /// Segments retransmitted over the connections' whole life (warmup, window and the end
    /// of the run): a loss recovered only by a timer after the window shows here.
    #[serde(default)]
    pub connection_retrans_segs: u64,
    /// Microseconds in the window that the senders had data to send (`tcpi_busy_time`,
    /// summed over connections; the kernel counts in jiffies, 4 ms at HZ=250).
    #[serde(default)]
    pub busy_us: u64,
    /// Microseconds of those that the receivers' advertised windows held the senders back
    /// (`tcpi_rwnd_limited`, what `ss -ti` prints as `rwnd_limited`).
    #[serde(default)]
    pub rwnd_limited_us: u64,
    /// Connections whose receiver advertised a receive window of 0 at the window's end
    /// (`tcpi_snd_wnd` of `TCP_INFO`): receivers that stopped reading. Null when not read.
    #[serde(default)]
    pub zero_window_connections: Option<u64>,
}

impl TcpWindow {
    /// The share of a window of `elapsed_s` over `connections` that the receivers' windows
    /// held the senders back.
    pub(crate) fn rwnd_limited_fraction(&self, elapsed_s: f64, connections: usize) -> f64 {
        let total_us = elapsed_s * 1e6 * connections.max(1) as f64;
        if total_us > 0.0 {
            (self.rwnd_limited_us as f64 / total_us).min(1.0)
        } else {
            0.0
        }
    }
}

/// How evenly the connections shared one window: bytes per connection.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ConnectionBytes {
    /// Connections counted.
    pub connections: usize,
    /// The connection that moved least.
    pub min: u64,
    /// The median connection.
    pub median: u64,
    /// The connection that moved most.
    pub max: u64,
}

impl ConnectionBytes {
    /// Min, median (lower middle) and max of `v`.
    pub(crate) fn of(v: &[u64]) -> ConnectionBytes {
        let mut s = v.to_vec();
        s.sort_unstable();
        ConnectionBytes {
            connections: s.len(),
            min: s.first().copied().unwrap_or(0),
            median: s.get(s.len().saturating_sub(1) / 2).copied().unwrap_or(0),
            max: s.last().copied().unwrap_or(0),
        }
    }

    /// min / max: 1 when every connection moved the same; null when none moved anything.
    pub(crate) fn min_over_max(&self) -> Option<f64> {
        (self.max > 0).then(|| self.min as f64 / self.max as f64)
    }
}

/// Latency percentiles, microseconds. A percentile that was not measured (wrk prints no
/// p99.9) is NaN, written as `null` and read back from it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyUs {
    /// Median.
    #[serde(deserialize_with = "f64_or_null")]
    pub p50: f64,
    /// 90th percentile.
    #[serde(deserialize_with = "f64_or_null")]
    pub p90: f64,
    /// 99th percentile.
    #[serde(deserialize_with = "f64_or_null")]
    pub p99: f64,
    /// 99.9th percentile.
    #[serde(deserialize_with = "f64_or_null")]
    pub p999: f64,
    /// Largest.
    #[serde(deserialize_with = "f64_or_null")]
    pub max: f64,
}

/// A number, or `null` (what serde_json writes for NaN, a value not measured) read as NaN.
fn f64_or_null<'de, D: serde::Deserializer<'de>>(d: D) -> Result<f64, D::Error> {
    Ok(Option::<f64>::deserialize(d)?.unwrap_or(f64::NAN))
}

impl LatencyUs {
    /// From a histogram of nanoseconds.
    pub(crate) fn of(h: &hdrhistogram::Histogram<u64>) -> LatencyUs {
        let q = |x: f64| h.value_at_quantile(x) as f64 / 1000.0;
        LatencyUs {
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: h.max() as f64 / 1000.0,
        }
    }
}

/// The recorded buckets of a histogram, as (value, count) pairs.
pub(crate) fn hist_pairs(h: &hdrhistogram::Histogram<u64>) -> Vec<(u64, u64)> {
    h.iter_recorded()
        .map(|v| (v.value_iterated_to(), v.count_at_value()))
        .collect()
}

/// Spread of per-repeat latency percentiles, microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencySpreadUs {
    /// Per-repeat medians.
    pub p50: Spread,
    /// Per-repeat 99th percentiles.
    pub p99: Spread,
}

/// Zero-copy accounting of one window's connections: the library's counts, with the
/// completion latency and the adaptive sender's decisions of the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct ZerocopyWindow {
    /// What the kernel said of the zero-copy sends, and every fallback to copying, summed
    /// over the window's connections (`attempts`, `completions`, `copied`, `copied_known`,
    /// `notifications`, `unexpected`, `registered`, `fallbacks`).
    #[serde(flatten)]
    pub counts: sendpath::ZerocopyCounts,
    /// Send-to-completion latency, median over the window's completions, microseconds: from
    /// the send to when the sender read its completion (so it includes how long completions
    /// waited to be read, `--zc-reap-every`). msg-zerocopy times one zero-copy send in 16.
    pub completion_p50_us: Option<f64>,
    /// The same, 99th percentile.
    #[serde(default)]
    pub completion_p99_us: Option<f64>,
    /// The same, the largest.
    #[serde(default)]
    pub completion_max_us: Option<f64>,
    /// What `adaptive` decided in the window; null for the fixed paths.
    #[serde(default)]
    pub decisions: Option<sendpath::Decisions>,
}

/// Bytes sent and received, and receiver-side verification.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Integrity {
    /// Payload bytes the send path put on the sockets (whole repeat).
    pub bytes_sent: u64,
    /// Payload bytes our receivers read (whole repeat); null when the receiver is remote.
    pub bytes_received: Option<u64>,
    /// Bytes checked against the pattern (0 unless `--recv verify`).
    pub bytes_verified: u64,
    /// Bytes that differed.
    pub mismatches: u64,
    /// Where the first of them was: its offset in its connection's stream (null when none
    /// differed, or the receiver did not say).
    #[serde(default)]
    pub first_mismatch: Option<u64>,
    /// Of `bytes_received`, those `--recv zerocopy` mapped into the receiver's memory
    /// (`TCP_ZEROCOPY_RECEIVE`) rather than copied; null for the other receivers.
    #[serde(default)]
    pub bytes_mapped: Option<u64>,
}

/// What the receiving end did with the bytes, as a row records it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Receiver {
    /// sendpath's receiver read into a buffer.
    #[default]
    Copy,
    /// sendpath's receiver dropped the bytes in the kernel (`MSG_TRUNC`).
    Discard,
    /// sendpath's receiver checked every byte.
    Verify,
    /// sendpath's receiver mapped received pages (`TCP_ZEROCOPY_RECEIVE`), copying the rest.
    Zerocopy,
    /// A receiver elsewhere (`--connect`): what it did is not known here.
    Remote,
}

impl Receiver {
    /// The stable name, as in results files.
    pub fn name(self) -> &'static str {
        match self {
            Receiver::Copy => "copy",
            Receiver::Discard => "discard",
            Receiver::Verify => "verify",
            Receiver::Zerocopy => "zerocopy",
            Receiver::Remote => "remote",
        }
    }
}

impl From<crate::traffic::RecvMode> for Receiver {
    fn from(m: crate::traffic::RecvMode) -> Receiver {
        use crate::traffic::RecvMode;
        match m {
            RecvMode::Copy => Receiver::Copy,
            RecvMode::Discard => Receiver::Discard,
            RecvMode::Verify => Receiver::Verify,
            RecvMode::Zerocopy => Receiver::Zerocopy,
        }
    }
}

impl std::fmt::Display for Receiver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

/// The share of a window's io_uring requests sent by the arena's registration index; `None`
/// without an arena or requests.
pub(crate) fn arena_registered(stats: &sendpath::SendStats) -> Option<f64> {
    let a = stats.arena?;
    (stats.calls > 0).then(|| a.registered_requests as f64 / stats.calls as f64)
}

/// How a point's messages reach its ring ([`Row::uring_buffers`]): `arena` or `owned` for
/// `uring`, `uring-zc` and `adaptive` (its ring's tiers), `None` for the others.
pub(crate) fn uring_buffers(
    strategy: sendpath::Strategy,
    opts: &sendpath::Options,
) -> Option<String> {
    use sendpath::Strategy::{Adaptive, Uring, UringZc};
    let name = if opts.uring_arena.is_some() {
        "arena"
    } else {
        "owned"
    };
    matches!(strategy, Uring | UringZc | Adaptive).then(|| name.to_string())
}

/// `--arena`: which io_uring paths write their messages in place, in an arena their ring
/// registers once, and which send from owned buffers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Arena {
    /// Each path the way that measured faster (docs/results.md, "Written in place"):
    /// `uring` and `uring-zc` in place from the library's default arena (4 MiB: 64 slots of
    /// 64 KiB), and `adaptive` too, as `calibrate` measures its `uring-zc` tiers. Messages
    /// larger than the default slot, where too few would fit to keep a window's sends in
    /// place, and `--fixed-buffers` runs: owned.
    #[default]
    Auto,
    /// Every path from owned buffers.
    Off,
    /// `uring`, `uring-zc` and `adaptive` in place, from an arena of this many bytes.
    Bytes(usize),
}

impl Arena {
    /// The arena `strategy` sends messages of up to `largest` bytes from under this choice
    /// (`fixed`: `--fixed-buffers`), its bytes cut in slots of `largest` (at least one);
    /// `None`: owned buffers.
    pub fn config_for(
        self,
        strategy: sendpath::Strategy,
        fixed: bool,
        largest: usize,
    ) -> Option<sendpath::ArenaConfig> {
        use sendpath::Strategy::{Adaptive, Uring, UringZc};
        let d = sendpath::ArenaConfig::default();
        let bytes = match self {
            Arena::Off => return None,
            Arena::Auto if fixed || largest > d.slot_size => return None,
            Arena::Auto if !matches!(strategy, Uring | UringZc | Adaptive) => return None,
            Arena::Auto => d.slot_size * d.slots,
            Arena::Bytes(_) if !matches!(strategy, Uring | UringZc | Adaptive) => return None,
            Arena::Bytes(b) => b,
        };
        let slot = largest.max(1);
        Some(sendpath::ArenaConfig {
            slot_size: slot,
            slots: (bytes / slot.next_multiple_of(4096)).max(1),
        })
    }
}

/// What [`Row::uring_order`] holds before a window reports how its senders sent: the linked
/// splice pairs of `uring-splice`, which sends no chain of buffers; for the other ring paths
/// the library's counters say ([`sendpath::SendStats::uring_order`]).
pub(crate) fn uring_order(strategy: sendpath::Strategy) -> Option<String> {
    (strategy == sendpath::Strategy::UringSplice).then(|| "linked pairs".into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use sendpath::Strategy::{Adaptive, Copy, MsgZerocopy, Uring, UringZc};

    fn bytes(a: Arena, s: sendpath::Strategy, fixed: bool) -> Option<usize> {
        a.config_for(s, fixed, 64 << 10)
            .map(|c| c.slot_size * c.slots)
    }

    #[test]
    fn auto_writes_in_place_only_the_paths_that_measured_faster_so() {
        let default = sendpath::ArenaConfig::default();
        let four_mib = Some(default.slot_size * default.slots);
        for s in [Uring, UringZc, Adaptive] {
            assert_eq!(bytes(Arena::Auto, s, false), four_mib, "{s}");
        }
        for s in [Copy, MsgZerocopy] {
            assert_eq!(bytes(Arena::Auto, s, false), None, "{s}");
        }
        // Registered pool buffers asked for: owned.
        assert_eq!(bytes(Arena::Auto, UringZc, true), None);
        for s in [Uring, UringZc, Adaptive, Copy] {
            assert_eq!(bytes(Arena::Off, s, false), None, "{s}");
        }
        assert_eq!(bytes(Arena::Bytes(16 << 20), Uring, false), Some(16 << 20));
        assert_eq!(bytes(Arena::Bytes(16 << 20), Copy, false), None);
        // Past the default slot, too few would fit in 4 MiB: owned, unless a size is given.
        assert_eq!(Arena::Auto.config_for(UringZc, false, (64 << 10) + 1), None);
        assert!(Arena::Bytes(4 << 20)
            .config_for(UringZc, false, 1 << 20)
            .is_some());
    }

    #[test]
    fn an_arena_is_cut_in_slots_of_the_point_s_largest_message() {
        let opts = sendpath::Options {
            uring_arena: Arena::Bytes(1 << 20).config_for(UringZc, false, 1400),
            ..sendpath::Options::default()
        };
        let a = opts.uring_arena.expect("an arena");
        assert_eq!((a.slot_size, a.slots), (1400, 256));
        // A message larger than the arena still gets one slot.
        let a = Arena::Bytes(1 << 20).config_for(Uring, false, 4 << 20);
        assert_eq!(a.map(|a| (a.slot_size, a.slots)), Some((4 << 20, 1)));
        assert_eq!(uring_buffers(UringZc, &opts).as_deref(), Some("arena"));
        assert_eq!(uring_buffers(Copy, &opts), None);
    }
}
