//! CPU a window used: by role and kind, per byte, context switches and system calls, and
//! the heap.

use super::Spread;
use serde::{Deserialize, Serialize};

/// Context switches and system calls of a measurement's threads by role, over a window or one
/// transfer; each null where it was not read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RoleCounts {
    /// The sender threads' context switches (`/proc/self/task/TID/status`).
    #[serde(default)]
    pub switches_sender: Option<ContextSwitches>,
    /// Our receiver threads'; null when the receiver is not ours.
    #[serde(default)]
    pub switches_receiver: Option<ContextSwitches>,
    /// The sender threads' system calls, as the kernel counts them (the
    /// `raw_syscalls:sys_enter` tracepoint); null when not counted (the results file says
    /// why).
    #[serde(default)]
    pub syscalls_sender: Option<u64>,
    /// Our receiver threads'.
    #[serde(default)]
    pub syscalls_receiver: Option<u64>,
}

/// The process's heap over one window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HeapWindow {
    /// Allocations made in the window.
    pub allocations: u64,
    /// Bytes they handed out.
    pub allocated_bytes: u64,
    /// Bytes in use at the window's end (pools, buffers in flight, everything else).
    pub live_bytes: u64,
}

/// A thread's context switches over an interval: voluntary (it blocked, waiting for the
/// kernel or its peer) and involuntary (the scheduler preempted it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ContextSwitches {
    /// It blocked.
    pub voluntary: u64,
    /// It was preempted.
    pub involuntary: u64,
}

impl std::iter::Sum for ContextSwitches {
    /// The switches of several threads together.
    fn sum<I: Iterator<Item = ContextSwitches>>(it: I) -> ContextSwitches {
        it.fold(ContextSwitches::default(), |a, b| ContextSwitches {
            voluntary: a.voluntary + b.voluntary,
            involuntary: a.involuntary + b.involuntary,
        })
    }
}

impl ContextSwitches {
    /// Voluntary and involuntary together.
    pub fn total(self) -> u64 {
        self.voluntary + self.involuntary
    }

    /// What changed since `before`.
    pub fn since(self, before: ContextSwitches) -> ContextSwitches {
        ContextSwitches {
            voluntary: self.voluntary.saturating_sub(before.voluntary),
            involuntary: self.involuntary.saturating_sub(before.involuntary),
        }
    }
}

/// CPU time in one window, nanoseconds, by role (threads of this process) and by kind
/// (system-wide, `/proc/stat`), with the same values per payload byte.
///
/// Roles: in `stream` the sender threads run the send path and the receiver threads read; in
/// `rr` the sender threads are the servers (they send responses with the path) and the receiver
/// threads are the clients. Per-thread times come from `/proc/self/task/TID/stat` (utime,
/// stime), in the same clock ticks as `/proc/stat`. On loopback, softirq work (TCP receive
/// processing, ACKs) runs on whichever thread the interrupt lands on, and some of the sender's
/// transmit work runs in the receiver's context: read the split as indicative, not exact.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuWindow {
    /// Sender threads, user time.
    pub sender_user_ns: u64,
    /// Sender threads, system time (syscalls, and softirq that ran in them unless the kernel
    /// accounts irq time separately).
    pub sender_system_ns: u64,
    /// Receiver threads, user time; null when the receiver is another program.
    pub receiver_user_ns: Option<u64>,
    /// Receiver threads, system time; null when the receiver is another program.
    pub receiver_system_ns: Option<u64>,
    /// System-wide user (+ nice) time.
    pub system_user_ns: u64,
    /// System-wide system time.
    pub system_system_ns: u64,
    /// System-wide softirq time.
    pub system_softirq_ns: u64,
    /// System-wide hard irq time.
    pub system_irq_ns: u64,
    /// The same values per payload byte.
    pub ns_per_byte: CpuNsPerByte,
    /// The remote receiver's threads (`--agent`), as the agent measured them; null otherwise.
    #[serde(default)]
    pub remote: Option<RemoteCpu>,
}

/// CPU time of the receiver threads of `sendpath agent` on the other host, over the window.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct RemoteCpu {
    /// User time, ns.
    pub user_ns: u64,
    /// System time, ns.
    pub system_ns: u64,
}

impl CpuWindow {
    /// Records the remote receiver's CPU over a window that moved `bytes`.
    pub(crate) fn set_remote(&mut self, user_ns: u64, system_ns: u64, bytes: u64) {
        self.remote = Some(RemoteCpu { user_ns, system_ns });
        self.ns_per_byte.remote = (bytes > 0).then(|| (user_ns + system_ns) as f64 / bytes as f64);
    }
}

/// CPU nanoseconds per payload byte, by role and kind (see [`CpuWindow`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuNsPerByte {
    /// Sender threads, user.
    pub sender_user: f64,
    /// Sender threads, system.
    pub sender_system: f64,
    /// Sender threads, user + system (the MSG_ZEROCOPY paper's "process" column).
    pub sender: f64,
    /// Receiver threads, user; null for a remote receiver.
    pub receiver_user: Option<f64>,
    /// Receiver threads, system; null for a remote receiver.
    pub receiver_system: Option<f64>,
    /// Receiver threads, user + system; null for a remote receiver.
    pub receiver: Option<f64>,
    /// System-wide user.
    pub system_user: f64,
    /// System-wide system.
    pub system_system: f64,
    /// System-wide softirq.
    pub system_softirq: f64,
    /// System-wide hard irq.
    pub system_irq: f64,
    /// System-wide busy: user + system + softirq + irq (the paper's "system" column).
    pub system: f64,
    /// The remote receiver's threads, user + system (`--agent`); null otherwise.
    #[serde(default)]
    pub remote: Option<f64>,
}

impl CpuNsPerByte {
    /// The median of each value over `v`; `None` when `v` is empty.
    pub(crate) fn median_of(v: &[CpuNsPerByte]) -> Option<CpuNsPerByte> {
        if v.is_empty() {
            return None;
        }
        let m =
            |f: fn(&CpuNsPerByte) -> f64| Spread::of(&v.iter().map(f).collect::<Vec<_>>()).median;
        let mo = |f: fn(&CpuNsPerByte) -> Option<f64>| {
            let x: Vec<f64> = v.iter().filter_map(f).collect();
            (!x.is_empty()).then(|| Spread::of(&x).median)
        };
        Some(CpuNsPerByte {
            sender_user: m(|c| c.sender_user),
            sender_system: m(|c| c.sender_system),
            sender: m(|c| c.sender),
            receiver_user: mo(|c| c.receiver_user),
            receiver_system: mo(|c| c.receiver_system),
            receiver: mo(|c| c.receiver),
            system_user: m(|c| c.system_user),
            system_system: m(|c| c.system_system),
            system_softirq: m(|c| c.system_softirq),
            system_irq: m(|c| c.system_irq),
            system: m(|c| c.system),
            remote: mo(|c| c.remote),
        })
    }
}
