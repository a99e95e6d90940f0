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
    /// The bytes the kernel copied between user memory and socket buffers in the window, as
    /// BPF counted them (`--metrics copies`); null when not counted (the results file says
    /// why).
    #[serde(default)]
    pub kernel_copied: Option<KernelCopied>,
}

/// Bytes the kernel copied in a window, by role and direction: `to_user` is received data
/// copied into user memory (tracepoint `skb:skb_copy_datagram_iovec`), `from_user` data
/// copied from user memory (fexit `_copy_from_iter`), `deferred` zero-copy buffers copied
/// after the send, host-wide (fentry `skb_copy_ubufs`). Each null where its counter did not
/// attach, or the role's threads are not ours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct KernelCopied {
    /// The sender threads' copies from user memory.
    pub from_user_sender: Option<u64>,
    /// The sender threads' copies into user memory (rr: the responses they read).
    pub to_user_sender: Option<u64>,
    /// Our receiver threads' copies into user memory.
    pub to_user_receiver: Option<u64>,
    /// Our receiver threads' copies from user memory (rr: the responses they send).
    pub from_user_receiver: Option<u64>,
    /// Zero-copy bytes the host's kernel copied after the send.
    pub deferred: Option<u64>,
}

/// The bytes the kernel copied in a run's windows, per payload byte (medians over the
/// windows) and in total, both roles together; each null where its counter did not attach
/// (the environment's `copy_counters` say why) or a role's threads are not ours.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct KernelCopies {
    /// Received data copied into user memory, per payload byte: about 1 for a receiver that
    /// copies, 0 for one that discards, the unmapped share for `--recv zerocopy`.
    pub receive_per_byte: Option<f64>,
    /// Data copied from user memory, per payload byte: about 1 for `copy`, 0 for `sendfile`.
    pub send_per_byte: Option<f64>,
    /// Zero-copy buffers the kernel copied after the send, per payload byte (host-wide).
    pub deferred_per_byte: Option<f64>,
    /// Received data copied into user memory over the repeats' windows, bytes.
    pub receive_bytes: Option<u64>,
    /// Data copied from user memory over the windows, bytes.
    pub send_bytes: Option<u64>,
    /// Zero-copy bytes copied after the send over the windows.
    pub deferred_bytes: Option<u64>,
}

impl KernelCopies {
    /// Over windows of (payload bytes, what the kernel copied): per byte the medians over
    /// the windows that moved bytes, in total the sums; `None` when there are none.
    pub(crate) fn over(w: &[(u64, KernelCopied)]) -> Option<KernelCopies> {
        if w.is_empty() {
            return None;
        }
        let per = |f: fn(&KernelCopied) -> Option<u64>| {
            let v: Option<Vec<f64>> = w
                .iter()
                .filter(|(bytes, _)| *bytes > 0)
                .map(|(bytes, k)| Some(f(k)? as f64 / *bytes as f64))
                .collect();
            v.filter(|v| !v.is_empty())
                .map(|v| super::Spread::of(&v).median)
        };
        let total = |f: fn(&KernelCopied) -> Option<u64>| w.iter().map(|(_, k)| f(k)).sum();
        Some(KernelCopies {
            receive_per_byte: per(KernelCopied::to_user),
            send_per_byte: per(KernelCopied::from_user),
            deferred_per_byte: per(|k| k.deferred),
            receive_bytes: total(KernelCopied::to_user),
            send_bytes: total(KernelCopied::from_user),
            deferred_bytes: total(|k| k.deferred),
        })
    }
}

impl KernelCopied {
    /// Both roles' copies into user memory; null unless both were counted (a receiver that
    /// is another program is not).
    pub fn to_user(&self) -> Option<u64> {
        Some(self.to_user_sender? + self.to_user_receiver?)
    }

    /// Both roles' copies from user memory.
    pub fn from_user(&self) -> Option<u64> {
        Some(self.from_user_sender? + self.from_user_receiver?)
    }
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
