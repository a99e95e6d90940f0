//! `gather`: `sendmsg()` with one iovec per field: the kernel gathers the fields while copying
//! them into the socket (one copy).

use super::{fields, sendmsg_all, sendmsg_counted, SendPath};
use crate::buffer::BufPool;
use crate::sys::SendFlags;
use crate::Socket;
use crate::{Buf, Error, Msg, Result, SendStats};
use std::os::fd::AsFd;

/// One `sendmsg()` per message.
pub(super) struct Gather {
    sock: Socket,
    stats: SendStats,
    bufs: BufPool,
}

impl Gather {
    pub(super) fn new(sock: Socket) -> Gather {
        Gather {
            sock,
            stats: SendStats::default(),
            bufs: BufPool::new(),
        }
    }
}

impl SendPath for Gather {
    fn name(&self) -> &'static str {
        "gather"
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let f = fields(self.name(), msg)?;
        // One field (the common case) needs no list of slices on the heap.
        let one;
        let many: Vec<&[u8]>;
        let iov: &[&[u8]] = match f.as_slice() {
            [b] => {
                one = [b.as_slice()];
                &one
            }
            _ => {
                many = f.iter().map(Buf::as_slice).collect();
                &many
            }
        };
        sendmsg_all(
            self.sock.as_fd(),
            iov,
            SendFlags::default(),
            &mut self.stats,
        )
        .1
        .map_err(Error::sys("sendmsg"))?;
        self.stats.sends += 1;
        self.stats.bytes += iov.iter().map(|b| b.len() as u64).sum::<u64>();
        self.bufs.put_fields(f);
        Ok(())
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        self.bufs.take(len)
    }

    // Always inline: `send_bufs` then loops on the system call with no call between.
    #[inline(always)]
    fn send_buf(&mut self, b: Buf) -> Result<()> {
        sendmsg_counted(self.sock.as_fd(), b.as_slice(), &mut self.stats)?;
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

/// `gather` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "gather",
    source: super::Source::Memory,
    avoids_send_copy: false,
    has_zc_completions: false,
    uses_fields: true,
    copies: Some(super::copies::GATHER),
    waits: crate::socket::Waits::InTheKernel,
    open: |sock, _| Ok(Box::new(Gather::new(sock))),
};
