//! The system calls `bare` makes, as thin as they come: the only `unsafe` of the example,
//! each block with why it holds.

use super::Tally;
use io_uring::{cqueue, opcode, types, IoUring};
use std::io;
use std::net::UdpSocket;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::time::Instant;

fn cvt(r: isize) -> io::Result<usize> {
    if r < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(r as usize)
    }
}

pub(super) fn setns(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: setns on an open namespace file affects only this thread.
    cvt(unsafe { libc::setns(fd.as_raw_fd(), libc::CLONE_NEWNET) } as isize).map(drop)
}

pub(super) fn pin(cpu: usize) -> io::Result<()> {
    // SAFETY: an all-zero cpu_set_t is empty; CPU_SET writes inside it; the call reads
    // `size_of` bytes of it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_SET(cpu, &mut set);
        cvt(libc::sched_setaffinity(0, std::mem::size_of_val(&set), &set) as isize).map(drop)
    }
}

pub(super) fn setsockopt(s: &UdpSocket, level: i32, name: i32, v: i32) -> Result<(), String> {
    // SAFETY: `v` is a live c_int and the length passed is its size.
    let r = unsafe { libc::setsockopt(s.as_raw_fd(), level, name, (&v as *const i32).cast(), 4) };
    cvt(r as isize)
        .map(drop)
        .map_err(|e| format!("setsockopt({level}, {name}): {e}"))
}

/// `send()` until `until`.
pub(super) fn copy(s: &UdpSocket, buf: &[u8], until: Instant) -> io::Result<Tally> {
    let mut t = Tally::default();
    while Instant::now() < until {
        for _ in 0..64 {
            // SAFETY: `buf` is live for the call.
            cvt(unsafe { libc::send(s.as_raw_fd(), buf.as_ptr().cast(), buf.len(), 0) })?;
            t.sends += 1;
        }
    }
    Ok(t)
}

/// `sendmsg(MSG_ZEROCOPY)` until `until`, reading the error queue every `every` sends.
pub(super) fn msg_zerocopy(
    s: &UdpSocket,
    buf: &[u8],
    until: Instant,
    every: usize,
) -> io::Result<Tally> {
    let one: i32 = 1;
    // SAFETY: `one` is a live c_int and the length passed is its size.
    let r = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_ZEROCOPY,
            (&one as *const i32).cast(),
            4,
        )
    };
    cvt(r as isize)?;
    let mut iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut _,
        iov_len: buf.len(),
    };
    // SAFETY: an all-zero msghdr is valid; it points at one iovec over `buf`, live below.
    let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    let mut t = Tally::default();
    while Instant::now() < until || t.completions < t.sends {
        if Instant::now() < until {
            for _ in 0..every {
                // SAFETY: `msg` and what it points at are live for the call.
                cvt(unsafe { libc::sendmsg(s.as_raw_fd(), &msg, libc::MSG_ZEROCOPY) })?;
                t.sends += 1;
            }
        }
        reap(s, &mut t)?;
    }
    Ok(t)
}

/// Reads the error queue until it is empty, counting the ids its ranges cover.
fn reap(s: &UdpSocket, t: &mut Tally) -> io::Result<()> {
    loop {
        let mut control = [0u64; 16];
        // SAFETY: an all-zero msghdr is valid; the control buffer is live and its size given.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` has no iovec and a writable control buffer.
        let r = unsafe {
            libc::recvmsg(
                s.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if r < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::WouldBlock {
                Ok(())
            } else {
                Err(e)
            };
        }
        // SAFETY: recvmsg filled `msg`; the first cmsg carries a sock_extended_err.
        unsafe {
            let c = libc::CMSG_FIRSTHDR(&msg);
            if !c.is_null() {
                let ee: libc::sock_extended_err =
                    std::ptr::read_unaligned(libc::CMSG_DATA(c).cast());
                let n = u64::from(ee.ee_data.wrapping_sub(ee.ee_info)) + 1;
                t.completions += n;
                if ee.ee_code & 1 != 0 {
                    t.copied += n;
                }
            }
        }
    }
}

/// `SEND` (or `SEND_ZC`) with `depth` requests in flight until `until`, then drains.
pub(super) fn uring(
    s: &UdpSocket,
    buf: &[u8],
    until: Instant,
    depth: usize,
    zc: bool,
    fixed: bool,
) -> io::Result<Tally> {
    // As sendpath's rings: one submitting thread, completions' task work run when it
    // waits (SINGLE_ISSUER | DEFER_TASKRUN); SENDPATH_URING_SETUP=coop for COOP_TASKRUN.
    let mut b = IoUring::builder();
    match std::env::var("SENDPATH_URING_SETUP").as_deref() {
        Ok("coop") => b.setup_coop_taskrun().setup_taskrun_flag(),
        _ => b
            .setup_single_issuer()
            .setup_defer_taskrun()
            .setup_taskrun_flag(),
    };
    let mut ring: IoUring = b.build((2 * depth).next_power_of_two() as u32)?;
    if fixed {
        let iov = libc::iovec {
            iov_base: buf.as_ptr() as *mut _,
            iov_len: buf.len(),
        };
        // SAFETY: `buf` outlives the ring (both live until this function returns, the ring
        // dropped first as it was declared later).
        unsafe { ring.submitter().register_buffers(&[iov])? };
    }
    let fd = types::Fd(s.as_raw_fd());
    let entry = if zc {
        opcode::SendZc::new(fd, buf.as_ptr(), buf.len() as u32)
            .zc_flags(1 << 3) // IORING_SEND_ZC_REPORT_USAGE
            .buf_index(fixed.then_some(0))
            .build()
    } else {
        opcode::Send::new(fd, buf.as_ptr(), buf.len() as u32).build()
    };
    let (mut t, mut inflight, mut notifs) = (Tally::default(), 0usize, 0u64);
    loop {
        let sending = Instant::now() < until;
        while sending && inflight < depth {
            // SAFETY: the SQE points at `buf`, which outlives every request (we drain all
            // of them, notifications included, before returning).
            unsafe {
                ring.submission()
                    .push(&entry)
                    .expect("room for depth entries")
            };
            inflight += 1;
            t.sends += 1;
        }
        if !sending && inflight == 0 && notifs == 0 {
            return Ok(t);
        }
        // With DEFER_TASKRUN, completions are posted only when this thread waits.
        ring.submitter()
            .submit_with_args(1, &types::SubmitArgs::new())?;
        for c in ring.completion() {
            let f = c.flags();
            if cqueue::notif(f) {
                notifs -= 1;
                t.completions += 1;
                if c.result() as u32 & (1 << 31) != 0 {
                    t.copied += 1;
                }
                continue;
            }
            if c.result() < 0 {
                return Err(io::Error::from_raw_os_error(-c.result()));
            }
            inflight -= 1;
            if cqueue::more(f) {
                notifs += 1;
            }
        }
    }
}
