//! `serialize`: the message's fields copied into one contiguous buffer, then `send()`: the
//! two-copy baseline (one copy in user space, one into the socket).

use super::{fields, send_counted, SendPath};
use crate::buffer::BufPool;
use crate::Socket;
use crate::{Buf, Msg, Result, SendStats};
use std::os::fd::AsFd;

/// Copies fields into a reused staging buffer, then sends it.
pub(super) struct Serialize {
    sock: Socket,
    stats: SendStats,
    staging: Vec<u8>,
    bufs: BufPool,
}

impl Serialize {
    pub(super) fn new(sock: Socket) -> Serialize {
        Serialize {
            sock,
            stats: SendStats::default(),
            staging: Vec::new(),
            bufs: BufPool::new(),
        }
    }
}

impl SendPath for Serialize {
    fn name(&self) -> &'static str {
        "serialize"
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let f = fields(self.name(), msg)?;
        self.staging.clear();
        for b in &f {
            self.staging.extend_from_slice(b.as_slice());
        }
        send_counted(self.sock.as_fd(), &self.staging, &mut self.stats)?;
        self.bufs.put_fields(f);
        Ok(())
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        self.bufs.take(len)
    }

    // Always inline: `send_bufs` then loops on the system call with no call between.
    #[inline(always)]
    fn send_buf(&mut self, b: Buf) -> Result<()> {
        self.staging.clear();
        self.staging.extend_from_slice(b.as_slice());
        send_counted(self.sock.as_fd(), &self.staging, &mut self.stats)?;
        self.bufs.put(b);
        Ok(())
    }

    fn take_fields(&mut self) -> Vec<Buf> {
        self.bufs.take_fields()
    }

    fn stats(&self) -> &SendStats {
        &self.stats
    }

    fn socket(&self) -> &Socket {
        &self.sock
    }
}

/// `serialize` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "serialize",
    source: super::Source::Memory,
    avoids_send_copy: false,
    has_zc_completions: false,
    uses_fields: true,
    copies: Some(super::copies::SERIALIZE),
    waits: crate::socket::Waits::InTheKernel,
    open: |sock, _| Ok(Box::new(Serialize::new(sock))),
};
