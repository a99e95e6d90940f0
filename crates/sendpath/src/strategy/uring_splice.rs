//! `uring-splice`: file to pipe to socket as linked pairs of io_uring `SPLICE` on a ring of
//! the path's own ([`UringDriver::send_file`]): what `splice` does, a pipe-full per
//! `io_uring_enter` instead of two syscalls, the page references moving through the pipe
//! without a copy.

use super::{file_range, required_file, SendPath};
use crate::buffer::BufPool;
use crate::driver::{ConnId, DriverConfig, Event, UringDriver};
use crate::{Buf, Error, Msg, Options, Result, SendStats, Socket, Strategy};
use std::fs::File;
use std::sync::Arc;

/// `uring-splice`. See the module docs.
pub(super) struct UringSplice {
    driver: UringDriver,
    id: ConnId,
    file: Arc<File>,
    events: Vec<Event>,
    writable: Vec<ConnId>,
    stats: SendStats,
    bufs: BufPool,
}

impl UringSplice {
    fn new(sock: Socket, opts: &Options) -> Result<UringSplice> {
        let file = required_file("uring-splice", opts)?;
        let cfg = DriverConfig {
            connections: 1,
            ring_zc_inflight: None,
            options: Options {
                pipe_size: opts.pipe_size,
                ..Options::default()
            },
        };
        let mut driver = UringDriver::new(cfg)?;
        let id = driver.add(sock, Strategy::Uring)?;
        Ok(UringSplice {
            driver,
            id,
            file,
            events: Vec::new(),
            writable: Vec::new(),
            stats: SendStats::default(),
            bufs: BufPool::new(),
        })
    }

    /// Runs the ring until the file send's end: its first pair in the one `io_uring_enter`
    /// that submits it, the rest as they come.
    fn settle(&mut self) -> Result<()> {
        self.driver.enter_and_route(2, self.id)?;
        loop {
            // Room on the connection is not news here (nothing is queued on it), but left
            // unread it would keep the next pass from waiting.
            self.driver.take_writable(&mut self.writable);
            self.writable.clear();
            self.driver.take_events(&mut self.events);
            for e in self.events.drain(..) {
                if let Event::FileSent { result, .. } = e {
                    return result.map(drop).map_err(Error::sys("io_uring SPLICE"));
                }
            }
            self.driver.run(true)?;
        }
    }
}

pub(super) fn open(sock: Socket, opts: &Options) -> Result<Box<dyn SendPath>> {
    Ok(Box::new(UringSplice::new(sock, opts)?))
}

impl SendPath for UringSplice {
    fn name(&self) -> &'static str {
        "uring-splice"
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let (offset, len) = file_range(self.name(), msg)?;
        let file = self.file.clone();
        self.driver
            .send_file(self.id, &[], file, offset, len as u64)?;
        self.settle()?;
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
        self.driver
            .socket(self.id)
            .expect("the path's one connection")
    }
}

/// `uring-splice` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "uring-splice",
    source: super::Source::File,
    avoids_send_copy: true,
    has_zc_completions: false,
    uses_fields: false,
    copies: Some(super::copies::PAGE_CACHE_BY_REFERENCE),
    waits: crate::socket::Waits::InTheKernel,
    open,
};
