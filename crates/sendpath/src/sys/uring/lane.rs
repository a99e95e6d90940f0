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

use super::submit::{next_request, send_entry, time_first_push};
use super::{age_ns, cqueue, Cqe, Op, SendRing, IORING_NOTIF_USAGE_ZC_COPIED, LANE};
use crate::completion::{LaneRequest, LaneSend, LaneStep, LaneTally};
use io_uring::types;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

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
        let tag = d.tag();
        let (clock, at) = (&self.clock, &self.held_at);
        let age_ns = || age_ns(clock, now, true, at.get(slot).copied().flatten());
        let (tallies, listed) = (&mut self.lane_tallies, &mut self.lane_listed);
        let Some(step) = count(tallies, listed, tag, d, (res, flags), age_ns) else {
            return;
        };
        if step.last || step.failed {
            self.lane_step(slot as u32, tag, step, Done::new(req, res, flags), to);
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
            parked_at,
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
            // Parked slots of the arena only: whether it lies in the registered part was
            // recorded when it was parked.
            if zc && !parked_at.get(slot as usize).is_some_and(|p| p.registered) {
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
            lane[slot as usize] = LaneRequest::new(len, zc, zc).of(tag);
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
    use super::super::{Op, SendRing};
    use crate::buffer::Buf;
    use std::os::fd::AsFd;

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
