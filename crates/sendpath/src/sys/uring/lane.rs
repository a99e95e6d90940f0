//! The datagram lane's completions, counted where they are read. A datagram pushed by
//! [`SendRing::push_lane`] is no one's once pushed: its result and notification are counted
//! into its connection's [`LaneTally`], which the driver hands to the connection once per
//! reap ([`SendRing::take_lane_tallies`]), and its slot goes back to the arena with its last
//! completion. Only a result that sent nothing goes to the connection itself, as a [`Cqe`]
//! whose slot the ring holds for it again: the connection resends it or lets it go.
//!
//! Every count is the one the connection's queue makes for a queued datagram (see
//! `send/lane.rs`, which tests the two against each other); the transitions here read no
//! ring and are tested on simulated completions.
//!
//! [`SendRing::push_lane`]: super::SendRing::push_lane
//! [`SendRing::take_lane_tallies`]: super::SendRing::take_lane_tallies
//! [`Cqe`]: super::Cqe

use super::submit::{in_region, next_request, send_entry};
use super::{age_ns, cqueue, Cqe, Op, SendRing, IORING_NOTIF_USAGE_ZC_COPIED, LANE};
use io_uring::types;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// A datagram of the lane, by its ring slot: what its completions are counted against.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LaneDatagram {
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

/// A lane datagram whose result sent nothing, for its connection: what it was.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneSend {
    /// Its bytes.
    pub(crate) len: usize,
    /// It went by SEND_ZC.
    pub(crate) zc: bool,
    /// From a registered buffer.
    pub(crate) registered: bool,
}

/// What one connection's lane datagrams' completions came to since the connection last took
/// them: the counts its state would have made one completion at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LaneTally {
    /// Results that sent the datagram, each one datagram out of the kernel's way.
    pub(crate) sent: u64,
    /// Bytes they sent.
    pub(crate) bytes: u64,
    /// Of them, those that sent fewer bytes than the datagram had.
    pub(crate) short: u64,
    /// SEND_ZC datagrams whose last completion came, as (sends, bytes): pinned, registered.
    pub(crate) ended: [(usize, usize); 2],
    /// Notifications.
    pub(crate) notifications: u64,
    /// Datagrams that went zero-copy and sent bytes, their notification in (completions).
    pub(crate) completions: u64,
    /// Of them, those the kernel reported copied.
    pub(crate) copied: u64,
    /// Completions that matched no datagram of the lane awaiting one.
    pub(crate) unexpected: u64,
    /// How long each timed completion took (ns since its buffer went to the ring).
    pub(crate) ages: Vec<u64>,
    /// In the ring's list of tallies to hand over.
    listed: bool,
}

/// What one completion did: whether it was the datagram's last, and whether its result sent
/// nothing (the slot is then its connection's again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LaneStep {
    pub(crate) last: bool,
    pub(crate) failed: bool,
}

impl LaneDatagram {
    /// A datagram of `len` bytes just pushed (by SEND_ZC when `zc`, from a registered buffer
    /// when `registered`).
    pub(crate) fn new(len: usize, zc: bool, registered: bool) -> LaneDatagram {
        LaneDatagram {
            len: len as u32,
            zc,
            registered,
            live: true,
            result: None,
            notif: None,
        }
    }

    /// What it was, for its connection.
    pub(crate) fn send(&self) -> LaneSend {
        LaneSend {
            len: self.len as usize,
            zc: self.zc,
            registered: self.registered,
        }
    }
}

impl LaneTally {
    /// The result of `d`: `res` bytes or `-errno`, `more` when a notification follows;
    /// `age_ns` when it was timed. A datagram of bytes whose result is `<= 0` failed.
    #[inline]
    pub(crate) fn on_result(
        &mut self,
        d: &mut LaneDatagram,
        res: i32,
        more: bool,
        age_ns: Option<u64>,
    ) -> LaneStep {
        if !d.live || d.result.is_some() {
            self.unexpected += 1;
            return LaneStep::default();
        }
        let transmitted = res > 0;
        let mut last = true;
        if d.zc && more {
            match d.notif {
                Some(copied) => self.outcome(transmitted, copied, age_ns),
                None => (d.result, last) = (Some(transmitted), false),
            }
        }
        if last {
            self.end(d);
        }
        let len = d.len as usize;
        let failed = !(transmitted || (res == 0 && len == 0));
        if !failed {
            self.sent += 1;
            self.bytes += res as u64;
            self.short += u64::from((res as usize) < len);
        }
        LaneStep { last, failed }
    }

    /// The notification of SEND_ZC datagram `d`, `copied` as
    /// `IORING_NOTIF_USAGE_ZC_COPIED` says; before its result it is kept for the result.
    #[inline]
    pub(crate) fn on_notification(
        &mut self,
        d: &mut LaneDatagram,
        copied: bool,
        age_ns: Option<u64>,
    ) -> LaneStep {
        self.notifications += 1;
        if !d.live || !d.zc || d.notif.is_some() {
            self.unexpected += 1;
            return LaneStep::default();
        }
        let Some(transmitted) = d.result else {
            d.notif = Some(copied);
            return LaneStep::default();
        };
        self.end(d);
        self.outcome(transmitted, copied, age_ns);
        LaneStep {
            last: true,
            failed: false,
        }
    }

    fn end(&mut self, d: &mut LaneDatagram) {
        d.live = false;
        if d.zc {
            let e = &mut self.ended[usize::from(d.registered)];
            *e = (e.0 + 1, e.1 + d.len as usize);
        }
    }

    /// A zero-copy datagram's two completions are in: a completion if it sent bytes.
    fn outcome(&mut self, transmitted: bool, copied: bool, age_ns: Option<u64>) {
        if transmitted {
            self.completions += 1;
            self.copied += u64::from(copied);
            if let Some(age) = age_ns {
                self.ages.push(age);
            }
        }
    }

    fn clear(&mut self) {
        let mut ages = std::mem::take(&mut self.ages);
        ages.clear();
        *self = LaneTally {
            ages,
            ..LaneTally::default()
        };
    }
}

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
        if !t.listed {
            t.listed = true;
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
            if zc && s.parked && s.pending == 0 && held_at[slot as usize].is_none() {
                // When it went to the ring, for the sampled ones (as `push_slot` times it).
                held_at[slot as usize] = clock.timed();
            }
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
        if self.lane_tallies.len() <= tag as usize {
            self.lane_tallies
                .resize_with(tag as usize + 1, LaneTally::default);
        }
        Ok((n, zc))
    }

    /// Records lane datagram `d` pushed from `slot` for `tag`.
    #[inline]
    pub(super) fn lane_pushed(&mut self, slot: u32, tag: u32, d: LaneDatagram) {
        // As long as `slots`: one for each.
        self.lane[slot as usize] = d;
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

#[cfg(test)]
mod tests {
    use super::*;

    fn zc() -> LaneDatagram {
        LaneDatagram::new(100, true, true)
    }

    #[test]
    fn a_zero_copy_datagram_ends_with_its_second_completion_in_either_order() {
        let mut t = LaneTally::default();
        let (mut a, mut b) = (zc(), zc());
        let step = |last, failed| LaneStep { last, failed };
        assert_eq!(t.on_result(&mut a, 100, true, None), step(false, false));
        assert_eq!(t.on_notification(&mut a, false, Some(5)), step(true, false));
        // The notification first: kept for the result, which ends it.
        assert_eq!(t.on_notification(&mut b, true, None), step(false, false));
        assert_eq!(t.on_result(&mut b, 60, true, Some(7)), step(true, false));
        assert_eq!((t.sent, t.bytes, t.short), (2, 160, 1));
        assert_eq!((t.completions, t.copied, t.notifications), (2, 1, 2));
        assert_eq!(t.ended, [(0, 0), (2, 200)]);
        assert_eq!(t.ages, [5, 7]);
        // A third completion of either is unexpected and changes nothing.
        assert_eq!(t.on_notification(&mut a, false, None), step(false, false));
        assert_eq!(t.on_result(&mut b, 100, false, None), step(false, false));
        assert_eq!((t.unexpected, t.sent, t.completions), (2, 2, 2));
    }

    #[test]
    fn a_result_that_sent_nothing_fails_and_its_notification_still_ends_it() {
        let mut t = LaneTally::default();
        let mut d = LaneDatagram::new(100, true, false);
        let failed = t.on_result(&mut d, -libc::EAGAIN, true, None);
        assert_eq!((failed.last, failed.failed), (false, true));
        assert_eq!(d.send().len, 100);
        let end = t.on_notification(&mut d, false, Some(3));
        assert_eq!((end.last, end.failed), (true, false));
        assert_eq!((t.sent, t.completions, t.notifications), (0, 0, 1));
        assert_eq!(t.ended, [(1, 100), (0, 0)], "pinned: out of the ledger");
        assert!(t.ages.is_empty(), "no data, no completion timed");
        // A copy ends with its result; an empty datagram's 0 is no failure, another's is.
        let mut copy = LaneDatagram::new(100, false, false);
        assert!(t.on_result(&mut copy, 0, false, None).failed);
        let mut empty = LaneDatagram::new(0, false, false);
        let s = t.on_result(&mut empty, 0, false, None);
        assert!(s.last && !s.failed);
        assert_eq!((t.sent, t.ended), (1, [(1, 100), (0, 0)]));
    }
}
