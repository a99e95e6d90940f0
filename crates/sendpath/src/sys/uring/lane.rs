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

use super::submit::{in_region, next_request, send_entry, sendmsg_entry, time_first_push};
use super::{age_ns, cqueue, Cqe, Op, SendRing, GROUP, IORING_NOTIF_USAGE_ZC_COPIED, LANE};
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
        let (free, parked, send) = (s.pending == 0 && !s.held, s.parked, d.send());
        if step.last {
            if free {
                self.slot_done(slot, parked);
            }
            self.request_ended(tag);
        }
        if step.failed {
            to(c.failed(tag, send));
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
            lane[slot as usize] = LaneRequest::new(len, zc, zc);
            n += 1;
        }
        drop(sq);
        self.requests_started(tag, n);
        self.lane_tally_for(tag);
        Ok((n, zc))
    }

    /// A stream's vectored send (`SENDMSG`, or `SENDMSG_ZC` for `Op::SendZc`, with
    /// `MSG_WAITALL`) of the first `len` bytes of each of held parked `slots` (all of `tag`),
    /// in order, let go of once pushed: the ring frees the slots after the request's last
    /// completion and counts its completions into `tag`'s [`LaneTally`], unless its result
    /// sent less than all, which hands the slots back to their owner held, in a [`Cqe`] that
    /// says [`Cqe::lane`]. A zero-copy request whose bytes all lie in the registered arena
    /// goes by index where the kernel takes registered iovecs. Returns the request id and
    /// whether it goes by index. A slot not held and parked, or with fewer bytes, is an error
    /// (`EBADSLT`), and then nothing is pushed.
    ///
    /// [`Cqe`]: super::Cqe
    /// [`Cqe::lane`]: super::Cqe::lane
    pub(crate) fn push_stream_lane(
        &mut self,
        fd: BorrowedFd<'_>,
        tag: u32,
        slots: &[u32],
        len: usize,
        op: Op,
    ) -> io::Result<(u64, bool)> {
        if slots.is_empty() {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        let zc = matches!(op, Op::SendZc { .. });
        let (g, held, mut iovs) = self.take_group();
        let fixed = self.lane_iovecs(slots, len, &mut iovs);
        let group = &mut self.groups[g as usize];
        (group.hdr.msg_iov, group.hdr.msg_iovlen) = (iovs.as_mut_ptr(), iovs.len());
        (group.slots, group.iovs) = (held, iovs);
        let Some(fixed) = fixed.map(|f| f && zc && self.vectored_fixed) else {
            self.give_back_group(g);
            return Err(io::Error::from_raw_os_error(libc::EBADSLT));
        };
        let now = self.clock(op);
        let req = next_request(&mut self.requests) | GROUP | LANE | u64::from(g);
        let group = &mut self.groups[g as usize];
        group.slots.extend_from_slice(slots);
        (group.tag, group.pending, group.pushed_at) = (tag, 1, now);
        (group.lane, group.lane_failed) = (LaneRequest::stream(len, slots.len(), zc, fixed), false);
        let entry = sendmsg_entry(fd, &group.hdr, op, false, fixed, req);
        loop {
            // SAFETY: as for `push_vectored`: the SQE points at the group's header, its
            // iovecs and the first `len` bytes of parked slots of the arena (whose memory
            // never moves), none of which is reused or released before the request's last
            // completion (`in_lane`, set below, holds each slot that long).
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                break;
            }
            if let Err(e) = self.submit() {
                self.give_back_group(g);
                return Err(e);
            }
        }
        for &slot in slots {
            if let Some(s) = self.slots[slot as usize].as_mut() {
                s.held = false;
            }
            self.in_lane[slot as usize] = true;
        }
        self.staged.clear();
        self.request_started(tag);
        self.lane_tally_for(tag);
        Ok((req, fixed))
    }

    /// The iovecs of a stream lane request of `slots`, `len` bytes each, onto `iovs`: where
    /// `fill_parked` put them, as a rule, with no look at each buffer again. Returns whether
    /// every one lies in the registered arena, or `None` for a slot not held and parked, or
    /// with fewer bytes.
    fn lane_iovecs(&self, slots: &[u32], len: usize, iovs: &mut Vec<libc::iovec>) -> Option<bool> {
        let staged = self.staged.len().checked_sub(slots.len());
        let staged = staged.map_or(&[][..], |at| &self.staged[at..]);
        if staged.len() != slots.len() {
            return self.lane_iovecs_of_slots(slots, len, iovs);
        }
        // The registered arena's bounds (none: an empty range).
        let (lo, hi) = self.arena.map_or((1, 0), |(b, n)| (b, b + n));
        let mut fixed = true;
        iovs.reserve(slots.len());
        for (&slot, &(was, at, n)) in slots.iter().zip(staged) {
            let s = self.slots.get(slot as usize).and_then(|s| s.as_ref());
            if was != slot || n != len || !s.is_some_and(|s| s.held && s.parked) {
                iovs.clear();
                return self.lane_iovecs_of_slots(slots, len, iovs);
            }
            fixed &= at >= lo && at + len <= hi;
            iovs.push(libc::iovec {
                iov_base: at as *mut libc::c_void,
                iov_len: len,
            });
        }
        Some(fixed)
    }

    /// [`SendRing::lane_iovecs`] for slots `fill_parked` did not just write: a look at each
    /// one's buffer.
    fn lane_iovecs_of_slots(
        &self,
        slots: &[u32],
        len: usize,
        iovs: &mut Vec<libc::iovec>,
    ) -> Option<bool> {
        let mut fixed = true;
        for &slot in slots {
            let s = self.slots.get(slot as usize).and_then(|s| s.as_ref());
            let b = s
                .filter(|s| s.held && s.parked)?
                .buf
                .as_slice()
                .get(..len)?;
            let at = b.as_ptr() as usize;
            fixed &= self
                .arena
                .is_some_and(|(b, n)| at >= b && at + len <= b + n);
            iovs.push(libc::iovec {
                iov_base: at as *mut libc::c_void,
                iov_len: len,
            });
        }
        Some(fixed)
    }

    /// Group `g`, taken for a request that did not go, free again.
    fn give_back_group(&mut self, g: u32) {
        self.groups[g as usize].pending = 0;
        self.free_groups.push(g);
    }

    /// One completion of a stream's lane request `req` (which carries [`GROUP`] and
    /// [`LANE`]): counted into its connection's tally; a result that sent less than all also
    /// goes to `to`, its slots held again. After its last, each slot its owner does not hold
    /// is free.
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
        let age_ns = age_ns(&self.clock, now, c.timed(), group.pushed_at);
        let (tallies, listed) = (&mut self.lane_tallies, &mut self.lane_listed);
        let Some(step) = c.count(tallies, listed, tag, &mut group.lane, age_ns) else {
            return;
        };
        let send = group.lane.send();
        group.lane_failed |= step.failed;
        let slots = std::mem::take(&mut group.slots);
        if step.failed {
            // Sent less than all: the slots are the connection's again, to settle.
            for &slot in &slots {
                if let Some(s) = self.slots[slot as usize].as_mut() {
                    s.held = true;
                }
            }
        }
        if step.last {
            self.lane_ended(g, &slots);
        }
        self.groups[g as usize].slots = slots;
        if step.failed {
            to(c.failed(tag, send));
        }
    }

    /// Stream lane request `g` of `slots` had its last completion: its slots that no one holds
    /// are free, and so is the group.
    fn lane_ended(&mut self, g: u32, slots: &[u32]) {
        let group = &mut self.groups[g as usize];
        let (tag, failed) = (group.tag, group.lane_failed);
        group.pending = 0;
        for &slot in slots {
            self.in_lane[slot as usize] = false;
        }
        if failed {
            // Their owner holds them, or let go of some (which may be in a request again).
            for &slot in slots {
                if !self.in_use(slot) && self.slots[slot as usize].as_ref().is_some_and(|s| !s.held)
                {
                    self.slot_done(slot, true);
                }
            }
        } else {
            // Parked, not held (the ring's since the push) and in no other request: free
            // without a look at each.
            self.parked_free.extend_from_slice(slots);
        }
        self.free_groups.push(g);
        self.request_ended(tag);
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

    /// For `tag`'s connection: its request, `send`, failed.
    fn failed(&self, tag: u32, send: LaneSend) -> Cqe {
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
    use super::super::Op;
    use super::SendRing;
    use crate::buffer::Buf;
    use std::io::Read;
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::os::fd::AsFd;

    #[test]
    fn a_stream_lane_request_sends_its_slots_in_order_and_gives_them_back_only_when_short() {
        let Ok(mut ring) = SendRing::new(8, 16) else {
            return crate::test_support::skip("io_uring setup failed (kernel or seccomp)");
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (mut peer, _) = listener.accept().unwrap();
        let slots: Vec<u32> = (0..3)
            .map(|i| ring.park(Buf::filled(10, i + 1), 2))
            .collect();
        // A slot not held: refused, nothing pushed, the others still held.
        let lone = ring.park(Buf::filled(10, 9), 2);
        ring.unhold(lone);
        let refused = ring.push_stream_lane(sock.as_fd(), 2, &[slots[0], lone], 10, Op::Send);
        assert_eq!(refused.unwrap_err().raw_os_error(), Some(libc::EBADSLT));
        assert_eq!(ring.in_kernel(), 0);
        // All three in one request: sent in order, counted for tag 2, their slots free.
        let (_, by_index) = ring
            .push_stream_lane(sock.as_fd(), 2, &slots, 10, Op::Send)
            .unwrap();
        assert!(!by_index, "a copy goes by address");
        ring.submit_and_wait(1).unwrap();
        let mut out = Vec::new();
        assert_eq!(ring.reap(&mut out), 1);
        assert!(out.is_empty(), "sent in full: nothing for its owner");
        let mut tallies = Vec::new();
        ring.take_lane_tallies(|tag, t| tallies.push((tag, t.sent, t.bytes)));
        assert_eq!(tallies, [(2, 1, 30)]);
        let mut got = [0u8; 30];
        peer.read_exact(&mut got).unwrap();
        let want: Vec<u8> = (1..=3).flat_map(|i| [i; 10]).collect();
        assert_eq!(got[..], want[..]);
        let mut free = ring.parked_free.clone();
        free.sort_unstable();
        assert_eq!(free, [slots[0], slots[1], slots[2], lone]);
        // On a socket shut for writing it sends nothing: the slots are their owner's again.
        let again: Vec<u32> = (4..6).map(|i| ring.park(Buf::filled(10, i), 2)).collect();
        sock.shutdown(Shutdown::Write).unwrap();
        ring.push_stream_lane(sock.as_fd(), 2, &again, 10, Op::Send)
            .unwrap();
        ring.submit_and_wait(1).unwrap();
        assert_eq!(ring.reap(&mut out), 1);
        let lane = out
            .iter()
            .map(|c| (c.res, c.lane.map(|l| l.len)))
            .collect::<Vec<_>>();
        assert_eq!(lane, [(-libc::EPIPE, Some(20))]);
        assert_eq!(ring.in_kernel(), 0);
        assert_eq!(ring.parked_free.len(), 4, "held by their owner");
        for &slot in &again {
            assert!(ring.unhold(slot).is_none(), "let go of, parked");
        }
        assert_eq!(ring.parked_free[4..], again[..]);
    }
}
