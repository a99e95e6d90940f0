//! An io_uring used for socket sends. The ring owns every buffer it has been handed until the
//! kernel has posted the last completion that refers to it (the result CQE, and for SEND_ZC the
//! notification CQE when the result carried `IORING_CQE_F_MORE`), and the iovecs and header of
//! every vectored request until its last completion, so the `unsafe` contract of pushing an SQE
//! that points at user memory is kept here and nowhere else.

use super::bufring::RecvBufs;
use crate::buffer::Buf;
use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

/// `IORING_SEND_ZC_REPORT_USAGE` from `<linux/io_uring.h>` (kernel 6.2).
pub(crate) const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_ENTER_GETEVENTS` from `<linux/io_uring.h>`.
const IORING_ENTER_GETEVENTS: u32 = 1 << 0;
/// `IORING_NOTIF_USAGE_ZC_COPIED` from `<linux/io_uring.h>`: set in a notification's `res` when
/// the kernel copied the data after all.
pub(crate) const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

pub(crate) use crate::engine::SendOp as Op;
use crate::engine::{Part, Payload};

/// Which of the send-related opcodes this kernel's io_uring supports (`IORING_REGISTER_PROBE`).
#[derive(Debug, Clone, Copy, Default)]
pub struct OpSupport {
    /// `IORING_OP_SEND`.
    pub send: bool,
    /// `IORING_OP_SENDMSG`.
    pub sendmsg: bool,
    /// `IORING_OP_SEND_ZC`.
    pub send_zc: bool,
    /// `IORING_OP_SENDMSG_ZC`.
    pub sendmsg_zc: bool,
    /// `IORING_OP_SPLICE`.
    pub splice: bool,
}

/// One completion, decoded.
#[derive(Debug)]
pub(crate) struct Cqe {
    /// The tag the request's buffers were pushed with (the driver's connection index).
    pub(crate) tag: u32,
    /// The request this completion belongs to (as returned by [`SendRing::push_slot`] or
    /// [`SendRing::push_vectored`]); a buffer can carry several requests (a short send's
    /// remainder is a new one).
    pub(crate) req: u64,
    /// `true` for a SEND_ZC notification (`IORING_CQE_F_NOTIF`), `false` for a request result.
    pub(crate) notif: bool,
    /// The CQE's `res`: bytes sent or `-errno` for a result; usage bits for a notification.
    pub(crate) res: i32,
    /// `IORING_CQE_F_MORE` on a result: a notification will follow.
    pub(crate) more: bool,
    /// Nanoseconds since the request's buffer went to the ring (for a vectored request,
    /// since it was pushed), read for a notification and for a result a notification follows
    /// (what a zero-copy outcome is timed from); 0 for a result that ends its request, whose
    /// age nothing reads.
    pub(crate) age_ns: u64,
}

/// Bit 63 of `user_data` marks a request that is not a send (accept, receive, cancel); send
/// request ids keep it clear.
const AUX: u64 = 1 << 63;
/// Bit 62 marks a vectored send: the low half of `user_data` is then its [`Group`], not a slot.
const GROUP: u64 = 1 << 62;

/// A request other than a send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum AuxOp {
    /// Multishot accept on a listening socket.
    Accept,
    /// Multishot receive into the provided buffers.
    Recv,
    /// A cancellation (its own completion carries nothing of interest).
    Cancel,
    /// `SPLICE` from a file into a pipe.
    SpliceIn,
    /// `SPLICE` from a pipe into a socket.
    SpliceOut,
}

impl AuxOp {
    fn code(self) -> u64 {
        match self {
            AuxOp::Accept => 1,
            AuxOp::Recv => 2,
            AuxOp::Cancel => 3,
            AuxOp::SpliceIn => 4,
            AuxOp::SpliceOut => 5,
        }
    }

    /// Requests of one connection, which must all be in before its tag is reused.
    fn per_connection(self) -> bool {
        matches!(self, AuxOp::Recv | AuxOp::SpliceIn | AuxOp::SpliceOut)
    }

    fn from_code(c: u64) -> Option<AuxOp> {
        match c {
            1 => Some(AuxOp::Accept),
            2 => Some(AuxOp::Recv),
            3 => Some(AuxOp::Cancel),
            4 => Some(AuxOp::SpliceIn),
            5 => Some(AuxOp::SpliceOut),
            _ => None,
        }
    }
}

/// One completion of an accept or receive, decoded.
#[derive(Debug)]
pub(crate) struct AuxCqe {
    /// The tag the request was pushed with.
    pub(crate) tag: u32,
    pub(crate) op: AuxOp,
    /// Bytes received, or `-errno`; for an accept, see `fd`.
    pub(crate) res: i32,
    /// `IORING_CQE_F_MORE`: the multishot request stays armed.
    pub(crate) more: bool,
    /// The provided buffer holding the bytes received (`IORING_CQE_F_BUFFER`).
    pub(crate) buf: Option<u16>,
    /// The accepted connection.
    pub(crate) fd: Option<OwnedFd>,
}

/// One cache line per slot: a buffer the ring holds goes in with one line written. When it
/// went to the ring is kept beside ([`SendRing::held_at`]).
#[repr(align(64))]
struct Slot {
    buf: Buf,
    tag: u32,
    /// Completions still expected for this slot.
    pending: u32,
    /// The owner may still send from it (see [`SendRing::unhold`]).
    held: bool,
}

/// A vectored request (`SENDMSG` / `SENDMSG_ZC`) over several slots: the slots it reads, and
/// the iovecs and header the kernel reads, kept until its last completion. A group's lists
/// keep their allocations from request to request.
struct Group {
    slots: Vec<u32>,
    iovs: Vec<libc::iovec>,
    hdr: Box<libc::msghdr>,
    tag: u32,
    /// Completions still expected: the result, then the notification if it said `F_MORE`.
    pending: u32,
    pushed_at: Instant,
}

// SAFETY: the raw pointers in `iovs` and `hdr` point into buffers the ring's own slots hold
// (and into `iovs`); a group is only read or written by the thread that owns the ring.
unsafe impl Send for Group {}

impl Group {
    fn new() -> Group {
        Group {
            slots: Vec::new(),
            iovs: Vec::new(),
            // SAFETY: an all-zero msghdr (no name, no iovecs, no control data) is valid.
            hdr: Box::new(unsafe { std::mem::zeroed() }),
            tag: 0,
            pending: 0,
            pushed_at: Instant::now(),
        }
    }
}

/// A ring's registered-buffer table: (address, capacity) per entry, filled in order.
struct FixedTable {
    keys: Vec<(usize, usize)>,
    used: usize,
}

/// How a ring was set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingSetup {
    /// `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN` (kernel 6.1): completion work
    /// runs only when the one submitting thread asks for completions. With
    /// `IORING_SETUP_TASKRUN_FLAG`, so the ring says when such work is waiting.
    SingleIssuerDeferTaskrun,
    /// `IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG` (kernel 5.19).
    CoopTaskrun,
    /// No setup flags.
    Plain,
}

impl RingSetup {
    /// A short name for notes and results.
    pub fn name(self) -> &'static str {
        match self {
            RingSetup::SingleIssuerDeferTaskrun => "single_issuer+defer_taskrun",
            RingSetup::CoopTaskrun => "coop_taskrun",
            RingSetup::Plain => "plain",
        }
    }
}

/// A ring plus the buffers its in-flight sends point at.
pub(crate) struct SendRing {
    ring: IoUring,
    setup: RingSetup,
    /// Created disabled (`IORING_SETUP_R_DISABLED`): the first thread that submits enables it
    /// and becomes its single issuer.
    enabled: bool,
    slots: Vec<Option<Slot>>,
    /// When each slot's buffer went to the ring.
    held_at: Vec<Instant>,
    /// The clock as [`SendRing::clock`] last read it.
    last_clock: Instant,
    free: Vec<u32>,
    /// Vectored requests, in flight or free for reuse (`free_groups`).
    groups: Vec<Group>,
    free_groups: Vec<u32>,
    /// Buffers whose last completion came in since the last [`SendRing::take_released`],
    /// with their tags.
    released: Vec<(u32, Buf)>,
    /// Registered-buffer table: (address, length) per index, when one was registered.
    fixed: Option<FixedTable>,
    /// Why registering buffers stopped, when the kernel refused (memlock, for one).
    fixed_error: Option<io::Error>,
    /// Requests pushed so far: the high half of each request id.
    requests: u32,
    /// Slots with completions outstanding.
    busy: usize,
    /// Per tag (connection): slots with completions outstanding plus receives armed.
    tag_busy: Vec<u32>,
    /// Accept, receive and cancel requests whose last completion has not come.
    aux_pending: usize,
    aux: Vec<AuxCqe>,
    /// The CQEs of the current reap (`user_data`, `res`, `flags`), decoded after the CQ is
    /// released.
    raw: Vec<(u64, i32, u32)>,
    recv: Option<RecvBufs>,
    /// Completions the kernel could not post because the CQ was full (`IORING_FEAT_NODROP`
    /// keeps them and posts them later), as the ring's overflow counter reads.
    cq_overflow: u32,
}

impl SendRing {
    /// `io_uring_setup(sq_entries, {cq_entries, flags})`, see io_uring_setup(2). Asks for
    /// SINGLE_ISSUER and DEFER_TASKRUN (created disabled, enabled by the first thread that
    /// submits), then COOP_TASKRUN, then no flags, taking the first the kernel accepts.
    /// `SENDPATH_URING_SETUP=coop` or `=plain` starts further down that list, to compare.
    pub(crate) fn new(sq_entries: u32, cq_entries: u32) -> io::Result<SendRing> {
        let sq = sq_entries.next_power_of_two().max(8);
        let cq = cq_entries.next_power_of_two().max(2 * sq);
        let mut last = None;
        let all = [
            RingSetup::SingleIssuerDeferTaskrun,
            RingSetup::CoopTaskrun,
            RingSetup::Plain,
        ];
        let skip = match std::env::var("SENDPATH_URING_SETUP").as_deref() {
            Ok("coop") => 1,
            Ok("plain") => 2,
            _ => 0,
        };
        for setup in all.into_iter().skip(skip) {
            let mut b = IoUring::builder();
            b.setup_cqsize(cq);
            match setup {
                RingSetup::SingleIssuerDeferTaskrun => {
                    b.setup_single_issuer()
                        .setup_defer_taskrun()
                        .setup_taskrun_flag()
                        .setup_r_disabled();
                }
                RingSetup::CoopTaskrun => {
                    b.setup_coop_taskrun().setup_taskrun_flag();
                }
                RingSetup::Plain => {}
            }
            match b.build(sq) {
                Ok(ring) => {
                    return Ok(SendRing {
                        ring,
                        setup,
                        enabled: setup != RingSetup::SingleIssuerDeferTaskrun,
                        slots: Vec::new(),
                        held_at: Vec::new(),
                        last_clock: Instant::now(),
                        free: Vec::new(),
                        groups: Vec::new(),
                        free_groups: Vec::new(),
                        released: Vec::new(),
                        fixed: None,
                        fixed_error: None,
                        requests: 0,
                        busy: 0,
                        tag_busy: Vec::new(),
                        aux_pending: 0,
                        aux: Vec::new(),
                        raw: Vec::new(),
                        recv: None,
                        cq_overflow: 0,
                    })
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)))
    }

    /// How the ring was set up.
    pub(crate) fn setup(&self) -> RingSetup {
        self.setup
    }

    /// `io_uring_register(IORING_REGISTER_ENABLE_RINGS)` the first time: the calling thread
    /// becomes the ring's single issuer.
    fn enable(&mut self) -> io::Result<()> {
        if !self.enabled {
            self.ring.submitter().register_enable_rings()?;
            self.enabled = true;
        }
        Ok(())
    }

    /// Why registered buffers are not used, when the kernel refused them.
    pub(crate) fn fixed_error(&self) -> Option<&io::Error> {
        self.fixed_error.as_ref()
    }

    /// `io_uring_register(IORING_REGISTER_PROBE)`: which send opcodes exist here.
    /// See io_uring_register(2).
    pub(crate) fn probe(&self) -> io::Result<OpSupport> {
        let mut p = Probe::new();
        self.ring.submitter().register_probe(&mut p)?;
        Ok(OpSupport {
            send: p.is_supported(opcode::Send::CODE),
            sendmsg: p.is_supported(opcode::SendMsg::CODE),
            send_zc: p.is_supported(opcode::SendZc::CODE),
            sendmsg_zc: p.is_supported(opcode::SendMsgZc::CODE),
            splice: p.is_supported(opcode::Splice::CODE),
        })
    }

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

    /// When a buffer pushed for `op` went to the ring: the clock for a zero-copy send, whose
    /// notification is timed from it; for a copy, whose completion nothing times, the last
    /// time read (no clock read per send).
    pub(crate) fn clock(&mut self, op: Op) -> Instant {
        if matches!(op, Op::SendZc { .. }) {
            self.last_clock = Instant::now();
        }
        self.last_clock
    }

    /// Puts `buf` in a free slot, held for its owner, pushed at `now`; send from it with
    /// [`SendRing::push_slot`].
    pub(crate) fn hold(&mut self, buf: Buf, tag: u32, now: Instant) -> u32 {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.held_at.push(now);
                (self.slots.len() - 1) as u32
            }
        };
        self.slots[slot as usize] = Some(Slot {
            buf,
            tag,
            pending: 0,
            held: true,
        });
        self.held_at[slot as usize] = now;
        slot
    }

    /// Whether `slot` holds a buffer its owner may send `range` of.
    fn live(&self, slot: u32, range: &std::ops::Range<usize>) -> bool {
        self.slots
            .get(slot as usize)
            .and_then(|s| s.as_ref())
            .is_some_and(|s| s.held && within(range, &s.buf))
    }

    /// The next request id's high half: 30 bits, clear of `AUX` (bit 63) and `GROUP` (62).
    fn next_request(&mut self) -> u64 {
        self.requests = self.requests.wrapping_add(1) & 0x3fff_ffff;
        u64::from(self.requests) << 32
    }

    /// One more request of `tag` whose last completion has not come.
    fn request_started(&mut self, tag: u32) {
        self.busy += 1;
        bump(&mut self.tag_busy, tag, true);
    }

    /// A request of `tag` had its last completion.
    fn request_ended(&mut self, tag: u32) {
        self.busy = self.busy.saturating_sub(1);
        bump(&mut self.tag_busy, tag, false);
    }

    /// Queues one vectored send of every part's bytes, in order, on `fd`: `IORING_OP_SENDMSG`
    /// (or `SENDMSG_ZC` for `Op::SendZc`) with `MSG_WAITALL`, see sendmsg(2). Each new part's
    /// buffer, taken from the front of `queue`, goes to the ring first, and the part names the
    /// slot that now holds it. With `link`, the next SQE runs only after this one completes in
    /// full. Returns the request id. A held part whose slot is not live, or a new one without
    /// its buffer, is an error (`EBADSLT`), and nothing is queued.
    pub(crate) fn push_vectored(
        &mut self,
        fd: BorrowedFd<'_>,
        parts: &mut [Part],
        queue: &mut VecDeque<Buf>,
        op: Op,
        link: bool,
        tag: u32,
    ) -> io::Result<u64> {
        let mut new = queue.iter();
        let all_live = parts.iter().all(|p| match p.payload {
            Payload::Held(slot) => self.live(slot, &p.range),
            Payload::New => new.next().is_some_and(|b| within(&p.range, b)),
        });
        if !all_live {
            return Err(io::Error::from_raw_os_error(libc::EBADSLT));
        }
        let g = self.free_groups.pop().unwrap_or_else(|| {
            self.groups.push(Group::new());
            (self.groups.len() - 1) as u32
        });
        let mut slots = std::mem::take(&mut self.groups[g as usize].slots);
        let mut iovs = std::mem::take(&mut self.groups[g as usize].iovs);
        slots.clear();
        iovs.clear();
        let now = self.clock(op);
        for part in parts.iter_mut() {
            let slot = match part.payload {
                Payload::New => self.hold(queue.pop_front().expect("checked above"), tag, now),
                Payload::Held(slot) => slot,
            };
            part.payload = Payload::Held(slot);
            let s = self.slots[slot as usize].as_mut().expect("live");
            s.pending += 1;
            let bytes = &s.buf.as_slice()[part.range.clone()];
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
        let (fd, hdr) = (
            types::Fd(fd.as_raw_fd()),
            &*group.hdr as *const libc::msghdr,
        );
        let entry = match op {
            Op::Send => opcode::SendMsg::new(fd, hdr)
                .flags(libc::MSG_WAITALL as u32)
                .build(),
            Op::SendZc { report_usage } => opcode::SendMsgZc::new(fd, hdr)
                .flags(libc::MSG_WAITALL as u32)
                .ioprio(if report_usage {
                    IORING_SEND_ZC_REPORT_USAGE
                } else {
                    0
                })
                .build(),
        };
        let entry = entry.user_data(req);
        let entry = if link {
            entry.flags(squeue::Flags::IO_LINK)
        } else {
            entry
        };
        loop {
            // SAFETY: the SQE points at the group's header, which points at its iovecs, which
            // point into buffers held in the group's slots. The group is reused, and each slot
            // released, only after the kernel posted the request's last completion (the header
            // and iovecs are kept that long although the kernel copies them at submission).
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                return Ok(req);
            }
            self.submit()?;
        }
    }

    /// Queues another send from a buffer the ring holds (the rest of a short send, or a retry
    /// after `ECANCELED`/`ENOMEM`). Returns the request id, which the completions of this
    /// request carry in [`Cqe::req`], and whether it sends from a registered buffer. A slot
    /// that is not held is an error (`EBADSLT`), never a send from freed memory.
    pub(crate) fn push_slot(
        &mut self,
        fd: BorrowedFd<'_>,
        slot: u32,
        range: std::ops::Range<usize>,
        op: Op,
        link: bool,
    ) -> io::Result<(u64, bool)> {
        if !self.live(slot, &range) {
            return Err(io::Error::from_raw_os_error(libc::EBADSLT));
        }
        if matches!(op, Op::SendZc { .. }) {
            self.register_buf(slot);
        }
        let req = self.next_request() | u64::from(slot);
        let s = self.slots[slot as usize]
            .as_mut()
            .expect("checked live above");
        s.pending += 1;
        let tag = s.tag;
        let s = &*s;
        let bytes = &s.buf.as_slice()[range];
        let fixed = s.buf.fixed.filter(|i| {
            self.fixed
                .as_ref()
                .and_then(|t| t.keys.get(*i as usize))
                .copied()
                == Some((s.buf.as_slice().as_ptr() as usize, s.buf.capacity()))
        });
        let fd = types::Fd(fd.as_raw_fd());
        let entry = match op {
            Op::Send => opcode::Send::new(fd, bytes.as_ptr(), bytes.len() as u32)
                .flags(libc::MSG_WAITALL)
                .build(),
            Op::SendZc { report_usage } => {
                opcode::SendZc::new(fd, bytes.as_ptr(), bytes.len() as u32)
                    .flags(libc::MSG_WAITALL)
                    .zc_flags(if report_usage {
                        IORING_SEND_ZC_REPORT_USAGE
                    } else {
                        0
                    })
                    .buf_index(fixed)
                    .build()
            }
        };
        let entry = entry.user_data(req);
        let entry = if link {
            entry.flags(squeue::Flags::IO_LINK)
        } else {
            entry
        };
        let registered = fixed.is_some() && matches!(op, Op::SendZc { .. });
        self.request_started(tag);
        loop {
            // SAFETY: the SQE points at `bytes`, inside the buffer held in `self.slots[slot]`.
            // That buffer is only moved out (released) once `pending` drops to zero, which
            // happens only after the kernel has posted every CQE for the slot, i.e. after it
            // stopped reading the memory. Moving the `Buf` value does not move its heap bytes.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                return Ok((req, registered));
            }
            self.submit()?;
        }
    }

    /// The owner will send no more from `slot`: the ring lets the buffer go once its last
    /// completion is in, returning it now if that has already happened.
    pub(crate) fn unhold(&mut self, slot: u32) -> Option<Buf> {
        let s = self.slots.get_mut(slot as usize)?.as_mut()?;
        s.held = false;
        if s.pending > 0 {
            return None;
        }
        self.free.push(slot);
        self.slots[slot as usize].take().map(|s| s.buf)
    }

    /// `io_uring_enter(to_submit, min_complete = want, IORING_ENTER_GETEVENTS)`.
    pub(crate) fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        self.enable()?;
        loop {
            match self.ring.submit_and_wait(want) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// `io_uring_enter(to_submit)` without waiting. On a DEFER_TASKRUN ring it always passes
    /// `IORING_ENTER_GETEVENTS` (with `min_complete` 0), so the deferred work of this very
    /// submission runs in the same call: the next link of a chain is such work, and without it
    /// a chain would advance one link per syscall. Elsewhere GETEVENTS is passed when the ring
    /// says deferred work is waiting.
    pub(crate) fn submit(&mut self) -> io::Result<usize> {
        self.enable()?;
        loop {
            let r = if self.setup == RingSetup::SingleIssuerDeferTaskrun {
                let n = self.ring.submission().len() as u32;
                // SAFETY: no extended argument is passed (`None`, size 0), so the kernel reads
                // nothing but the rings, which `IoUring` keeps mapped.
                unsafe {
                    self.ring.submitter().enter::<libc::sigset_t>(
                        n,
                        0,
                        IORING_ENTER_GETEVENTS,
                        None,
                    )
                }
            } else {
                self.ring.submit()
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// Whether entering the kernel would do anything: SQEs to submit, deferred completion work
    /// to run (`IORING_SQ_TASKRUN`), or completions held back by a full CQ.
    pub(crate) fn needs_enter(&mut self) -> bool {
        let mut sq = self.ring.submission();
        sq.sync();
        !sq.is_empty() || sq.taskrun() || sq.cq_overflow() || !self.enabled
    }

    /// Whether deferred completion work is waiting for the next enter with GETEVENTS.
    pub(crate) fn taskrun_pending(&mut self) -> bool {
        let mut sq = self.ring.submission();
        sq.sync();
        sq.taskrun()
    }

    /// Waits up to `timeout` for at least one completion (submitting what is queued first).
    /// Returns false when the time ran out.
    pub(crate) fn wait_for(&mut self, timeout: Duration) -> io::Result<bool> {
        self.wait_batch(1, Duration::ZERO, timeout)
    }

    /// Waits up to `timeout` for `want` completions, but once `min_wait` has passed returns as
    /// soon as there is at least one (`IORING_FEAT_MIN_TIMEOUT`, Linux 6.12; a zero `min_wait`
    /// is what older kernels take): fewer, fuller wake-ups for a loop over many connections.
    /// Returns false when the time ran out.
    pub(crate) fn wait_batch(
        &mut self,
        want: usize,
        min_wait: Duration,
        timeout: Duration,
    ) -> io::Result<bool> {
        self.enable()?;
        let ts = types::Timespec::from(timeout);
        let usec = u32::try_from(min_wait.as_micros()).unwrap_or(u32::MAX);
        let args = types::SubmitArgs::new().timespec(&ts).min_wait_usec(usec);
        match self.ring.submitter().submit_with_args(want, &args) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Whether the kernel takes a batch wait's minimum (`IORING_FEAT_MIN_TIMEOUT`).
    pub(crate) fn has_min_wait(&self) -> bool {
        self.ring.params().is_feature_min_timeout()
    }

    /// Moves every available completion into `out`, releasing buffers whose last completion
    /// has arrived. Returns how many completions there were (accepts and receives included).
    pub(crate) fn reap(&mut self, out: &mut Vec<Cqe>) -> usize {
        let mut cq = self.ring.completion();
        self.cq_overflow = cq.overflow();
        let n = cq.len();
        if n == 0 {
            // Most passes look more often than completions come: no clock reading for none.
            return 0;
        }
        let mut now = None;
        let mut raw = std::mem::take(&mut self.raw);
        raw.extend((&mut cq).map(|c| (c.user_data(), c.result(), c.flags())));
        drop(cq);
        for (req, res, flags) in raw.drain(..) {
            if req & AUX != 0 {
                self.reap_aux(req, res, flags);
                continue;
            }
            let notif = cqueue::notif(flags);
            let more = !notif && cqueue::more(flags);
            let done = if req & GROUP != 0 {
                self.group_completed(req as u32, more)
            } else {
                let done = self.slot_completed(req as u32, more);
                if let (Some((tag, _)), false) = (done, more) {
                    self.request_ended(tag);
                }
                done
            };
            let Some((tag, pushed_at)) = done else {
                continue;
            };
            out.push(Cqe {
                tag,
                req,
                notif,
                res,
                more,
                age_ns: match notif || more {
                    true => {
                        let now = *now.get_or_insert_with(Instant::now);
                        now.duration_since(pushed_at).as_nanos() as u64
                    }
                    false => 0,
                },
            });
        }
        self.raw = raw;
        n
    }

    /// One completion of a request on `slot` came in (`more`: another will follow). Releases
    /// the buffer after its last one if its owner let it go. Returns the slot's tag and when
    /// its buffer went to the ring; `None` for a slot not in use.
    fn slot_completed(&mut self, slot: u32, more: bool) -> Option<(u32, Instant)> {
        let s = self.slots.get_mut(slot as usize)?.as_mut()?;
        s.pending = s.pending.saturating_sub(1) + u32::from(more);
        let done = (s.tag, self.held_at[slot as usize]);
        if s.pending == 0 && !s.held {
            self.free.push(slot);
            if let Some(s) = self.slots[slot as usize].take() {
                self.released.push((s.tag, s.buf));
            }
        }
        Some(done)
    }

    /// One completion of vectored request `g` came in: one for each of its slots. After its
    /// last, the group is free for another request.
    fn group_completed(&mut self, g: u32, more: bool) -> Option<(u32, Instant)> {
        let group = self.groups.get_mut(g as usize).filter(|g| g.pending > 0)?;
        group.pending = group.pending - 1 + u32::from(more);
        let done = (group.tag, group.pushed_at);
        let slots = std::mem::take(&mut group.slots);
        for &slot in &slots {
            self.slot_completed(slot, more);
        }
        let group = &mut self.groups[g as usize];
        group.slots = slots;
        if group.pending == 0 {
            self.free_groups.push(g);
            self.request_ended(done.0);
        }
        Some(done)
    }

    /// Moves the buffers released since the last call, each with its tag, into `out`.
    pub(crate) fn take_released(&mut self, out: &mut Vec<(u32, Buf)>) {
        out.append(&mut self.released);
    }

    /// Number of send requests whose last completion has not come: while it is not 0, the
    /// kernel may still read a buffer the ring holds.
    pub(crate) fn in_kernel(&self) -> usize {
        self.busy
    }

    /// Number of send requests with completions outstanding that carry `tag`, plus the accept
    /// and receive requests armed with it: while this is not 0, a completion may still name
    /// `tag`.
    pub(crate) fn in_kernel_for(&self, tag: u32) -> usize {
        self.tag_busy.get(tag as usize).map_or(0, |n| *n as usize)
    }

    /// Number of buffers carrying `tag` that the kernel may still read (a scan: for counting
    /// what is left after a deadline, not for a loop).
    pub(crate) fn buffers_in_kernel_for(&self, tag: u32) -> usize {
        let slots = self.slots.iter().flatten();
        slots.filter(|s| s.tag == tag && s.pending > 0).count()
    }

    /// Accept and receive requests armed (multishot requests stay armed until their last CQE).
    pub(crate) fn aux_pending(&self) -> usize {
        self.aux_pending
    }

    /// Completions the kernel had to hold back because the CQ was full, so far.
    pub(crate) fn cq_overflow(&self) -> u32 {
        self.cq_overflow
    }

    /// `io_uring_register_buf_ring`: `count` receive buffers of `size` bytes as group 0, for
    /// [`SendRing::push_recv_multi`].
    pub(crate) fn provide_recv_buffers(&mut self, count: u16, size: usize) -> io::Result<()> {
        if self.recv.is_some() {
            return Err(io::Error::from_raw_os_error(libc::EEXIST));
        }
        self.recv = Some(RecvBufs::new(&self.ring, 0, count, size)?);
        Ok(())
    }

    /// The first `len` bytes of provided buffer `bid`, which a receive completion handed over.
    pub(crate) fn recv_bytes(&self, bid: u16, len: usize) -> Option<&[u8]> {
        self.recv.as_ref()?.get(bid, len)
    }

    /// Offers provided buffer `bid` to the kernel again.
    pub(crate) fn recycle(&mut self, bid: u16) {
        if let Some(r) = self.recv.as_mut() {
            r.recycle(bid);
        }
    }

    /// Queues a multishot accept (`IORING_OP_ACCEPT` with `IORING_ACCEPT_MULTISHOT`, kernel
    /// 5.19) on `listener`; each connection comes back as an [`AuxCqe`] with its `fd`. The
    /// listener must stay open while the request is armed.
    pub(crate) fn push_accept_multi(
        &mut self,
        listener: BorrowedFd<'_>,
        tag: u32,
    ) -> io::Result<()> {
        let e = opcode::AcceptMulti::new(types::Fd(listener.as_raw_fd()))
            .flags(libc::SOCK_CLOEXEC)
            .build();
        self.push_aux(e, AuxOp::Accept, tag)
    }

    /// Queues a multishot receive (`IORING_OP_RECV` with `IORING_RECV_MULTISHOT`, kernel 6.0)
    /// on `fd` into the provided buffers; it stays armed until end of file, an error, or the
    /// buffers run out (`-ENOBUFS`), each of which ends it with a CQE without `F_MORE`.
    pub(crate) fn push_recv_multi(&mut self, fd: BorrowedFd<'_>, tag: u32) -> io::Result<()> {
        let group = match &self.recv {
            Some(r) => r.group(),
            None => return Err(io::Error::from_raw_os_error(libc::ENOBUFS)),
        };
        let e = opcode::RecvMulti::new(types::Fd(fd.as_raw_fd()), group).build();
        self.push_aux(e, AuxOp::Recv, tag)
    }

    /// Cancels every request on `fd` (`IORING_OP_ASYNC_CANCEL` with `IORING_ASYNC_CANCEL_FD |
    /// IORING_ASYNC_CANCEL_ALL`, kernel 5.19); each ends with `-ECANCELED`.
    pub(crate) fn push_cancel_fd(&mut self, fd: BorrowedFd<'_>, tag: u32) -> io::Result<()> {
        let e =
            opcode::AsyncCancel2::new(types::CancelBuilder::fd(types::Fd(fd.as_raw_fd())).all())
                .build();
        self.push_aux(e, AuxOp::Cancel, tag)
    }

    /// Queues `len` bytes of `file` from `offset` into the pipe (`pipe_w`), linked to a splice
    /// of `out_len` bytes from the pipe (`pipe_r`) into `sock` (`IORING_OP_SPLICE`, see
    /// splice(2)); or, with `len` 0, only the second. Each comes back as an [`AuxCqe`]
    /// (`SpliceIn`, `SpliceOut`); when the first moves fewer bytes than asked, the second ends
    /// with `-ECANCELED`. The descriptors must stay open until both completions are in.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn push_splice(
        &mut self,
        file: BorrowedFd<'_>,
        offset: u64,
        len: u32,
        pipe_w: BorrowedFd<'_>,
        pipe_r: BorrowedFd<'_>,
        sock: BorrowedFd<'_>,
        out_len: u32,
        tag: u32,
    ) -> io::Result<()> {
        // Both SQEs must go in one submission, or the link would end between them.
        let room = {
            let sq = self.ring.submission();
            sq.capacity() - sq.len()
        };
        if room < 2 {
            self.submit()?;
        }
        if len > 0 {
            let e = opcode::Splice::new(
                types::Fd(file.as_raw_fd()),
                offset as i64,
                types::Fd(pipe_w.as_raw_fd()),
                -1,
                len,
            )
            .build()
            .flags(squeue::Flags::IO_LINK);
            self.push_aux(e, AuxOp::SpliceIn, tag)?;
        }
        let e = opcode::Splice::new(
            types::Fd(pipe_r.as_raw_fd()),
            -1,
            types::Fd(sock.as_raw_fd()),
            -1,
            out_len,
        )
        .build();
        self.push_aux(e, AuxOp::SpliceOut, tag)
    }

    fn push_aux(&mut self, e: squeue::Entry, op: AuxOp, tag: u32) -> io::Result<()> {
        let e = e.user_data(AUX | (op.code() << 32) | u64::from(tag));
        loop {
            // SAFETY: accept, multishot receive (into buffers `RecvBufs` owns for the ring's
            // life), splice (between descriptors, through no memory of ours) and cancel
            // requests point at no memory of the caller's.
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                break;
            }
            self.submit()?;
        }
        self.aux_pending += 1;
        if op.per_connection() {
            bump(&mut self.tag_busy, tag, true);
        }
        Ok(())
    }

    fn reap_aux(&mut self, data: u64, res: i32, flags: u32) {
        let tag = data as u32;
        let Some(op) = AuxOp::from_code((data >> 32) & 0xff) else {
            return;
        };
        let more = cqueue::more(flags);
        if !more {
            self.aux_pending = self.aux_pending.saturating_sub(1);
            if op.per_connection() {
                bump(&mut self.tag_busy, tag, false);
            }
        }
        let buf = cqueue::buffer_select(flags);
        if let (Some(b), Some(r)) = (buf, self.recv.as_mut()) {
            r.taken(b);
        }
        let fd = (op == AuxOp::Accept && res >= 0).then(|| {
            // SAFETY: a successful accept CQE's `res` is a new descriptor the kernel installed
            // in this process's table for us; nothing else owns it.
            unsafe { OwnedFd::from_raw_fd(res) }
        });
        if op != AuxOp::Cancel {
            self.aux.push(AuxCqe {
                tag,
                op,
                res,
                more,
                buf,
                fd,
            });
        }
    }

    /// Moves the accept and receive completions reaped so far into `out`.
    pub(crate) fn take_aux(&mut self, out: &mut Vec<AuxCqe>) {
        out.append(&mut self.aux);
    }

    /// Waits up to `timeout` until the kernel holds no buffer, moving completions into `out`.
    /// Returns how many buffers it still holds afterwards.
    pub(crate) fn drain(&mut self, timeout: Duration, out: &mut Vec<Cqe>) -> usize {
        let deadline = Instant::now() + timeout;
        while self.in_kernel() > 0 && Instant::now() < deadline {
            if self.wait_for(Duration::from_millis(10)).is_err() {
                break;
            }
            self.reap(out);
        }
        self.in_kernel()
    }
}

/// Whether `range` is a range of `buf`'s bytes.
fn within(range: &std::ops::Range<usize>, buf: &Buf) -> bool {
    range.start <= range.end && range.end <= buf.len()
}

/// Counts one more (`up`) or one fewer request outstanding for `tag`.
fn bump(counts: &mut Vec<u32>, tag: u32, up: bool) {
    let i = tag as usize;
    if up {
        if counts.len() <= i {
            counts.resize(i + 1, 0);
        }
        counts[i] += 1;
    } else if let Some(c) = counts.get_mut(i) {
        *c = c.saturating_sub(1);
    }
}

impl Drop for SendRing {
    fn drop(&mut self) {
        if self.aux_pending > 0 {
            // Multishot receives write into the provided buffers until they end: cancel them
            // all and wait, and keep the buffers mapped for good if they do not end in time.
            let e = opcode::AsyncCancel2::new(types::CancelBuilder::any())
                .build()
                .user_data(AUX | (AuxOp::Cancel.code() << 32));
            // SAFETY: a cancel request points at no memory.
            if unsafe { self.ring.submission().push(&e) }.is_ok() {
                self.aux_pending += 1;
            }
            let deadline = Instant::now() + Duration::from_secs(2);
            let mut sink = Vec::new();
            while self.aux_pending > 0 && Instant::now() < deadline {
                if self.wait_for(Duration::from_millis(10)).is_err() {
                    break;
                }
                self.reap(&mut sink);
                self.aux.clear();
            }
        }
        if let Some(r) = self.recv.take() {
            if self.aux_pending > 0 || r.unregister(&self.ring).is_err() {
                std::mem::forget(r);
            }
        }
        let mut sink = Vec::new();
        if self.drain(Duration::from_secs(2), &mut sink) > 0 {
            // The kernel may still read these buffers; never free memory it may read.
            for s in self.slots.drain(..).flatten() {
                if s.pending > 0 {
                    std::mem::forget(s.buf);
                }
            }
            for g in self.groups.drain(..) {
                if g.pending > 0 {
                    std::mem::forget(g);
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 64);
    }
}
