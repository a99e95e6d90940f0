//! The stream lane in the ring: a stream's messages written in parked slots straight into a
//! group's lists ([`SendRing::fill_lane_group`]), then sent as one vectored request
//! ([`SendRing::push_lane_group`]). The slots are the group's as a whole from the moment they
//! are taken: each is reached through where its bytes are (`parked_at`), and neither its
//! cache line nor a mark of its own is written, so the push reads no slot again and the end
//! of the request frees them in one move. A `SEND` request's one completion goes to its
//! connection as it is; a `SEND_ZC` request's are counted into the connection's tally as a
//! lane datagram's are. Only a result that sent less than all hands the slots to their owner,
//! held, each written then ([`SendRing::route_lane_group`]).

use super::submit::{next_request, sendmsg_entry};
use super::{Op, SendRing, GROUP, LANE};
use crate::completion::LaneRequest;
use std::io;
use std::os::fd::BorrowedFd;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};

impl SendRing {
    /// Parked slots for a vectored request of a stream, one for each message `i` of
    /// `at`, each written by `fill(i, bytes)` in its first `len` bytes and put in a group's
    /// lists as it is taken, its iovec where it was written. The slots are the group's, not
    /// their owner's, until [`SendRing::push_lane_group`] sends it or
    /// [`SendRing::drop_lane_group`] lets it go. Stops early when no parked slot is free or
    /// large enough. Returns the group and how many it holds; `None` when it would hold none.
    /// When `fill` panics, the slots go back before the panic goes on.
    pub(crate) fn fill_lane_group(
        &mut self,
        len: usize,
        at: std::ops::Range<usize>,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Option<(u32, usize)> {
        let (g, mut slots, mut iovs) = self.take_group();
        let mut registered = true;
        for i in at {
            let Some((slot, bytes, in_arena)) = self.take_lane_slot(len) else {
                break;
            };
            registered &= in_arena;
            slots.push(slot);
            iovs.push(libc::iovec {
                iov_base: bytes.as_mut_ptr().cast(),
                iov_len: len,
            });
            if let Err(panic) = catch_unwind(AssertUnwindSafe(|| fill(i, bytes))) {
                (self.groups[g as usize].slots, self.groups[g as usize].iovs) = (slots, iovs);
                self.drop_lane_group(g);
                resume_unwind(panic);
            }
        }
        let n = slots.len();
        let group = &mut self.groups[g as usize];
        (group.slots, group.iovs, group.registered) = (slots, iovs, registered);
        if n == 0 {
            self.give_back_group(g);
            return None;
        }
        Some((g, n))
    }

    /// A free parked slot for a lane request, its first `len` bytes to write, and whether it
    /// lies in the registered arena, reached without a look at the slot itself; `None` when
    /// none is free or `len` does not fit.
    #[inline(always)]
    pub(super) fn take_lane_slot(&mut self, len: usize) -> Option<(u32, &mut [u8], bool)> {
        let slot = *self.parked_free.last()?;
        let at = *self.parked_at.get(slot as usize)?;
        // A slot parked without an arena's bytes has none to give.
        if len > at.size || at.start.is_null() {
            return None;
        }
        self.parked_free.pop();
        // SAFETY: `at` is where the arena slot held in `slots[slot]` starts, and its size
        // (`park`); a parked slot's buffer never leaves the ring, and the arena's mapping
        // lives as long as it. A slot in `parked_free` is in no request and held by no one,
        // so, taken off that list, these bytes are written here alone, until the lane's
        // request (which owns the slot from now on) is pushed.
        let bytes = unsafe { std::slice::from_raw_parts_mut(at.start, len) };
        Some((slot, bytes, at.registered))
    }

    /// Sends group `g` of [`SendRing::fill_lane_group`] (`tag`'s, messages of `len` bytes) as
    /// one vectored request (`SENDMSG`, or `SENDMSG_ZC` for `Op::SendZc`, with `MSG_WAITALL`),
    /// in order: the ring frees its slots after the request's last completion and counts its
    /// completions into `tag`'s tally, unless its result sent less than all, which hands the
    /// slots to their owner held, in a [`Cqe`](super::Cqe) that says
    /// [`Cqe::lane`](super::Cqe::lane). A zero-copy request whose bytes all lie in the
    /// registered arena goes by index where the kernel takes registered iovecs. Returns the
    /// request id and whether it goes by index; when it cannot be pushed the group is let go
    /// ([`SendRing::drop_lane_group`]).
    pub(crate) fn push_lane_group(
        &mut self,
        fd: BorrowedFd<'_>,
        tag: u32,
        g: u32,
        len: usize,
        op: Op,
    ) -> io::Result<(u64, bool)> {
        let zc = matches!(op, Op::SendZc { .. });
        let now = self.clock(op);
        let req = next_request(&mut self.requests) | GROUP | LANE | u64::from(g);
        let group = &mut self.groups[g as usize];
        let fixed = zc && self.vectored_fixed && group.registered;
        (group.hdr.msg_iov, group.hdr.msg_iovlen) = (group.iovs.as_mut_ptr(), group.iovs.len());
        (group.tag, group.pending, group.pushed_at) = (tag, 1, now);
        group.lane = LaneRequest::stream(len, group.slots.len(), zc, fixed);
        group.whole = true;
        let entry = sendmsg_entry(fd, &group.hdr, op, false, fixed, req);
        loop {
            // SAFETY: as for `push_vectored`: the SQE points at the group's header, its
            // iovecs and the first `len` bytes of parked slots of the arena (whose memory
            // never moves), none of which is reused or released before the request's last
            // completion (the group owns them as a whole, `whole`, or marked `in_lane`).
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                break;
            }
            if let Err(e) = self.submit() {
                self.drop_lane_group(g);
                return Err(e);
            }
        }
        self.request_started(tag);
        self.lane_tally_for(tag);
        Ok((req, fixed))
    }

    /// Lets group `g` of [`SendRing::fill_lane_group`] go unsent: its slots parked and free
    /// again, what was written in them dropped.
    pub(crate) fn drop_lane_group(&mut self, g: u32) {
        self.parked_free
            .extend_from_slice(&self.groups[g as usize].slots);
        self.give_back_group(g);
    }

    /// The slots of group `g`, in the order its request sends them.
    pub(crate) fn lane_group_slots(&self, g: u32) -> &[u32] {
        &self.groups[g as usize].slots
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::Op;
    use super::SendRing;
    use crate::buffer::Buf;
    use std::io::Read;
    use std::net::{Shutdown, TcpListener, TcpStream};
    use std::os::fd::AsFd;

    /// `n` parked slots of an arena of 4 KiB slots on `ring`, free.
    pub(in super::super) fn parked(ring: &mut SendRing, n: usize) {
        let arena = std::sync::Arc::new(crate::buffer::ArenaMem::new(4096, n, 0).unwrap());
        while let Some(slot) = arena.take() {
            let slot = ring.park(Buf::arena(slot), 2);
            assert!(ring.unhold(slot).is_none(), "parked, not freed");
        }
    }

    /// A ring with 4 parked slots free, a TCP socket on loopback and its peer; `None`
    /// (skipped) without io_uring.
    fn ring_and_stream() -> Option<(SendRing, TcpStream, TcpStream)> {
        let Ok(mut ring) = SendRing::new(8, 16) else {
            crate::test_support::skip("io_uring setup failed (kernel or seccomp)");
            return None;
        };
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let sock = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (peer, _) = listener.accept().unwrap();
        parked(&mut ring, 4);
        Some((ring, sock, peer))
    }

    #[test]
    fn a_stream_lane_request_sends_its_slots_in_order_and_gives_them_back_only_when_short() {
        let Some((mut ring, sock, mut peer)) = ring_and_stream() else {
            return;
        };
        // Three messages written where they are sent, in one request, in order.
        let mut fill = |i: usize, b: &mut [u8]| b.fill(i as u8 + 1);
        let (g, n) = ring.fill_lane_group(10, 0..3, &mut fill).unwrap();
        assert_eq!((n, ring.parked_free.len()), (3, 1));
        let slots = ring.lane_group_slots(g).to_vec();
        let (_, by_index) = ring
            .push_lane_group(sock.as_fd(), 2, g, 10, Op::Send)
            .unwrap();
        assert!(!by_index, "a copy goes by address");
        // Slots the request owns as a whole: the count marks them, then finds them by tag.
        let mut left = [0u64; 3];
        ring.buffers_in_kernel_by_tag(&mut left);
        assert_eq!(left, [0, 0, 3]);
        ring.submit_and_wait(1).unwrap();
        let mut out = Vec::new();
        assert_eq!(ring.reap(&mut out), 1);
        // Its one completion, to its owner as it is: sent in full, nothing to settle.
        let sent = |out: &[super::super::Cqe]| {
            out.iter()
                .map(|c| (c.tag, c.res, c.lane.map(|l| (l.len, l.failed))))
                .collect::<Vec<_>>()
        };
        assert_eq!(sent(&out), [(2, 30, Some((30, false)))]);
        assert!(!ring.has_lane_tallies(), "nothing counted into a tally");
        out.clear();
        let mut got = [0u8; 30];
        peer.read_exact(&mut got).unwrap();
        let want: Vec<u8> = (1..=3).flat_map(|i| [i; 10]).collect();
        assert_eq!(got[..], want[..]);
        assert_eq!(ring.parked_free.len(), 4, "all free again");
        // A group let go unsent: its slots free, nothing in the kernel.
        let (g, _) = ring.fill_lane_group(10, 0..2, &mut fill).unwrap();
        ring.drop_lane_group(g);
        assert_eq!((ring.parked_free.len(), ring.in_kernel()), (4, 0));
        // More than a slot holds: none taken.
        assert!(ring.fill_lane_group(4097, 0..1, &mut fill).is_none());
        assert_eq!(ring.parked_free.len(), 4);
        // On a socket shut for writing it sends nothing: the slots are their owner's again.
        sock.shutdown(Shutdown::Write).unwrap();
        let (g, _) = ring.fill_lane_group(10, 0..2, &mut fill).unwrap();
        let again = ring.lane_group_slots(g).to_vec();
        ring.push_lane_group(sock.as_fd(), 2, g, 10, Op::Send)
            .unwrap();
        ring.submit_and_wait(1).unwrap();
        assert_eq!(ring.reap(&mut out), 1);
        assert_eq!(sent(&out), [(2, -libc::EPIPE, Some((20, true)))]);
        assert_eq!(ring.in_kernel(), 0);
        assert_eq!(ring.parked_free.len(), 2, "held by their owner");
        for &slot in &again {
            assert!(ring.unhold(slot).is_none(), "let go of, parked");
        }
        assert_eq!(ring.parked_free[2..], again[..]);
        assert!(slots.iter().all(|s| ring.parked_free.contains(s)));
    }

    #[test]
    fn a_stream_lane_request_marked_for_a_count_frees_its_slots_as_one_that_was_not() {
        let Some((mut ring, sock, mut peer)) = ring_and_stream() else {
            return;
        };
        let mut fill = |i: usize, b: &mut [u8]| b.fill(i as u8 + 7);
        let (g, _) = ring.fill_lane_group(10, 0..2, &mut fill).unwrap();
        let slots = ring.lane_group_slots(g).to_vec();
        // A tag other than the one the slots were parked with (2).
        ring.push_lane_group(sock.as_fd(), 5, g, 10, Op::Send)
            .unwrap();
        // What a shutdown or a drop does before it counts or leaks the slots in use.
        ring.mark_lane_slots();
        assert!(slots.iter().all(|&s| ring.in_use(s)));
        // One scan counts every tag: each slot once, by the request's tag (not 2).
        let mut left = [0u64; 6];
        ring.buffers_in_kernel_by_tag(&mut left);
        assert_eq!(left, [0, 0, 0, 0, 0, 2]);
        // A tag past the counts is not counted, and nothing else is.
        let mut short = [0u64; 5];
        ring.buffers_in_kernel_by_tag(&mut short);
        assert_eq!(short, [0; 5]);
        ring.submit_and_wait(1).unwrap();
        let mut out = Vec::new();
        assert_eq!(ring.reap(&mut out), 1);
        assert_eq!(out.len(), 1, "its one completion, to its owner");
        assert!(out[0].lane.is_some_and(|l| !l.failed), "sent in full");
        assert!(slots.iter().all(|&s| !ring.in_use(s)));
        assert_eq!((ring.parked_free.len(), ring.in_kernel()), (4, 0));
        let mut got = [0u8; 20];
        peer.read_exact(&mut got).unwrap();
        assert_eq!(got[..], [[7u8; 10], [8u8; 10]].concat()[..]);
    }

    /// A zero-copy lane request of `n` slots on `ring` and `sock`, read by `peer`, with every
    /// completion reaped: whether it went by index, and its tally's sends and bytes. `None`
    /// when the kernel refused registered iovecs (before 6.15).
    fn zc_request(
        ring: &mut SendRing,
        sock: &TcpStream,
        peer: &mut TcpStream,
        n: usize,
    ) -> Option<(bool, u64, u64)> {
        let mut fill = |i: usize, b: &mut [u8]| b.fill(i as u8 + 1);
        let (g, _) = ring.fill_lane_group(10, 0..n, &mut fill).unwrap();
        let op = Op::SendZc { report_usage: true };
        let (_, by_index) = ring.push_lane_group(sock.as_fd(), 2, g, 10, op).unwrap();
        ring.submit_and_wait(1).unwrap();
        let mut out = Vec::new();
        ring.reap(&mut out);
        if out.iter().any(|c| c.res == -libc::EINVAL) {
            return None;
        }
        let mut got = vec![0u8; 10 * n];
        peer.read_exact(&mut got).unwrap();
        let want: Vec<u8> = (1..=n as u8).flat_map(|i| [i; 10]).collect();
        assert_eq!(got, want, "in order");
        // The notification, once the peer has read the bytes (bounded: 10 waits of 1 s).
        for _ in 0..10 {
            if ring.in_kernel() == 0 {
                break;
            }
            let one_second = std::time::Duration::from_secs(1);
            ring.wait_batch(1, std::time::Duration::ZERO, one_second)
                .unwrap();
            ring.reap(&mut out);
        }
        assert_eq!(ring.in_kernel(), 0, "result and notification in");
        let mut sent = (0, 0);
        ring.take_lane_tallies(|_, t| sent = (sent.0 + t.sent, sent.1 + t.bytes));
        Some((by_index, sent.0, sent.1))
    }

    #[test]
    fn a_zero_copy_stream_lane_request_goes_by_index_only_when_all_its_slots_are_registered() {
        for (registered, before) in [(4, true), (4, false), (2, true), (0, true)] {
            let Some((mut ring, sock, mut peer)) = ring_and_stream() else {
                return;
            };
            ring.enable_fixed_buffers(1).unwrap();
            ring.set_vectored_fixed(true);
            // A second arena of four slots, `registered` of them registered before or
            // after they are parked; the first arena's four taken out of the way.
            let taken: Vec<u32> = ring.parked_free.drain(..).collect();
            let arena = std::sync::Arc::new(crate::buffer::ArenaMem::new(4096, 4, 0).unwrap());
            let (base, _) = arena.region();
            let register = |ring: &mut SendRing| {
                if registered > 0 {
                    assert_eq!(
                        ring.register_arena(base, registered * 4096, 4096).0,
                        registered * 4096
                    );
                }
            };
            if before {
                register(&mut ring);
            }
            while let Some(slot) = arena.take() {
                let slot = ring.park(Buf::arena(slot), 2);
                assert!(ring.unhold(slot).is_none(), "parked");
            }
            if !before {
                register(&mut ring);
            }
            let Some((by_index, sent, bytes)) = zc_request(&mut ring, &sock, &mut peer, 4) else {
                crate::test_support::skip("SENDMSG_ZC from registered iovecs needs Linux 6.15");
                return;
            };
            let why = format!("{registered} of 4 registered, before parking: {before}");
            assert_eq!(by_index, registered == 4, "{why}");
            assert_eq!((sent, bytes), (1, 40), "{why}");
            assert_eq!(ring.parked_free.len(), 4, "{why}");
            drop(taken);
        }
    }
}
