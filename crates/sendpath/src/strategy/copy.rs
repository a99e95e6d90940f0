//! `copy`: `send()` from one contiguous buffer, the baseline every other path is compared with.

use super::{fields, send_all, send_counted, sendmsg_all, SendPath};
use crate::buffer::BufPool;
use crate::sys::SendFlags;
use crate::Socket;
use crate::{Buf, Msg, Result, SendStats};
use std::os::fd::AsFd;

/// The most messages `copy` puts in one system call (`Options::copy_batch`).
const MAX_BATCH: usize = 64;

/// `send()` per field (one field per message is the intended use: one contiguous buffer).
pub(super) struct Copy {
    sock: Socket,
    stats: SendStats,
    bufs: BufPool,
    /// Set when this stands in for a zero-copy path the kernel lacks.
    fallback_note: Option<String>,
    /// The socket sends datagrams: a message must be one buffer.
    datagrams: bool,
    /// Messages per system call in `send_bufs` (`Options::copy_batch`, at most 64).
    batch: usize,
    /// The buffers `send_in_place` writes messages in, one per message of a system call: the
    /// kernel has copied them when the call returns, so they never leave the path.
    scratch: Vec<Buf>,
}

impl Copy {
    pub(super) fn new(sock: Socket) -> Copy {
        Copy {
            datagrams: crate::sys::socket::is_datagram(sock.as_fd()),
            sock,
            stats: SendStats::default(),
            bufs: BufPool::new(),
            fallback_note: None,
            batch: 1,
            scratch: Vec::new(),
        }
    }

    /// Sends up to `n` messages of a `send_bufs` call in one system call.
    fn batched(mut self, n: usize) -> Copy {
        self.batch = n.clamp(1, MAX_BATCH);
        self
    }

    /// `send_in_place` one message per system call: each written in the one scratch buffer
    /// and sent from it, the bytes found once for all `n`.
    fn send_each_in_place(
        &mut self,
        n: usize,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        let Some(b) = self.scratch.first_mut() else {
            return Ok(());
        };
        b.resize(len);
        let bytes = b.as_mut_slice();
        let fd = self.sock.as_fd();
        let unsupported = u64::from(self.fallback_note.is_some());
        for i in 0..n {
            fill(i, bytes);
            self.stats.zerocopy.fallbacks.unsupported += unsupported;
            send_counted(fd, bytes, &mut self.stats)?;
        }
        Ok(())
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

    fn send_bufs(&mut self, bufs: &mut Vec<Buf>) -> Result<()> {
        if self.batch == 1 {
            for b in bufs.drain(..) {
                self.send_buf(b)?;
            }
            return Ok(());
        }
        while !bufs.is_empty() {
            let n = bufs.len().min(self.batch);
            if self.fallback_note.is_some() {
                self.stats.zerocopy.fallbacks.unsupported += n as u64;
            }
            let sent = send_batch(&self.sock, self.datagrams, &bufs[..n], &mut self.stats);
            for b in bufs.drain(..n) {
                self.bufs.put(b);
            }
            if let Err(e) = sent {
                bufs.clear();
                return Err(e);
            }
        }
        Ok(())
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        self.bufs.take(len)
    }

    /// Each message written in a buffer of the path's own, which the kernel copies from before
    /// the call returns: a buffer per message of one system call (`Options::copy_batch`),
    /// reused by every call, so none moves between the caller and the pool.
    fn send_in_place(
        &mut self,
        n: usize,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        while self.scratch.len() < self.batch.min(n) {
            self.scratch.push(self.bufs.take(len));
        }
        if self.batch == 1 {
            return self.send_each_in_place(n, len, fill);
        }
        let mut done = 0;
        while done < n {
            let m = (n - done).min(self.batch);
            for (j, b) in self.scratch[..m].iter_mut().enumerate() {
                b.resize(len);
                fill(done + j, b.as_mut_slice());
            }
            if self.fallback_note.is_some() {
                self.stats.zerocopy.fallbacks.unsupported += m as u64;
            }
            send_batch(
                &self.sock,
                self.datagrams,
                &self.scratch[..m],
                &mut self.stats,
            )?;
            done += m;
        }
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

/// One system call for the messages of `batch`: `sendmsg` over them on a stream (every byte, in
/// order, continuing a short send), `sendmmsg` on a datagram socket (each its own datagram,
/// continuing where the kernel stopped).
fn send_batch(sock: &Socket, datagrams: bool, batch: &[Buf], stats: &mut SendStats) -> Result<()> {
    let mut iov = [&[][..]; MAX_BATCH];
    for (slot, b) in iov.iter_mut().zip(batch) {
        *slot = b.as_slice();
    }
    let iov = &iov[..batch.len()];
    let fd = sock.as_fd();
    if datagrams {
        let mut done = 0;
        while done < iov.len() {
            match crate::sys::socket::sendmmsg(fd, &iov[done..], SendFlags::NOSIGNAL) {
                Ok(0) => {
                    let e = std::io::Error::from(std::io::ErrorKind::WriteZero);
                    return Err(crate::Error::sys("sendmmsg")(e));
                }
                Ok(n) => {
                    stats.calls += 1;
                    done += n;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(crate::Error::sys("sendmmsg")(e)),
            }
        }
    } else {
        let (_, sent) = sendmsg_all(fd, iov, SendFlags::default(), stats);
        sent.map_err(crate::Error::sys("sendmsg"))?;
    }
    stats.sends += batch.len() as u64;
    stats.bytes += iov.iter().map(|b| b.len() as u64).sum::<u64>();
    Ok(())
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
    open: |sock, o| Ok(Box::new(Copy::new(sock).batched(o.copy_batch))),
};
