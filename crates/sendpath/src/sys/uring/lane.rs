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
use crate::completion::{LaneDatagram, LaneTally};
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
        let notif = cqueue::notif(flags);
        let more = !notif && cqueue::more(flags);
        let age_ns = age_ns(&self.clock, now, notif || more, self.held_at[slot as usize]);
        let Some(t) = self.lane_tallies.get_mut(tag as usize) else {
            return;
        };
        if t.list() {
            self.lane_listed.push(tag);
        }
        let step = match notif {
            true => t.on_notification(d, (res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0, age_ns),
            false => t.on_result(d, res, more, age_ns),
        };
        // Nothing sent: the slot is its connection's again, to resend or let go of.
        s.held |= step.failed;
        if step.last {
            s.pending = s.pending.saturating_sub(1);
        }
        let (free, parked, send) = (s.pending == 0 && !s.held, s.parked, d.send());
        if step.last {
            if free {
                self.slot_done(slot, parked);
            }
            self.request_ended(tag);
        }
        if step.failed {
            to(Cqe {
                tag,
                req,
                notif,
                res,
                more,
                age_ns: None,
                lane: Some(send),
            });
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
            if zc && !in_region(*arena, bytes) {
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
            lane[slot as usize] = LaneDatagram::new(len, zc, zc);
            n += 1;
        }
        drop(sq);
        self.requests_started(tag, n);
        self.lane_tally_for(tag);
        Ok((n, zc))
    }

    /// Records lane datagram `d` pushed from `slot` for `tag`.
    #[inline]
    pub(super) fn lane_pushed(&mut self, slot: u32, tag: u32, d: LaneDatagram) {
        // As long as `slots`: one for each.
        self.lane[slot as usize] = d;
        self.lane_tally_for(tag);
    }

    /// Makes sure `tag` has a tally for its lane datagrams' completions to go into.
    #[inline]
    fn lane_tally_for(&mut self, tag: u32) {
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
