//! Send requests: `SEND` and `SEND_ZC` from one buffer the ring holds, vectored `SENDMSG` and
//! `SENDMSG_ZC` over several, and the registered-buffer table zero-copy sends use.

use super::slots::within;
use super::{
    Group, LaneRequest, Op, Part, Payload, SendRing, Slot, GROUP, IORING_SEND_ZC_REPORT_USAGE, LANE,
};
use crate::buffer::Buf;
use io_uring::{opcode, squeue, types, IoUring};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `IORING_RECVSEND_FIXED_BUF` from `<linux/io_uring.h>`: the request's bytes are in the
/// registered buffer `buf_index`.
const RECVSEND_FIXED_BUF: u16 = 1 << 2;

/// A ring's registered-buffer table: (address, capacity) per entry, filled in order.
pub(super) struct FixedTable {
    pub(super) keys: Vec<(usize, usize)>,
    pub(super) used: usize,
}

impl SendRing {
    /// `io_uring_register(IORING_REGISTER_BUFFERS2)` with a sparse table of `n` entries, to be
    /// filled by [`SendRing::register_buf`].
    pub(crate) fn enable_fixed_buffers(&mut self, n: u32) -> io::Result<()> {
        self.ring.submitter().register_buffers_sparse(n)?;
        self.fixed = Some(FixedTable {
            keys: vec![(0, 0); n as usize],
            used: 0,
        });
        Ok(())
    }

    /// `io_uring_register(IORING_REGISTER_BUFFERS_UPDATE)`: puts the buffer in `slot` in the registered table
    /// (pinning its pages) unless it is already there. Returns `false` when the table is full or
    /// fixed buffers are off; the buffer is then sent unregistered. When the kernel refuses
    /// (`ENOMEM` past the memlock limit, for one), fixed buffers are turned off for this ring
    /// and the reason kept in [`SendRing::fixed_error`].
    fn register_buf(&mut self, slot: u32) -> bool {
        let (Some(table), Some(s)) = (
            self.fixed.as_mut(),
            self.slots.get_mut(slot as usize).and_then(|s| s.as_mut()),
        ) else {
            return false;
        };
        match Self::try_register(&self.ring, table, &mut s.buf) {
            Ok(r) => r,
            Err(e) => {
                self.fixed = None;
                self.fixed_error = Some(e);
                false
            }
        }
    }

    /// Registers the first `len` bytes at `base` (a driver's arena) as entry 0 of the table,
    /// which must be new: zero-copy requests whose bytes lie inside it go by index (SEND_ZC,
    /// and vectored SENDMSG_ZC where the kernel has registered iovecs: 6.15).
    /// When the kernel refuses (`ENOMEM` past `ulimit -l`), tries half as much, down to
    /// `unit` bytes. Returns how many bytes are registered and the first refusal.
    pub(crate) fn register_arena(
        &mut self,
        base: usize,
        len: usize,
        unit: usize,
    ) -> (usize, Option<io::Error>) {
        let Some(table) = self.fixed.as_mut().filter(|t| t.used == 0) else {
            return (0, Some(io::Error::from_raw_os_error(libc::EBUSY)));
        };
        let (mut try_len, mut first) = (len, None);
        while try_len >= unit.max(1) {
            let iov = libc::iovec {
                iov_base: base as *mut libc::c_void,
                iov_len: try_len,
            };
            // SAFETY: the iovec describes a live mapping the driver keeps (in an Arc) for as
            // long as any buffer in it may be in a request; the kernel pins its pages and only
            // reads them (sendpath issues no *_FIXED read ops).
            match unsafe {
                self.ring
                    .submitter()
                    .register_buffers_update(0, &[iov], None)
            } {
                Ok(_) => {
                    table.keys[0] = (base, try_len);
                    table.used = 1;
                    self.arena = Some((base, try_len));
                    for at in &mut self.parked_at {
                        at.registered = in_region(self.arena, at.start as usize, at.size);
                    }
                    return (try_len, first);
                }
                Err(e) => {
                    let again = e.raw_os_error() == Some(libc::ENOMEM);
                    first.get_or_insert(e);
                    if !again {
                        break;
                    }
                    try_len = (try_len / 2) / unit.max(1) * unit.max(1);
                }
            }
        }
        (0, first)
    }

    /// Lets vectored zero-copy sends from the arena go by index (the kernel takes registered
    /// iovecs for `SENDMSG_ZC`: Linux 6.15).
    pub(crate) fn set_vectored_fixed(&mut self, on: bool) {
        self.vectored_fixed = on;
    }

    /// Registers `buf` now (see [`SendRing::register_buf`]); `false` when fixed buffers are
    /// off or the table is full.
    pub(crate) fn register(&mut self, buf: &mut Buf) -> bool {
        let Some(table) = self.fixed.as_mut() else {
            return false;
        };
        match Self::try_register(&self.ring, table, buf) {
            Ok(r) => r,
            Err(e) => {
                self.fixed = None;
                self.fixed_error = Some(e);
                false
            }
        }
    }

    fn try_register(ring: &IoUring, table: &mut FixedTable, buf: &mut Buf) -> io::Result<bool> {
        let key = (buf.as_slice().as_ptr() as usize, buf.capacity());
        if let Some(i) = buf.fixed {
            if table.keys.get(i as usize) == Some(&key) {
                return Ok(true);
            }
        }
        // Entries are taken in order and never given back, so the next free one is `used`: no
        // scan of a full table on every send (which cost milliseconds at 10,000 connections).
        let i = table.used;
        if i >= table.keys.len() {
            return Ok(false);
        }
        let iov = libc::iovec {
            iov_base: key.0 as *mut libc::c_void,
            iov_len: key.1,
        };
        // SAFETY: the iovec describes the live allocation of `buf`. The kernel pins its pages
        // and only ever reads them (sendpath issues no *_FIXED read ops), so even if the Buf is
        // later dropped the kernel keeps its own page references and no Rust memory is written.
        // Stale entries are detected by address and length before use (see above).
        unsafe {
            ring.submitter()
                .register_buffers_update(i as u32, &[iov], None)?
        };
        table.keys[i] = key;
        table.used += 1;
        buf.fixed = Some(i as u16);
        Ok(true)
    }

    /// Hands `buf` to the ring and queues one send of `buf[range]` on `fd`; `tag` comes back in
    /// each of its completions. With `link`, the next SQE pushed runs only after this one
    /// completes in full (`IOSQE_IO_LINK`); a chain is how sends on one stream socket keep their
    /// order. The ring holds the buffer until [`SendRing::unhold`] and its last completion.
    /// Returns the slot, the request id and whether the send uses a registered buffer.
    pub(crate) fn push(
        &mut self,
        fd: BorrowedFd<'_>,
        buf: Buf,
        range: std::ops::Range<usize>,
        op: Op,
        link: bool,
        tag: u32,
    ) -> io::Result<(u32, u64, bool)> {
        let now = self.clock(op);
        let slot = self.hold(buf, tag, now);
        let (req, registered) = self.push_slot(fd, slot, range, op, link)?;
        Ok((slot, req, registered))
    }

    /// When a buffer pushed for `op` went to the ring, for the zero-copy sends whose
    /// notification is timed: one in [`crate::stats::SendClock`]'s sample (a clock read per
    /// send cost about 2% at 1400 B); `None` for the others and for a copy, whose completion
    /// nothing times.
    pub(crate) fn clock(&mut self, op: Op) -> Option<u64> {
        match op {
            Op::SendZc { .. } => self.clock.timed(),
            _ => None,
        }
    }

    /// The next request id's high half: 29 bits, clear of `AUX` (bit 63), `GROUP` (62) and
    /// `LANE` (61).
    fn next_request(&mut self) -> u64 {
        next_request(&mut self.requests)
    }

    /// Queues one vectored send of every part's bytes, in order, on `fd`: `IORING_OP_SENDMSG`
    /// (or `SENDMSG_ZC` for `Op::SendZc`) with `MSG_WAITALL`, see sendmsg(2). Each new part's
    /// buffer, taken from the front of `queue`, goes to the ring first, and the part names the
    /// slot that now holds it. With `link`, the next SQE runs only after this one completes in
    /// full. Returns the request id and whether it sends by index from the arena (a
    /// zero-copy request whose every part lies in it, where the kernel takes registered
    /// iovecs). A held part whose slot is not live, or a new one without
    /// its buffer, is an error (`EBADSLT`), and nothing is queued.
    pub(crate) fn push_vectored(
        &mut self,
        fd: BorrowedFd<'_>,
        parts: &mut [Part],
        queue: &mut VecDeque<Buf>,
        op: Op,
        link: bool,
        tag: u32,
    ) -> io::Result<(u64, bool)> {
        let mut new = queue.iter();
        let all_live = parts.iter().all(|p| match p.payload {
            Payload::Held(slot) => self.live(slot, &p.range),
            Payload::New => new.next().is_some_and(|b| within(&p.range, b)),
        });
        if !all_live {
            return Err(io::Error::from_raw_os_error(libc::EBADSLT));
        }
        let (g, mut slots, mut iovs) = self.take_group();
        let now = self.clock(op);
        let mut fixed = self.vectored_fixed && matches!(op, Op::SendZc { .. });
        for part in parts.iter_mut() {
            let slot = match part.payload {
                Payload::New => self.hold(queue.pop_front().expect("checked above"), tag, now),
                Payload::Held(slot) => slot,
            };
            part.payload = Payload::Held(slot);
            let s = self.slots[slot as usize].as_mut().expect("live");
            s.pending += 1;
            let bytes = &s.buf.as_slice()[part.range.clone()];
            fixed = fixed && in_region(self.arena, bytes.as_ptr() as usize, bytes.len());
            iovs.push(libc::iovec {
                iov_base: bytes.as_ptr() as *mut libc::c_void,
                iov_len: bytes.len(),
            });
            slots.push(slot);
        }
        let req = self.next_request() | GROUP | u64::from(g);
        self.request_started(tag);
        let group = &mut self.groups[g as usize];
        group.hdr.msg_iov = iovs.as_mut_ptr();
        group.hdr.msg_iovlen = iovs.len();
        (group.slots, group.iovs) = (slots, iovs);
        (group.tag, group.pending, group.pushed_at) = (tag, 1, now);
        let entry = sendmsg_entry(fd, &group.hdr, op, link, fixed, req);
        loop {
            // SAFETY: the SQE points at the group's header, which points at its iovecs, which
            // point into buffers held in the group's slots. The group is reused, and each slot
            // released, only after the kernel posted the request's last completion (the header
            // and iovecs are kept that long although the kernel copies them at submission).
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                return Ok((req, fixed));
            }
            self.submit()?;
        }
    }

    /// A free group for a vectored request, with its lists of slots and iovecs taken out
    /// (empty, keeping their allocations).
    pub(super) fn take_group(&mut self) -> (u32, Vec<u32>, Vec<libc::iovec>) {
        let g = self.free_groups.pop().unwrap_or_else(|| {
            self.groups.push(Group::new());
            (self.groups.len() - 1) as u32
        });
        let group = &mut self.groups[g as usize];
        let (mut slots, mut iovs) = (
            std::mem::take(&mut group.slots),
            std::mem::take(&mut group.iovs),
        );
        slots.clear();
        iovs.clear();
        (g, slots, iovs)
    }

    /// Queues another send from a buffer the ring holds (the rest of a short send, or a retry
    /// after `ECANCELED`/`ENOMEM`). Returns the request id, which the completions of this
    /// request carry in [`Cqe::req`], and whether it sends from a registered buffer. A slot
    /// that is not held is an error (`EBADSLT`), never a send from freed memory.
    #[inline]
    pub(crate) fn push_slot(
        &mut self,
        fd: BorrowedFd<'_>,
        slot: u32,
        range: std::ops::Range<usize>,
        op: Op,
        link: bool,
    ) -> io::Result<(u64, bool)> {
        self.push_slot_marked(fd, slot, range, op, link, 0)
    }

    /// One datagram of the first `len` bytes of held `slot`, pushed as
    /// [`SendRing::push_slot`] does and let go of at once: the ring frees the slot after its
    /// last completion and counts its completions into its tag's [`LaneTally`], unless its
    /// result sent nothing (`<= 0` for a datagram of bytes), which hands it back to its owner
    /// held (to resend it or let it go) in a [`Cqe`] that says [`Cqe::lane`]. Returns the
    /// request id and whether it sends from a registered buffer; on an error the slot stays
    /// held.
    ///
    /// [`LaneTally`]: super::LaneTally
    /// [`Cqe`]: super::Cqe
    /// [`Cqe::lane`]: super::Cqe::lane
    #[inline]
    pub(crate) fn push_lane(
        &mut self,
        fd: BorrowedFd<'_>,
        slot: u32,
        len: usize,
        op: Op,
    ) -> io::Result<(u64, bool)> {
        let (req, registered) = self.push_slot_marked(fd, slot, 0..len, op, false, LANE)?;
        if let Some(s) = self.slots[slot as usize].as_mut() {
            s.held = false;
            let (tag, zc) = (s.tag, matches!(op, Op::SendZc { .. }));
            self.lane_pushed(slot, tag, LaneRequest::new(len, zc, registered));
        }
        Ok((req, registered))
    }

    /// [`SendRing::push_slot`], with `mark` in the request id.
    #[inline(always)]
    fn push_slot_marked(
        &mut self,
        fd: BorrowedFd<'_>,
        slot: u32,
        range: std::ops::Range<usize>,
        op: Op,
        link: bool,
        mark: u64,
    ) -> io::Result<(u64, bool)> {
        // Entry 0 is the arena. SEND takes no registered buffer (the kernel refuses
        // IORING_RECVSEND_FIXED_BUF on it with EINVAL): it sends the arena by address.
        let zc = matches!(op, Op::SendZc { .. });
        // The slot, looked at once: held, with `range` inside its bytes.
        let live = self.slots.get_mut(slot as usize).and_then(|s| s.as_mut());
        let Some(s) = live.filter(|s| s.held) else {
            return Err(io::Error::from_raw_os_error(libc::EBADSLT));
        };
        let Some(bytes) = s.buf.as_slice().get(range) else {
            return Err(io::Error::from_raw_os_error(libc::EBADSLT));
        };
        let (at, len) = (bytes.as_ptr(), bytes.len());
        let in_arena = zc && in_region(self.arena, bytes.as_ptr() as usize, bytes.len());
        time_first_push(s, zc, &mut self.held_at[slot as usize], &mut self.clock);
        s.pending += 1;
        let tag = s.tag;
        let req = self.next_request() | mark | u64::from(slot);
        let fixed = match zc {
            false => None,
            true if in_arena => Some(0),
            true => self.own_index(slot),
        };
        let entry = send_entry(types::Fd(fd.as_raw_fd()), at, len, op, fixed).user_data(req);
        let entry = if link {
            entry.flags(squeue::Flags::IO_LINK)
        } else {
            entry
        };
        let registered = fixed.is_some();
        self.request_started(tag);
        loop {
            // SAFETY: the SQE points at `len` bytes from `at`, inside the buffer held in
            // `self.slots[slot]`. That buffer is only moved out (released) once `pending` drops
            // to zero, which happens only after the kernel has posted every CQE for the slot,
            // i.e. after it stopped reading the memory. Moving the `Buf` value does not move
            // its heap bytes.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                return Ok((req, registered));
            }
            self.submit()?;
        }
    }

    /// The registered-buffer index of the buffer in live `slot` (outside the arena), registered
    /// now if it can be (`register_buf` checks that an existing entry still names its bytes);
    /// `None` when it is not registered.
    #[cold]
    fn own_index(&mut self, slot: u32) -> Option<u16> {
        if !self.register_buf(slot) {
            return None;
        }
        self.slots[slot as usize].as_ref()?.buf.fixed
    }
}

/// A zero-copy request that is parked slot `s`'s first: when it went to the ring, in `at`, for
/// the sampled ones (an owned buffer's time is taken by `hold`).
#[inline(always)]
pub(super) fn time_first_push(
    s: &Slot,
    zc: bool,
    at: &mut Option<u64>,
    clock: &mut crate::stats::SendClock,
) {
    if zc && s.parked && s.pending == 0 && at.is_none() {
        *at = clock.timed();
    }
}

/// The high half of the request id after `requests`: 29 bits, clear of `AUX` (bit 63),
/// `GROUP` (62) and `LANE` (61).
pub(super) fn next_request(requests: &mut u32) -> u64 {
    *requests = requests.wrapping_add(1) & 0x1fff_ffff;
    u64::from(*requests) << 32
}

/// The SQE of a send of `len` bytes from `at` on `fd`: `IORING_OP_SEND`, or `SEND_ZC` for
/// `Op::SendZc` (from registered buffer `fixed` when given), with `MSG_WAITALL`.
#[inline(always)]
pub(super) fn send_entry(
    fd: types::Fd,
    at: *const u8,
    len: usize,
    op: Op,
    fixed: Option<u16>,
) -> squeue::Entry {
    match op {
        Op::Send => opcode::Send::new(fd, at, len as u32)
            .flags(libc::MSG_WAITALL)
            .build(),
        Op::SendZc { report_usage } => opcode::SendZc::new(fd, at, len as u32)
            .flags(libc::MSG_WAITALL)
            .zc_flags(if report_usage {
                IORING_SEND_ZC_REPORT_USAGE
            } else {
                0
            })
            .buf_index(fixed)
            .build(),
    }
}

/// Whether the `n` bytes at address `p` lie in `region` (first byte, length): the registered
/// part of the arena.
pub(super) fn in_region(region: Option<(usize, usize)>, p: usize, n: usize) -> bool {
    region.is_some_and(|(base, len)| p >= base && p + n <= base + len)
}

/// The SQE of a vectored send of `hdr`'s iovecs on `fd`: `IORING_OP_SENDMSG`, or
/// `SENDMSG_ZC` for `Op::SendZc`, with `MSG_WAITALL`, linked to the next when `link`; a
/// `fixed` SENDMSG_ZC's iovecs name bytes of registered buffer 0 (the arena).
pub(super) fn sendmsg_entry(
    fd: BorrowedFd<'_>,
    hdr: &libc::msghdr,
    op: Op,
    link: bool,
    fixed: bool,
    req: u64,
) -> squeue::Entry {
    let (fd, hdr) = (types::Fd(fd.as_raw_fd()), hdr as *const libc::msghdr);
    let entry = match op {
        Op::Send => opcode::SendMsg::new(fd, hdr)
            .flags(libc::MSG_WAITALL as u32)
            .build(),
        Op::SendZc { report_usage } => opcode::SendMsgZc::new(fd, hdr)
            .flags(libc::MSG_WAITALL as u32)
            .ioprio(
                if report_usage {
                    IORING_SEND_ZC_REPORT_USAGE
                } else {
                    0
                } | if fixed { RECVSEND_FIXED_BUF } else { 0 },
            )
            .build(),
    };
    let entry = entry.user_data(req);
    if link {
        entry.flags(squeue::Flags::IO_LINK)
    } else {
        entry
    }
}
