//! Taking CPU and counter readings at the edges of a measured window.

use crate::probe::CopyCounterState;
use crate::window::{
    ContextSwitches, CpuNsPerByte, CpuWindow, HeapWindow, KernelCopied, Repeat, RoleCounts,
};
use sendpath_host::copies::CopyCounter;
use sendpath_host::cpu::{ProcessCpu, SystemCpu, ThreadCpu};
use sendpath_host::perf::{HwEvent, PerfCounter};
use std::time::Instant;

/// What is read at the edges of each window: CPU time (per thread by role, and system-wide by
/// kind) and hardware counters, opened once per run before the worker threads start (the
/// counters follow threads created afterwards). With `minimal`, only time and bytes are taken:
/// the baseline for showing what measuring costs.
pub struct Meter {
    counters: Option<[PerfCounter; 3]>,
    minimal: bool,
    /// Count each role's system calls ([`Meter::count_syscalls`]).
    syscalls: bool,
    /// Count what the kernel copies ([`Meter::count_copies`]).
    copies: Option<CopyCounter>,
}

impl Meter {
    /// Opens cycles, instructions and LLC misses (or none if any is unavailable), unless
    /// `minimal`.
    pub fn open(minimal: bool) -> Meter {
        if minimal {
            return Meter {
                counters: None,
                minimal,
                syscalls: false,
                copies: None,
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
            syscalls: false,
            copies: None,
        }
    }

    /// Also counts the system calls of each window's sender and receiver threads (the
    /// `raw_syscalls:sys_enter` tracepoint, one counter per thread, up to [`MAX_COUNTED`]
    /// threads). While counted, every system call on the host is slower: compare speeds only
    /// between runs that both count or both do not. Why it cannot, when it cannot.
    pub fn count_syscalls(&mut self) -> Result<(), String> {
        if let Some(why) = SyscallCount::start().unavailable() {
            return Err(why);
        }
        self.syscalls = !self.minimal;
        Ok(())
    }

    /// Also counts the bytes the kernel copies between user memory and socket buffers, by
    /// role ([`sendpath_host::copies`]: BPF programs, root). The counters that attached, and
    /// why the others did not; `Err` when none can count.
    pub fn count_copies(&mut self) -> Result<Vec<CopyCounterState>, String> {
        let c = CopyCounter::open()?;
        let states = CopyCounterState::of(&c);
        if !self.minimal {
            self.copies = Some(c);
        }
        Ok(states)
    }

    fn read(&mut self) -> Option<[u64; 3]> {
        let c = self.counters.as_mut()?;
        Some([c[0].read().ok()?, c[1].read().ok()?, c[2].read().ok()?])
    }
}

/// Threads whose system calls are counted at most, one descriptor each.
pub const MAX_COUNTED: usize = 64;

/// The thread ids of a window's roles (see [`CpuWindow`]).
#[derive(Default)]
pub(crate) struct Roles {
    /// Threads that run the send path.
    pub(crate) senders: Vec<i32>,
    /// Threads of our own receiving end; `None` when the receiver is another program.
    pub(crate) receivers: Option<Vec<i32>>,
    /// Their system-call counters, opened at the first snapshot that counts (these threads
    /// live as long as the `Roles`); `None` inside when they cannot be opened.
    calls: std::cell::OnceCell<Option<RoleCalls>>,
}

/// One system-call counter per thread, by role.
struct RoleCalls {
    senders: Vec<PerfCounter>,
    receivers: Option<Vec<PerfCounter>>,
}

impl RoleCalls {
    fn open(roles: &Roles) -> Option<RoleCalls> {
        let open = |tids: &[i32]| -> Option<Vec<PerfCounter>> {
            tids.iter()
                .map(|&t| PerfCounter::syscalls_of_thread(t).ok())
                .collect()
        };
        let n = roles.senders.len() + roles.receivers.as_ref().map_or(0, Vec::len);
        if n > MAX_COUNTED {
            return None;
        }
        Some(RoleCalls {
            senders: open(&roles.senders)?,
            receivers: match &roles.receivers {
                Some(r) => Some(open(r)?),
                None => None,
            },
        })
    }
}

/// How much a counter read `start`, then `end`, grew; `None` unless both were read.
pub(crate) fn grew(start: Option<u64>, end: Option<u64>) -> Option<u64> {
    start.zip(end).map(|(a, b)| b.saturating_sub(a))
}

/// The sum of `counters` now.
fn calls_now(counters: &[PerfCounter]) -> Option<u64> {
    counters.iter().map(|c| c.read().ok()).sum()
}

/// Context switches and system calls of one role's threads at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct RoleReading {
    switches: Option<ContextSwitches>,
    calls: Option<u64>,
    /// Bytes copied into and from user memory, each when counted.
    to_user: Option<u64>,
    from_user: Option<u64>,
}

impl RoleReading {
    fn read(
        tids: &[i32],
        calls: Option<&[PerfCounter]>,
        copies: Option<&CopyCounter>,
    ) -> RoleReading {
        let switches: Option<Vec<ContextSwitches>> = tids
            .iter()
            .map(|&t| context_switches_in(&format!("/proc/self/task/{t}/status")))
            .collect();
        let copied = |f: fn(sendpath_host::copies::Copied) -> Option<u64>| {
            let c = copies?;
            tids.iter().map(|&t| c.read(t).and_then(f)).sum()
        };
        RoleReading {
            switches: switches.map(|v| v.into_iter().sum()),
            calls: calls.and_then(calls_now),
            to_user: copied(|c| c.to_user),
            from_user: copied(|c| c.from_user),
        }
    }

    /// What changed from `self` to `end`: switches, and calls less the counters' own reads
    /// (none: they are read from another thread).
    fn since(self, end: RoleReading) -> RoleReading {
        RoleReading {
            switches: self.switches.zip(end.switches).map(|(a, b)| b.since(a)),
            calls: grew(self.calls, end.calls),
            to_user: grew(self.to_user, end.to_user),
            from_user: grew(self.from_user, end.from_user),
        }
    }
}

/// Both roles' readings at one instant.
#[derive(Debug, Clone, Copy, Default)]
struct RolesReading {
    sender: RoleReading,
    /// `None` when the receiver is another program.
    receiver: Option<RoleReading>,
    /// Zero-copy bytes the host's kernel copied after the send, when copies are counted.
    deferred: Option<u64>,
    /// Copies were counted at this instant.
    copies: bool,
}

impl RolesReading {
    /// What the roles' threads did from `self` to `end`.
    fn window(self, end: RolesReading) -> RoleCounts {
        let s = self.sender.since(end.sender);
        let r = self.receiver.zip(end.receiver).map(|(a, b)| a.since(b));
        RoleCounts {
            switches_sender: s.switches,
            switches_receiver: r.and_then(|r| r.switches),
            syscalls_sender: s.calls,
            syscalls_receiver: r.and_then(|r| r.calls),
            kernel_copied: (self.copies && end.copies).then(|| KernelCopied {
                from_user_sender: s.from_user,
                to_user_sender: s.to_user,
                to_user_receiver: r.and_then(|r| r.to_user),
                from_user_receiver: r.and_then(|r| r.from_user),
                deferred: grew(self.deferred, end.deferred),
            }),
        }
    }
}

impl Roles {
    /// Collects the thread ids the workers of a window send as they start: `(true, tid)` from
    /// each of `senders` sender threads and `(false, tid)` from each of `receivers` receiver
    /// threads (`None`: the receiver is another program).
    pub(crate) fn gather(
        rx: &std::sync::mpsc::Receiver<(bool, i32)>,
        senders: usize,
        receivers: Option<usize>,
    ) -> Roles {
        let mut roles = Roles {
            senders: Vec::with_capacity(senders),
            receivers: receivers.map(Vec::with_capacity),
            calls: Default::default(),
        };
        for (is_sender, tid) in rx.iter().take(senders + receivers.unwrap_or(0)) {
            match (is_sender, roles.receivers.as_mut()) {
                (true, _) => roles.senders.push(tid),
                (false, Some(r)) => r.push(tid),
                (false, None) => {}
            }
        }
        roles
    }

    /// Each role's context switches, system calls when `count` (its counters opened on
    /// first use), and kernel copies when `copies` is given (which then watches exactly
    /// these threads).
    fn counts(&self, count: bool, mut copies: Option<&mut CopyCounter>) -> RolesReading {
        let calls = count
            .then(|| self.calls.get_or_init(|| RoleCalls::open(self)).as_ref())
            .flatten();
        if let Some(c) = copies.as_deref_mut() {
            let all: Vec<i32> = self
                .senders
                .iter()
                .chain(self.receivers.iter().flatten())
                .copied()
                .collect();
            if c.watch(&all).is_err() {
                copies = None;
            }
        }
        let copies = copies.map(|c| &*c);
        RolesReading {
            sender: RoleReading::read(&self.senders, calls.map(|c| c.senders.as_slice()), copies),
            receiver: self
                .receivers
                .as_ref()
                .map(|r| RoleReading::read(r, calls.and_then(|c| c.receivers.as_deref()), copies)),
            deferred: copies.and_then(CopyCounter::deferred),
            copies: copies.is_some(),
        }
    }
}

fn threads_cpu(tids: &[i32]) -> Option<ThreadCpu> {
    let v: Option<Vec<ThreadCpu>> = tids.iter().map(|&t| ThreadCpu::read(t).ok()).collect();
    v.map(ThreadCpu::sum)
}

/// Readings at one instant.
pub(crate) struct Snapshot {
    at: Instant,
    cpu: Option<CpuReading>,
    hw: Option<[u64; 3]>,
    /// Context switches and system calls, sender and receiver threads.
    roles: RolesReading,
    /// The process's allocations so far (when the program counts them).
    heap: Option<sendpath_host::heap::HeapCounts>,
}

/// A measured window: the readings at its two edges.
pub(crate) struct Edges {
    pub(crate) start: Snapshot,
    pub(crate) end: Snapshot,
}

impl Edges {
    /// The window's values for `bytes` payload bytes in `messages` messages over `conns`
    /// connections ([`Snapshot::window`]).
    pub(crate) fn repeat(
        &self,
        bytes: u64,
        messages: u64,
        conns: usize,
        cpu_mhz: Option<f64>,
    ) -> Repeat {
        self.start
            .window(&self.end, bytes, messages, conns, cpu_mhz)
    }
}

struct CpuReading {
    process: ProcessCpu,
    system: SystemCpu,
    senders: ThreadCpu,
    receivers: Option<ThreadCpu>,
}

impl Snapshot {
    /// Reads everything now.
    pub(crate) fn take(hw: &mut Meter, roles: &Roles) -> Snapshot {
        if hw.minimal {
            return Snapshot {
                at: Instant::now(),
                cpu: None,
                hw: None,
                roles: RolesReading::default(),
                heap: sendpath_host::heap::heap_counts(),
            };
        }
        let cpu = (|| {
            Some(CpuReading {
                senders: threads_cpu(&roles.senders)?,
                receivers: match &roles.receivers {
                    Some(r) => Some(threads_cpu(r)?),
                    None => None,
                },
                system: SystemCpu::read().ok()?,
                process: ProcessCpu::read().ok()?,
            })
        })();
        let counts = roles.counts(hw.syscalls, hw.copies.as_mut());
        Snapshot {
            at: Instant::now(),
            cpu,
            hw: hw.read(),
            roles: counts,
            heap: sendpath_host::heap::heap_counts(),
        }
    }

    /// The values of the window from `self` to `end`, for `bytes` payload bytes in `messages`
    /// messages over `conns` connections.
    pub(crate) fn window(
        &self,
        end: &Snapshot,
        bytes: u64,
        messages: u64,
        conns: usize,
        cpu_mhz: Option<f64>,
    ) -> Repeat {
        let elapsed = end.at.duration_since(self.at).as_secs_f64();
        let per = |ns: u64| {
            if bytes > 0 {
                ns as f64 / bytes as f64
            } else {
                0.0
            }
        };
        let cpu = match (&self.cpu, &end.cpu) {
            (Some(a), Some(b)) => Some(cpu_window(a, b, per)),
            _ => None,
        };
        let context_switches = match (&self.cpu, &end.cpu) {
            (Some(a), Some(b)) => Some(b.process.since(&a.process).context_switches),
            _ => None,
        };
        let hw = match (self.hw, end.hw) {
            (Some(a), Some(b)) if bytes > 0 => Some([
                b[0].saturating_sub(a[0]) as f64 / bytes as f64,
                b[1].saturating_sub(a[1]) as f64 / bytes as f64,
                b[2].saturating_sub(a[2]) as f64 / bytes as f64,
            ]),
            _ => None,
        };
        let heap = self.heap.zip(end.heap).map(|(a, b)| HeapWindow {
            allocations: b.allocations.saturating_sub(a.allocations),
            allocated_bytes: b.allocated_bytes.saturating_sub(a.allocated_bytes),
            live_bytes: b.live_bytes,
        });
        Repeat {
            heap,
            roles: self.roles.window(end.roles),
            throughput_gbps: bytes as f64 * 8.0 / elapsed / 1e9,
            messages_per_s: messages as f64 / elapsed,
            bytes,
            elapsed_s: elapsed,
            est_cycles_per_byte: cpu
                .zip(cpu_mhz)
                .map(|(c, mhz)| c.ns_per_byte.sender * mhz / 1000.0),
            cpu,
            hw_cycles_per_byte: hw.map(|h| h[0]),
            hw_instructions_per_byte: hw.map(|h| h[1]),
            hw_llc_misses_per_byte: hw.map(|h| h[2]),
            context_switches,
            msg_time_us: if messages > 0 {
                elapsed * conns as f64 / messages as f64 * 1e6
            } else {
                0.0
            },
            ..Repeat::default()
        }
    }
}

fn cpu_window(a: &CpuReading, b: &CpuReading, per: impl Fn(u64) -> f64) -> CpuWindow {
    let s = b.senders.since(&a.senders);
    let r = match (a.receivers, b.receivers) {
        (Some(x), Some(y)) => Some(y.since(&x)),
        _ => None,
    };
    let sys = b.system.since(&a.system);
    CpuWindow {
        sender_user_ns: s.user_ns,
        sender_system_ns: s.system_ns,
        receiver_user_ns: r.map(|r| r.user_ns),
        receiver_system_ns: r.map(|r| r.system_ns),
        system_user_ns: sys.user_ns,
        system_system_ns: sys.system_ns,
        system_softirq_ns: sys.softirq_ns,
        system_irq_ns: sys.irq_ns,
        ns_per_byte: CpuNsPerByte {
            sender_user: per(s.user_ns),
            sender_system: per(s.system_ns),
            sender: per(s.user_ns.saturating_add(s.system_ns)),
            receiver_user: r.map(|r| per(r.user_ns)),
            receiver_system: r.map(|r| per(r.system_ns)),
            receiver: r.map(|r| per(r.user_ns.saturating_add(r.system_ns))),
            system_user: per(sys.user_ns),
            system_system: per(sys.system_ns),
            system_softirq: per(sys.softirq_ns),
            system_irq: per(sys.irq_ns),
            system: per(sys.busy_ns()),
            remote: None,
        },
        remote: None,
    }
}

/// CPU time of the calling thread, nanoseconds (`CLOCK_THREAD_CPUTIME_ID`: exact, where
/// `/proc` counts in clock ticks).
pub(crate) fn thread_cpu_ns() -> u64 {
    cpu_ns(rustix::time::ClockId::ThreadCPUTime)
}

/// The calling thread's context switches so far, voluntary (it blocked) and involuntary (it
/// was preempted), from `/proc/thread-self/status`; `None` where it cannot be read.
pub(crate) fn thread_context_switches() -> Option<ContextSwitches> {
    context_switches_in("/proc/thread-self/status")
}

/// A thread's context switches from its `status` file.
fn context_switches_in(status: &str) -> Option<ContextSwitches> {
    let s = std::fs::read_to_string(status).ok()?;
    let field = |k: &str| -> Option<u64> {
        s.lines()
            .find_map(|l| l.strip_prefix(k))
            .and_then(|v| v.trim_start_matches(':').trim().parse().ok())
    };
    Some(ContextSwitches {
        voluntary: field("voluntary_ctxt_switches")?,
        involuntary: field("nonvoluntary_ctxt_switches")?,
    })
}

/// The system calls the calling thread makes from [`SyscallCount::start`] on, as the kernel
/// counts them (the `raw_syscalls:sys_enter` tracepoint), or why they cannot be counted here.
pub(crate) struct SyscallCount(Result<(PerfCounter, u64), String>);

impl SyscallCount {
    pub(crate) fn start() -> SyscallCount {
        let c = PerfCounter::syscalls_of_this_thread().and_then(|c| {
            let at = c.read()?;
            Ok((c, at))
        });
        SyscallCount(c.map_err(|e| {
            format!("system calls are not counted: the tracepoint raw_syscalls:sys_enter cannot be opened ({e}; root, or perf_event_paranoid -1, and tracefs are needed)")
        }))
    }

    /// Calls since `start`, not counting the reads of the counter itself.
    pub(crate) fn since_start(&mut self) -> Option<u64> {
        let (c, at) = self.0.as_mut().ok()?;
        let now = c.read().ok()?;
        Some(now.saturating_sub(*at).saturating_sub(1))
    }

    /// Why nothing is counted, when nothing is.
    pub(crate) fn unavailable(&self) -> Option<String> {
        self.0.as_ref().err().cloned()
    }
}

/// CPU time of the whole process (every thread, io_uring's io-wq workers included).
pub(crate) fn process_cpu_ns() -> u64 {
    cpu_ns(rustix::time::ClockId::ProcessCPUTime)
}

fn cpu_ns(clock: rustix::time::ClockId) -> u64 {
    let t = rustix::time::clock_gettime(clock);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// The calling thread's CPU time, exact in total, split into user and system in the
/// proportion `/proc` counted in ticks (all system when it counted none yet).
pub(crate) fn own_thread_cpu(tid: i32) -> ThreadCpu {
    let total = thread_cpu_ns();
    let ticks = ThreadCpu::read(tid).unwrap_or_default();
    let t = ticks.user_ns + ticks.system_ns;
    let user = if t > 0 {
        (u128::from(total) * u128::from(ticks.user_ns) / u128::from(t)) as u64
    } else {
        0
    };
    ThreadCpu {
        user_ns: user,
        system_ns: total - user,
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_thread_that_sleeps_counts_a_voluntary_switch() {
        let a = super::thread_context_switches().expect("/proc/thread-self/status");
        std::thread::sleep(std::time::Duration::from_millis(5));
        let b = super::thread_context_switches().unwrap();
        assert!(b.since(a).voluntary >= 1, "{a:?} -> {b:?}");
    }

    #[test]
    fn a_thread_s_system_calls_are_counted_without_the_counter_s_own() {
        let mut c = super::SyscallCount::start();
        if let Some(why) = c.unavailable() {
            return crate::units::skip(&why);
        }
        for _ in 0..50 {
            let _ = rustix::process::getppid();
        }
        assert_eq!(c.since_start(), Some(50));
    }
}
