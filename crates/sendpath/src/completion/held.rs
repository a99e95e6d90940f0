//! Messages whose memory the kernel may still read, held until every MSG_ZEROCOPY completion id
//! they consumed is reported.
//!
//! One message can take several `sendmsg` calls (short sends), and each call that sent bytes
//! consumed one completion id. Whatever happens next (the message finishes, a later call fails,
//! the connection resets) those ids stay consumed: the kernel will report them, and until it does
//! it may still read the pages. So a message is held from its first successful call until its
//! last id is back, on every path, success or error; and the ids it consumed are always entered
//! in the tracker, so later messages keep their ids in step with the kernel's.

use super::zerocopy::{ZcNotification, ZcTracker};
use crate::stats::ZerocopyCounts;

/// A message of several ids, held until the last of them is reported.
struct Held<B> {
    item: B,
    ids_left: u32,
}

/// What the tracker keeps per id: a one-call message itself (the common case, released with
/// its id), or the slot of a message of several calls.
enum Token<B> {
    Whole(B),
    Part(usize),
}

/// What one notification did.
#[derive(Debug, Default, PartialEq, Eq)]
#[cfg(test)]
pub(crate) struct HeldRelease<B> {
    /// Messages whose last id is now reported: free to reuse.
    pub freed: Vec<B>,
    /// Ids (sends) the range completed.
    pub completions: u64,
    /// Of those, how many the range reported as copied (per range bit: approximate).
    pub copied: u64,
    /// Ids that matched no outstanding send.
    pub unexpected: u64,
    /// Send-to-notification latency of each completed id that was timed, nanoseconds.
    pub latencies_ns: Vec<u64>,
}

/// Messages held for their MSG_ZEROCOPY completions. `B` is what a message owns (its buffers).
pub(crate) struct HeldMessages<B> {
    tracker: ZcTracker<Token<B>>,
    parts: Vec<Option<Held<B>>>,
    free_slots: Vec<usize>,
}

impl<B> Default for HeldMessages<B> {
    fn default() -> Self {
        HeldMessages::new()
    }
}

impl<B> HeldMessages<B> {
    /// Nothing held; the socket's next zero-copy id is 0.
    pub(crate) fn new() -> HeldMessages<B> {
        HeldMessages::starting_at(0)
    }

    /// Nothing held; the socket's next zero-copy id is `first_id` (tests of wrap-around).
    pub(crate) fn starting_at(first_id: u32) -> HeldMessages<B> {
        HeldMessages {
            tracker: ZcTracker::starting_at(first_id),
            parts: Vec::new(),
            free_slots: Vec::new(),
        }
    }

    /// Records a message of `bytes` bytes whose `sendmsg(MSG_ZEROCOPY)` calls sent something
    /// `ids` times, whether or not the message went out whole. With `ids == 0` the kernel holds
    /// nothing of it and it is handed straight back. A message sent at `sent_at_ns` has the
    /// latency of each of its ids reported; an untimed one (`None`) has none.
    #[inline]
    pub(crate) fn sent(
        &mut self,
        item: B,
        ids: u32,
        bytes: usize,
        sent_at_ns: Option<u64>,
    ) -> Option<B> {
        match ids {
            0 => Some(item),
            1 => {
                self.tracker.on_send(Token::Whole(item), bytes, sent_at_ns);
                None
            }
            _ => {
                self.sent_in_parts(item, ids, bytes, sent_at_ns);
                None
            }
        }
    }

    /// A message that took several calls: held in a slot, one id per call pointing at it.
    #[cold]
    fn sent_in_parts(&mut self, item: B, ids: u32, bytes: usize, sent_at_ns: Option<u64>) {
        let h = Some(Held {
            item,
            ids_left: ids,
        });
        let slot = match self.free_slots.pop() {
            Some(i) => {
                self.parts[i] = h;
                i
            }
            None => {
                self.parts.push(h);
                self.parts.len() - 1
            }
        };
        for k in 0..ids {
            let b = if k == 0 { bytes } else { 0 };
            self.tracker.on_send(Token::Part(slot), b, sent_at_ns);
        }
    }

    /// Applies one completion range from the error queue, collected in lists.
    #[cfg(test)]
    pub(crate) fn on_notification(&mut self, n: ZcNotification, now_ns: u64) -> HeldRelease<B> {
        let mut freed = Vec::new();
        let mut latencies_ns = Vec::new();
        let c = self.release(n, now_ns, |item| freed.push(item), |l| latencies_ns.push(l));
        HeldRelease {
            freed,
            completions: c.completions,
            copied: c.copied,
            unexpected: c.unexpected,
            latencies_ns,
        }
    }

    /// Applies one completion range: each message whose last id it reports goes to `free`,
    /// each timed id's latency to `latency`. [`HeldMessages::on_notification`] without the
    /// lists.
    #[inline]
    pub(crate) fn release(
        &mut self,
        n: ZcNotification,
        now_ns: u64,
        mut free: impl FnMut(B),
        mut latency: impl FnMut(u64),
    ) -> ZerocopyCounts {
        let parts = &mut self.parts;
        let free_slots = &mut self.free_slots;
        self.tracker.release(n, now_ns, |token, l| {
            if let Some(l) = l {
                latency(l);
            }
            match token {
                Token::Whole(item) => free(item),
                Token::Part(slot) => {
                    if let Some(item) = last_part(parts, free_slots, slot) {
                        free(item);
                    }
                }
            }
        })
    }

    /// Completion ids not yet reported.
    #[inline]
    pub(crate) fn outstanding(&self) -> usize {
        self.tracker.outstanding()
    }

    /// Bytes of messages not yet fully reported.
    #[inline]
    pub(crate) fn outstanding_bytes(&self) -> usize {
        self.tracker.outstanding_bytes()
    }

    /// The id the socket's next zero-copy send will get.
    #[cfg(test)]
    pub(crate) fn next_id(&self) -> u32 {
        self.tracker.next_id()
    }

    /// Gives up on every held message (the drain timed out). The kernel may still read what
    /// they own: the caller must never reuse or free it.
    pub(crate) fn abandon(&mut self) -> Vec<B> {
        let mut out: Vec<B> = (self.tracker.abandon().into_iter())
            .filter_map(|t| match t {
                Token::Whole(item) => Some(item),
                Token::Part(_) => None,
            })
            .collect();
        self.free_slots.clear();
        out.extend(self.parts.drain(..).flatten().map(|h| h.item));
        out
    }
}

/// One id of the message in `slot` is back: the message, when it was its last.
fn last_part<B>(
    parts: &mut [Option<Held<B>>],
    free_slots: &mut Vec<usize>,
    slot: usize,
) -> Option<B> {
    let h = parts[slot].as_mut()?;
    h.ids_left -= 1;
    if h.ids_left > 0 {
        return None;
    }
    free_slots.push(slot);
    parts[slot].take().map(|h| h.item)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn n(lo: u32, hi: u32, copied: bool) -> ZcNotification {
        ZcNotification { lo, hi, copied }
    }

    #[test]
    fn a_message_cut_short_by_an_error_is_held_until_its_ids_are_back() {
        // Message "a" took two calls (ids 0 and 1) and then a third call failed: the caller
        // still records both ids. Its buffers stay held until both are reported.
        let mut h = HeldMessages::new();
        assert_eq!(h.sent("a", 2, 300, None), None);
        assert_eq!(h.outstanding(), 2);
        assert_eq!(
            h.next_id(),
            2,
            "the ids the failed message consumed are accounted"
        );
        let r = h.on_notification(n(0, 0, true), 10);
        assert!(r.freed.is_empty(), "one id of two is back: still held");
        assert_eq!((r.completions, r.copied), (1, 1));
        // The next message gets id 2, as the kernel numbers it, and is not confused with "a".
        assert_eq!(h.sent("b", 1, 100, Some(20)), None);
        let r = h.on_notification(n(2, 2, false), 30);
        assert_eq!(r.freed, vec!["b"]);
        assert_eq!(r.latencies_ns, vec![10], "\"b\" was timed");
        assert_eq!(r.unexpected, 0);
        let r = h.on_notification(n(1, 1, true), 40);
        assert_eq!(r.freed, vec!["a"]);
        assert_eq!(h.outstanding(), 0);
        assert_eq!(h.outstanding_bytes(), 0);
    }

    #[test]
    fn a_message_that_sent_nothing_comes_straight_back() {
        let mut h: HeldMessages<&str> = HeldMessages::new();
        assert_eq!(h.sent("x", 0, 10, None), Some("x"));
        assert_eq!(h.outstanding(), 0);
        assert_eq!(h.next_id(), 0);
    }

    #[test]
    fn merged_out_of_order_ranges_across_the_32_bit_wrap() {
        let mut h = HeldMessages::starting_at(u32::MAX - 1);
        h.sent("a", 2, 10, None); // ids MAX-1, MAX
        h.sent("b", 2, 10, None); // ids 0, 1
        h.sent("c", 1, 10, None); // id 2
        let r = h.on_notification(n(0, 2, false), 5);
        assert_eq!(r.freed, vec!["b", "c"]);
        let r = h.on_notification(n(u32::MAX - 1, u32::MAX, false), 6);
        assert_eq!(r.freed, vec!["a"]);
        assert_eq!(h.outstanding(), 0);
        assert_eq!(h.next_id(), 3);
    }

    #[test]
    fn release_hands_each_freed_message_and_timed_latency_to_the_caller() {
        // One-call messages (held as themselves) around one of three calls (held in a slot),
        // completed out of order: each comes back once, when its last id does.
        let mut h = HeldMessages::new();
        h.sent("a", 1, 10, Some(0)); // id 0
        h.sent("b", 3, 30, None); // ids 1, 2, 3
        h.sent("c", 1, 10, Some(5)); // id 4
        let (mut freed, mut lat) = (Vec::new(), Vec::new());
        let c = h.release(n(2, 4, true), 50, |m| freed.push(m), |l| lat.push(l));
        assert_eq!(freed, vec!["c"], "\"b\" still has id 1 out");
        assert_eq!(lat, vec![45]);
        assert_eq!((c.completions, c.copied, c.unexpected), (3, 3, 0));
        let c = h.release(n(0, 1, false), 60, |m| freed.push(m), |l| lat.push(l));
        assert_eq!(
            freed,
            vec!["c", "a", "b"],
            "in id order: a's id 0, then b's last"
        );
        assert_eq!(lat, vec![45, 60]);
        assert_eq!((c.completions, c.copied), (2, 0));
        assert_eq!((h.outstanding(), h.outstanding_bytes()), (0, 0));
        // A slot freed is reused by the next message of several calls.
        h.sent("d", 2, 20, None); // ids 5, 6
        let c = h.release(n(5, 7, false), 70, |m| freed.push(m), |l| lat.push(l));
        assert_eq!(freed.last(), Some(&"d"));
        assert_eq!(c.unexpected, 1, "id 7 was never sent");
    }

    #[test]
    fn abandon_hands_back_everything_held() {
        let mut h = HeldMessages::new();
        h.sent("a", 1, 1, None);
        h.sent("b", 3, 1, None);
        h.on_notification(n(0, 1, false), 0);
        let mut left = h.abandon();
        left.sort();
        assert_eq!(left, vec!["b"]);
        assert_eq!(h.outstanding(), 0);
    }
}
