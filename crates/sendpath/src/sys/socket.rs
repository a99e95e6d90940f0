//! Socket calls: options, `send`, `sendmsg` (with and without `MSG_ZEROCOPY`), the error queue,
//! `recv` and `poll`.

use super::{cvt, SendFlags};
use crate::completion::ZcNotification;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `SO_EE_ORIGIN_ZEROCOPY` from `<linux/errqueue.h>`.
const SO_EE_ORIGIN_ZEROCOPY: u8 = 5;
/// `SO_EE_CODE_ZEROCOPY_COPIED` from `<linux/errqueue.h>`.
const SO_EE_CODE_ZEROCOPY_COPIED: u8 = 1;

/// `setsockopt(fd, level, name, &value, sizeof(int))`: sets an integer socket option.
/// See setsockopt(2), socket(7), tcp(7).
pub(crate) fn set_int_opt(fd: BorrowedFd<'_>, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    cvt(ret).map(drop)
}

/// `shutdown(fd, how)`. See shutdown(2).
pub(crate) fn shutdown(fd: BorrowedFd<'_>, how: std::net::Shutdown) -> io::Result<()> {
    let how = match how {
        std::net::Shutdown::Read => libc::SHUT_RD,
        std::net::Shutdown::Write => libc::SHUT_WR,
        std::net::Shutdown::Both => libc::SHUT_RDWR,
    };
    // SAFETY: a plain call on a borrowed, open descriptor.
    cvt(unsafe { libc::shutdown(fd.as_raw_fd(), how) }).map(drop)
}

/// `setsockopt(fd, SOL_SOCKET, SO_ZEROCOPY, 1)`: allows `MSG_ZEROCOPY` on this socket.
/// See msg_zerocopy.rst in the kernel documentation.
pub(crate) fn enable_zerocopy(fd: BorrowedFd<'_>) -> io::Result<()> {
    set_int_opt(fd, libc::SOL_SOCKET, libc::SO_ZEROCOPY, 1)
}

/// `send(fd, buf, len, flags)`. See send(2). Made through rustix, which issues the system call
/// inline: no libc wrapper (a cancellation point that toggles the thread's cancel state around
/// every call), and one return less to mispredict after the kernel has run (see
/// docs/history/results-log.md, "What 50 ns per send cost at 4 KiB").
#[inline]
pub(crate) fn send(fd: BorrowedFd<'_>, buf: &[u8], flags: SendFlags) -> io::Result<usize> {
    rustix::net::send(fd, buf, flags.rustix()).map_err(io::Error::from)
}

/// `sendmsg(fd, {iov = bufs}, flags)` on a connected socket, through rustix as [`send`]. With
/// `MSG_ZEROCOPY` in `flags` the kernel may keep references to the pages of `bufs` after the
/// call returns; the caller must not reuse them until the matching completion arrives on the
/// error queue ([`recv_zc_notifications`]). See sendmsg(2), msg_zerocopy.rst.
#[inline]
pub(crate) fn sendmsg(fd: BorrowedFd<'_>, bufs: &[&[u8]], flags: SendFlags) -> io::Result<usize> {
    // Most messages have a few fields: their iovecs live on the stack (a send of one field
    // should not pay for clearing 64 of them, or 4).
    if bufs.len() == 1 {
        sendmsg_iov::<1>(fd, bufs, flags)
    } else if bufs.len() <= 4 {
        sendmsg_iov::<4>(fd, bufs, flags)
    } else {
        sendmsg_iov::<64>(fd, bufs, flags)
    }
}

/// [`sendmsg`] with room for `N` iovecs; fields past the `N`th are left for the next call.
#[inline]
fn sendmsg_iov<const N: usize>(
    fd: BorrowedFd<'_>,
    bufs: &[&[u8]],
    flags: SendFlags,
) -> io::Result<usize> {
    let n = bufs.len().min(N);
    let mut iov = [io::IoSlice::new(&[]); N];
    for (slot, b) in iov.iter_mut().zip(bufs) {
        *slot = io::IoSlice::new(b);
    }
    let mut no_control = rustix::net::SendAncillaryBuffer::default();
    rustix::net::sendmsg(fd, &iov[..n], &mut no_control, flags.rustix()).map_err(io::Error::from)
}

/// `sendmmsg(fd, ...)`: each of `bufs` (at most 64 taken) as a datagram of its own, in one
/// system call. Returns how many were sent (the kernel may stop early). See sendmmsg(2).
pub(crate) fn sendmmsg(fd: BorrowedFd<'_>, bufs: &[&[u8]], flags: SendFlags) -> io::Result<usize> {
    let n = bufs.len().min(64);
    let iov: Vec<[io::IoSlice<'_>; 1]> = bufs[..n].iter().map(|b| [io::IoSlice::new(b)]).collect();
    let mut controls: Vec<rustix::net::SendAncillaryBuffer<'_, '_, '_>> =
        (0..n).map(|_| Default::default()).collect();
    let mut msgs: Vec<rustix::net::MMsgHdr<'_>> = iov
        .iter()
        .zip(controls.iter_mut())
        .map(|(v, c)| rustix::net::MMsgHdr::new(v, c))
        .collect();
    rustix::net::sendmmsg(fd, &mut msgs, flags.rustix()).map_err(io::Error::from)
}

/// `recvmsg(fd, MSG_ERRQUEUE | MSG_DONTWAIT)` until the queue is empty: collects the zero-copy
/// completions (`sock_extended_err` with `ee_origin == SO_EE_ORIGIN_ZEROCOPY`) into `out`.
/// Returns how many messages were read. Other error-queue entries (for example ICMP errors on
/// UDP) are returned as `Err` with their errno. See recvmsg(2), msg_zerocopy.rst, ip(7).
pub(crate) fn recv_zc_notifications(
    fd: BorrowedFd<'_>,
    out: &mut Vec<ZcNotification>,
) -> io::Result<usize> {
    let mut n = 0;
    loop {
        // Room for one cmsghdr carrying a sock_extended_err plus its offender address.
        let mut control = [0u64; 16];
        // SAFETY: an all-zero msghdr is a valid header to fill in.
        let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = std::mem::size_of_val(&control) as _;
        // SAFETY: `msg` has no iovec and a control buffer of `msg_controllen` writable bytes.
        let ret = unsafe {
            libc::recvmsg(
                fd.as_raw_fd(),
                &mut msg,
                libc::MSG_ERRQUEUE | libc::MSG_DONTWAIT,
            )
        };
        if ret == -1 {
            let err = io::Error::last_os_error();
            if err.kind() == io::ErrorKind::WouldBlock {
                return Ok(n);
            }
            return Err(err);
        }
        n += 1;
        // SAFETY: `msg` was filled in by recvmsg; CMSG_FIRSTHDR/NXTHDR stay inside
        // `msg_controllen`, and CMSG_DATA of an IP(V6)_RECVERR message holds a
        // sock_extended_err (read unaligned, as the control buffer gives no alignment promise
        // beyond cmsghdr's).
        unsafe {
            let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
            while !cmsg.is_null() {
                let c = &*cmsg;
                let is_recverr = (c.cmsg_level == libc::SOL_IP && c.cmsg_type == libc::IP_RECVERR)
                    || (c.cmsg_level == libc::SOL_IPV6 && c.cmsg_type == libc::IPV6_RECVERR);
                if is_recverr {
                    let ee: libc::sock_extended_err =
                        std::ptr::read_unaligned(libc::CMSG_DATA(cmsg).cast());
                    if ee.ee_origin == SO_EE_ORIGIN_ZEROCOPY && ee.ee_errno == 0 {
                        out.push(ZcNotification {
                            lo: ee.ee_info,
                            hi: ee.ee_data,
                            copied: ee.ee_code & SO_EE_CODE_ZEROCOPY_COPIED != 0,
                        });
                    } else if ee.ee_errno != 0 {
                        return Err(io::Error::from_raw_os_error(ee.ee_errno as i32));
                    }
                }
                cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
            }
        }
    }
}

/// `poll({fd, events}, 1, timeout_ms)`: waits until `fd` is ready for `events` (`POLLIN`,
/// `POLLOUT`, or 0 for only `POLLERR`, which is how the error queue signals). Returns the
/// `revents`, 0 on timeout. See poll(2).
pub(crate) fn poll(fd: BorrowedFd<'_>, events: i16, timeout_ms: i32) -> io::Result<i16> {
    let mut p = libc::pollfd {
        fd: fd.as_raw_fd(),
        events,
        revents: 0,
    };
    loop {
        // SAFETY: one valid pollfd.
        let ret = unsafe { libc::poll(&mut p, 1, timeout_ms) };
        match cvt(ret) {
            Ok(0) => return Ok(0),
            Ok(_) => return Ok(p.revents),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
}

/// `getsockopt(fd, level, name)` into a `T` (a plain C struct or array that any bytes are a
/// valid value of); the bytes the kernel did not write stay zero. See getsockopt(2).
fn get_opt<T: Copy>(fd: BorrowedFd<'_>, level: i32, name: i32) -> io::Result<T> {
    // SAFETY: `T` is only instantiated below with C structs and integer arrays, for which the
    // all-zero value is valid; the kernel writes at most `len` bytes into it.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a live value of `len` bytes, and `len` a live socklen_t.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut T).cast(),
            &mut len,
        )
    };
    cvt(ret).map(|_| v)
}

/// Whether the socket carries datagrams (`SO_TYPE` is `SOCK_DGRAM`): each send is a message
/// of its own, so no send waits on the one before it. See socket(7).
pub(crate) fn is_datagram(fd: BorrowedFd<'_>) -> bool {
    get_opt::<i32>(fd, libc::SOL_SOCKET, libc::SO_TYPE).is_ok_and(|t| t == libc::SOCK_DGRAM)
}
