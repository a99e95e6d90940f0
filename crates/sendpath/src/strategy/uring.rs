//! `uring` and `uring-zc` as a [`SendPath`]: an [`UringDriver`] with one connection and a fixed
//! choice of operation (SEND for `uring`, SEND_ZC for `uring-zc`). `send` queues; the driver
//! keeps one chain of up to `uring_depth` buffers in the kernel while the next fills (one
//! vectored request, or linked requests: [`Order`](crate::Order)), and a send waits only when
//! the queue behind the chain is full.

use super::{fields, SendPath};
use crate::driver::{ConnId, DriverConfig, UringDriver};
use crate::{Buf, Msg, Options, Result, SendStats, Socket, Strategy};
use std::time::Duration;

/// A one-connection io_uring path.
pub(super) struct UringPath {
    name: &'static str,
    driver: UringDriver,
    id: ConnId,
    note: Option<String>,
    /// The last message's emptied list of buffers ([`SendPath::take_fields`]).
    spare: Vec<Buf>,
}

impl UringPath {
    /// Opens `name` on `sock`, sending as `strategy` (`uring` or `uring-zc`) does. `uring-zc`
    /// on a kernel without SEND_ZC counts each send as an `unsupported` fallback.
    pub(super) fn new(
        name: &'static str,
        sock: Socket,
        opts: &Options,
        strategy: Strategy,
        note: Option<String>,
    ) -> Result<UringPath> {
        let cfg = DriverConfig {
            connections: 1,
            ring_zc_inflight: None,
            options: Options {
                file: None,
                profile: None,
                ..opts.clone()
            },
        };
        let mut driver = UringDriver::new(cfg)?;
        let id = driver.add(sock, strategy)?;
        let note = match (note, driver.note()) {
            (Some(a), Some(b)) => Some(format!("{a}; {b}")),
            (a, b) => a.or(b),
        };
        Ok(UringPath {
            name,
            driver,
            id,
            note,
            spare: Vec::new(),
        })
    }
}

pub(super) fn open(sock: Socket, opts: &Options) -> Result<Box<dyn SendPath>> {
    Ok(Box::new(UringPath::new(
        "uring",
        sock,
        opts,
        Strategy::Uring,
        None,
    )?))
}

impl SendPath for UringPath {
    fn name(&self) -> &'static str {
        self.name
    }

    fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let mut f = fields(self.name, msg)?;
        self.driver.push_message(self.name, self.id, &mut f)?;
        self.spare = f;
        // A full batch goes in now, without waiting; a partial one waits for more or a flush.
        self.driver.submit_ready(self.id)?;
        self.driver.conn_error(self.id)
    }

    fn send_buf(&mut self, b: Buf) -> Result<()> {
        self.spare.push(b);
        let mut one = std::mem::take(&mut self.spare);
        let r = self.driver.push_bufs(self.id, &mut one);
        self.spare = one;
        r
    }

    fn send_bufs(&mut self, bufs: &mut Vec<Buf>) -> Result<()> {
        self.driver.push_bufs(self.id, bufs)
    }

    fn send_in_place(
        &mut self,
        n: usize,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        self.driver.send_in_place(self.id, n, len, fill)
    }

    fn flush(&mut self) -> Result<()> {
        self.driver.flush(self.id)
    }

    fn finish(&mut self, timeout: Duration) -> Result<()> {
        self.driver.flush(self.id)?;
        self.driver.finish(timeout)
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        let (zc_inflight, free) = self.driver.zc_and_free(self.id);
        if free == 0 && zc_inflight > 0 {
            // Completions that are ready may release a buffer; a failed ring just means none.
            let _ = self.driver.run(false);
        }
        self.driver
            .take_buf(self.id, len)
            .unwrap_or_else(|_| Buf::page_aligned(len, crate::buffer::FILL))
    }

    fn take_fields(&mut self) -> Vec<Buf> {
        std::mem::take(&mut self.spare)
    }

    fn stats(&self) -> &SendStats {
        self.driver
            .stats(self.id)
            .expect("the path's one connection")
    }

    fn socket(&self) -> &Socket {
        self.driver
            .socket(self.id)
            .expect("the path's one connection")
    }
}

/// `uring` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "uring",
    source: super::Source::Memory,
    avoids_send_copy: false,
    has_zc_completions: false,
    uses_fields: false,
    copies: Some(super::copies::USER_SEND),
    waits: crate::socket::Waits::OnTheRing,
    open: |sock, opts| open(sock, opts),
};
