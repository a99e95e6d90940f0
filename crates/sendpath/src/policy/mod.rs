//! I/O-free decisions: whether a send may go zero-copy now, and what to do when the kernel
//! refuses. The send paths ask; they never decide on their own.

pub(crate) mod adaptive;

use serde::{Deserialize, Serialize};

/// Why a send meant to be zero-copy went by copy instead.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum FallbackReason {
    /// `ENOBUFS` from `sendmsg(MSG_ZEROCOPY)` even after draining completions (optmem or
    /// locked-memory limit).
    Enobufs,
    /// The in-flight cap (sends or bytes awaiting completion) was full.
    InflightCap,
    /// The socket or kernel does not support the zero-copy operation.
    Unsupported,
    /// io_uring SEND_ZC failed with `ENOMEM`.
    Enomem,
}

/// Limits on zero-copy sends awaiting their completion, per socket. They bound what the kernel
/// pins page by page for each send and charges to the user's locked memory (past that,
/// `ENOBUFS` or `ENOMEM`). An io_uring send from a registered buffer (`--fixed-buffers`, or a
/// message written in place in an arena) is not counted: its pages were pinned and charged
/// once, when they were registered, and the buffer's slots bound how many are in flight.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct InflightLimits {
    /// At most this many sends awaiting completion.
    pub max_sends: usize,
    /// At most this many bytes awaiting completion (one send is always allowed when none is
    /// outstanding, whatever its size).
    pub max_bytes: usize,
}

impl Default for InflightLimits {
    /// 256 sends (the per-worker cap measured best for an io_uring HTTP server) and 8 MiB, the
    /// default `ulimit -l` that an unprivileged user's pinned pages are charged against.
    fn default() -> Self {
        InflightLimits {
            max_sends: 256,
            max_bytes: 8 << 20,
        }
    }
}

/// The decision for one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ZcDecision {
    /// Send with the zero-copy operation.
    ZeroCopy,
    /// Reap completions first, then ask again (the cap is full).
    ReapThenRetry,
    /// Send by copy, counting this reason.
    Copy(FallbackReason),
}

/// Whether a send of `len` bytes may go zero-copy, given what is outstanding. `reaped` says
/// whether completions were already reaped for this send (so a full cap now means fallback).
pub(crate) fn admit(
    supported: bool,
    limits: InflightLimits,
    outstanding_sends: usize,
    outstanding_bytes: usize,
    len: usize,
    reaped: bool,
) -> ZcDecision {
    if !supported {
        return ZcDecision::Copy(FallbackReason::Unsupported);
    }
    let fits = outstanding_sends < limits.max_sends
        && (outstanding_sends == 0 || outstanding_bytes + len <= limits.max_bytes);
    match (fits, reaped) {
        (true, _) => ZcDecision::ZeroCopy,
        (false, false) => ZcDecision::ReapThenRetry,
        (false, true) => ZcDecision::Copy(FallbackReason::InflightCap),
    }
}

/// Whether to read completions before taking a buffer for the next send: only when no
/// released buffer is free and `every` sends (or half the byte cap) await completion. Below
/// that a new buffer is cheaper than the system calls that would find one, and the kernel
/// merges the completions that wait on the queue into ranges, so one read releases many (the
/// MSG_ZEROCOPY paper's batching). `every` of 1 reads the queue whenever the pool is empty.
#[inline]
pub(crate) fn reap_before_take(
    free_bufs: usize,
    outstanding_sends: usize,
    outstanding_bytes: usize,
    every: usize,
    limits: InflightLimits,
) -> bool {
    free_bufs == 0
        && outstanding_sends > 0
        && (outstanding_sends >= every.max(1) || outstanding_bytes >= limits.max_bytes / 2)
}

/// What to do after `ENOBUFS` from a zero-copy send: drain completions and retry once; on a
/// second `ENOBUFS` for the same send, copy it.
pub(crate) fn on_enobufs(retries_so_far: u32) -> ZcDecision {
    if retries_so_far == 0 {
        ZcDecision::ReapThenRetry
    } else {
        ZcDecision::Copy(FallbackReason::Enobufs)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const L: InflightLimits = InflightLimits {
        max_sends: 4,
        max_bytes: 100,
    };

    #[test]
    fn unsupported_always_copies() {
        assert_eq!(
            admit(false, L, 0, 0, 1, false),
            ZcDecision::Copy(FallbackReason::Unsupported)
        );
    }

    #[test]
    fn cap_on_sends_reaps_then_copies() {
        assert_eq!(admit(true, L, 3, 30, 10, false), ZcDecision::ZeroCopy);
        assert_eq!(admit(true, L, 4, 40, 10, false), ZcDecision::ReapThenRetry);
        assert_eq!(
            admit(true, L, 4, 40, 10, true),
            ZcDecision::Copy(FallbackReason::InflightCap)
        );
    }

    #[test]
    fn cap_on_bytes_but_one_big_send_always_fits() {
        assert_eq!(admit(true, L, 1, 95, 10, false), ZcDecision::ReapThenRetry);
        assert_eq!(admit(true, L, 0, 0, 1000, false), ZcDecision::ZeroCopy);
    }

    #[test]
    fn completions_are_read_in_batches_of_sends_or_bytes() {
        // A free buffer: never read the queue for one.
        assert!(!reap_before_take(1, 100, 0, 32, L));
        // Nothing outstanding: nothing to read.
        assert!(!reap_before_take(0, 0, 0, 32, L));
        assert!(!reap_before_take(0, 31, 31, 32, L));
        assert!(reap_before_take(0, 32, 32, 32, L));
        // Half the byte cap (100 here) outstanding reads the queue below `every` sends.
        assert!(reap_before_take(0, 2, 50, 32, L));
        // Every 1 (and 0, taken as 1): whenever the pool is empty.
        assert!(reap_before_take(0, 1, 1, 1, L));
        assert!(reap_before_take(0, 1, 1, 0, L));
    }

    #[test]
    fn enobufs_retries_once_then_copies() {
        assert_eq!(on_enobufs(0), ZcDecision::ReapThenRetry);
        assert_eq!(on_enobufs(1), ZcDecision::Copy(FallbackReason::Enobufs));
    }
}
