//! `mmap-send`: `send()` straight from a read-only mapping of the file: no copy into a user
//! buffer, one copy from the page cache into the socket.

use super::{file_range, required_file, SendPath};
use crate::buffer::BufPool;
use crate::sys::mem::FileMap;
use crate::Socket;
use crate::{Buf, Error, Msg, Result, SendStats};
use std::fs::File;
use std::os::fd::AsFd;
use std::sync::Arc;

/// Maps the whole file once, then sends slices of the mapping.
pub(super) struct MmapSend {
    sock: Socket,
    map: FileMap,
    stats: SendStats,
    bufs: BufPool,
}

impl MmapSend {
    pub(super) fn new(sock: Socket, file: Arc<File>) -> Result<MmapSend> {
        let len = file.metadata().map_err(Error::sys("fstat"))?.len() as usize;
        let map = FileMap::new(file.as_fd(), len).map_err(Error::sys("mmap"))?;
        Ok(MmapSend {
            sock,
            map,
            stats: SendStats::default(),
            bufs: BufPool::new(),
        })
    }
}

impl SendPath for MmapSend {
    fn name(&self) -> &'static str {
        "mmap-send"
    }

    // Inline: `send_ranges` then loops on the system calls.
    #[inline]
    fn send(&mut self, msg: Msg) -> Result<()> {
        let (offset, len) = file_range(self.name(), msg)?;
        let (mut at, end) = (offset as usize, offset as usize + len);
        if end > self.map.len() {
            return Err(Error::Config(format!(
                "file range {offset}+{len} is past the end of the mapped file"
            )));
        }
        while at < end {
            match self
                .map
                .send(self.sock.as_fd(), at..end, crate::sys::SendFlags::NOSIGNAL)
            {
                Ok(n) => {
                    if at + n < end {
                        self.stats.short_sends += 1;
                    }
                    at += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::sys("send")(e)),
            }
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

/// `mmap-send` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "mmap-send",
    source: super::Source::File,
    avoids_send_copy: false,
    has_zc_completions: false,
    uses_fields: false,
    copies: Some(super::copies::MMAP_SEND),
    waits: crate::socket::Waits::InTheKernel,
    open: |sock, opts| {
        Ok(Box::new(MmapSend::new(
            sock,
            required_file("mmap-send", opts)?,
        )?))
    },
};
