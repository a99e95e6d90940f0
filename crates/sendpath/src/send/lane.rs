//! The datagram lane: datagrams written in place and pushed to the ring as they are written,
//! past the queue ([`SendRing::push_lane`]). Each is one request the ring lets go of once
//! pushed, so its slot goes back to the arena with its last completion and the state keeps
//! only what it counts: per slot, the datagram's length and, for a SEND_ZC, which of its two
//! completions came first. Every count is the one the queue's way would make
//! ([`ConnState::submit_datagrams`] and [`ConnState::on_datagram_result`]); a datagram that
//! sent nothing comes back to the state held, and is resent by the queue's way or let go.
//!
//! [`SendRing::push_lane`]: crate::sys::uring::SendRing::push_lane

use super::{Choice, ConnState, Pushed, SendOp};
use crate::completion::SendZcLedger;

/// A datagram of the lane in the kernel, by its ring slot.
#[derive(Debug, Clone, Copy, Default)]
pub(super) struct LaneSlot {
    len: u32,
    zc: bool,
    registered: bool,
    /// Awaiting a completion.
    live: bool,
    /// Its result came, with `F_MORE`: whether it sent bytes.
    result: Option<bool>,
    /// Its notification came before its result: whether the kernel copied.
    notif: Option<bool>,
}

/// The lane's datagrams in the kernel.
#[derive(Debug, Default)]
pub(super) struct Lane {
    /// Datagrams awaiting their result.
    in_kernel: usize,
    /// By ring slot.
    slots: Vec<LaneSlot>,
}

impl Lane {
    pub(super) fn in_kernel(&self) -> usize {
        self.in_kernel
    }
}

impl ConnState {
    /// How many datagrams may go by the lane now: room in the kernel on a datagram socket with
    /// nothing queued or to resend (which go first) and no error; 0 otherwise.
    pub(crate) fn lane_room(&self) -> usize {
        if !self.lane_clear() {
            return 0;
        }
        self.cfg.depth.saturating_sub(self.datagrams_in_kernel())
    }

    /// Whether the lane would take datagrams once the kernel has room: a datagram socket with
    /// nothing queued or to resend and no error.
    pub(crate) fn lane_clear(&self) -> bool {
        self.datagrams && self.error.is_none() && self.queued.is_empty() && self.resend.is_empty()
    }

    /// The operation for a datagram of `len` bytes about to go by the lane, as the queue's
    /// way decides it (counting a fallback when zero-copy cannot be), and whether it is
    /// zero-copy. `again` is what [`ConnState::lane_pushed`] returned for the datagram before
    /// it in the same run: that decision stands while the ring's budget allows, since
    /// nothing else it rests on has changed (see there).
    #[inline]
    pub(crate) fn lane_op(&mut self, len: usize, again: Option<SendOp>) -> (SendOp, bool) {
        if let (Some(op), true) = (again, self.zc_budget > 0) {
            self.zc_budget -= 1;
            return (op, true);
        }
        let zc = self.chooser.fixed() != Some(Choice::Copy) && self.decide(len);
        (self.send_op(zc), zc)
    }

    /// A datagram of `len` bytes written in held `slot` went by the lane as `op` (decided by
    /// [`ConnState::lane_op`]): counted as the queue's way counts one. Returns `op` when the
    /// next datagram of the run may take it without deciding again: a fixed choice of
    /// zero-copy from a registered slot, which leaves what `decide` reads as it was (the
    /// pinned sends and bytes, and no choice of this batch pending), all but the budget.
    #[inline]
    pub(crate) fn lane_pushed(
        &mut self,
        slot: u32,
        len: usize,
        op: SendOp,
        p: Pushed,
    ) -> Option<SendOp> {
        let zc = op != SendOp::Send;
        self.stats.sends += 1;
        if let Some(a) = &mut self.stats.arena {
            a.slots += 1;
        }
        self.count_datagram(len, zc, p);
        let i = slot as usize;
        if self.lane.slots.len() <= i {
            self.lane.slots.resize(i + 1, LaneSlot::default());
        }
        self.lane.slots[i] = LaneSlot {
            len: len as u32,
            zc,
            registered: p.registered,
            live: true,
            result: None,
            notif: None,
        };
        self.lane.in_kernel += 1;
        let fixed = self.chooser.fixed().is_some();
        (zc && p.registered && fixed).then_some(op)
    }

    /// The result of the lane's datagram in `slot` (`res` bytes or `-errno`, `more` when a
    /// notification follows). With `res <= 0` the ring handed the slot back held: resent, or
    /// let go.
    pub(crate) fn on_lane_result(&mut self, slot: u32, res: i32, more: bool, age_ns: Option<u64>) {
        let live = |d: &&mut LaneSlot| d.live && d.result.is_none();
        let Some(d) = self.lane.slots.get_mut(slot as usize).filter(live) else {
            self.stats.zerocopy.unexpected += 1;
            if res <= 0 {
                self.unheld.push(slot);
            }
            return;
        };
        self.lane.in_kernel -= 1;
        let (len, zc, registered) = (d.len as usize, d.zc, d.registered);
        let transmitted = res > 0;
        let mut outcome = None;
        if !zc || !more {
            d.live = false;
        } else if let Some(copied) = d.notif {
            d.live = false;
            outcome = Some(SendZcLedger::outcome(transmitted, copied, 1));
        } else {
            d.result = Some(transmitted);
        }
        if zc && !d.live {
            self.ledger.datagram_ended(len, registered);
        }
        if outcome.is_some() {
            self.count_notif(outcome, age_ns);
        }
        if res > 0 || (res == 0 && len == 0) {
            self.stats.bytes += res as u64;
            self.stats.short_sends += u64::from((res as usize) < len);
            if res == 0 {
                self.unheld.push(slot);
            }
            return;
        }
        self.datagram_failed(slot, len, zc, res);
    }

    /// The notification of the lane's SEND_ZC datagram in `slot`; `copied` is
    /// `IORING_NOTIF_USAGE_ZC_COPIED`. Before its result it is kept for the result.
    pub(crate) fn on_lane_notification(&mut self, slot: u32, copied: bool, age_ns: Option<u64>) {
        self.stats.zerocopy.notifications += 1;
        let due = |d: &&mut LaneSlot| d.live && d.zc && d.notif.is_none();
        let Some(d) = self.lane.slots.get_mut(slot as usize).filter(due) else {
            self.stats.zerocopy.unexpected += 1;
            return;
        };
        let Some(transmitted) = d.result else {
            d.notif = Some(copied);
            return;
        };
        d.live = false;
        let (len, registered) = (d.len as usize, d.registered);
        self.ledger.datagram_ended(len, registered);
        self.count_notif(Some(SendZcLedger::outcome(transmitted, copied, 1)), age_ns);
    }
}

#[cfg(test)]
mod tests {
    use super::super::datagram::tests::datagrams;
    use super::super::tests::{state, Kernel};
    use super::super::{Choice, ConnState, Pushed, SendOp};

    /// Pushes `len` bytes in `slot` by the lane, the next of a run whose last push returned
    /// `again`; returns whether it went zero-copy and what the push returned.
    fn lane_again(
        st: &mut ConnState,
        slot: u32,
        len: usize,
        registered: bool,
        again: Option<SendOp>,
    ) -> (bool, Option<SendOp>) {
        assert!(st.lane_room() > 0, "room for slot {slot}");
        let (op, zc) = st.lane_op(len, again);
        let req = u64::from(slot);
        (
            zc,
            st.lane_pushed(slot, len, op, Pushed { req, registered }),
        )
    }

    /// Pushes `len` bytes in `slot` by the lane as the first of a run; whether it went
    /// zero-copy.
    fn lane(st: &mut ConnState, slot: u32, len: usize, registered: bool) -> bool {
        lane_again(st, slot, len, registered, None).0
    }

    /// One datagram's completions: its result, then (or first, with `notif_first`) its
    /// notification when it went zero-copy.
    #[derive(Clone, Copy)]
    struct Event {
        res: i32,
        notif_first: bool,
        copied: bool,
    }

    const SENT: Event = Event {
        res: 100,
        notif_first: false,
        copied: false,
    };

    #[test]
    fn the_lane_counts_what_the_queue_counts_for_the_same_completions() {
        let events = [
            SENT,
            Event {
                notif_first: true,
                copied: true,
                ..SENT
            },
            Event {
                copied: true,
                ..SENT
            },
            Event {
                res: -libc::ENOMEM,
                ..SENT
            },
            Event {
                res: -libc::EAGAIN,
                notif_first: true,
                ..SENT
            },
            Event { res: 60, ..SENT },
        ];
        for (zc, choice, registered) in [
            (true, Choice::ZeroCopy, true),
            (true, Choice::ZeroCopy, false),
            (false, Choice::Copy, false),
        ] {
            // The queue's way: six datagrams queued, pushed, completed as `events` say.
            let mut q = datagrams(8, zc, choice);
            let mut k = Kernel::new(1);
            k.registered = registered;
            for slot in 0..events.len() as u32 {
                q.push_held(slot, 100).unwrap();
            }
            q.request_flush();
            let pushed = k.submit(&mut q);
            assert_eq!(pushed.len(), events.len());
            // The lane's: the same six, pushed as they are written.
            let mut l = datagrams(8, zc, choice);
            // One run: each datagram decided from the one before it where that stands.
            let mut again = None;
            let lane_zc: Vec<_> = (0..events.len() as u32)
                .map(|slot| {
                    let went;
                    (went, again) = lane_again(&mut l, slot, 100, registered, again);
                    went
                })
                .collect();
            for (slot, e) in events.iter().enumerate() {
                let (went_zc, req) = (lane_zc[slot], pushed[slot].1);
                assert_eq!(went_zc, pushed[slot].3 != SendOp::Send, "the same choice");
                let slot = slot as u32;
                if went_zc && e.notif_first {
                    q.on_notification(req, e.copied, None);
                    l.on_lane_notification(slot, e.copied, None);
                }
                q.on_result(req, e.res, went_zc, Some(7));
                l.on_lane_result(slot, e.res, went_zc, Some(7));
                if went_zc && !e.notif_first {
                    q.on_notification(req, e.copied, Some(9));
                    l.on_lane_notification(slot, e.copied, Some(9));
                }
            }
            let (qs, ls) = (q.stats(), l.stats());
            assert_eq!(
                format!("{qs:?}"),
                format!("{ls:?}"),
                "zc {zc}, registered {registered}"
            );
            assert_eq!(q.zc_inflight(), 0);
            assert_eq!(l.zc_inflight(), 0);
            // Registered, all six go zero-copy; not, the cap of 4 leaves the last two to copy.
            let z = &ls.zerocopy;
            let want = match (zc, registered) {
                (true, true) => (4, 2, 6),
                (true, false) => (3, 2, 4),
                (false, _) => (0, 0, 0),
            };
            assert_eq!((z.completions, z.copied, z.notifications), want);
            assert_eq!(q.error(), l.error());
            if !zc {
                assert_eq!(l.error(), Some(libc::ENOMEM), "a copy's ENOMEM is an error");
                continue;
            }
            // The failed two wait to be resent, by the queue's way on both.
            assert_eq!(l.lane_room(), 0, "what is to be resent goes first");
            assert!(l.ready());
            let resent = Kernel::new(1 << 40).submit(&mut l);
            let slots: Vec<_> = resent.iter().map(|x| (x.0, x.3 == SendOp::Send)).collect();
            assert_eq!(
                slots,
                [(3, true), (4, !lane_zc[4])],
                "ENOMEM goes again by copy"
            );
        }
    }

    #[test]
    fn a_run_s_decision_stands_only_for_a_fixed_zero_copy_from_registered_slots_within_budget() {
        // Per datagram, decided afresh; and in one run, decided from the one before.
        let run = |choice, registered, budget: usize| {
            let (mut fresh, mut run) = (datagrams(8, true, choice), datagrams(8, true, choice));
            fresh.set_zc_budget(budget);
            run.set_zc_budget(budget);
            let (mut again, mut hints, mut went) = (None, Vec::new(), Vec::new());
            for slot in 0..6 {
                let zc = lane(&mut fresh, slot, 100, registered);
                let (zc2, next) = lane_again(&mut run, slot, 100, registered, again);
                assert_eq!(zc, zc2, "slot {slot}");
                (again, _) = (next, hints.push(next.is_some()));
                went.push(zc);
            }
            let (f, r) = (fresh.stats(), run.stats());
            assert_eq!(format!("{f:?}"), format!("{r:?}"));
            (went, hints, r.zerocopy.fallbacks.total())
        };
        let (went, hints, fallbacks) = run(Choice::ZeroCopy, true, 4);
        assert_eq!(
            went,
            [true, true, true, true, false, false],
            "the budget of 4"
        );
        assert_eq!(hints, [true, true, true, true, false, false]);
        assert_eq!(fallbacks, 2);
        // Pinned: the cap of 4 is read again for each.
        let (went, hints, _) = run(Choice::ZeroCopy, false, usize::MAX);
        assert_eq!(went, [true, true, true, true, false, false]);
        assert!(
            hints.iter().all(|h| !h),
            "no decision stands for pinned sends"
        );
        // Copy never goes zero-copy.
        let (went, hints, _) = run(Choice::Copy, true, usize::MAX);
        assert!(!went.iter().any(|&w| w) && !hints.iter().any(|&h| h));
        // The adaptive sender decides each datagram (and counts each decision).
        let profile = crate::profile::Profile::defaults();
        let cfg = crate::policy::adaptive::AdaptiveConfig {
            run_min: 0,
            ..Default::default()
        };
        let a = crate::policy::adaptive::Adaptive::new(profile, cfg);
        let mut st = ConnState::new(
            state(8, true, Choice::ZeroCopy).cfg,
            super::super::Chooser::Adaptive(Box::new(a)),
        );
        st.set_datagrams();
        assert_eq!(lane_again(&mut st, 0, 65536, true, None), (true, None));
    }

    #[test]
    fn only_a_datagram_that_sent_nothing_comes_back_to_the_state() {
        let mut st = datagrams(4, false, Choice::Copy);
        for slot in 0..4 {
            lane(&mut st, slot, 100, false);
        }
        assert_eq!(st.lane_room(), 0, "depth in the kernel");
        assert!(!st.is_flushed());
        st.on_lane_result(0, 100, false, None);
        assert_eq!(st.lane_room(), 1, "each result makes room");
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        assert!(un.is_empty(), "the ring frees a slot that sent: {un:?}");
        // A second result for the same datagram, or one for a slot never pushed.
        st.on_lane_result(0, 100, false, None);
        st.on_lane_result(9, -libc::EINTR, false, None);
        assert_eq!(st.stats().zerocopy.unexpected, 2);
        st.drain_unheld(&mut un);
        assert_eq!(un, [9], "a slot handed back is let go of, even unexpected");
        un.clear();
        st.on_lane_result(1, -libc::ECONNREFUSED, false, None);
        assert_eq!(st.error(), Some(libc::ECONNREFUSED));
        assert_eq!(st.lane_room(), 0, "no lane after an error");
        st.on_lane_result(2, 0, false, None);
        st.on_lane_result(3, 100, false, None);
        st.drain_unheld(&mut un);
        assert_eq!(un, [1, 2], "the failed one and the one that sent nothing");
        assert_eq!(st.stats().bytes, 200);
        assert!(st.is_flushed());
    }

    #[test]
    fn an_empty_datagram_counts_as_sent_and_its_slot_is_let_go_of() {
        let mut st = datagrams(2, false, Choice::Copy);
        lane(&mut st, 5, 0, false);
        st.on_lane_result(5, 0, false, None);
        assert_eq!(st.error(), None);
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        assert_eq!(un, [5]);
        assert_eq!(st.stats().sends, 1);
    }

    #[test]
    fn the_lane_waits_behind_the_queue_and_shares_the_depth_with_it() {
        let mut st = datagrams(4, false, Choice::Copy);
        assert_eq!(datagrams(4, false, Choice::Copy).lane_room(), 4);
        assert_eq!(
            state(4, false, Choice::Copy).lane_room(),
            0,
            "a stream has no lane"
        );
        st.push_held(7, 10).unwrap();
        assert_eq!(st.lane_room(), 0, "a queued datagram goes first");
        st.request_flush();
        let q = Kernel::new(1).submit(&mut st);
        assert_eq!(q.len(), 1);
        assert_eq!(st.lane_room(), 3, "one of the queue's in the kernel");
        lane(&mut st, 0, 10, false);
        lane(&mut st, 1, 10, false);
        assert_eq!(st.lane_room(), 1);
        st.on_result(q[0].1, 10, false, None);
        assert_eq!(st.lane_room(), 2);
    }
}
