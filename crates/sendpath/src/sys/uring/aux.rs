//! Requests that are not sends: multishot accept and receive (into the ring's provided
//! buffers), splice between a file, a pipe and a socket, and cancellation.

use super::slots::bump;
use super::{SendRing, AUX};
use crate::sys::bufring::RecvBufs;
use io_uring::{cqueue, opcode, squeue, types};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::time::{Duration, Instant};

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
    pub(super) fn code(self) -> u64 {
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

impl SendRing {
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

    pub(super) fn reap_aux(&mut self, data: u64, res: i32, flags: u32) {
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

    /// Whether accept or receive completions were reaped since the last
    /// [`SendRing::take_aux`].
    pub(crate) fn has_aux(&self) -> bool {
        !self.aux.is_empty()
    }

    /// Cancels every request still in the kernel (`IORING_OP_ASYNC_CANCEL` with
    /// `IORING_ASYNC_CANCEL_ANY`) and waits at most `grace` for their last completions. Returns
    /// how many buffers the kernel still holds then: they are never freed (see `Drop`).
    pub(crate) fn shut_down(&mut self, grace: Duration) -> usize {
        if self.aux_pending == 0 && self.in_kernel() == 0 {
            return 0;
        }
        let e = opcode::AsyncCancel2::new(types::CancelBuilder::any())
            .build()
            .user_data(AUX | (AuxOp::Cancel.code() << 32));
        // SAFETY: a cancel request points at no memory.
        if unsafe { self.ring.submission().push(&e) }.is_ok() {
            self.aux_pending += 1;
        }
        let deadline = Instant::now() + grace;
        let mut sink = Vec::new();
        while (self.aux_pending > 0 || self.in_kernel() > 0) && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            if self.wait_for(left.min(Duration::from_millis(10))).is_err() {
                break;
            }
            self.reap(&mut sink);
            self.aux.clear();
        }
        self.mark_lane_slots();
        (0..self.slots.len() as u32)
            .filter(|&slot| self.in_use(slot))
            .count()
    }
}
