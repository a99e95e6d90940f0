//! The async sender's io_uring half: one connection on a ring of its own whose fd the tokio
//! reactor polls. Sends are queued and submitted without waiting; when the connection's queue
//! is full, the half awaits the ring's readiness (a completion posted) instead of entering the
//! kernel to wait. Buffers wait in the sender's backlog until the connection takes them, so a
//! dropped future leaves them queued for the next call, and the ring keeps every buffer the
//! kernel may read.

use crate::driver::{ConnId, DriverConfig, UringDriver};
use crate::send::Chooser;
use crate::sys::reactor::Deadline;
use crate::sys::uring::RingSetup;
use crate::{Buf, Error, Options, Result, Socket};
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::time::Duration;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// The ring half. See the module docs.
pub(super) struct RingHalf {
    /// A duplicate of the ring's fd, registered with the reactor.
    ready: AsyncFd<OwnedFd>,
    pub(super) driver: UringDriver,
    pub(super) id: ConnId,
}

impl RingHalf {
    /// A ring for `sock` alone, sending as `chooser` says. The ring is set up without
    /// SINGLE_ISSUER and DEFER_TASKRUN: a task may move between runtime threads, and its
    /// completions must reach the ring (and wake the reactor) while no thread is in the ring.
    pub(super) fn new(sock: Socket, chooser: Chooser, opts: &Options) -> Result<RingHalf> {
        let cfg = DriverConfig {
            connections: 1,
            ring_zc_inflight: None,
            options: Options {
                file: None,
                ..opts.clone()
            },
        };
        let mut driver = UringDriver::with_setup(cfg, RingSetup::Plain)?;
        let id = driver.add_with_chooser(sock, chooser)?;
        let ready = crate::sys::reactor::register(driver.ring_fd()?, Interest::READABLE)
            .map_err(|(e, _)| {
                Error::Config(format!(
                    "the async sender needs a tokio runtime with I/O enabled (Runtime::enable_io, or #[tokio::main]): {e}"
                ))
            })?;
        Ok(RingHalf { ready, driver, id })
    }

    /// Queues the first `n` buffers of `from`, in order, each a message, submitting as the
    /// queue fills and awaiting room while it is full. A buffer leaves `from` only when the
    /// connection took it, so a dropped future leaves the rest where they were.
    pub(super) async fn send(&mut self, from: &mut VecDeque<Buf>, mut n: usize) -> Result<()> {
        loop {
            while n > 0 {
                let b = from.pop_front().expect("n buffers at the front");
                match self.driver.push(self.id, b, true) {
                    Ok(()) => n -= 1,
                    Err((e, b)) if e.kind() == std::io::ErrorKind::WouldBlock => {
                        from.push_front(b);
                        break;
                    }
                    Err((e, b)) => {
                        from.push_front(b);
                        return Err(e);
                    }
                }
            }
            self.driver.run(false)?;
            self.driver.conn_error(self.id)?;
            if n == 0 {
                return Ok(());
            }
            if self.driver.room(self.id) == 0 {
                self.completion().await?;
            }
        }
    }

    /// Submits what is queued and awaits until every byte is on the socket.
    pub(super) async fn flush(&mut self) -> Result<()> {
        self.driver.request_flush(self.id)?;
        loop {
            self.driver.run(false)?;
            self.driver.conn_error(self.id)?;
            if self.driver.is_flushed(self.id) {
                return Ok(());
            }
            self.completion().await?;
        }
    }

    /// Flushes, then awaits every notification for at most `timeout`; the buffers the kernel
    /// still holds then are leaked, counted. How many.
    pub(super) async fn drain(&mut self, timeout: Duration) -> Result<u64> {
        let flushed = Deadline::after(timeout).within(self.flush()).await;
        if let Some(r) = flushed.map_err(super::deadline_failed)? {
            r?;
        }
        let mut deadline = Deadline::after(timeout);
        while self.driver.in_kernel() > 0 {
            // Past the deadline, or the reactor gone: what the kernel still holds is counted
            // as leaked below, with the stats.
            match deadline
                .within(self.completion())
                .await
                .map_err(super::deadline_failed)?
            {
                Some(Ok(())) => {}
                Some(Err(_)) | None => break,
            }
            self.driver.run(false)?;
        }
        match self.driver.finish(Duration::ZERO) {
            Ok(()) => Ok(0),
            Err(Error::Leaked { buffers, .. }) => Ok(buffers),
            Err(e) => Err(e),
        }
    }

    /// Awaits a completion on the ring (its fd readable).
    async fn completion(&mut self) -> Result<()> {
        let mut g = self
            .ready
            .readable()
            .await
            .map_err(super::reactor_gone("a completion on the ring"))?;
        g.clear_ready();
        Ok(())
    }

    /// A buffer of `len` bytes: one the kernel has released, or a new one.
    pub(super) fn take_buf(&mut self, len: usize) -> Buf {
        let (zc, free) = self.driver.zc_and_free(self.id);
        if free == 0 && zc > 0 {
            let _ = self.driver.run(false);
        }
        self.driver
            .take_buf(self.id, len)
            .unwrap_or_else(|_| Buf::page_aligned(len, crate::buffer::FILL))
    }
}
