//! The lanes: messages written in place and pushed to the ring as they are written, past
//! the queue. On a datagram socket each is one request ([`SendRing::push_lane`]); on a stream
//! socket a run of them is one vectored request ([`SendRing::push_lane_group`]), the one the
//! connection has in the kernel, as a chain would be. The ring lets go of a lane's request
//! once pushed: its slots go back to the arena with its last completion, and its completions
//! are counted where they are read, into a [`LaneTally`] the connection takes once per reap
//! ([`ConnState::on_lane_tally`]). The state keeps only how many are in the kernel (and a
//! stream's slots). Every count is the one the queue's way would make; a datagram that sent
//! nothing comes back to the state, held, and is resent by the queue's way or let go, and a
//! stream's request that sent less than all is settled as its chain would be
//! ([`ConnState::on_lane_failed`]).
//!
//! [`SendRing::push_lane`]: crate::sys::uring::SendRing::push_lane
//! [`SendRing::push_lane_group`]: crate::sys::uring::SendRing::push_lane_group

use super::{Choice, ConnState, Order, SendOp, MAX_IOV};
use crate::completion::{ChainEntry, ChainResult, LaneSend, LaneTally};
use crate::policy::{self, ZcDecision};

/// A stream's request in the kernel by the lane: its slots, in order, each `len` bytes.
#[derive(Debug, Default)]
pub(super) struct LaneGroup {
    slots: Vec<u32>,
    len: usize,
    zc: bool,
}

impl ConnState {
    /// How many messages may go by the lane now: as many datagrams as the kernel has room
    /// for, or on a stream socket with nothing in the kernel a vectored request's worth; 0
    /// unless [`ConnState::lane_clear`].
    pub(crate) fn lane_room(&self) -> usize {
        self.lane_space().unwrap_or(0)
    }

    /// [`ConnState::lane_room`], `None` when the lane is not clear
    /// ([`ConnState::lane_clear`]): `Some(0)` says it waits for the kernel.
    pub(crate) fn lane_space(&self) -> Option<usize> {
        match (self.lane_clear(), self.datagrams) {
            (false, _) => None,
            (true, true) => Some(self.cfg.depth.saturating_sub(self.datagrams_in_kernel())),
            (true, false) if self.chain_in_flight() => Some(0),
            (true, false) => Some(self.cfg.depth.min(MAX_IOV)),
        }
    }

    /// Whether the lane would take messages once the kernel has room: nothing queued or to
    /// resend (which go first) and no error, on a datagram socket, or on a stream socket
    /// whose chains are vectored and whose operation is fixed (one request carries one).
    pub(crate) fn lane_clear(&self) -> bool {
        let stream = self.cfg.order == Order::Vectored && self.chooser.fixed().is_some();
        (self.datagrams || stream)
            && self.error.is_none()
            && self.queued.is_empty()
            && self.resend.is_empty()
    }

    /// The operation of a stream's request of up to `n` messages of `len` bytes about to go
    /// by the lane, when the queue's way would decide every one the same
    /// ([`ConnState::stream_lane_pushed`] then decides them); `None` otherwise, the queue's
    /// way then taking them.
    pub(crate) fn stream_lane_op(&self, n: usize, len: usize) -> Option<SendOp> {
        if self.chooser.fixed()? == Choice::Copy {
            return Some(SendOp::Send);
        }
        let z = self.cfg.zc?;
        // `decide` admits by the sends in flight and those chosen before in the request: the
        // last of the `n` is admitted only if every one is.
        let (pinned, bytes) = self.ledger.pinned();
        let last = (n.max(1) - 1, (n.max(1) - 1) * len);
        let admit = policy::admit(true, z.limits, pinned + last.0, bytes + last.1, len, true);
        (self.zc_budget >= n && admit == ZcDecision::ZeroCopy).then_some(self.send_op(true))
    }

    /// A stream's request of the messages in `slots`, `len` bytes each, went by the lane as
    /// `op` (from [`ConnState::stream_lane_op`] for as many or more), from registered
    /// buffers when `registered`: decided and counted as the queue's way does its chain.
    pub(crate) fn stream_lane_pushed(
        &mut self,
        slots: &[u32],
        len: usize,
        op: SendOp,
        registered: bool,
    ) {
        let (n, zc) = (slots.len(), op != SendOp::Send);
        if zc {
            // As the queue's way decides each: under the fixed choice of zero-copy that
            // `stream_lane_op` found admitting every one, each decision takes one send from
            // the ring's budget and none falls back (what they chose is in the ledger once
            // counted below).
            self.zc_budget -= n.min(self.zc_budget);
        }
        self.count_in_place(n, true);
        self.count_unkeyed(1, n, len, zc, registered);
        self.lane_in_kernel += 1;
        let g = &mut self.lane_group;
        g.slots.clear();
        g.slots.extend_from_slice(slots);
        (g.len, g.zc) = (len, zc);
    }

    /// The operation for a datagram of `len` bytes about to go by the lane, as the queue's
    /// way decides it (counting a fallback when zero-copy cannot be), and whether it is
    /// zero-copy.
    #[inline]
    pub(crate) fn lane_op(&mut self, len: usize) -> (SendOp, bool) {
        let zc = self.chooser.fixed() != Some(Choice::Copy) && self.decide(len);
        (self.send_op(zc), zc)
    }

    /// How many of the next `n` datagrams of a run may go as `op` without deciding again,
    /// where [`ConnState::lane_pushed`] returned `op` for the one before them: all of them
    /// for a copy, as many as the ring's budget allows for zero-copy. Those that go are
    /// counted by [`ConnState::lane_pushed_run`].
    #[inline]
    pub(crate) fn lane_take(&self, op: SendOp, n: usize) -> usize {
        match op {
            SendOp::Send => n,
            SendOp::SendZc { .. } => n.min(self.zc_budget),
        }
    }

    /// `n` datagrams of `len` bytes each went by the lane as `op`, which
    /// [`ConnState::lane_take`] allowed: counted as [`ConnState::lane_pushed`] counts them,
    /// zero-copy ones taken from the ring's budget.
    #[inline]
    pub(crate) fn lane_pushed_run(&mut self, n: usize, len: usize, op: SendOp, registered: bool) {
        if op != SendOp::Send {
            self.zc_budget -= n.min(self.zc_budget);
        }
        self.lane_pushed(n, len, op, registered);
    }

    /// `n` datagrams of `len` bytes each went by the lane as `op` (decided by
    /// [`ConnState::lane_op`] or [`ConnState::lane_take`]), from registered buffers when
    /// `registered`: counted as the queue's way counts each. Returns `op` when the rest of
    /// the run may take it without deciding again ([`ConnState::lane_take`]): a fixed choice
    /// of a copy, which decides nothing, or a fixed choice of zero-copy that went zero-copy
    /// from registered buffers, which leaves what `decide` reads as it was (the pinned sends
    /// and bytes, and no choice of this batch pending), all but the budget.
    #[inline]
    pub(crate) fn lane_pushed(
        &mut self,
        n: usize,
        len: usize,
        op: SendOp,
        registered: bool,
    ) -> Option<SendOp> {
        let zc = op != SendOp::Send;
        self.count_in_place(n, true);
        self.count_unkeyed(n, n, len, zc, registered);
        self.lane_in_kernel += n;
        let stands = match self.chooser.fixed() {
            Some(Choice::Copy) => true,
            Some(Choice::ZeroCopy) => zc && registered,
            None => false,
        };
        stands.then_some(op)
    }

    /// What the lane's datagrams' completions came to since the last tally: counted as the
    /// queue's way counts each completion. A reap's zero-copy completions reach the adaptive
    /// sender together, as a vectored request's do.
    pub(crate) fn on_lane_tally(&mut self, t: &LaneTally) {
        self.lane_in_kernel = self.lane_in_kernel.saturating_sub(t.sent as usize);
        self.stats.bytes += t.bytes;
        self.stats.short_sends += t.short;
        let z = &mut self.stats.zerocopy;
        z.notifications += t.notifications;
        z.unexpected += t.unexpected;
        for (registered, &(sends, bytes)) in [false, true].into_iter().zip(&t.ended) {
            if sends > 0 {
                self.ledger.unkeyed_ended(sends, bytes, registered);
            }
        }
        if t.completions > 0 {
            self.count_completions(t.completions, t.copied);
        }
        for &(age, n) in &t.ages {
            crate::stats::record_ns_n(&mut self.stats.completion_latency_ns, age, n);
        }
    }

    /// The result `res` of the lane's request `d` in `slot` (for a stream, its first), which
    /// the ring hands over as it is: a stream's `SEND` request that sent all counts as its
    /// tally would ([`LaneTally::on_result`]). Otherwise `d` failed: the datagram sent nothing
    /// (`res`: 0 or `-errno`), or the stream's request sent less than all, and the ring holds
    /// its slots for the state again. A datagram is resent by the queue's way or let go; a
    /// stream's request is settled as a chain of one request: the bytes it sent count, and
    /// what it left is resent first, in order.
    pub(crate) fn on_lane_result(&mut self, slot: u32, d: LaneSend, res: i32) {
        self.lane_in_kernel = self.lane_in_kernel.saturating_sub(1);
        if !d.failed {
            self.stats.bytes += res as u64;
            return;
        }
        if self.datagrams {
            return self.datagram_failed(slot, d.len, d.zc, res);
        }
        let g = std::mem::take(&mut self.lane_group);
        let mut chain = std::mem::take(&mut self.chain);
        let entry = |&slot: &u32| ChainEntry {
            slot,
            start: 0,
            end: g.len,
            zc: g.zc,
        };
        chain.extend(g.slots.iter().map(entry));
        let entries = chain.len();
        self.settle_links(&chain, &[ChainResult { entries, res }]);
        chain.clear();
        (self.chain, self.lane_group) = (chain, g);
    }
}

#[cfg(test)]
mod tests {
    use super::super::datagram::tests::datagrams;
    use super::super::tests::{state, Kernel};
    use super::super::{Choice, ConnState, SendOp};
    use crate::completion::{LaneRequest, LaneTally};

    /// Pushes `len` bytes by the lane, the next of a run whose last push returned `again`,
    /// as the driver does (from buffers the ring registered when `registered`); returns what
    /// the ring would keep of it, whether it went zero-copy and whether the next may go
    /// without deciding.
    fn lane_again(
        st: &mut ConnState,
        len: usize,
        registered: bool,
        again: Option<SendOp>,
    ) -> (LaneRequest, bool, Option<SendOp>) {
        assert!(st.lane_room() > 0, "room");
        if let Some(op) = again.filter(|&op| st.lane_take(op, 1) == 1) {
            let zc = op != SendOp::Send;
            st.lane_pushed_run(1, len, op, registered && zc);
            return (LaneRequest::new(len, zc, registered && zc), zc, Some(op));
        }
        let (op, zc) = st.lane_op(len);
        let next = st.lane_pushed(1, len, op, registered && zc);
        (LaneRequest::new(len, zc, registered && zc), zc, next)
    }

    /// Pushes `len` bytes by the lane as the first of a run.
    fn lane(st: &mut ConnState, len: usize, registered: bool) -> (LaneRequest, bool) {
        let (d, zc, _) = lane_again(st, len, registered, None);
        (d, zc)
    }

    /// A result as the ring counts it, and as the state gets it when it sent nothing.
    fn result(st: &mut ConnState, t: &mut LaneTally, slot: u32, d: &mut LaneRequest, res: i32) {
        if t.on_result(d, res, d.send(res).zc, || Some(7)).failed {
            st.on_lane_result(slot, d.send(res), res);
        }
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
            // The lane's: the same six in one run, each decided from the one before it where
            // that stands, their completions counted as the ring counts them.
            let mut l = datagrams(8, zc, choice);
            let (mut again, mut t) = (None, LaneTally::default());
            let mut sent: Vec<_> = (0..events.len())
                .map(|_| {
                    let (d, went, next) = lane_again(&mut l, 100, registered, again);
                    again = next;
                    (d, went)
                })
                .collect();
            for (slot, e) in events.iter().enumerate() {
                let (d, went_zc) = &mut sent[slot];
                let req = pushed[slot].1;
                assert_eq!(*went_zc, pushed[slot].3 != SendOp::Send, "the same choice");
                if *went_zc && e.notif_first {
                    q.on_notification(req, e.copied, None);
                    t.on_notification(d, e.copied, || None);
                }
                q.on_result(req, e.res, *went_zc, Some(7));
                result(&mut l, &mut t, slot as u32, d, e.res);
                if *went_zc && !e.notif_first {
                    q.on_notification(req, e.copied, Some(9));
                    t.on_notification(d, e.copied, || Some(9));
                }
            }
            l.on_lane_tally(&t);
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
                [(3, true), (4, !sent[4].1)],
                "ENOMEM goes again by copy"
            );
        }
    }

    #[test]
    fn a_run_s_decision_stands_for_a_fixed_copy_and_a_fixed_zero_copy_from_registered_slots_in_budget(
    ) {
        // Per datagram, decided afresh; and in one run, decided from the one before.
        let run = |choice, registered, budget: usize| {
            let (mut fresh, mut run) = (datagrams(8, true, choice), datagrams(8, true, choice));
            fresh.set_zc_budget(budget);
            run.set_zc_budget(budget);
            let (mut again, mut hints, mut went) = (None, Vec::new(), Vec::new());
            for _ in 0..6 {
                let (_, zc) = lane(&mut fresh, 100, registered);
                let (_, zc2, next) = lane_again(&mut run, 100, registered, again);
                assert_eq!(zc, zc2);
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
        assert_eq!(
            hints,
            [true, true, true, true, false, false],
            "a fallback decides again"
        );
        assert_eq!(fallbacks, 2);
        // Pinned: the cap of 4 is read again for each.
        let (went, hints, _) = run(Choice::ZeroCopy, false, usize::MAX);
        assert_eq!(went, [true, true, true, true, false, false]);
        assert!(
            hints.iter().all(|h| !h),
            "no decision stands for pinned sends"
        );
        // A fixed copy decides nothing: it stands, and never goes zero-copy.
        let (went, hints, _) = run(Choice::Copy, true, usize::MAX);
        assert!(!went.iter().any(|&w| w) && hints.iter().all(|&h| h));
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
        let (_, zc, next) = lane_again(&mut st, 65536, true, None);
        assert_eq!((zc, next), (true, None));
    }

    #[test]
    fn only_a_datagram_that_sent_nothing_comes_back_to_the_state() {
        let mut st = datagrams(4, false, Choice::Copy);
        let mut sent: Vec<_> = (0..4).map(|_| lane(&mut st, 100, false).0).collect();
        assert_eq!(st.lane_room(), 0, "depth in the kernel");
        assert!(!st.is_flushed());
        let mut t = LaneTally::default();
        result(&mut st, &mut t, 0, &mut sent[0], 100);
        assert_eq!(st.lane_room(), 0, "counted once the tally is in");
        st.on_lane_tally(&t);
        assert_eq!(st.lane_room(), 1, "each result makes room");
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        assert!(un.is_empty(), "the ring frees a slot that sent: {un:?}");
        let mut t = LaneTally::default();
        result(&mut st, &mut t, 1, &mut sent[1], -libc::ECONNREFUSED);
        assert_eq!(st.error(), Some(libc::ECONNREFUSED));
        assert_eq!(st.lane_room(), 0, "no lane after an error");
        result(&mut st, &mut t, 2, &mut sent[2], 0);
        result(&mut st, &mut t, 3, &mut sent[3], 100);
        st.on_lane_tally(&t);
        st.drain_unheld(&mut un);
        assert_eq!(un, [1, 2], "the failed one and the one that sent nothing");
        let s = st.stats();
        assert_eq!((s.sends, s.bytes), (4, 200));
        assert!(st.is_flushed());
        // An empty datagram's 0 is sent, not failed.
        let mut st = datagrams(2, false, Choice::Copy);
        let mut t = LaneTally::default();
        let mut empty = lane(&mut st, 0, false).0;
        result(&mut st, &mut t, 5, &mut empty, 0);
        st.on_lane_tally(&t);
        st.drain_unheld(&mut un);
        assert_eq!((st.error(), un.len(), st.lane_room()), (None, 2, 2));
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
        lane(&mut st, 10, false);
        lane(&mut st, 10, false);
        assert_eq!(st.lane_room(), 1);
        st.on_result(q[0].1, 10, false, None);
        assert_eq!(st.lane_room(), 2);
    }

    /// A connection state of `depth` on a stream socket whose chains are vectored.
    fn stream(depth: usize, zc: bool, choice: Choice) -> ConnState {
        let mut st = state(depth, zc, choice);
        st.cfg.order = super::super::Order::Vectored;
        st
    }

    #[test]
    fn a_stream_s_lane_request_counts_and_resends_what_its_chain_would() {
        // One request of four messages of 100 bytes: its result, then its notification.
        let results = [400, 250, -libc::ENOMEM, -libc::EAGAIN, 0, -libc::ECONNRESET];
        let slots = [0, 1, 2, 3];
        for (zc, choice, registered, copied) in [
            (true, Choice::ZeroCopy, true, false),
            (true, Choice::ZeroCopy, false, true),
            (false, Choice::Copy, false, false),
        ] {
            for res in results {
                let why = format!("zc {zc}, registered {registered}, result {res}");
                // The queue's way: the four queued, pushed as one vectored request.
                let mut q = stream(8, zc, choice);
                let mut k = Kernel::new(1);
                k.registered = registered;
                for slot in slots {
                    q.push_held(slot, 100).unwrap();
                }
                q.request_flush();
                let req = k.submit(&mut q)[0].1;
                q.on_result(req, res, zc, Some(7));
                // The lane's: the same four in one request, counted as the ring counts.
                let mut l = stream(8, zc, choice);
                assert_eq!(l.lane_room(), 8);
                let op = l
                    .stream_lane_op(4, 100)
                    .expect("one operation for all four");
                l.stream_lane_pushed(&slots, 100, op, registered && zc);
                assert_eq!(l.lane_room(), 0, "one request in the kernel");
                let mut d = LaneRequest::stream(100, 4, zc, registered && zc);
                let mut t = LaneTally::default();
                // As the ring routes it: a `SEND` request's result to the state as it is, a
                // `SEND_ZC` request's into the tally, and to the state when it failed it.
                let failed = match d.stream_copy() {
                    true => d.fails(res),
                    false => t.on_result(&mut d, res, zc, || Some(7)).failed,
                };
                assert_eq!(failed, res != 400, "{why}");
                assert_eq!(d.stream_copy(), !zc, "{why}");
                if failed || !zc {
                    l.on_lane_result(0, d.send(res), res);
                }
                if zc {
                    q.on_notification(req, copied, Some(9));
                    t.on_notification(&mut d, copied, || Some(9));
                }
                l.on_lane_tally(&t);
                let (qs, ls) = (q.stats(), l.stats());
                assert_eq!(format!("{qs:?}"), format!("{ls:?}"), "{why}");
                assert_eq!((q.zc_inflight(), l.zc_inflight()), (0, 0), "{why}");
                assert_eq!(q.error(), l.error(), "{why}");
                let (mut qu, mut lu) = (Vec::new(), Vec::new());
                q.drain_unheld(&mut qu);
                l.drain_unheld(&mut lu);
                // A request that sent all is the ring's to let go of; one that did not, the
                // state's, as the chain's are.
                let ring = if failed { &qu[..] } else { &[] };
                assert_eq!(lu, ring, "the same slots let go of: {why}");
                // What is left goes again, by the queue's way, the same on both.
                let again = |st: &mut ConnState| {
                    let log = Kernel::new(1 << 40).submit(st);
                    log.into_iter().map(|x| (x.0, x.2, x.3)).collect::<Vec<_>>()
                };
                assert_eq!(again(&mut q), again(&mut l), "{why}");
            }
        }
    }

    #[test]
    fn a_stream_s_zero_copy_request_decides_as_the_queue_decides_each_of_its_sends() {
        let (mut l, mut q) = (
            stream(8, true, Choice::ZeroCopy),
            stream(8, true, Choice::ZeroCopy),
        );
        l.set_zc_budget(5);
        q.set_zc_budget(5);
        let op = l.stream_lane_op(4, 100).expect("four admitted");
        l.stream_lane_pushed(&[0, 1, 2, 3], 100, op, true);
        q.deciding = (0, 0);
        assert!(
            (0..4).all(|_| q.decide(100)),
            "the queue's way: each admitted"
        );
        assert_eq!((l.zc_budget, q.zc_budget), (1, 1));
        let (lz, qz) = (&l.stats().zerocopy, &q.stats().zerocopy);
        assert_eq!(format!("{:?}", lz.fallbacks), format!("{:?}", qz.fallbacks));
        assert_eq!(lz.fallbacks.total(), 0);
    }

    #[test]
    fn a_stream_takes_the_lane_only_when_one_operation_fits_every_message() {
        // Zero-copy under a cap of 4 pinned sends: four fit one request, five do not.
        let st = stream(8, true, Choice::ZeroCopy);
        assert!(st.stream_lane_op(4, 100).is_some());
        assert_eq!(st.stream_lane_op(5, 100), None);
        let mut st = stream(8, true, Choice::ZeroCopy);
        st.set_zc_budget(3);
        assert_eq!(st.stream_lane_op(4, 100), None, "past the ring's budget");
        assert_eq!(st.stats().zerocopy.fallbacks.total(), 0, "nothing decided");
        // Linked chains, something queued, or a chain in flight: not now.
        let mut st = state(8, false, Choice::Copy);
        assert_eq!(st.lane_room(), 0, "linked");
        st.cfg.order = super::super::Order::Vectored;
        assert_eq!(st.lane_room(), 8);
        st.push_held(0, 100).unwrap();
        assert_eq!(st.lane_room(), 0, "the queue goes first");
        st.request_flush();
        let log = Kernel::new(1).submit(&mut st);
        assert_eq!(st.lane_room(), 0, "a chain in flight");
        st.on_result(log[0].1, 100, false, None);
        assert_eq!(st.lane_room(), 8);
    }
}
