//! `uring-splice`: file to pipe to socket as linked pairs of io_uring `SPLICE` on a ring of
//! the path's own ([`UringDriver::splice`]): what `splice` does, a pipe-full per
//! `io_uring_enter` instead of two syscalls, the page references moving through the pipe
//! without a copy. The rules of each pair are [`SpliceJob`]'s.

use super::{file_range, required_file, SendPath};
use crate::buffer::BufPool;
use crate::engine::{
    Choice, ConnId, DriverConfig, Event, SpliceJob, SplicePipe, SpliceProgress, UringDriver,
};
use crate::{sys, Buf, Error, Msg, Options, Result, SendStats, Socket};
use std::fs::File;
use std::os::fd::AsFd;
use std::sync::Arc;

/// `uring-splice`. See the module docs.
pub(super) struct UringSplice {
    driver: UringDriver,
    id: ConnId,
    file: Arc<File>,
    pipe: SplicePipe,
    pipe_size: u64,
    events: Vec<Event>,
    writable: Vec<ConnId>,
    stats: SendStats,
    bufs: BufPool,
}

impl UringSplice {
    fn new(sock: Socket, opts: &Options) -> Result<UringSplice> {
        let file = required_file("uring-splice", opts)?;
        let mut driver = UringDriver::new(DriverConfig::from_options(opts, 1, Choice::Copy))?;
        let id = driver.add(sock, Choice::Copy, false)?;
        let (read, write) = sys::file::pipe().map_err(Error::sys("pipe2"))?;
        let pipe_size =
            sys::file::set_pipe_size(write.as_fd(), opts.pipe_size).unwrap_or(64 * 1024) as u64;
        Ok(UringSplice {
            driver,
            id,
            file,
            pipe: SplicePipe { read, write },
            pipe_size,
            events: Vec::new(),
            writable: Vec::new(),
            stats: SendStats::default(),
            bufs: BufPool::new(),
        })
    }

    /// Waits for the completions of the pair in flight (both, in the first wait); `Ok(true)`
    /// when the job is done.
    fn settle(&mut self, job: &mut SpliceJob) -> Result<bool> {
        self.driver.submit_and_wait_for(2)?;
        loop {
            // Room on the connection is not news here (nothing is queued on it), but left
            // unread it would keep the next pass from waiting.
            self.driver.take_writable(&mut self.writable);
            self.writable.clear();
            self.driver.take_events(&mut self.events);
            for e in self.events.drain(..) {
                let Event::Spliced { into_pipe, res, .. } = e else {
                    continue;
                };
                match job.on_spliced(into_pipe, res) {
                    Ok(SpliceProgress::Waiting) => {}
                    Ok(SpliceProgress::Next) => return Ok(false),
                    Ok(SpliceProgress::Done) => return Ok(true),
                    Err(f) => {
                        return Err(Error::sys("io_uring SPLICE")(std::io::Error::other(
                            f.to_string(),
                        )))
                    }
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
        let mut job = SpliceJob::new(offset, len as u64, 0);
        while !job.is_done() {
            let step = job
                .next(self.pipe_size)
                .map_err(|f| Error::Config(format!("uring-splice: {f} (raise --pipe-size)")))?;
            self.driver.splice(
                self.id,
                self.file.as_fd(),
                step.offset,
                step.len,
                &self.pipe,
                step.in_pipe,
            )?;
            if self.settle(&mut job)? {
                break;
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
        self.driver.socket(self.id)
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
    open,
};
