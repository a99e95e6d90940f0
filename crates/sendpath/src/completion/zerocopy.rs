//! MSG_ZEROCOPY completion tracking.
//!
//! Every successful `sendmsg(MSG_ZEROCOPY)` on a socket gets the next 32-bit id (starting at 0,
//! wrapping). The kernel reports completions on the error queue as inclusive ranges
//! `[ee_info, ee_data]`; adjacent completions are merged into one range, and ranges may arrive
//! out of order. A send's buffer may be reused only once its id has been reported.
//!
//! **COPIED is approximate.** When the kernel merges completions into one range it keeps only
//! the first part's `SO_EE_CODE_ZEROCOPY_COPIED` bit, so a range is counted as copied (or not) as
//! a whole. A range that mixes copied and zero-copy sends is misreported in the direction of its
//! first send. The counters say "per range bit", and the report says so.

use crate::stats::ZerocopyCounts;
use std::collections::VecDeque;

/// One zero-copy completion range, as read from the error queue.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ZcNotification {
    /// First id (`ee_info`).
    pub lo: u32,
    /// Last id, inclusive (`ee_data`).
    pub hi: u32,
    /// `ee_code & SO_EE_CODE_ZEROCOPY_COPIED`: the kernel copied the data after all.
    pub copied: bool,
}

#[derive(Debug)]
struct Pending<T> {
    token: T,
    bytes: usize,
    /// When it was sent, for a timed send.
    sent_at_ns: Option<u64>,
}

/// What one notification released.
#[derive(Debug, Default, PartialEq, Eq)]
#[cfg(test)]
pub(crate) struct Released<T> {
    /// Tokens of the sends now complete, in id order.
    pub tokens: Vec<T>,
    /// Send-to-notification latency of each timed one, nanoseconds.
    pub latencies_ns: Vec<u64>,
    /// How many of them the range reported as copied.
    pub copied: u64,
    /// Ids in the range that matched no outstanding send (duplicates or foreign ids).
    pub unexpected: u64,
}

/// Tracks outstanding MSG_ZEROCOPY sends by id. `T` is whatever the caller needs back when a
/// send completes (a buffer, a message index).
#[derive(Debug)]
pub(crate) struct ZcTracker<T> {
    /// Extended (64-bit, never wrapping) id of `pending[0]`.
    base: u64,
    pending: VecDeque<Option<Pending<T>>>,
    outstanding: usize,
    outstanding_bytes: usize,
}

impl<T> Default for ZcTracker<T> {
    fn default() -> Self {
        ZcTracker::new()
    }
}

impl<T> ZcTracker<T> {
    /// A tracker for a new socket, whose first zero-copy send gets id 0.
    pub(crate) fn new() -> ZcTracker<T> {
        ZcTracker::starting_at(0)
    }

    /// A tracker whose next id is `first_id` (for tests of wrap-around).
    pub(crate) fn starting_at(first_id: u32) -> ZcTracker<T> {
        ZcTracker {
            base: first_id as u64,
            pending: VecDeque::new(),
            outstanding: 0,
            outstanding_bytes: 0,
        }
    }

    /// Records a send the kernel accepted with `MSG_ZEROCOPY`; returns the 32-bit id it got.
    /// Call it only for calls that returned success: a failed call consumes no id. A send
    /// timed at `sent_at_ns` has its latency reported with its completion; an untimed one
    /// (`None`) has none.
    pub(crate) fn on_send(&mut self, token: T, bytes: usize, sent_at_ns: Option<u64>) -> u32 {
        let id = self.base + self.pending.len() as u64;
        self.pending.push_back(Some(Pending {
            token,
            bytes,
            sent_at_ns,
        }));
        self.outstanding += 1;
        self.outstanding_bytes += bytes;
        id as u32
    }

    /// Sends not yet reported complete.
    pub(crate) fn outstanding(&self) -> usize {
        self.outstanding
    }

    /// Bytes of sends not yet reported complete.
    pub(crate) fn outstanding_bytes(&self) -> usize {
        self.outstanding_bytes
    }

    /// The id the next send will get.
    #[cfg(test)]
    pub(crate) fn next_id(&self) -> u32 {
        (self.base + self.pending.len() as u64) as u32
    }

    /// Applies one notification range, releasing the sends it covers, collected in lists.
    #[cfg(test)]
    pub(crate) fn on_notification(&mut self, n: ZcNotification, now_ns: u64) -> Released<T> {
        let mut tokens = Vec::new();
        let mut latencies_ns = Vec::new();
        let c = self.release(n, now_ns, |token, latency| {
            tokens.push(token);
            latencies_ns.extend(latency);
        });
        Released {
            tokens,
            latencies_ns,
            copied: c.copied,
            unexpected: c.unexpected,
        }
    }

    /// Applies one notification range and hands each send it completes to `done`, in id
    /// order, with its latency when it was timed: [`ZcTracker::on_notification`] without the
    /// lists, for a sender that reads the error queue many times a millisecond.
    #[inline]
    pub(crate) fn release(
        &mut self,
        n: ZcNotification,
        now_ns: u64,
        mut done: impl FnMut(T, Option<u64>),
    ) -> ZerocopyCounts {
        // Ids are 32-bit and wrap: place the range relative to the oldest outstanding id, as a
        // signed offset so that ids just before the window (already completed) are recognised.
        let count = n.hi.wrapping_sub(n.lo) as i64 + 1;
        let first = n.lo.wrapping_sub(self.base as u32) as i32 as i64;
        let len = self.pending.len() as i64;
        let mut c = ZerocopyCounts {
            notifications: 1,
            ..ZerocopyCounts::default()
        };
        let mut one = |slot: Option<Pending<T>>, c: &mut ZerocopyCounts| match slot {
            Some(p) => {
                self.outstanding -= 1;
                self.outstanding_bytes -= p.bytes;
                c.completions += 1;
                c.copied += u64::from(n.copied);
                done(p.token, p.sent_at_ns.map(|at| now_ns.saturating_sub(at)));
            }
            None => c.unexpected += 1,
        };
        if first == 0 && count <= len {
            // In order, the common case: the range is the oldest sends, taken off the front.
            for _ in 0..count {
                one(self.pending.pop_front().flatten(), &mut c);
            }
            self.base += count as u64;
        } else {
            for k in 0..count {
                let idx = first + k;
                if idx >= len {
                    c.unexpected += (count - k) as u64;
                    break;
                }
                let slot = (idx >= 0).then(|| self.pending[idx as usize].take());
                one(slot.flatten(), &mut c);
            }
        }
        while matches!(self.pending.front(), Some(None)) {
            self.pending.pop_front();
            self.base += 1;
        }
        c
    }

    /// Removes every outstanding send without a completion (the socket is gone and the drain
    /// timed out). The caller must not reuse what these tokens stand for: the kernel may still
    /// read it.
    pub(crate) fn abandon(&mut self) -> Vec<T> {
        self.outstanding = 0;
        self.outstanding_bytes = 0;
        self.base += self.pending.len() as u64;
        self.pending.drain(..).flatten().map(|p| p.token).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(lo: u32, hi: u32, copied: bool) -> ZcNotification {
        ZcNotification { lo, hi, copied }
    }

    #[test]
    fn single_and_merged_ranges_release_in_order() {
        let mut t = ZcTracker::new();
        for i in 0..10u32 {
            assert_eq!(t.on_send(i, 100, Some(i as u64 * 10)), i);
        }
        let r = t.on_notification(n(0, 0, false), 5);
        assert_eq!(r.tokens, vec![0]);
        assert_eq!(r.latencies_ns, vec![5]);
        let r = t.on_notification(n(1, 9, true), 200);
        assert_eq!(r.tokens, (1..10).collect::<Vec<_>>());
        assert_eq!(r.copied, 9);
        assert_eq!(r.latencies_ns[0], 190);
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.outstanding_bytes(), 0);
        assert_eq!(t.next_id(), 10);
    }

    #[test]
    fn only_timed_sends_report_a_latency() {
        let mut t = ZcTracker::new();
        for i in 0..8u32 {
            let timed = (i % 4 == 0).then_some(u64::from(i) * 10);
            t.on_send(i, 1, timed);
        }
        let r = t.on_notification(n(0, 7, false), 100);
        assert_eq!(r.tokens.len(), 8, "every send completes");
        assert_eq!(r.latencies_ns, vec![100, 60], "sends 0 and 4 were timed");
    }

    #[test]
    fn out_of_order_ranges_release_only_what_they_cover() {
        let mut t = ZcTracker::new();
        for i in 0..6u32 {
            t.on_send(i, 10, None);
        }
        let r = t.on_notification(n(3, 5, false), 1);
        assert_eq!(r.tokens, vec![3, 4, 5]);
        assert_eq!(t.outstanding(), 3);
        assert_eq!(t.outstanding_bytes(), 30);
        let r = t.on_notification(n(0, 2, true), 1);
        assert_eq!(r.tokens, vec![0, 1, 2]);
        assert_eq!(r.copied, 3);
        assert_eq!(t.outstanding(), 0);
        // The window has advanced past all six.
        assert_eq!(t.on_send(6, 10, None), 6);
    }

    #[test]
    fn ids_wrap_at_32_bits() {
        let mut t = ZcTracker::starting_at(u32::MAX - 2);
        let ids: Vec<u32> = (0..6).map(|i| t.on_send(i, 1, None)).collect();
        assert_eq!(ids, vec![u32::MAX - 2, u32::MAX - 1, u32::MAX, 0, 1, 2]);
        // One merged range spanning the wrap.
        let r = t.on_notification(n(u32::MAX - 1, 1, false), 0);
        assert_eq!(r.tokens, vec![1, 2, 3, 4]);
        assert_eq!(r.unexpected, 0);
        let r = t.on_notification(n(u32::MAX - 2, u32::MAX - 2, false), 0);
        assert_eq!(r.tokens, vec![0]);
        let r = t.on_notification(n(2, 2, false), 0);
        assert_eq!(r.tokens, vec![5]);
        assert_eq!(t.outstanding(), 0);
    }

    #[test]
    fn duplicate_and_foreign_ids_are_counted_not_released_twice() {
        let mut t = ZcTracker::new();
        t.on_send("a", 1, None);
        t.on_send("b", 1, None);
        assert_eq!(t.on_notification(n(0, 0, false), 0).tokens, vec!["a"]);
        let r = t.on_notification(n(0, 1, false), 0);
        assert_eq!(r.tokens, vec!["b"]);
        assert_eq!(r.unexpected, 1);
        let r = t.on_notification(n(7, 9, false), 0);
        assert!(r.tokens.is_empty());
        assert_eq!(r.unexpected, 3);
    }

    #[test]
    fn merged_range_keeps_first_copied_bit_for_all() {
        // The kernel merged a zero-copy send (id 0) with a copied one (id 1) and reported the
        // first one's bit (not copied): both count as not copied. This is the documented
        // approximation.
        let mut t = ZcTracker::new();
        t.on_send(0, 1, None);
        t.on_send(1, 1, None);
        let r = t.on_notification(n(0, 1, false), 0);
        assert_eq!(r.copied, 0);
        assert_eq!(r.tokens.len(), 2);
    }

    #[test]
    fn abandon_hands_back_tokens_and_resets_counts() {
        let mut t = ZcTracker::new();
        for i in 0..4 {
            t.on_send(i, 8, None);
        }
        t.on_notification(n(1, 1, false), 0);
        assert_eq!(t.abandon(), vec![0, 2, 3]);
        assert_eq!(t.outstanding(), 0);
        assert_eq!(t.next_id(), 4);
    }
}
