//! `sendfile`: `sendfile()` from the file to the socket; the kernel attaches page-cache pages to
//! the socket without a copy through user space.

use super::{file_range, required_file, SendPath};
use crate::buffer::BufPool;
use crate::Socket;
use crate::{sys, Buf, Error, Msg, Result, SendStats};
use std::fs::File;
use std::io;
use std::os::fd::AsFd;
use std::sync::Arc;

/// `sendfile()` until the range is sent.
pub(super) struct Sendfile {
    sock: Socket,
    file: Arc<File>,
    stats: SendStats,
    bufs: BufPool,
}

impl Sendfile {
    pub(super) fn new(sock: Socket, file: Arc<File>) -> Sendfile {
        Sendfile {
            sock,
            file,
            stats: SendStats::default(),
            bufs: BufPool::new(),
        }
    }
}

impl SendPath for Sendfile {
    fn name(&self) -> &'static str {
        "sendfile"
    }

    // Inline: `send_ranges` then loops on the system calls.
    #[inline]
    fn send(&mut self, msg: Msg) -> Result<()> {
        let (offset, len) = file_range(self.name(), msg)?;
        sendfile_all(&self.sock, &self.file, offset, len, &mut self.stats)
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

/// `sendfile()` until `len` bytes of `file` from `offset` are on the socket; counts the send.
#[inline]
pub(super) fn sendfile_all(
    sock: &Socket,
    file: &File,
    mut offset: u64,
    len: usize,
    stats: &mut SendStats,
) -> Result<()> {
    let end = offset + len as u64;
    while offset < end {
        let want = (end - offset) as usize;
        match sys::file::sendfile(sock.as_fd(), file.as_fd(), &mut offset, want) {
            Ok(0) => {
                return Err(Error::Config(format!(
                    "sendfile: the file ends before offset {end}"
                )))
            }
            Ok(n) => {
                stats.calls += 1;
                if n < want {
                    stats.short_sends += 1;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(Error::sys("sendfile")(e)),
        }
    }
    stats.sends += 1;
    stats.bytes += len as u64;
    Ok(())
}

/// `sendfile` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "sendfile",
    source: super::Source::File,
    avoids_send_copy: true,
    has_zc_completions: false,
    uses_fields: false,
    copies: Some(super::copies::PAGE_CACHE_BY_REFERENCE),
    waits: crate::socket::Waits::InTheKernel,
    open: |sock, opts| {
        Ok(Box::new(Sendfile::new(
            sock,
            required_file("sendfile", opts)?,
        )))
    },
};
