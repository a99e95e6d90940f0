//! `splice`: file to pipe, pipe to socket, with `splice()`; page references move through the
//! pipe without a copy. The pipe size is settable (default 1 MiB, or what the kernel grants).

use super::{file_range, required_file, SendPath};
use crate::buffer::BufPool;
use crate::Socket;
use crate::{sys, Buf, Error, Msg, Result, SendStats};
use std::fs::File;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::sync::Arc;

/// A pipe between a source and the socket.
pub(super) struct Pipe {
    pub r: OwnedFd,
    pub w: OwnedFd,
    /// Capacity the kernel granted, bytes.
    pub size: usize,
}

impl Pipe {
    /// A pipe of (up to) `want` bytes. The kernel may refuse to grow a pipe (unprivileged users
    /// past `/proc/sys/fs/pipe-max-size`); the default 64 KiB is used then.
    pub(super) fn new(want: usize) -> Result<Pipe> {
        let (r, w) = sys::file::pipe().map_err(Error::sys("pipe2"))?;
        let size = sys::file::set_pipe_size(w.as_fd(), want).unwrap_or(64 * 1024);
        Ok(Pipe { r, w, size })
    }

    /// Moves exactly `n` bytes from the pipe to `sock`.
    pub(super) fn drain_to(
        &self,
        sock: BorrowedFd<'_>,
        mut n: usize,
        stats: &mut SendStats,
    ) -> Result<()> {
        while n > 0 {
            match sys::file::splice(self.r.as_fd(), None, sock, n, sys::SpliceFlags::MOVE) {
                Ok(0) => {
                    return Err(Error::sys("splice(pipe -> socket)")(
                        io::ErrorKind::WriteZero.into(),
                    ))
                }
                Ok(k) => {
                    if k < n {
                        stats.short_sends += 1;
                    }
                    n -= k;
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::sys("splice(pipe -> socket)")(e)),
            }
        }
        Ok(())
    }
}

/// `splice()` file -> pipe -> socket.
pub(super) struct Splice {
    sock: Socket,
    file: Arc<File>,
    pipe: Pipe,
    stats: SendStats,
    bufs: BufPool,
}

impl Splice {
    pub(super) fn new(sock: Socket, file: Arc<File>, pipe_size: usize) -> Result<Splice> {
        Ok(Splice {
            sock,
            file,
            pipe: Pipe::new(pipe_size)?,
            stats: SendStats::default(),
            bufs: BufPool::new(),
        })
    }
}

impl SendPath for Splice {
    fn name(&self) -> &'static str {
        "splice"
    }

    // Inline: `send_ranges` then loops on the system calls.
    #[inline]
    fn send(&mut self, msg: Msg) -> Result<()> {
        let (mut offset, len) = file_range(self.name(), msg)?;
        let end = offset + len as u64;
        while offset < end {
            let want = ((end - offset) as usize).min(self.pipe.size);
            let got = match sys::file::splice(
                self.file.as_fd(),
                Some(&mut offset),
                self.pipe.w.as_fd(),
                want,
                sys::SpliceFlags::MOVE,
            ) {
                Ok(0) => {
                    return Err(Error::Config(format!(
                        "splice: the file ends before offset {end}"
                    )))
                }
                Ok(k) => k,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::sys("splice(file -> pipe)")(e)),
            };
            self.pipe
                .drain_to(self.sock.as_fd(), got, &mut self.stats)?;
        }
        self.stats.sends += 1;
        self.stats.bytes += len as u64;
        Ok(())
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        self.bufs.take(len)
    }

    fn stats(&self) -> &SendStats {
        &self.stats
    }

    fn socket(&self) -> &Socket {
        &self.sock
    }
}

/// `splice` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "splice",
    source: super::Source::File,
    avoids_send_copy: true,
    has_zc_completions: false,
    uses_fields: false,
    copies: Some(super::copies::PAGE_CACHE_BY_REFERENCE),
    waits: crate::socket::Waits::InTheKernel,
    open: |sock, opts| {
        Ok(Box::new(Splice::new(
            sock,
            required_file("splice", opts)?,
            opts.pipe_size,
        )?))
    },
};
