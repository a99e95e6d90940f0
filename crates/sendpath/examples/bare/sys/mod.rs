//! The system calls `bare` makes, as thin as they come: the only `unsafe` of the example,
//! each block with why it holds.
#![allow(unsafe_code)]

use super::pool::Pool;
use super::Tally;
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Instant;

pub(super) mod file;
pub(super) mod uring;

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

pub(super) fn setsockopt(fd: RawFd, level: i32, name: i32, v: i32) -> Result<(), String> {
    // SAFETY: `v` is a live c_int and the length passed is its size.
    let r = unsafe { libc::setsockopt(fd, level, name, (&v as *const i32).cast(), 4) };
    cvt(r as isize)
        .map(drop)
        .map_err(|e| format!("setsockopt({level}, {name}): {e}"))
}

/// `setsockopt(TCP_CONGESTION, name)`: the connection's congestion control.
pub(super) fn set_congestion(fd: RawFd, name: &str) -> Result<(), String> {
    // SAFETY: `name` is live for the call and the length passed is its length.
    let r = unsafe {
        libc::setsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_CONGESTION,
            name.as_ptr().cast(),
            name.len() as libc::socklen_t,
        )
    };
    cvt(r as isize).map(drop).map_err(|e| {
        format!("--congestion {name}: {e} (see net.ipv4.tcp_available_congestion_control)")
    })
}

/// `recv(MSG_TRUNC)` of `read` bytes at a time until the end of the stream: the bytes are
/// dropped in the kernel, never copied out. Returns how many were read.
pub(super) fn discard(fd: RawFd, read: usize) -> io::Result<u64> {
    let mut total = 0u64;
    loop {
        // SAFETY: with MSG_TRUNC on TCP the kernel writes nothing; a null buffer is allowed.
        let r = unsafe { libc::recv(fd, std::ptr::null_mut(), read, libc::MSG_TRUNC) };
        match cvt(r) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
}

/// `read()` of `read` bytes at a time until the end of the stream, every byte checked to be
/// `byte` when one is given; how many were read, or an error naming the first wrong byte's
/// offset.
pub(super) fn read_out(fd: RawFd, read: usize, byte: Option<u8>) -> io::Result<u64> {
    let mut buf = vec![0u8; read.max(1)];
    let mut total = 0u64;
    loop {
        match rustix::io::read(sock(fd), &mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => {
                let wrong = byte.and_then(|x| buf[..n].iter().position(|&b| b != x));
                if let Some(i) = wrong {
                    return Err(io::Error::other(format!(
                        "byte {} of the stream is {:#04x} where {:#04x} was expected",
                        total + i as u64,
                        buf[i],
                        byte.unwrap_or_default()
                    )));
                }
                total += n as u64;
            }
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
}

/// The socket `fd` names, borrowed for one call.
fn sock<'a>(fd: RawFd) -> BorrowedFd<'a> {
    // SAFETY: every `fd` here is a socket its caller keeps open (bare's connection) for as
    // long as the call using the borrow.
    unsafe { BorrowedFd::borrow_raw(fd) }
}

/// `send()` of all of `buf`, resent from where a short send stopped. Through rustix, as the
/// library sends: the system call inline, no libc wrapper.
pub(super) fn send_all(fd: RawFd, buf: &[u8], flags: u32) -> io::Result<()> {
    let flags = rustix::net::SendFlags::from_bits_retain(flags);
    let mut off = 0;
    while off < buf.len() {
        match rustix::net::send(sock(fd), &buf[off..], flags) {
            Ok(n) => off += n,
            Err(rustix::io::Errno::INTR) => {}
            Err(e) => return Err(e.into()),
        }
    }
    Ok(())
}

/// `send()` of all of `buf` through libc, as the library's `mmap-send` sends from its mapping
/// (a pointer, no Rust slice over pages a shrinking file could take away).
pub(super) fn send_all_libc(fd: RawFd, buf: &[u8], flags: i32) -> io::Result<()> {
    let mut off = 0;
    while off < buf.len() {
        // SAFETY: `buf[off..]` is live for the call.
        let r = unsafe { libc::send(fd, buf[off..].as_ptr().cast(), buf.len() - off, flags) };
        match cvt(r) {
            Ok(n) => off += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// `sendmsg()` of one iovec over `buf` with `flags`, through rustix as [`send_all`].
fn sendmsg1(fd: RawFd, buf: &[u8], flags: u32) -> io::Result<usize> {
    let flags = rustix::net::SendFlags::from_bits_retain(flags);
    let mut no_control = rustix::net::SendAncillaryBuffer::default();
    Ok(rustix::net::sendmsg(
        sock(fd),
        &[io::IoSlice::new(buf)],
        &mut no_control,
        flags,
    )?)
}

/// `send()` until `until`, from `bufs` in turn; `stage` first copies each into another, as
/// `serialize` does.
pub(super) fn copy(fd: RawFd, bufs: &[&[u8]], until: Instant, stage: bool) -> io::Result<Tally> {
    let mut t = Tally::default();
    let mut staging = Vec::with_capacity(bufs[0].len());
    let mut i = 0;
    while Instant::now() < until {
        for _ in 0..64 {
            let buf = bufs[i];
            i = if i + 1 == bufs.len() { 0 } else { i + 1 };
            if stage {
                staging.clear();
                staging.extend_from_slice(buf);
                send_all(fd, &staging, 0)?;
            } else {
                send_all(fd, buf, 0)?;
            }
            t.sends += 1;
            t.bytes += buf.len() as u64;
        }
    }
    Ok(t)
}

/// `sendmsg()` of one iovec until `until`, as `gather` does with one field, from `bufs` in
/// turn.
pub(super) fn gather(fd: RawFd, bufs: &[&[u8]], until: Instant) -> io::Result<Tally> {
    let mut t = Tally::default();
    let mut i = 0;
    while Instant::now() < until {
        for _ in 0..64 {
            let buf = bufs[i];
            i = if i + 1 == bufs.len() { 0 } else { i + 1 };
            let mut off = 0;
            while off < buf.len() {
                off += sendmsg1(fd, &buf[off..], 0)?;
            }
            t.sends += 1;
            t.bytes += buf.len() as u64;
        }
    }
    Ok(t)
}

/// `sendmsg(MSG_ZEROCOPY)` until `until`, reading the error queue every `every` sends (and
/// waiting on it when the pool has no free buffer). `next_id` is the socket's next zero-copy
/// send id (the kernel counts them per socket, across calls).
pub(super) fn msg_zerocopy(
    fd: RawFd,
    pool: &mut Pool,
    until: Instant,
    every: usize,
    next_id: &mut u32,
) -> io::Result<Tally> {
    let one: i32 = 1;
    setsockopt(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, one).map_err(io::Error::other)?;
    let mut held: VecDeque<(u32, usize)> = VecDeque::new();
    let mut t = Tally::default();
    loop {
        // The clock is read once per `every` sends, as the other loops read it per 64.
        let sending = Instant::now() < until;
        if !sending && t.completions >= t.sends {
            break;
        }
        for _ in 0..if sending { every } else { 0 } {
            let Some(i) = pool.take() else {
                poll_errqueue(fd)?;
                break;
            };
            let buf = pool.buf(i);
            // The pages stay untouched until their notification (or are never rewritten
            // without `--pool`).
            let n = sendmsg1(fd, buf, libc::MSG_ZEROCOPY as u32)?;
            if n < buf.len() {
                // The rest by copy: a short zero-copy send is rare (a signal).
                send_all(fd, &buf[n..], 0)?;
            }
            held.push_back((*next_id, i));
            *next_id = next_id.wrapping_add(1);
            t.sends += 1;
            t.bytes += buf.len() as u64;
        }
        if !sending && t.completions < t.sends {
            poll_errqueue(fd)?;
        }
        reap(fd, &mut t, &mut |lo, hi| release(&mut held, pool, lo, hi))?;
    }
    Ok(t)
}

/// Gives back the buffers of sends `lo..=hi`.
fn release(held: &mut VecDeque<(u32, usize)>, pool: &mut Pool, lo: u32, hi: u32) {
    let done = |id: u32| id.wrapping_sub(lo) <= hi.wrapping_sub(lo);
    while let Some(&(id, i)) = held.front().filter(|(id, _)| done(*id)) {
        let _ = id;
        pool.put(i);
        held.pop_front();
    }
    // Out of order (rare): the rest of the range, wherever it is.
    held.retain(|&(id, i)| {
        let keep = !done(id);
        if !keep {
            pool.put(i);
        }
        keep
    });
}

/// Waits up to 10 ms for the error queue to hold a notification.
fn poll_errqueue(fd: RawFd) -> io::Result<()> {
    let mut p = libc::pollfd {
        fd,
        events: 0,
        revents: 0,
    };
    // SAFETY: one live pollfd.
    cvt(unsafe { libc::poll(&mut p, 1, 10) } as isize).map(drop)
}

/// Reads the error queue until it is empty, counting the ids its ranges cover.
fn reap(fd: RawFd, t: &mut Tally, on_range: &mut dyn FnMut(u32, u32)) -> io::Result<()> {
    loop {
        let mut control = [0u64; 16];
        // SAFETY: an all-zero msghdr is valid; the control buffer is live and its size given.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` has no iovec and a writable control buffer.
        let r = unsafe { libc::recvmsg(fd, &mut msg, libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT) };
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
                on_range(ee.ee_info, ee.ee_data);
                let n = u64::from(ee.ee_data.wrapping_sub(ee.ee_info)) + 1;
                t.completions += n;
                if ee.ee_code & 1 != 0 {
                    t.copied += n;
                }
            }
        }
    }
}
