//! File and pipe calls: `sendfile`, `splice`, `vmsplice`, `pipe2`, `F_SETPIPE_SZ`,
//! `posix_fadvise`.

use super::{cvt, cvt_size, SpliceFlags};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

/// `sendfile(out_fd, in_fd, &offset, count)`: moves up to `count` bytes of the file at `offset`
/// to the socket without a copy through user space; advances `offset`. See sendfile(2).
#[inline]
pub(crate) fn sendfile(
    out: BorrowedFd<'_>,
    input: BorrowedFd<'_>,
    offset: &mut u64,
    count: usize,
) -> io::Result<usize> {
    let mut off = *offset as libc::off_t;
    // SAFETY: `off` is a live local the kernel reads and updates.
    let n =
        cvt_size(unsafe { libc::sendfile(out.as_raw_fd(), input.as_raw_fd(), &mut off, count) })?;
    *offset = off as u64;
    Ok(n)
}

/// `splice(fd_in, off_in, fd_out, NULL, len, flags)`: moves up to `len` bytes between a pipe and
/// a file or socket. With `off_in` the input is read at that offset, which is advanced.
/// See splice(2).
pub(crate) fn splice(
    input: BorrowedFd<'_>,
    off_in: Option<&mut u64>,
    out: BorrowedFd<'_>,
    len: usize,
    flags: SpliceFlags,
) -> io::Result<usize> {
    let mut off = off_in.as_ref().map(|o| **o as libc::loff_t).unwrap_or(0);
    let off_ptr = if off_in.is_some() {
        &mut off as *mut libc::loff_t
    } else {
        std::ptr::null_mut()
    };
    // SAFETY: `off_ptr` is null or points at the live local `off`.
    let n = cvt_size(unsafe {
        libc::splice(
            input.as_raw_fd(),
            off_ptr,
            out.as_raw_fd(),
            std::ptr::null_mut(),
            len,
            flags.bits(),
        )
    })?;
    if let Some(o) = off_in {
        *o = off as u64;
    }
    Ok(n)
}

/// `vmsplice(pipe_w, {buf}, 1, flags)`: puts references to the user pages of `buf` into the pipe
/// (no copy). The pages stay referenced by the pipe, and later by socket buffers, until the
/// reader consumes them; there is no completion for this.
///
/// # Safety
/// The caller must guarantee that nothing writes to the memory of `buf` until every byte spliced
/// from it has been consumed by the final reader (for a TCP socket: read by the receiving
/// application on a local peer, or acknowledged and freed on a remote one). Otherwise the reader
/// sees the new contents. See vmsplice(2).
pub(crate) unsafe fn vmsplice(
    pipe_w: BorrowedFd<'_>,
    buf: &[u8],
    flags: SpliceFlags,
) -> io::Result<usize> {
    let iov = libc::iovec {
        iov_base: buf.as_ptr() as *mut libc::c_void,
        iov_len: buf.len(),
    };
    // SAFETY: one iovec over a live slice; the kernel only takes page references (the caller
    // upholds the no-rewrite contract above).
    cvt_size(unsafe { libc::vmsplice(pipe_w.as_raw_fd(), &iov, 1, flags.bits()) })
}

/// `pipe2(fds, O_CLOEXEC)`: returns (read end, write end). See pipe(2).
pub(crate) fn pipe() -> io::Result<(OwnedFd, OwnedFd)> {
    let mut fds = [0 as libc::c_int; 2];
    // SAFETY: `fds` has room for the two descriptors pipe2 writes.
    cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) })?;
    // SAFETY: pipe2 succeeded, so both are fresh descriptors this process owns.
    Ok(unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) })
}

/// `fcntl(fd, F_SETPIPE_SZ, size)`: asks for a pipe buffer of `size` bytes and returns the size
/// the kernel granted (rounded up to a power-of-two number of pages; capped by
/// `/proc/sys/fs/pipe-max-size` for unprivileged users). See fcntl(2), pipe(7).
pub(crate) fn set_pipe_size(fd: BorrowedFd<'_>, size: usize) -> io::Result<usize> {
    // SAFETY: F_SETPIPE_SZ takes an int argument and touches no memory of ours.
    cvt(unsafe { libc::fcntl(fd.as_raw_fd(), libc::F_SETPIPE_SZ, size as libc::c_int) })
        .map(|n| n as usize)
}
