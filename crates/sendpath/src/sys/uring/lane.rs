//! The datagram lane in the ring. A datagram pushed by [`SendRing::push_lane`] (or a run of
//! them, [`SendRing::push_lane_run`]) is no one's once pushed: its result and notification
//! are counted into its connection's [`LaneTally`] where they are read, which the driver
//! hands to the connection once per reap ([`SendRing::take_lane_tallies`]), and its slot goes
//! back to the arena with its last completion. Only a result that sent nothing goes to the
//! connection itself, as a [`Cqe`] whose slot the ring holds for it again: the connection
//! resends it or lets it go.
//!
//! [`SendRing::push_lane`]: super::SendRing::push_lane
//! [`Cqe`]: super::Cqe

use super::submit::{in_region, next_request, send_entry, time_first_push};
use super::{age_ns, cqueue, Cqe, Op, SendRing, IORING_NOTIF_USAGE_ZC_COPIED, LANE};
use crate::completion::{LaneRequest, LaneSend, LaneStep, LaneTally};
use io_uring::types;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

impl SendRing {
    /// One completion of a lane datagram (`req` carries [`super::LANE`]): counted into its
    /// connection's tally; a result that sent nothing also goes to `to`, its slot held again.
    #[inline(always)]
    pub(super) fn route_lane(
        &mut self,
        req: u64,
        res: i32,
        flags: u32,
        now: &mut Option<u64>,
        to: &mut impl FnMut(Cqe),
    ) {
        let slot = req as u32;
        let (Some(Some(s)), Some(d)) = (
            self.slots.get_mut(slot as usize),
            self.lane.get_mut(slot as usize),
        ) else {
            return;
        };
        let tag = s.tag;
        let c = Done::new(req, res, flags);
        let age_ns = age_ns(&self.clock, now, c.timed(), self.held_at[slot as usize]);
        let Some(step) = c.count(
            &mut self.lane_tallies,
            &mut self.lane_listed,
            tag,
            d,
            age_ns,
        ) else {
            return;
        };
        // Nothing sent: the slot is its connection's again, to resend or let go of.
        s.held |= step.failed;
        if step.last {
            s.pending = s.pending.saturating_sub(1);
        }
        let (free, parked) = (s.pending == 0 && !s.held, s.parked);
        let failed = step.failed.then(|| d.send(res));
        if step.last {
            if free {
                self.slot_done(slot, parked);
            }
            self.request_ended(tag);
        }
        if let Some(send) = failed {
            failed_to(to, c.lane(tag, send));
        }
    }

    /// Datagrams of the first `len` bytes of each of held `slots` (parked slots of the
    /// arena, all of `tag`), each pushed by `op` as [`SendRing::push_lane`] pushes one, with
    /// one look at the submission queue for them all. Stops at a slot not held or with fewer
    /// bytes, and, for SEND_ZC, at one outside the registered arena (which `push_lane`
    /// registers on its own). Returns how many went and whether they send from a registered
    /// buffer.
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
            slots: held,
            held_at,
            lane,
            clock,
            requests,
            arena,
            ..
        } = self;
        let mut sq = ring.submission();
        let mut n = 0;
        for &slot in slots {
            let Some(Some(s)) = held.get_mut(slot as usize) else {
                break;
            };
            let Some(bytes) = s.buf.as_slice().get(..len).filter(|_| s.held) else {
                break;
            };
            if zc && !in_region(*arena, bytes.as_ptr() as usize, len) {
                break;
            }
            time_first_push(s, zc, &mut held_at[slot as usize], clock);
            let req = next_request(requests) | LANE | u64::from(slot);
            let entry = send_entry(fd, bytes.as_ptr(), len, op, zc.then_some(0)).user_data(req);
            // SAFETY: the SQE points at `len` bytes inside the buffer held in `slots[slot]`,
            // which is released only once `pending` (counted here) drops to zero after the
            // kernel posted the slot's last CQE: as for `push_slot`.
            if unsafe { sq.push(&entry) }.is_err() {
                break;
            }
            (s.pending, s.held) = (s.pending + 1, false);
            lane[slot as usize] = LaneRequest::new(len, zc, zc);
            n += 1;
        }
        drop(sq);
        self.requests_started(tag, n);
        self.lane_tally_for(tag);
        Ok((n, zc))
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
        let age_ns = age_ns(&self.clock, now, c.timed(), group.pushed_at);
        let (tallies, listed) = (&mut self.lane_tallies, &mut self.lane_listed);
        let Some(step) = c.count(tallies, listed, tag, &mut group.lane, age_ns) else {
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

    /// Marks the slots of every stream lane request the kernel may still read `in_lane`, one
    /// by one, each with its request's tag, so a count or release of slots in use (`in_use`,
    /// by tag) sees them.
    pub(super) fn mark_lane_slots(&mut self) {
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
        self.lane[slot as usize] = d;
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

    /// Counted against request `d` of `tag` into the tag's tally in `tallies` (listed in
    /// `listed` for the hand-over if it was not); `None` for a tag with no tally.
    #[inline(always)]
    fn count(
        &self,
        tallies: &mut [LaneTally],
        listed: &mut Vec<u32>,
        tag: u32,
        d: &mut LaneRequest,
        age_ns: Option<u64>,
    ) -> Option<LaneStep> {
        let t = tallies.get_mut(tag as usize)?;
        if t.list() {
            listed.push(tag);
        }
        Some(match self.notif {
            true => {
                let copied = (self.res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0;
                t.on_notification(d, copied, age_ns)
            }
            false => t.on_result(d, self.res, self.more, age_ns),
        })
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
