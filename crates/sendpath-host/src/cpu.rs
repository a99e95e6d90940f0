//! CPU time, process-wide (`getrusage`) and system-wide (`/proc/stat`).

use crate::sys;
use serde::{Deserialize, Serialize};

/// System-wide CPU time from the first line of `/proc/stat`, in nanoseconds.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct SystemCpu {
    /// user + nice.
    pub user_ns: u64,
    /// system.
    pub system_ns: u64,
    /// softirq.
    pub softirq_ns: u64,
    /// irq.
    pub irq_ns: u64,
    /// idle + iowait.
    pub idle_ns: u64,
    /// steal (time the hypervisor gave to others).
    pub steal_ns: u64,
}

impl SystemCpu {
    /// Reads `/proc/stat` now.
    pub fn read() -> std::io::Result<SystemCpu> {
        let s = std::fs::read_to_string("/proc/stat")?;
        Self::parse(&s, sys::host::clock_ticks_per_sec()).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "unexpected /proc/stat")
        })
    }

    /// Parses the aggregate `cpu` line of `/proc/stat` (times in ticks of `1/hz` s).
    pub fn parse(text: &str, hz: u64) -> Option<SystemCpu> {
        let line = text.lines().find(|l| l.starts_with("cpu "))?;
        let v: Vec<u64> = line
            .split_whitespace()
            .skip(1)
            .map(|x| x.parse().unwrap_or(0))
            .collect();
        let at = |i: usize| ticks_to_ns(v.get(i).copied().unwrap_or(0), hz);
        Some(SystemCpu {
            user_ns: at(0) + at(1),
            system_ns: at(2),
            idle_ns: at(3) + at(4),
            irq_ns: at(5),
            softirq_ns: at(6),
            steal_ns: at(7),
        })
    }

    /// Time spent between two readings.
    pub fn since(&self, earlier: &SystemCpu) -> SystemCpu {
        SystemCpu {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            system_ns: self.system_ns.saturating_sub(earlier.system_ns),
            softirq_ns: self.softirq_ns.saturating_sub(earlier.softirq_ns),
            irq_ns: self.irq_ns.saturating_sub(earlier.irq_ns),
            idle_ns: self.idle_ns.saturating_sub(earlier.idle_ns),
            steal_ns: self.steal_ns.saturating_sub(earlier.steal_ns),
        }
    }

    /// Busy time: everything but idle and steal.
    pub fn busy_ns(&self) -> u64 {
        self.user_ns
            .saturating_add(self.system_ns)
            .saturating_add(self.softirq_ns)
            .saturating_add(self.irq_ns)
    }
}

/// `ticks` of `1/hz` s in nanoseconds, without overflow (saturating at `u64::MAX`).
pub fn ticks_to_ns(ticks: u64, hz: u64) -> u64 {
    let ns = u128::from(ticks) * 1_000_000_000 / u128::from(hz.max(1));
    u64::try_from(ns).unwrap_or(u64::MAX)
}

/// One thread's CPU time, from `/proc/self/task/TID/stat` (utime and stime, in the clock ticks
/// `/proc/stat` also uses).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ThreadCpu {
    /// User time, ns.
    pub user_ns: u64,
    /// System time, ns.
    pub system_ns: u64,
}

impl ThreadCpu {
    /// Reads thread `tid` of this process now (a thread id from [`sys::host::gettid`]).
    pub fn read(tid: i32) -> std::io::Result<ThreadCpu> {
        let s = std::fs::read_to_string(format!("/proc/self/task/{tid}/stat"))?;
        Self::parse(&s, sys::host::clock_ticks_per_sec()).ok_or_else(|| {
            std::io::Error::new(std::io::ErrorKind::InvalidData, "unexpected task stat")
        })
    }

    /// Parses a `/proc/PID/task/TID/stat` line: utime and stime are the 14th and 15th fields,
    /// counted after the command name in parentheses (which may hold spaces).
    pub fn parse(text: &str, hz: u64) -> Option<ThreadCpu> {
        let after = &text[text.rfind(')')? + 1..];
        let f: Vec<&str> = after.split_whitespace().collect();
        let ticks = |i: usize| f.get(i)?.parse::<u64>().ok();
        Some(ThreadCpu {
            user_ns: ticks_to_ns(ticks(11)?, hz),
            system_ns: ticks_to_ns(ticks(12)?, hz),
        })
    }

    /// Sums threads.
    pub fn sum(v: impl IntoIterator<Item = ThreadCpu>) -> ThreadCpu {
        v.into_iter().fold(ThreadCpu::default(), |a, b| ThreadCpu {
            user_ns: a.user_ns.saturating_add(b.user_ns),
            system_ns: a.system_ns.saturating_add(b.system_ns),
        })
    }

    /// Time between two readings.
    pub fn since(&self, earlier: &ThreadCpu) -> ThreadCpu {
        ThreadCpu {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            system_ns: self.system_ns.saturating_sub(earlier.system_ns),
        }
    }
}

/// Process CPU time and context switches (`getrusage(RUSAGE_SELF)`), all threads.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ProcessCpu {
    /// User time, ns.
    pub user_ns: u64,
    /// System time, ns.
    pub system_ns: u64,
    /// Voluntary + involuntary context switches.
    pub context_switches: u64,
}

impl ProcessCpu {
    /// Reads `getrusage(RUSAGE_SELF)` now.
    pub fn read() -> std::io::Result<ProcessCpu> {
        let r = sys::host::rusage(false)?;
        Ok(ProcessCpu {
            user_ns: r.user_ns,
            system_ns: r.system_ns,
            context_switches: r.voluntary_csw + r.involuntary_csw,
        })
    }

    /// Time and switches between two readings.
    pub fn since(&self, earlier: &ProcessCpu) -> ProcessCpu {
        ProcessCpu {
            user_ns: self.user_ns.saturating_sub(earlier.user_ns),
            system_ns: self.system_ns.saturating_sub(earlier.system_ns),
            context_switches: self
                .context_switches
                .saturating_sub(earlier.context_switches),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_proc_stat_cpu_line() {
        let text = "cpu  100 5 50 1000 20 1 7 3 0 0\ncpu0 1 2 3 4 5 6 7 8 0 0\n";
        let c = SystemCpu::parse(text, 100).unwrap();
        assert_eq!(c.user_ns, 1_050_000_000);
        assert_eq!(c.system_ns, 500_000_000);
        assert_eq!(c.idle_ns, 10_200_000_000);
        assert_eq!(c.softirq_ns, 70_000_000);
        assert_eq!(c.steal_ns, 30_000_000);
        assert_eq!(
            c.busy_ns(),
            1_050_000_000 + 500_000_000 + 70_000_000 + 10_000_000
        );
        assert!(SystemCpu::parse("intr 1 2 3", 100).is_none());
        // Tick counts that would overflow `ticks * 1e9` in 64 bits saturate instead.
        let huge = format!("cpu  {} 0 0 0 0 0 0 0\n", u64::MAX);
        assert_eq!(SystemCpu::parse(&huge, 100).unwrap().user_ns, u64::MAX);
    }

    #[test]
    fn parses_a_task_stat_line_with_spaces_in_the_name() {
        let line =
            "4242 (send (path) 1) S 1 4242 4242 0 -1 4194560 100 0 0 0 250 75 0 0 20 0 3 0 1 0 0";
        let t = ThreadCpu::parse(line, 100).unwrap();
        assert_eq!(t.user_ns, 2_500_000_000);
        assert_eq!(t.system_ns, 750_000_000);
        assert!(ThreadCpu::parse("garbage", 100).is_none());
        let me = ThreadCpu::read(sys::host::gettid()).unwrap();
        assert!(me.user_ns < u64::MAX);
    }
}
