//! Taking CPU and counter readings at the edges of a measured window.

use crate::results::Repeat;
use sendpath::metrics::cpu::{ProcessCpu, SystemCpu};
use sendpath::sys::perf::{HwEvent, PerfCounter};
use std::time::Instant;

/// What is read at the edges of each window: CPU time (process and system-wide) and hardware
/// counters, opened once per run before the worker threads start (the counters follow threads
/// created afterwards). With `minimal`, only time and bytes are taken: the baseline for showing
/// what measuring costs.
pub struct Meter {
    counters: Option<[PerfCounter; 3]>,
    minimal: bool,
}

impl Meter {
    /// Opens cycles, instructions and LLC misses (or none if any is unavailable), unless
    /// `minimal`.
    pub fn open(minimal: bool) -> Meter {
        if minimal {
            return Meter {
                counters: None,
                minimal,
            };
        }
        let c = (|| {
            Some([
                PerfCounter::open(HwEvent::Cycles).ok()?,
                PerfCounter::open(HwEvent::Instructions).ok()?,
                PerfCounter::open(HwEvent::LlcMisses).ok()?,
            ])
        })();
        Meter {
            counters: c,
            minimal,
        }
    }

    fn read(&mut self) -> Option<[u64; 3]> {
        let c = self.counters.as_mut()?;
        Some([c[0].read().ok()?, c[1].read().ok()?, c[2].read().ok()?])
    }
}

/// Readings at one instant.
pub struct Snapshot {
    at: Instant,
    process: ProcessCpu,
    system: SystemCpu,
    hw: Option<[u64; 3]>,
}

impl Snapshot {
    /// Reads everything now.
    pub fn take(hw: &mut Meter) -> Snapshot {
        if hw.minimal {
            return Snapshot {
                at: Instant::now(),
                process: ProcessCpu::default(),
                system: SystemCpu::default(),
                hw: None,
            };
        }
        Snapshot {
            at: Instant::now(),
            process: ProcessCpu::read().unwrap_or_default(),
            system: SystemCpu::read().unwrap_or_default(),
            hw: hw.read(),
        }
    }

    /// The per-byte figures for the window from `self` to `end`, for `bytes` payload bytes in
    /// `messages` messages over `conns` connections.
    pub fn window(
        &self,
        end: &Snapshot,
        bytes: u64,
        messages: u64,
        conns: usize,
        cpu_mhz: Option<f64>,
    ) -> Repeat {
        let elapsed = end.at.duration_since(self.at).as_secs_f64();
        let p = end.process.since(&self.process);
        let s = end.system.since(&self.system);
        let per = |ns: u64| {
            if bytes > 0 {
                ns as f64 / bytes as f64
            } else {
                0.0
            }
        };
        let proc_ns = p.user_ns + p.system_ns;
        let hw = match (self.hw, end.hw) {
            (Some(a), Some(b)) if bytes > 0 => Some([
                (b[0] - a[0]) as f64 / bytes as f64,
                (b[1] - a[1]) as f64 / bytes as f64,
                (b[2] - a[2]) as f64 / bytes as f64,
            ]),
            _ => None,
        };
        Repeat {
            throughput_gbps: bytes as f64 * 8.0 / elapsed / 1e9,
            messages_per_s: messages as f64 / elapsed,
            bytes,
            elapsed_s: elapsed,
            cpu_process_ns_per_byte: per(proc_ns),
            cpu_process_user_ns_per_byte: per(p.user_ns),
            cpu_process_system_ns_per_byte: per(p.system_ns),
            cpu_system_ns_per_byte: per(s.busy_ns()),
            cpu_system_user_ns_per_byte: per(s.user_ns),
            cpu_system_kernel_ns_per_byte: per(s.system_ns + s.irq_ns),
            cpu_system_softirq_ns_per_byte: per(s.softirq_ns),
            est_cycles_per_byte: cpu_mhz.map(|mhz| per(proc_ns) * mhz / 1000.0),
            hw_cycles_per_byte: hw.map(|h| h[0]),
            hw_instructions_per_byte: hw.map(|h| h[1]),
            hw_llc_misses_per_byte: hw.map(|h| h[2]),
            context_switches: p.context_switches,
            msg_time_us: if messages > 0 {
                elapsed * conns as f64 / messages as f64 * 1e6
            } else {
                0.0
            },
            latency_us: None,
        }
    }
}
