//! The one result type every exporter reads (JSON, CSV, the table, later the HTML report).

use serde::{Deserialize, Serialize};

/// Version of the JSON layout; bumped when a field changes meaning.
pub const SCHEMA_VERSION: u32 = 1;

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
    /// One row per measured point.
    pub results: Vec<Row>,
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
}

/// Where and how the numbers were taken.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Environment {
    /// What `sendpath probe` found.
    pub probe: sendpath::probe::ProbeReport,
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
    pub fn of(v: &[f64]) -> Spread {
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
    pub fn relative_range(&self) -> f64 {
        if self.median > 0.0 {
            (self.max - self.min) / self.median
        } else {
            0.0
        }
    }
}

/// One repeat's raw values.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Repeat {
    /// Payload throughput, Gbit/s (10^9 bit/s), as received (or sent, with `--connect`).
    pub throughput_gbps: f64,
    /// Messages per second.
    pub messages_per_s: f64,
    /// Payload bytes in the measured window.
    pub bytes: u64,
    /// Measured window, seconds.
    pub elapsed_s: f64,
    /// Process CPU (user + system, all threads: both ends on loopback) per payload byte, ns.
    pub cpu_process_ns_per_byte: f64,
    /// Process user CPU per byte, ns.
    pub cpu_process_user_ns_per_byte: f64,
    /// Process system CPU per byte, ns.
    pub cpu_process_system_ns_per_byte: f64,
    /// System-wide busy CPU (`/proc/stat`) per byte, ns.
    pub cpu_system_ns_per_byte: f64,
    /// System-wide user time per byte, ns.
    pub cpu_system_user_ns_per_byte: f64,
    /// System-wide kernel time per byte, ns.
    pub cpu_system_kernel_ns_per_byte: f64,
    /// System-wide softirq time per byte, ns.
    pub cpu_system_softirq_ns_per_byte: f64,
    /// Estimated cycles per byte: process CPU ns x nominal clock. An estimate, not a count.
    pub est_cycles_per_byte: Option<f64>,
    /// Hardware cycles per byte (`perf_event_open`), when the CPU exposes counters.
    pub hw_cycles_per_byte: Option<f64>,
    /// Hardware instructions per byte.
    pub hw_instructions_per_byte: Option<f64>,
    /// Hardware LLC misses per byte.
    pub hw_llc_misses_per_byte: Option<f64>,
    /// Context switches of the process in the window.
    pub context_switches: u64,
    /// Mean time to receive one message on one connection, microseconds.
    pub msg_time_us: f64,
    /// Latency percentiles (request/response only).
    pub latency_us: Option<LatencyUs>,
}

/// Latency percentiles, microseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct LatencyUs {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// 99.9th percentile.
    pub p999: f64,
    /// Largest.
    pub max: f64,
}

impl LatencyUs {
    /// From a histogram of nanoseconds.
    pub fn of(h: &hdrhistogram::Histogram<u64>) -> LatencyUs {
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

/// CPU per byte, median over repeats.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuPerByte {
    /// Process CPU ns per byte.
    pub process: f64,
    /// System-wide busy CPU ns per byte.
    pub system: f64,
}

/// Zero-copy accounting for the row (summed over repeats and connections).
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Zerocopy {
    /// Zero-copy send operations attempted.
    pub attempts: u64,
    /// Completions reported.
    pub completions: u64,
    /// Fraction of completions the kernel copied; null when unknown or not applicable.
    pub copied_fraction: Option<f64>,
    /// Fallbacks to copy, by reason.
    pub fallbacks: sendpath::metrics::Fallbacks,
    /// Send-to-completion latency, median over all completions, microseconds.
    pub completion_p50_us: Option<f64>,
    /// Why the path is not the one asked for, if it fell back at open time.
    pub note: Option<String>,
}

/// Receiver-side verification.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct Integrity {
    /// Bytes checked against the pattern (0 unless `--recv verify`).
    pub bytes_verified: u64,
    /// Bytes that differed.
    pub mismatches: u64,
}

/// One measured point.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Row {
    /// `stream` or `rr`.
    pub workload: String,
    /// Send path.
    pub strategy: String,
    /// Message size (stream) or response size (rr), bytes.
    pub size_bytes: usize,
    /// Request size (rr), bytes.
    pub request_bytes: Option<usize>,
    /// Connections, each with its own sender (and receiver) thread.
    pub threads: usize,
    /// Fields per message (memory paths that gather fields).
    pub fields: usize,
    /// `copy`, `discard` or `verify`.
    pub recv_mode: String,
    /// Open-loop request rate (rr), requests per second; null for closed loop.
    pub rate_per_s: Option<f64>,
    /// Raw per-repeat values.
    pub repeats: Vec<Repeat>,
    /// Throughput over repeats.
    pub throughput_gbps: Spread,
    /// Messages (or transactions) per second over repeats.
    pub messages_per_s: Spread,
    /// CPU per byte, medians.
    pub cpu_ns_per_byte: CpuPerByte,
    /// Zero-copy accounting.
    pub zerocopy: Zerocopy,
    /// Verification.
    pub integrity: Integrity,
    /// Latency (rr: median over repeats of each percentile).
    pub latency_us: Option<LatencyUs>,
    /// Warnings about this row (wide spread, fallbacks).
    pub warnings: Vec<String>,
}

impl Row {
    /// The median over repeats of a per-repeat value; `None` when no repeat has it.
    pub fn median_of(&self, f: impl Fn(&Repeat) -> Option<f64>) -> Option<f64> {
        let v: Vec<f64> = self.repeats.iter().filter_map(f).collect();
        (!v.is_empty()).then(|| Spread::of(&v).median)
    }

    /// Fills the summary fields from `repeats` and adds the spread warning.
    pub fn summarise(&mut self) {
        let col = |f: fn(&Repeat) -> f64| -> Vec<f64> { self.repeats.iter().map(f).collect() };
        self.throughput_gbps = Spread::of(&col(|r| r.throughput_gbps));
        self.messages_per_s = Spread::of(&col(|r| r.messages_per_s));
        self.cpu_ns_per_byte = CpuPerByte {
            process: Spread::of(&col(|r| r.cpu_process_ns_per_byte)).median,
            system: Spread::of(&col(|r| r.cpu_system_ns_per_byte)).median,
        };
        let lats: Vec<LatencyUs> = self.repeats.iter().filter_map(|r| r.latency_us).collect();
        if !lats.is_empty() {
            let m = |f: fn(&LatencyUs) -> f64| {
                Spread::of(&lats.iter().map(f).collect::<Vec<_>>()).median
            };
            self.latency_us = Some(LatencyUs {
                p50: m(|l| l.p50),
                p90: m(|l| l.p90),
                p99: m(|l| l.p99),
                p999: m(|l| l.p999),
                max: m(|l| l.max),
            });
        }
        let spread = self.throughput_gbps.relative_range();
        if self.repeats.len() > 1 && spread > 0.10 {
            self.warnings.push(format!(
                "throughput varied by {:.0}% of the median across {} repeats: close other load, pin CPUs (--cpu), or raise --duration/--repeat",
                spread * 100.0,
                self.repeats.len()
            ));
        }
        if self.repeats.len() == 1 {
            self.warnings
                .push("a single repeat: no spread is known (use --repeat 3 or more)".into());
        }
        if self.integrity.mismatches > 0 {
            self.warnings.push(format!(
                "{} bytes arrived corrupted: this path is broken here",
                self.integrity.mismatches
            ));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spread_is_median_min_max() {
        let s = Spread::of(&[3.0, 1.0, 2.0]);
        assert_eq!((s.median, s.min, s.max), (2.0, 1.0, 3.0));
        assert_eq!(Spread::of(&[1.0, 2.0, 3.0, 10.0]).median, 2.5);
        assert!((s.relative_range() - 1.0).abs() < 1e-9);
    }

    #[test]
    fn wide_spread_warns_with_advice() {
        let mut r = Row::default();
        for t in [10.0, 10.5, 13.0] {
            r.repeats.push(Repeat {
                throughput_gbps: t,
                ..Default::default()
            });
        }
        r.summarise();
        assert_eq!(r.throughput_gbps.median, 10.5);
        assert!(r.warnings[0].contains("--repeat"), "{:?}", r.warnings);
        let mut ok = Row::default();
        for t in [10.0, 10.2, 10.4] {
            ok.repeats.push(Repeat {
                throughput_gbps: t,
                ..Default::default()
            });
        }
        ok.summarise();
        assert!(ok.warnings.is_empty());
    }
}
