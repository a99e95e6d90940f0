//! An io_uring used for socket sends. The ring owns every buffer it has been handed until the
//! kernel has posted the last completion that refers to it (the result CQE, and for SEND_ZC the
//! notification CQE when the result carried `IORING_CQE_F_MORE`), so the `unsafe` contract of
//! pushing an SQE that points at user memory is kept here and nowhere else.

use crate::buffer::Buf;
use io_uring::{cqueue, opcode, squeue, types, IoUring, Probe};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::{Duration, Instant};

/// `IORING_SEND_ZC_REPORT_USAGE` from `<linux/io_uring.h>` (kernel 6.2).
pub const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_NOTIF_USAGE_ZC_COPIED` from `<linux/io_uring.h>`: set in a notification's `res` when
/// the kernel copied the data after all.
pub const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

/// Which send opcode an SQE uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Op {
    /// `IORING_OP_SEND` with `MSG_WAITALL`.
    Send,
    /// `IORING_OP_SEND_ZC` with `MSG_WAITALL`, optionally asking for usage reporting.
    SendZc {
        /// Set `IORING_SEND_ZC_REPORT_USAGE`.
        report_usage: bool,
    },
}

/// Which of the send-related opcodes this kernel's io_uring supports (`IORING_REGISTER_PROBE`).
#[derive(Debug, Clone, Copy, Default)]
pub struct OpSupport {
    /// `IORING_OP_SEND`.
    pub send: bool,
    /// `IORING_OP_SEND_ZC`.
    pub send_zc: bool,
    /// `IORING_OP_SENDMSG_ZC`.
    pub sendmsg_zc: bool,
    /// `IORING_OP_SPLICE`.
    pub splice: bool,
}

/// One completion, decoded.
#[derive(Debug)]
pub struct Cqe {
    /// The ring slot (one per buffer handed in).
    pub slot: u32,
    /// The request this completion belongs to (as returned by [`SendRing::push_slot`]); a
    /// buffer can carry several requests (a short send's remainder is a new one).
    pub req: u64,
    /// `true` for a SEND_ZC notification (`IORING_CQE_F_NOTIF`), `false` for a request result.
    pub notif: bool,
    /// The CQE's `res`: bytes sent or `-errno` for a result; usage bits for a notification.
    pub res: i32,
    /// `IORING_CQE_F_MORE` on a result: a notification will follow.
    pub more: bool,
    /// Nanoseconds since the slot's first SQE was pushed.
    pub age_ns: u64,
    /// The buffer, when this was the last completion that referred to it.
    pub released: Option<Buf>,
}

struct Slot {
    buf: Buf,
    /// Completions still expected for this slot.
    pending: u32,
    pushed_at: Instant,
}

/// A ring plus the buffers its in-flight sends point at.
pub struct SendRing {
    ring: IoUring,
    slots: Vec<Option<Slot>>,
    free: Vec<u32>,
    /// Registered-buffer table: (address, length) per index, when one was registered.
    fixed: Option<Vec<(usize, usize)>>,
    /// Requests pushed so far: the high half of each request id.
    requests: u32,
}

impl SendRing {
    /// `io_uring_setup(sq_entries, {cq_entries})`. See io_uring_setup(2).
    pub fn new(sq_entries: u32, cq_entries: u32) -> io::Result<SendRing> {
        let sq = sq_entries.next_power_of_two().max(8);
        let cq = cq_entries.next_power_of_two().max(2 * sq);
        Ok(SendRing {
            ring: IoUring::builder().setup_cqsize(cq).build(sq)?,
            slots: Vec::new(),
            free: Vec::new(),
            fixed: None,
            requests: 0,
        })
    }

    /// `io_uring_register(IORING_REGISTER_PROBE)`: which send opcodes exist here.
    /// See io_uring_register(2).
    pub fn probe(&self) -> io::Result<OpSupport> {
        let mut p = Probe::new();
        self.ring.submitter().register_probe(&mut p)?;
        Ok(OpSupport {
            send: p.is_supported(opcode::Send::CODE),
            send_zc: p.is_supported(opcode::SendZc::CODE),
            sendmsg_zc: p.is_supported(opcode::SendMsgZc::CODE),
            splice: p.is_supported(opcode::Splice::CODE),
        })
    }

    /// `io_uring_register(IORING_REGISTER_BUFFERS2)` with a sparse table of `n` entries, to be
    /// filled by [`SendRing::register_buf`].
    pub fn enable_fixed_buffers(&mut self, n: u32) -> io::Result<()> {
        self.ring.submitter().register_buffers_sparse(n)?;
        self.fixed = Some(vec![(0, 0); n as usize]);
        Ok(())
    }

    /// `io_uring_register(IORING_REGISTER_BUFFERS_UPDATE)`: puts `buf` in the registered table
    /// (pinning its pages) unless it is already there. Returns `false` when the table is full or
    /// fixed buffers are off; the buffer is then sent unregistered.
    pub fn register_buf(&mut self, buf: &mut Buf) -> io::Result<bool> {
        let Some(table) = self.fixed.as_mut() else {
            return Ok(false);
        };
        let key = (buf.as_slice().as_ptr() as usize, buf.capacity());
        if let Some(i) = buf.fixed {
            if table.get(i as usize) == Some(&key) {
                return Ok(true);
            }
        }
        let Some(i) = table.iter().position(|e| e.0 == 0) else {
            return Ok(false);
        };
        let iov = libc::iovec {
            iov_base: key.0 as *mut libc::c_void,
            iov_len: key.1,
        };
        // SAFETY: the iovec describes the live allocation of `buf`. The kernel pins its pages
        // and only ever reads them (sendpath issues no *_FIXED read ops), so even if the Buf is
        // later dropped the kernel keeps its own page references and no Rust memory is written.
        // Stale entries are detected by address and length before use (see above).
        unsafe {
            self.ring
                .submitter()
                .register_buffers_update(i as u32, &[iov], None)?
        };
        table[i] = key;
        buf.fixed = Some(i as u16);
        Ok(true)
    }

    /// Hands `buf` to the ring and queues one send of `buf[range]` on `fd`. With `link`, the
    /// next SQE pushed runs only after this one completes in full (`IOSQE_IO_LINK`); a chain is
    /// how sends on one stream socket keep their order. Returns the slot and the request id.
    pub fn push(
        &mut self,
        fd: BorrowedFd<'_>,
        buf: Buf,
        range: std::ops::Range<usize>,
        op: Op,
        link: bool,
    ) -> io::Result<(u32, u64)> {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                (self.slots.len() - 1) as u32
            }
        };
        self.slots[slot as usize] = Some(Slot {
            buf,
            pending: 0,
            pushed_at: Instant::now(),
        });
        let req = self.push_slot(fd, slot, range, op, link)?;
        Ok((slot, req))
    }

    /// Queues another send from a buffer the ring already holds (the rest of a short send, or
    /// a retry after `ECANCELED`/`ENOMEM`). Returns the request id, which the completions of
    /// this request carry in [`Cqe::req`].
    pub fn push_slot(
        &mut self,
        fd: BorrowedFd<'_>,
        slot: u32,
        range: std::ops::Range<usize>,
        op: Op,
        link: bool,
    ) -> io::Result<u64> {
        let s = self.slots[slot as usize]
            .as_mut()
            .expect("push_slot on a live slot");
        let bytes = &s.buf.as_slice()[range];
        let fixed = s.buf.fixed.filter(|i| {
            self.fixed
                .as_ref()
                .and_then(|t| t.get(*i as usize))
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
        self.requests = self.requests.wrapping_add(1);
        let req = (u64::from(self.requests) << 32) | u64::from(slot);
        let entry = entry.user_data(req);
        let entry = if link {
            entry.flags(squeue::Flags::IO_LINK)
        } else {
            entry
        };
        s.pending += 1;
        loop {
            // SAFETY: the SQE points at `bytes`, inside the buffer held in `self.slots[slot]`.
            // That buffer is only moved out (released) once `pending` drops to zero, which
            // happens only after the kernel has posted every CQE for the slot, i.e. after it
            // stopped reading the memory. Moving the `Buf` value does not move its heap bytes.
            let pushed = unsafe { self.ring.submission().push(&entry) };
            if pushed.is_ok() {
                return Ok(req);
            }
            self.ring.submit()?;
        }
    }

    /// `io_uring_enter(to_submit, min_complete = want, IORING_ENTER_GETEVENTS)`.
    pub fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        loop {
            match self.ring.submit_and_wait(want) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// `io_uring_enter(to_submit)` without waiting.
    pub fn submit(&mut self) -> io::Result<usize> {
        self.ring.submit()
    }

    /// Moves every available completion into `out`, releasing buffers whose last completion
    /// has arrived.
    pub fn reap(&mut self, out: &mut Vec<Cqe>) {
        let now = Instant::now();
        for cqe in self.ring.completion() {
            let req = cqe.user_data();
            let slot = req as u32;
            let flags = cqe.flags();
            let notif = cqueue::notif(flags);
            let more = !notif && cqueue::more(flags);
            let Some(s) = self.slots.get_mut(slot as usize).and_then(|s| s.as_mut()) else {
                continue;
            };
            s.pending -= 1;
            if more {
                s.pending += 1;
            }
            let age_ns = now.duration_since(s.pushed_at).as_nanos() as u64;
            let released = if s.pending == 0 {
                self.free.push(slot);
                self.slots[slot as usize].take().map(|s| s.buf)
            } else {
                None
            };
            out.push(Cqe {
                slot,
                req,
                notif,
                res: cqe.result(),
                more,
                age_ns,
                released,
            });
        }
    }

    /// Number of buffers the ring still holds.
    pub fn held(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    /// Bytes of the buffer in `slot` (for resending part of it).
    pub fn slot_len(&self, slot: u32) -> usize {
        self.slots[slot as usize]
            .as_ref()
            .map_or(0, |s| s.buf.len())
    }

    /// Waits up to `timeout` for every held buffer to be released, moving completions into
    /// `out`. Returns how many buffers are still held afterwards.
    pub fn drain(&mut self, timeout: Duration, out: &mut Vec<Cqe>) -> usize {
        let deadline = Instant::now() + timeout;
        while self.held() > 0 && Instant::now() < deadline {
            let ts = types::Timespec::from(Duration::from_millis(10));
            let args = types::SubmitArgs::new().timespec(&ts);
            match self.ring.submitter().submit_with_args(1, &args) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ETIME) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(_) => break,
            }
            self.reap(out);
        }
        self.held()
    }
}

impl Drop for SendRing {
    fn drop(&mut self) {
        let mut sink = Vec::new();
        if self.drain(Duration::from_secs(2), &mut sink) > 0 {
            // The kernel may still read these buffers; never free memory it may read.
            for s in self.slots.drain(..).flatten() {
                std::mem::forget(s.buf);
            }
        }
    }
}
