//! `copy`: `send()` from one contiguous buffer, the baseline every other path is compared with.

use super::{fields, send_all, send_counted, SendPath};
use crate::buffer::BufPool;
use crate::Socket;
use crate::{Buf, Msg, Result, SendStats};
use std::os::fd::AsFd;

/// `send()` per field (one field per message is the intended use: one contiguous buffer).
pub(super) struct Copy {
    sock: Socket,
    stats: SendStats,
    bufs: BufPool,
    /// Set when this stands in for a zero-copy path the kernel lacks.
    fallback_note: Option<String>,
    /// The socket sends datagrams: a message must be one buffer.
    datagrams: bool,
}

impl Copy {
    pub(super) fn new(sock: Socket) -> Copy {
        Copy {
            datagrams: crate::sys::socket::is_datagram(sock.as_fd()),
            sock,
            stats: SendStats::default(),
            bufs: BufPool::new(),
            fallback_note: None,
        }
    }

    /// Makes this path stand in for a zero-copy path that is unavailable: each send is counted
    /// as an `unsupported` fallback and `note` says why.
    pub(super) fn fallback_note(&mut self, note: String) {
        self.fallback_note = Some(note);
    }
}

impl SendPath for Copy {
    fn name(&self) -> &'static str {
        "copy"
    }

    fn note(&self) -> Option<&str> {
        self.fallback_note.as_deref()
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let f = fields(self.name(), msg)?;
        if self.datagrams && f.len() > 1 {
            self.bufs.put_fields(f);
            return Err(super::split_datagram(self.name()));
        }
        if self.fallback_note.is_some() {
            self.stats.zerocopy.fallbacks.unsupported += 1;
        }
        for b in &f {
            send_all(self.sock.as_fd(), b.as_slice(), &mut self.stats)?;
            self.stats.bytes += b.len() as u64;
        }
        self.stats.sends += 1;
        self.bufs.put_fields(f);
        Ok(())
    }

    // Always inline: `send_bufs` then loops on the system call with no call between.
    #[inline(always)]
    fn send_buf(&mut self, b: Buf) -> Result<()> {
        if self.fallback_note.is_some() {
            self.stats.zerocopy.fallbacks.unsupported += 1;
        }
        send_counted(self.sock.as_fd(), b.as_slice(), &mut self.stats)?;
        self.bufs.put(b);
        Ok(())
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        self.bufs.take(len)
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

/// `copy` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "copy",
    source: super::Source::Memory,
    avoids_send_copy: false,
    has_zc_completions: false,
    uses_fields: false,
    copies: Some(super::copies::USER_SEND),
    waits: crate::socket::Waits::InTheKernel,
    open: |sock, _| Ok(Box::new(Copy::new(sock))),
};
