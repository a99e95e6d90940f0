//! `read-send`: `pread()` a file chunk into a buffer, then `send()` it: the traditional file
//! server path (disk or page cache to user buffer, user buffer to socket).

use super::{file_range, required_file, send_counted, SendPath};
use crate::buffer::BufPool;
use crate::Socket;
use crate::{Buf, Error, Msg, Result, SendStats};
use std::fs::File;
use std::os::fd::AsFd;
use std::os::unix::fs::FileExt;
use std::sync::Arc;

/// Reads into a reused buffer, then sends it.
pub(super) struct ReadSend {
    sock: Socket,
    file: Arc<File>,
    buf: Vec<u8>,
    stats: SendStats,
    bufs: BufPool,
}

impl ReadSend {
    pub(super) fn new(sock: Socket, file: Arc<File>) -> ReadSend {
        ReadSend {
            sock,
            file,
            buf: Vec::new(),
            stats: SendStats::default(),
            bufs: BufPool::new(),
        }
    }
}

impl SendPath for ReadSend {
    fn name(&self) -> &'static str {
        "read-send"
    }

    // Inline: `send_ranges` then loops on the system calls.
    #[inline]
    fn send(&mut self, msg: Msg) -> Result<()> {
        let (offset, len) = file_range(self.name(), msg)?;
        self.buf.resize(len, 0);
        self.file
            .read_exact_at(&mut self.buf, offset)
            .map_err(Error::sys("pread"))?;
        send_counted(self.sock.as_fd(), &self.buf, &mut self.stats)
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

/// `read-send` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "read-send",
    source: super::Source::File,
    avoids_send_copy: false,
    has_zc_completions: false,
    uses_fields: false,
    copies: Some(super::copies::READ_SEND),
    waits: crate::socket::Waits::InTheKernel,
    open: |sock, opts| {
        Ok(Box::new(ReadSend::new(
            sock,
            required_file("read-send", opts)?,
        )))
    },
};
