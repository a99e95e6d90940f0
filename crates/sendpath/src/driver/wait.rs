//! Waiting on the ring for one connection or for all: a batch queued as room comes, a flush,
//! the last notifications before a close. Every wait for a connection's progress is bounded
//! by its send timeout (`SO_SNDTIMEO`), as a blocking send would be.

use super::{Conn, ConnId, UringDriver};
use crate::{Buf, Error, Result};
use std::time::{Duration, Instant};

impl UringDriver {
    /// Runs until every byte queued on `id` is on the socket, or the connection's send
    /// timeout (`SO_SNDTIMEO`) passes with no byte accepted.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, id: sendpath::ConnId) -> sendpath::Result<()> {
    /// ring.flush(id)?;
    /// # Ok(()) }
    /// ```
    pub fn flush(&mut self, id: ConnId) -> Result<()> {
        self.request_flush(id)?;
        self.run_until(id, |d| d.is_flushed(id))
    }

    /// Flushes every connection (those that failed are skipped), then waits up to `timeout`
    /// for every notification. Buffers the kernel still holds after that are leaked (never
    /// reused, since the kernel may still read them), counted in each connection's
    /// [`SendStats::leaked_buffers`](crate::SendStats::leaked_buffers), and reported as
    /// [`Error::Leaked`] with the totals.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver) -> sendpath::Result<()> {
    /// ring.finish(std::time::Duration::from_secs(2))?;
    /// println!("{:?}", ring.total_stats().summary());
    /// # Ok(()) }
    /// ```
    pub fn finish(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        for i in 0..self.conns.len() {
            if self.conns[i].as_ref().is_some_and(|c| !c.closing) {
                let _ = self.request_flush(self.id_of(i as u32));
            }
        }
        while Instant::now() < deadline && self.conns.iter().flatten().any(unflushed) {
            self.pass(Some(Some(left(deadline).min(Duration::from_millis(10)))))?;
        }
        while self.ring.in_kernel() > 0 && Instant::now() < deadline {
            self.ring
                .wait_for(left(deadline).min(Duration::from_millis(10)))
                .map_err(Error::sys("io_uring_enter"))?;
            self.reap();
        }
        // One scan of the ring's slots for every connection: a scan each would cost
        // connections x slots after the deadline.
        let mut left = vec![0u64; self.conns.len()];
        self.ring.buffers_in_kernel_by_tag(&mut left);
        let mut leaked = 0;
        for (c, left) in self.conns.iter_mut().zip(left) {
            if let Some(c) = c {
                c.state.count_leaked(left);
                leaked += left;
            }
        }
        match leaked {
            0 => Ok(()),
            buffers => Err(Error::Leaked {
                buffers,
                stats: Box::new(self.total_stats()),
            }),
        }
    }

    /// Queues each of `bufs` on `id` as its own message, in order, filling the queue in one
    /// step and submitting each full batch at once, waiting for room while the queue is full;
    /// leaves `bufs` empty. On an error the buffers not yet queued are dropped.
    pub(crate) fn push_bufs(&mut self, id: ConnId, bufs: &mut Vec<Buf>) -> Result<()> {
        let mut left = bufs.drain(..);
        loop {
            let st = &mut self.open_conn_mut(id)?.state;
            let took = st.push_from(&mut left);
            if st.ready() {
                self.dirty.push(id.idx);
            }
            self.submit_ready(id)?;
            if left.len() == 0 {
                return self.conn_error(id);
            }
            if took == 0 {
                self.run_until(id, |d| d.room(id) > 0)?;
            }
        }
    }

    /// Queues a message's buffers on `id` in order, the last one ending the message, waiting
    /// for room whenever the connection's queue is full; `fields` comes back empty.
    pub(crate) fn push_message(
        &mut self,
        path: &'static str,
        id: ConnId,
        fields: &mut Vec<Buf>,
    ) -> Result<()> {
        let n = fields.len();
        if n > 1 && self.conn(id)?.state.datagrams() {
            return Err(crate::strategy::split_datagram(path));
        }
        for (i, mut buf) in fields.drain(..).enumerate() {
            loop {
                match self.push(id, buf, i + 1 == n) {
                    Ok(()) => break,
                    Err((e, _)) if e.kind() != std::io::ErrorKind::WouldBlock => return Err(e),
                    Err((_, back)) => {
                        buf = back;
                        self.run_until(id, |d| d.room(id) > 0)?;
                    }
                }
            }
        }
        Ok(())
    }

    /// Runs, waiting in the kernel, until `done`, `id` failed, or `id`'s send timeout passed
    /// with no byte of it accepted (then `EAGAIN`, as a blocking send would say). Room made on
    /// other connections is news for the owner's next [`UringDriver::take_writable`], not a
    /// reason to stop waiting: it is set aside during the wait and handed back after.
    pub(crate) fn run_until(
        &mut self,
        id: ConnId,
        done: impl Fn(&UringDriver) -> bool,
    ) -> Result<()> {
        let timeout = self.conn(id)?.timeout;
        let mut progress = (self.conn(id)?.state.stats().bytes, Instant::now());
        let mut parked = Vec::new();
        let r = (|| {
            while !done(self) && self.conn(id)?.state.error().is_none() {
                parked.append(&mut self.writable);
                parked.dedup();
                let Some(t) = timeout else {
                    self.run(true)?;
                    continue;
                };
                let bytes = self.conn(id)?.state.stats().bytes;
                if bytes != progress.0 {
                    progress = (bytes, Instant::now());
                }
                let waited = progress.1.elapsed();
                if waited >= t {
                    let call = self.send_call(id);
                    return Err(Error::sys(call)(std::io::Error::from_raw_os_error(
                        libc::EAGAIN,
                    )));
                }
                self.run_for(t - waited)?;
            }
            Ok(())
        })();
        parked.append(&mut self.writable);
        parked.dedup();
        self.writable = parked;
        r?;
        self.conn_error(id)
    }

    /// The call a connection's sends are, for errors: SEND_ZC once it has sent zero-copy.
    fn send_call(&self, id: ConnId) -> &'static str {
        match self.conn(id) {
            Ok(c) if c.state.stats().zerocopy.attempts > 0 => "io_uring SEND_ZC",
            _ => "io_uring SEND",
        }
    }
}

/// Whether a connection still has bytes to put on its socket.
fn unflushed(c: &Conn) -> bool {
    let file = c.file.as_ref().is_some_and(|f| !f.is_idle());
    !c.closing && c.state.error().is_none() && (!c.state.is_flushed() || file)
}

/// The time left until `deadline`.
fn left(deadline: Instant) -> Duration {
    deadline.saturating_duration_since(Instant::now())
}
