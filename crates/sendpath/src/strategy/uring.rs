//! `uring` and `uring-zc` as a [`SendPath`]: an [`UringDriver`] with one connection and a fixed
//! choice of operation (SEND for `uring`, SEND_ZC for `uring-zc`). `send` queues; the driver
//! keeps one linked chain of up to `uring_depth` requests in the kernel while the next fills,
//! and a send waits only when the queue behind the chain is full.

use super::{fields, SendPath};
use crate::engine::{Choice, ConnId, DriverConfig, UringDriver};
use crate::Socket;
use crate::{Buf, Msg, Options, Result, SendStats};
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
    /// Opens `name` on `sock`: `choice` is the operation each send asks for. With
    /// `Choice::ZeroCopy` on a kernel without SEND_ZC each send is an `unsupported` fallback.
    pub(super) fn new(
        name: &'static str,
        sock: Socket,
        opts: &Options,
        choice: Choice,
        note: Option<String>,
    ) -> Result<UringPath> {
        let mut driver = UringDriver::new(DriverConfig::from_options(opts, 1, choice))?;
        let id = driver.add(sock, choice, opts.uring_report_usage)?;
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
        Choice::Copy,
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
        self.driver.push_message(self.id, &mut f)?;
        self.spare = f;
        // A full batch goes in now, without waiting; a partial one waits for more or a flush.
        self.driver.submit_ready()?;
        self.driver.conn_error(self.id)
    }

    fn send_buf(&mut self, b: Buf) -> Result<()> {
        self.driver.push_waiting(self.id, b, true)?;
        self.driver.submit_ready()?;
        self.driver.conn_error(self.id)
    }

    fn send_bufs(&mut self, bufs: &mut Vec<Buf>) -> Result<()> {
        self.driver.push_bufs(self.id, bufs)?;
        self.driver.conn_error(self.id)
    }

    fn flush(&mut self) -> Result<()> {
        self.driver.flush(self.id)
    }

    fn finish(&mut self, timeout: Duration) -> Result<()> {
        self.driver.flush(self.id)?;
        self.driver.finish(timeout)
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        let st = self.driver.state(self.id);
        if st.free_bufs() == 0 && st.zc_inflight() > 0 {
            // Completions that are ready may release a buffer; a failed ring just means none.
            let _ = self.driver.run(false);
        }
        self.driver.take_buf(self.id, len)
    }

    fn take_fields(&mut self) -> Vec<Buf> {
        std::mem::take(&mut self.spare)
    }

    fn stats(&self) -> &SendStats {
        self.driver.stats(self.id)
    }

    fn socket(&self) -> &Socket {
        self.driver.socket(self.id)
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
    open: |sock, opts| open(sock, opts),
};
