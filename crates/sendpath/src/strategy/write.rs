//! The system calls of the copying and MSG_ZEROCOPY paths, each until every byte of a message
//! is on the socket: one `send()` or `sendmsg()` inline (what almost always sends it all), the
//! loop of a short or interrupted send out of line, every short send counted.

use crate::sys::{self, SendFlags};
use crate::{Error, Result, SendStats};
use std::io;
use std::os::fd::BorrowedFd;

/// `send()` until every byte of `buf` is on the socket.
#[inline]
pub(super) fn send_all(fd: BorrowedFd<'_>, mut buf: &[u8], stats: &mut SendStats) -> Result<()> {
    while !buf.is_empty() {
        match sys::socket::send(fd, buf, SendFlags::NOSIGNAL) {
            Ok(n) => {
                stats.calls += 1;
                if n < buf.len() {
                    stats.short_sends += 1;
                }
                buf = &buf[n..];
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(Error::sys("send")(e)),
        }
    }
    Ok(())
}

/// [`send_all`] of one whole message, counted as a send of its bytes. One `send()` sends it
/// all, almost always; the loop of a short or interrupted send is out of line
/// ([`send_rest`]), so the common case is the system call and two adds.
#[inline(always)]
pub(super) fn send_counted(fd: BorrowedFd<'_>, buf: &[u8], stats: &mut SendStats) -> Result<()> {
    match sys::socket::send(fd, buf, SendFlags::NOSIGNAL) {
        Ok(n) if n == buf.len() => stats.calls += 1,
        first => send_rest(fd, buf, first, stats)?,
    }
    stats.sends += 1;
    stats.bytes += buf.len() as u64;
    Ok(())
}

/// Finishes sending `buf` after a first `send()` that returned `first` without sending it all.
#[cold]
#[inline(never)]
pub(super) fn send_rest(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    first: io::Result<usize>,
    stats: &mut SendStats,
) -> Result<()> {
    match first {
        Ok(n) => {
            stats.calls += 1;
            stats.short_sends += 1;
            send_all(fd, &buf[n..], stats)
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => send_all(fd, buf, stats),
        Err(e) => Err(Error::sys("send")(e)),
    }
}

/// One `sendmsg()` of one buffer (as `gather` sends a one-field message) until every byte is
/// on the socket, counted as a send of its bytes ([`sendmsg_one`]).
#[inline(always)]
pub(super) fn sendmsg_counted(fd: BorrowedFd<'_>, buf: &[u8], stats: &mut SendStats) -> Result<()> {
    let (_, sent) = sendmsg_one(fd, buf, SendFlags::default(), stats);
    sent.map_err(Error::sys("sendmsg"))?;
    stats.sends += 1;
    stats.bytes += buf.len() as u64;
    Ok(())
}

/// [`sendmsg_all`] of one buffer: one `sendmsg()` inline, which almost always sends it all;
/// a short or interrupted send goes on out of line ([`sendmsg_one_rest`]), with the same
/// count of calls and the same `ENOBUFS` rule.
#[inline(always)]
pub(super) fn sendmsg_one(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    flags: SendFlags,
    stats: &mut SendStats,
) -> (u32, io::Result<()>) {
    if buf.is_empty() {
        // No call, as `sendmsg_all` makes none: an empty zero-copy send would take no id.
        return (0, Ok(()));
    }
    match sys::socket::sendmsg(fd, &[buf], flags | SendFlags::NOSIGNAL) {
        Ok(n) if n == buf.len() => {
            stats.calls += 1;
            (1, Ok(()))
        }
        first => sendmsg_one_rest(fd, buf, flags, first, stats),
    }
}

/// Finishes a one-buffer [`sendmsg_one`] whose first call returned `first` without sending it
/// all.
#[cold]
#[inline(never)]
pub(super) fn sendmsg_one_rest(
    fd: BorrowedFd<'_>,
    buf: &[u8],
    flags: SendFlags,
    first: io::Result<usize>,
    stats: &mut SendStats,
) -> (u32, io::Result<()>) {
    match first {
        Ok(n) => {
            stats.calls += 1;
            stats.short_sends += 1;
            sendmsg_from(fd, &[buf], flags, stats, n, 1)
        }
        Err(e) if e.kind() == io::ErrorKind::Interrupted => sendmsg_all(fd, &[buf], flags, stats),
        Err(e) => (0, Err(e)),
    }
}

/// `sendmsg()` with `flags` until every byte of `bufs` is on the socket. Returns the number of
/// calls that sent something (each `MSG_ZEROCOPY` call that does consumes one completion id)
/// together with the outcome: on an error the count still says how many ids the message
/// consumed, so the caller can hold its buffers until they are reported. An `ENOBUFS` after part
/// of the message went zero-copy finishes the message by copy, counted as an `enobufs` fallback;
/// before any byte went, it is returned to the caller to decide.
#[inline]
pub(super) fn sendmsg_all(
    fd: BorrowedFd<'_>,
    bufs: &[&[u8]],
    flags: SendFlags,
    stats: &mut SendStats,
) -> (u32, io::Result<()>) {
    sendmsg_from(fd, bufs, flags, stats, 0, 0)
}

/// [`sendmsg_all`] after `calls` calls have sent the first `done` bytes of `bufs`.
pub(super) fn sendmsg_from(
    fd: BorrowedFd<'_>,
    bufs: &[&[u8]],
    flags: SendFlags,
    stats: &mut SendStats,
    mut done: usize,
    mut calls: u32,
) -> (u32, io::Result<()>) {
    let total: usize = bufs.iter().map(|b| b.len()).sum();
    let mut scratch: Vec<&[u8]> = Vec::new();
    while done < total {
        // The first call sends the fields as given; only what a short send left is gathered.
        let parts: &[&[u8]] = if done == 0 {
            bufs
        } else {
            scratch.clear();
            scratch.extend(rest(bufs, done));
            &scratch
        };
        match sys::socket::sendmsg(fd, parts, flags | SendFlags::NOSIGNAL) {
            Ok(n) => {
                done += n;
                calls += 1;
                stats.calls += 1;
                if done < total {
                    stats.short_sends += 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if calls > 0 && e.raw_os_error() == Some(libc::ENOBUFS) => {
                stats.zerocopy.fallbacks.enobufs += 1;
                let left: Vec<&[u8]> = rest(bufs, done).collect();
                return (calls, sendmsg_all(fd, &left, SendFlags::default(), stats).1);
            }
            Err(e) => return (calls, Err(e)),
        }
    }
    (calls, Ok(()))
}

/// The parts of `bufs` after the first `skip` bytes.
pub(super) fn rest<'a, 'b>(
    bufs: &'b [&'a [u8]],
    mut skip: usize,
) -> impl Iterator<Item = &'a [u8]> + use<'a, 'b> {
    bufs.iter().filter_map(move |b| {
        if skip >= b.len() {
            skip -= b.len();
            None
        } else {
            let part = &b[skip..];
            skip = 0;
            Some(part)
        }
    })
}
