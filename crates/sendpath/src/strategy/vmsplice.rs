//! `vmsplice`: the message's user pages go into a pipe by reference (`vmsplice()`), then move to
//! the socket (`splice()`).
//!
//! # How no page is rewritten before the receiver has read it
//! vmsplice has no completion: the pages stay referenced by the pipe, then by socket buffers,
//! and on a local receiver until the receiving application has read them. Any write to them
//! before then changes what the receiver reads. This path therefore never reuses a page:
//!
//! 1. [`SendPath::take_buf`] hands out buffers in fresh anonymous pages ([`Buf::pages`]).
//! 2. `send` takes the buffer by value and seals it ([`SealedPages`]): from then on no code in
//!    the process has write access.
//! 3. After splicing, the sealed pages are unmapped (`munmap`). The kernel keeps its own
//!    references and frees the pages when the last reader is done; they never return to this
//!    process's allocator, so nothing can rewrite them.
//!
//! A heap buffer passed to `send` is first copied into fresh pages (counted in
//! `staged_copies`), since heap memory is reused by the allocator.
//!
//! The price is a fresh mapping (page faults, zeroing, unmap) per message; the measurements
//! include it, because skipping it is what makes vmsplice fast and wrong.
//!
//! [`SealedPages`]: crate::sys::mem::SealedPages

use super::splice::Pipe;
use super::{fields, SendPath};
use crate::sys::mem::PageBuf;
use crate::sys::SpliceFlags;
use crate::Socket;
use crate::{Buf, Error, Msg, Result, SendStats};
use std::os::fd::AsFd;

/// vmsplice into a pipe, splice to the socket, unmap.
pub(super) struct Vmsplice {
    sock: Socket,
    pipe: Pipe,
    stats: SendStats,
    /// Heap buffers copied into fresh pages before splicing.
    pub staged_copies: u64,
    #[cfg(test)]
    scribble: Option<u8>,
}

impl Vmsplice {
    pub(super) fn new(sock: Socket, pipe_size: usize) -> Result<Vmsplice> {
        Ok(Vmsplice {
            sock,
            pipe: Pipe::new(pipe_size)?,
            stats: SendStats::default(),
            staged_copies: 0,
            #[cfg(test)]
            scribble: None,
        })
    }

    fn send_pages(&mut self, pages: PageBuf) -> Result<()> {
        let len = pages.len();
        let sealed = pages.seal();
        let mut off = 0;
        while off < len {
            let end = len.min(off + self.pipe.size);
            let n = match sealed.vmsplice(self.pipe.w.as_fd(), off..end, SpliceFlags::default()) {
                Ok(n) => n,
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(Error::sys("vmsplice")(e)),
            };
            self.pipe.drain_to(self.sock.as_fd(), n, &mut self.stats)?;
            off += n;
        }
        #[cfg(test)]
        if let Some(b) = self.scribble {
            sealed.scribble_for_test(b);
        }
        // Dropping `sealed` unmaps the pages; the kernel's references keep them alive.
        drop(sealed);
        Ok(())
    }
}

impl SendPath for Vmsplice {
    fn name(&self) -> &'static str {
        "vmsplice"
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let f = fields(self.name(), msg)?;
        let mut len = 0;
        for b in f {
            len += b.len();
            let pages = match b.into_pages() {
                Ok(p) => p,
                Err(heap) => {
                    let mut p = PageBuf::new(heap.len()).map_err(Error::sys("mmap"))?;
                    p.as_mut_slice().copy_from_slice(heap.as_slice());
                    self.staged_copies += 1;
                    heap.release();
                    p
                }
            };
            self.send_pages(pages)?;
        }
        self.stats.sends += 1;
        self.stats.bytes += len as u64;
        Ok(())
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        Buf::pages(len).unwrap_or_else(|_| Buf::filled(len, crate::buffer::FILL))
    }

    fn stats(&self) -> &SendStats {
        &self.stats
    }

    fn socket(&self) -> &Socket {
        &self.sock
    }
}

/// `vmsplice` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "vmsplice",
    source: super::Source::Memory,
    avoids_send_copy: true,
    has_zc_completions: false,
    uses_fields: false,
    copies: Some(super::copies::PAGES_BY_REFERENCE),
    waits: crate::socket::Waits::InTheKernel,
    open: |sock, opts| Ok(Box::new(Vmsplice::new(sock, opts.pipe_size)?)),
};

#[cfg(test)]
mod tests {
    use super::*;
    use sendpath_host::pattern;
    use std::io::Read;
    use std::net::TcpListener;
    use std::time::Duration;

    /// Sends `msgs` messages of `len` pattern bytes; the receiver waits before reading so the
    /// pages are still in its queue when (in the broken mode) the sender rewrites them.
    fn run(scribble: Option<u8>) -> pattern::Verifier {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let total = 4 * 16384;
        let rx = std::thread::spawn(move || {
            let (mut s, _) = l.accept().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            let mut v = pattern::Verifier::new();
            let mut buf = vec![0u8; 65536];
            while v.bytes_verified() < total as u64 {
                let n = s.read(&mut buf).unwrap();
                assert!(n > 0, "sender closed early");
                v.check(&buf[..n]);
            }
            v
        });
        let sock = std::net::TcpStream::connect(addr).unwrap();
        let mut p = Vmsplice::new(sock.into(), 1 << 20).unwrap();
        p.scribble = scribble;
        let mut off = 0u64;
        for _ in 0..4 {
            let mut b = p.take_buf(16384);
            pattern::fill(b.as_mut_slice(), off);
            off += 16384;
            p.send(Msg::one(b)).unwrap();
        }
        p.finish(Duration::from_secs(1)).unwrap();
        rx.join().unwrap()
    }

    #[test]
    fn sealed_pages_arrive_intact() {
        let v = run(None);
        println!(
            "vmsplice: {} bytes verified, {} mismatches",
            v.bytes_verified(),
            v.mismatches
        );
        assert_eq!(v.mismatches, 0);
    }

    #[test]
    fn rewriting_pages_too_early_is_caught_by_the_verifier() {
        // The deliberately broken mode: pages rewritten right after splicing, while the
        // receiver has not read them yet. The verifier must see it.
        let v = run(Some(0xEE));
        println!(
            "vmsplice with too-early rewrite: {} bytes verified, {} mismatches (first at {:?})",
            v.bytes_verified(),
            v.mismatches,
            v.first_mismatch
        );
        assert!(v.mismatches > 0, "a too-early rewrite went unnoticed");
    }
}
