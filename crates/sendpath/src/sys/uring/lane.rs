//! The datagram lane in the ring. Datagrams written in place are taken from the parked slots
//! as a stream's lane request takes them ([`SendRing::fill_lane_slots`]) and pushed a run at
//! a time ([`SendRing::push_lane_run`]): each slot is the ring's as a whole from the moment
//! it is taken, reached through where its bytes are, its own record (tag, length,
//! completions due) not written, and its last completion puts it back among the parked slots
//! in one move. A datagram pushed by [`SendRing::push_lane`] (a held slot) is no one's once
//! pushed either. Either way its result and notification are counted into its connection's
//! [`LaneTally`] where they are read, which the driver hands to the connection once per reap
//! ([`SendRing::take_lane_tallies`]). Only a result that sent nothing goes to the connection
//! itself, as a [`Cqe`] whose slot the ring holds for it again (written then): the
//! connection resends it or lets it go.
//!
//! [`SendRing::push_lane`]: super::SendRing::push_lane
//! [`Cqe`]: super::Cqe

use super::submit::{next_request, send_entry};
use super::{age_ns, cqueue, Cqe, Op, SendRing, IORING_NOTIF_USAGE_ZC_COPIED, LANE};
use crate::completion::{LaneRequest, LaneSend, LaneStep, LaneTally};
use io_uring::types;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

impl SendRing {
    /// One completion of a lane datagram (`req` carries [`super::LANE`]): counted into its
    /// connection's tally, found from the datagram's own record; its slot is looked at only
    /// after its last completion, or a result that sent nothing (which goes to `to` too, its
    /// slot held again). The clock and the slot's push time are read only for a zero-copy
    /// outcome, and the time only for the sampled pushes.
    #[inline(always)]
    pub(super) fn route_lane(
        &mut self,
        req: u64,
        res: i32,
        flags: u32,
        now: &mut Option<u64>,
        to: &mut impl FnMut(Cqe),
    ) {
        let slot = req as u32 as usize;
        let Some(d) = self.lane.get_mut(slot) else {
            return;
        };
        let (tag, whole) = (d.tag(), d.is_whole());
        let (clock, at) = (&self.clock, &self.held_at);
        let age_ns = || age_ns(clock, now, true, at.get(slot).copied().flatten());
        let (tallies, listed) = (&mut self.lane_tallies, &mut self.lane_listed);
        let Some(step) = count(tallies, listed, tag, d, (res, flags), age_ns) else {
            return;
        };
        if whole && !step.failed {
            if step.last {
                // The ring's as a whole since its push, and no one's: free as it is.
                self.parked_free.push(slot as u32);
                self.request_ended(tag);
            }
            return;
        }
        if whole {
            self.split_lane_slot(slot);
        }
        if step.last || step.failed {
            self.lane_step(slot as u32, tag, step, Done::new(req, res, flags), to);
        }
    }

    /// The slot of whole lane datagram `slot` given its own record, as a slot pushed by
    /// [`SendRing::push_lane`] has it: its tag, its length, the request awaiting its
    /// completions, held by no one. For a result that fails the datagram, and for a count of
    /// what the kernel holds.
    #[cold]
    fn split_lane_slot(&mut self, slot: usize) {
        let d = &mut self.lane[slot];
        d.split();
        let (tag, len) = (d.tag(), d.len());
        if let Some(s) = self.slots[slot].as_mut() {
            s.buf.resize(len);
            (s.tag, s.held, s.pending) = (tag, false, 1);
        }
    }

    /// Lane datagram `slot` of `tag` had its last completion (`step.last`), or a result that
    /// sent nothing (`step.failed`: the slot is its connection's again, to resend or let go
    /// of, and the result goes to `to`).
    #[inline(always)]
    fn lane_step(
        &mut self,
        slot: u32,
        tag: u32,
        step: LaneStep,
        c: Done,
        to: &mut impl FnMut(Cqe),
    ) {
        let Some(Some(s)) = self.slots.get_mut(slot as usize) else {
            return;
        };
        s.held |= step.failed;
        if step.last {
            s.pending = s.pending.saturating_sub(1);
        }
        let (free, parked) = (s.pending == 0 && !s.held, s.parked);
        if step.last {
            if free {
                self.slot_done(slot, parked);
            }
            self.request_ended(tag);
        }
        if step.failed {
            failed_to(to, c.lane(tag, self.lane[slot as usize].send(c.res)));
        }
    }

    /// Parked slots for lane datagrams of `len` bytes, one for each message `i` of `at`, each
    /// written by `fill(i, bytes)` and pushed onto `out` in order, taken as a stream's lane
    /// request takes them: the slots are the lane's as a whole, not their owner's, until
    /// [`SendRing::push_lane_run`] (or [`SendRing::push_lane_taken`]) sends them or
    /// [`SendRing::drop_lane_slots`] lets them go. Stops early when no parked slot is free or
    /// large enough. When `fill` panics, the slots this call took go back before the panic
    /// goes on.
    pub(crate) fn fill_lane_slots(
        &mut self,
        len: usize,
        at: std::ops::Range<usize>,
        fill: &mut dyn FnMut(usize, &mut [u8]),
        out: &mut Vec<u32>,
    ) {
        let start = out.len();
        for i in at {
            let Some((slot, bytes, _)) = self.take_lane_slot(len) else {
                return;
            };
            out.push(slot);
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| fill(i, bytes))) {
                self.parked_free.extend(out.drain(start..));
                resume_unwind(panic);
            }
        }
    }

    /// Datagrams of the first `len` bytes of each of `slots` (taken by
    /// [`SendRing::fill_lane_slots`], all of `tag`), each pushed by `op` as one request, with
    /// one look at the submission queue for them all. Each slot is reached through where its
    /// bytes are, and stays the ring's as a whole until its last completion, which frees it.
    /// Stops at a slot with fewer bytes, and, for SEND_ZC, at one outside the registered arena
    /// ([`SendRing::push_lane_taken`] sends that one). Returns how many went and whether they
    /// send from a registered buffer.
    pub(crate) fn push_lane_run(
        &mut self,
        fd: BorrowedFd<'_>,
        tag: u32,
        slots: &[u32],
        len: usize,
        op: Op,
    ) -> io::Result<(usize, bool)> {
        let zc = matches!(op, Op::SendZc { .. });
        let room = {
            let sq = self.ring.submission();
            sq.capacity() - sq.len()
        };
        if room < slots.len() {
            self.submit()?;
        }
        let fd = types::Fd(fd.as_raw_fd());
        let SendRing {
            ring,
            held_at,
            lane,
            clock,
            requests,
            parked_at,
            ..
        } = self;
        let mut sq = ring.submission();
        let mut n = 0;
        for &slot in slots {
            let Some(at) = parked_at.get(slot as usize) else {
                break;
            };
            if len > at.size || (zc && !at.registered) {
                break;
            }
            let req = next_request(requests) | LANE | u64::from(slot);
            let entry = send_entry(fd, at.start, len, op, zc.then_some(0)).user_data(req);
            // SAFETY: the SQE points at the first `len` bytes of the arena slot held in
            // `slots[slot]` (`at`, recorded by `park`), whose buffer never leaves the ring and
            // whose memory lives as long as it. The slot is the lane's as a whole: it is in no
            // free list and held by no one until its datagram's last completion frees it.
            if unsafe { sq.push(&entry) }.is_err() {
                break;
            }
            // The clock, for a zero-copy outcome in the sample.
            held_at[slot as usize] = if zc { clock.timed() } else { None };
            lane[slot as usize] = LaneRequest::new(len, zc, zc).of(tag).whole();
            n += 1;
        }
        drop(sq);
        self.requests_started(tag, n);
        self.lane_tally_for(tag);
        Ok((n, zc))
    }

    /// Lane datagram `slot` (taken by [`SendRing::fill_lane_slots`] for `tag`), pushed alone:
    /// as [`SendRing::push_lane_run`] pushes it where it can, else held for `tag` and pushed as
    /// [`SendRing::push_lane`] pushes a held slot (registering a buffer outside the arena's
    /// registered part on its own). Returns whether it sends from a registered buffer. When
    /// it cannot be pushed, the slot is left for [`SendRing::drop_lane_slots`] (held for
    /// `tag` if it failed as a held slot's push).
    pub(crate) fn push_lane_taken(
        &mut self,
        fd: BorrowedFd<'_>,
        tag: u32,
        slot: u32,
        len: usize,
        op: Op,
    ) -> io::Result<bool> {
        if let (1, registered) = self.push_lane_run(fd, tag, &[slot], len, op)? {
            return Ok(registered);
        }
        self.hold_taken(slot, tag, len);
        self.push_lane(fd, slot, len, op)
            .map(|(_, registered)| registered)
    }

    /// Lets lane slots that did not go free again ([`SendRing::fill_lane_slots`]): each parked
    /// and free, what was written in it dropped.
    pub(crate) fn drop_lane_slots(&mut self, slots: &[u32]) {
        for &slot in slots {
            // Held only when `push_lane_taken` held it for a push that failed.
            match self.slots[slot as usize].as_ref().is_some_and(|s| s.held) {
                true => drop(self.unhold(slot)),
                false => self.parked_free.push(slot),
            }
        }
    }

    /// Group `g`, taken for a request that did not go, free again.
    pub(super) fn give_back_group(&mut self, g: u32) {
        self.groups[g as usize].pending = 0;
        self.free_groups.push(g);
    }

    /// One completion of a stream's lane request `req` (which carries [`GROUP`] and
    /// [`LANE`]): a `SEND` request's result goes to `to` as it is; a `SEND_ZC` request's
    /// completions are counted into its connection's tally, and a result that sent less than
    /// all also goes to `to`. A result that sent less than all holds the slots for their owner
    /// again. After its last completion, each slot its owner does not hold is free. Kept out
    /// of the reap's loop, which it would crowd for the datagram lane's many completions.
    #[inline(never)]
    pub(super) fn route_lane_group(
        &mut self,
        req: u64,
        res: i32,
        flags: u32,
        now: &mut Option<u64>,
        to: &mut impl FnMut(Cqe),
    ) {
        let g = req as u32;
        let Some(group) = self.groups.get_mut(g as usize).filter(|g| g.pending > 0) else {
            return;
        };
        let tag = group.tag;
        let c = Done::new(req, res, flags);
        if group.lane.stream_copy() {
            // Its one completion: nothing to wait for, nothing to count but what it sent.
            let send = group.lane.send(res);
            if send.failed {
                self.hand_back_lane_slots(g);
            }
            self.lane_ended(g);
            return to(c.lane(tag, send));
        }
        let (clock, at) = (&self.clock, group.pushed_at);
        let age_ns = || age_ns(clock, now, c.timed(), at);
        let (tallies, listed) = (&mut self.lane_tallies, &mut self.lane_listed);
        let Some(step) = count(tallies, listed, tag, &mut group.lane, (res, flags), age_ns) else {
            return;
        };
        let failed = step.failed.then(|| group.lane.send(res));
        if step.failed {
            // Sent less than all: the slots are the connection's again, to settle.
            self.hand_back_lane_slots(g);
        }
        if step.last {
            self.lane_ended(g);
        }
        if let Some(send) = failed {
            to(c.lane(tag, send));
        }
    }

    /// The slots of stream lane request `g`, which owned them as a whole, each held for its
    /// connection again, as [`SendRing::take_parked`] holds one, and marked `in_lane` until
    /// the request's last completion.
    fn hand_back_lane_slots(&mut self, g: u32) {
        let group = &mut self.groups[g as usize];
        group.whole = false;
        for (&slot, iov) in group.slots.iter().zip(&group.iovs) {
            self.in_lane[slot as usize] = true;
            self.held_at[slot as usize] = None;
            if let Some(s) = self.slots[slot as usize].as_mut() {
                (s.tag, s.held) = (group.tag, true);
                s.buf.resize(iov.iov_len);
            }
        }
    }

    /// Stream lane request `g` had its last completion: its slots that no one holds are free,
    /// and so is the group.
    fn lane_ended(&mut self, g: u32) {
        let group = &mut self.groups[g as usize];
        let (tag, whole) = (group.tag, group.whole);
        (group.pending, group.whole) = (0, false);
        if whole {
            // Parked, not held (the ring's since the push) and in no other request: free
            // without a look at each.
            self.parked_free
                .extend_from_slice(&self.groups[g as usize].slots);
        } else {
            let slots = std::mem::take(&mut group.slots);
            for &slot in &slots {
                self.in_lane[slot as usize] = false;
            }
            // Their owner holds them, or let go of some (which may be in a request again).
            for &slot in &slots {
                if !self.in_use(slot) && self.slots[slot as usize].as_ref().is_some_and(|s| !s.held)
                {
                    self.slot_done(slot, true);
                }
            }
            self.groups[g as usize].slots = slots;
        }
        self.free_groups.push(g);
        self.request_ended(tag);
    }

    /// Marks the slots of every lane request the kernel may still read, one by one, each with
    /// its request's tag, so a count or release of slots in use (`in_use`, by tag) sees them:
    /// a whole datagram's slot as [`SendRing::push_lane`] leaves it, a stream request's
    /// `in_lane`.
    pub(super) fn mark_lane_slots(&mut self) {
        for slot in 0..self.lane.len() {
            if self.lane[slot].is_whole() {
                self.split_lane_slot(slot);
            }
        }
        for g in 0..self.groups.len() {
            let group = &mut self.groups[g];
            if group.pending > 0 && group.whole {
                group.whole = false;
                for &slot in &group.slots {
                    self.in_lane[slot as usize] = true;
                    if let Some(s) = self.slots[slot as usize].as_mut() {
                        s.tag = group.tag;
                    }
                }
            }
        }
    }

    /// Records lane datagram `d` pushed from `slot` for `tag`.
    #[inline]
    pub(super) fn lane_pushed(&mut self, slot: u32, tag: u32, d: LaneRequest) {
        // As long as `slots`: one for each.
        self.lane[slot as usize] = d.of(tag);
        self.lane_tally_for(tag);
    }

    /// Makes sure `tag` has a tally for its lane datagrams' completions to go into.
    #[inline]
    pub(super) fn lane_tally_for(&mut self, tag: u32) {
        if self.lane_tallies.len() <= tag as usize {
            self.lane_tallies
                .resize_with(tag as usize + 1, LaneTally::default);
        }
    }

    /// Hands each connection's lane tally since the last call to `to` (tag, tally), and starts
    /// them again.
    pub(crate) fn take_lane_tallies(&mut self, mut to: impl FnMut(u32, &LaneTally)) {
        for &tag in &self.lane_listed {
            let t = &mut self.lane_tallies[tag as usize];
            to(tag, t);
            t.clear();
        }
        self.lane_listed.clear();
    }

    /// Whether a lane tally waits to be taken.
    pub(crate) fn has_lane_tallies(&self) -> bool {
        !self.lane_listed.is_empty()
    }
}

/// A lane datagram's failed result to its connection: rare, kept out of the reap's loop.
#[cold]
#[inline(never)]
fn failed_to(to: &mut impl FnMut(Cqe), c: Cqe) {
    to(c)
}

/// Completion `res`, `flags` of lane request `d` of `tag`, counted into the tag's tally in
/// `tallies` (listed in `listed` for the hand-over if it was not); `None` for a tag with no
/// tally. `age_ns` is asked for only when a zero-copy outcome is counted.
#[inline(always)]
fn count(
    tallies: &mut [LaneTally],
    listed: &mut Vec<u32>,
    tag: u32,
    d: &mut LaneRequest,
    (res, flags): (i32, u32),
    age_ns: impl FnOnce() -> Option<u64>,
) -> Option<LaneStep> {
    let t = tallies.get_mut(tag as usize)?;
    if t.list() {
        listed.push(tag);
    }
    Some(match cqueue::notif(flags) {
        true => t.on_notification(d, (res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0, age_ns),
        false => t.on_result(d, res, cqueue::more(flags), age_ns),
    })
}

/// One completion of a lane's request, decoded.
struct Done {
    req: u64,
    res: i32,
    notif: bool,
    /// A result a notification follows.
    more: bool,
}

impl Done {
    #[inline(always)]
    fn new(req: u64, res: i32, flags: u32) -> Done {
        let notif = cqueue::notif(flags);
        let more = !notif && cqueue::more(flags);
        Done {
            req,
            res,
            notif,
            more,
        }
    }

    /// Whether it is one a zero-copy outcome is timed from.
    fn timed(&self) -> bool {
        self.notif || self.more
    }

    /// For `tag`'s connection: its request, `send` (failed, or a stream's `SEND`).
    fn lane(&self, tag: u32, send: LaneSend) -> Cqe {
        Cqe {
            tag,
            req: self.req,
            notif: self.notif,
            res: self.res,
            more: self.more,
            age_ns: None,
            lane: Some(send),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::stream_lane::tests::parked;
    use super::super::{Op, SendRing};
    use crate::buffer::Buf;
    use std::net::UdpSocket;
    use std::os::fd::AsFd;

    /// A ring with 4 parked slots free (parked for tag 2), a UDP socket connected to a
    /// receiving one, and that one; `None` (skipped) without io_uring.
    fn ring_and_datagrams() -> Option<(SendRing, UdpSocket, UdpSocket)> {
        let Ok(mut ring) = SendRing::new(8, 16) else {
            crate::test_support::skip("io_uring setup failed (kernel or seccomp)");
            return None;
        };
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        parked(&mut ring, 4);
        Some((ring, tx, rx))
    }

    /// Every completion `ring` has, and each tally's (tag, sends, bytes).
    fn reap_all(ring: &mut SendRing, n: usize) -> (Vec<super::Cqe>, Vec<(u32, u64, u64)>) {
        ring.submit_and_wait(n).unwrap();
        let mut out = Vec::new();
        for _ in 0..100 {
            ring.reap(&mut out);
            if ring.in_kernel() == 0 {
                break;
            }
            let ms = std::time::Duration::from_millis(10);
            ring.wait_batch(1, std::time::Duration::ZERO, ms).unwrap();
        }
        let mut tallies = Vec::new();
        ring.take_lane_tallies(|tag, t| tallies.push((tag, t.sent, t.bytes)));
        (out, tallies)
    }

    #[test]
    fn lane_datagrams_written_in_place_are_the_ring_s_until_their_last_completion_frees_them() {
        let Some((mut ring, tx, rx)) = ring_and_datagrams() else {
            return;
        };
        let mut fill = |i: usize, b: &mut [u8]| b.fill(i as u8 + 1);
        for (round, count_first) in [(0u8, false), (1, true)] {
            let mut slots = Vec::new();
            ring.fill_lane_slots(10, 0..3, &mut fill, &mut slots);
            assert_eq!((slots.len(), ring.parked_free.len()), (3, 1));
            // Bytes past a slot's: none goes.
            assert_eq!(
                ring.push_lane_run(tx.as_fd(), 5, &slots, 4097, Op::Send)
                    .unwrap()
                    .0,
                0
            );
            let (n, _) = ring
                .push_lane_run(tx.as_fd(), 5, &slots, 10, Op::Send)
                .unwrap();
            assert_eq!((n, ring.in_kernel()), (3, 3));
            // No slot's own record was written: the tag they were parked with is still there.
            assert!(slots
                .iter()
                .all(|&s| ring.slots[s as usize].as_ref().unwrap().tag == 2));
            if count_first {
                // What a shutdown or a drop does first: the slots are found, by their tag.
                let mut left = [0u64; 6];
                ring.buffers_in_kernel_by_tag(&mut left);
                assert_eq!(left, [0, 0, 0, 0, 0, 3]);
                assert!(slots.iter().all(|&s| ring.in_use(s)));
            }
            let (out, tallies) = reap_all(&mut ring, 3);
            assert!(
                out.is_empty(),
                "all sent: nothing for their owner (round {round})"
            );
            assert_eq!(tallies, [(5, 3, 30)]);
            assert!(slots.iter().all(|&s| !ring.in_use(s)));
            assert_eq!((ring.parked_free.len(), ring.in_kernel()), (4, 0));
            for i in 1..=3u8 {
                let mut got = [0u8; 16];
                assert_eq!(rx.recv(&mut got).unwrap(), 10);
                assert_eq!(got[..10], [i; 10]);
            }
        }
    }

    #[test]
    fn a_lane_datagram_that_sent_nothing_is_its_owner_s_again_and_one_not_pushed_goes_back() {
        let Some((mut ring, _tx, _rx)) = ring_and_datagrams() else {
            return;
        };
        // Not connected: its send fails (EDESTADDRREQ).
        let lone = UdpSocket::bind("127.0.0.1:0").unwrap();
        let mut fill = |i: usize, b: &mut [u8]| b.fill(i as u8 + 7);
        let mut slots = Vec::new();
        ring.fill_lane_slots(12, 0..2, &mut fill, &mut slots);
        let registered = ring.push_lane_taken(lone.as_fd(), 3, slots[0], 12, Op::Send);
        assert!(!registered.unwrap(), "a copy goes by address");
        // The second did not go: free again, unwritten.
        ring.drop_lane_slots(&slots[1..]);
        assert_eq!(ring.parked_free.len(), 3);
        let (out, tallies) = reap_all(&mut ring, 1);
        let got: Vec<_> = out
            .iter()
            .map(|c| (c.tag, c.res, c.lane.map(|l| l.failed)))
            .collect();
        assert_eq!(got, [(3, -libc::EDESTADDRREQ, Some(true))]);
        assert_eq!(tallies, [(3, 0, 0)]);
        // Held for its owner, its bytes as written, to resend or let go of.
        assert_eq!(ring.unsent_bytes(slots[0]), Some(&[7u8; 12][..]));
        assert!(ring.unhold(slots[0]).is_none(), "parked, not freed");
        assert_eq!((ring.parked_free.len(), ring.in_kernel()), (4, 0));
        // A write that panics takes nothing.
        let panicked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let mut boom = |i: usize, _: &mut [u8]| assert!(i < 1, "the second write fails");
            ring.fill_lane_slots(12, 0..3, &mut boom, &mut slots);
        }));
        assert!(panicked.is_err());
        assert_eq!(ring.parked_free.len(), 4);
    }

    #[test]
    fn a_zero_copy_lane_datagram_outside_the_registered_arena_is_held_and_pushed_alone() {
        let Some((mut ring, tx, rx)) = ring_and_datagrams() else {
            return;
        };
        let mut fill = |_: usize, b: &mut [u8]| b.fill(9);
        let mut slots = Vec::new();
        ring.fill_lane_slots(100, 0..1, &mut fill, &mut slots);
        let zc = Op::SendZc { report_usage: true };
        // No arena registered: not by a run, which sends by index only.
        assert_eq!(
            ring.push_lane_run(tx.as_fd(), 4, &slots, 100, zc)
                .unwrap()
                .0,
            0
        );
        ring.push_lane_taken(tx.as_fd(), 4, slots[0], 100, zc)
            .unwrap();
        let (out, tallies) = reap_all(&mut ring, 1);
        assert!(out.is_empty(), "sent: nothing for its owner");
        assert_eq!(tallies, [(4, 1, 100)]);
        assert_eq!((ring.parked_free.len(), ring.in_kernel()), (4, 0));
        let mut got = [0u8; 128];
        assert_eq!(rx.recv(&mut got).unwrap(), 100);
        assert_eq!(got[..100], [9u8; 100]);
    }

    #[test]
    fn each_lane_datagram_s_completions_count_for_the_connection_that_pushed_it() {
        let Ok(mut ring) = SendRing::new(16, 32) else {
            crate::test_support::skip("io_uring setup failed (kernel or seccomp)");
            return;
        };
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        // Two connections' datagrams, interleaved: tag 2 sends 10 bytes, tag 5 sends 30, each
        // by SEND_ZC (two completions) and by SEND (one).
        let zc = Op::SendZc { report_usage: true };
        for (i, op) in [zc, zc, Op::Send, zc].into_iter().enumerate() {
            for (tag, len) in [(2, 10), (5, 30)] {
                let slot = ring.hold(Buf::filled(len, i as u8), tag, None);
                ring.push_lane(tx.as_fd(), slot, len, op).unwrap();
            }
        }
        ring.submit_and_wait(8).unwrap();
        let mut out = Vec::new();
        for _ in 0..100 {
            ring.reap(&mut out);
            if ring.in_kernel() == 0 {
                break;
            }
            ring.wait_batch(
                1,
                std::time::Duration::ZERO,
                std::time::Duration::from_millis(10),
            )
            .unwrap();
        }
        assert_eq!(ring.in_kernel(), 0, "every result and notification in");
        assert!(out.is_empty(), "all sent: nothing for their owners");
        let mut tallies = Vec::new();
        ring.take_lane_tallies(|tag, t| {
            tallies.push((
                tag,
                t.sent,
                t.bytes,
                t.notifications,
                t.completions,
                t.unexpected,
            ))
        });
        tallies.sort_unstable();
        assert_eq!(tallies, [(2, 4, 40, 3, 3, 0), (5, 4, 120, 3, 3, 0)]);
        // Each slot let go of with its last completion, to the connection that held it.
        let mut released = Vec::new();
        ring.take_released(&mut released);
        let mut back: Vec<_> = released.iter().map(|(tag, b)| (*tag, b.len())).collect();
        back.sort_unstable();
        assert_eq!(back, [[(2, 10); 4], [(5, 30); 4]].concat());
    }
}
