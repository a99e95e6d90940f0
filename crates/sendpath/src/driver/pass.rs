//! Sending on the ring: queueing buffers, one pass of routing completions and submitting the
//! chains that are ready, and the waits built on passes (for room, for a flush, for every
//! notification), each bounded by the connection's send timeout.

use super::{Conn, ConnId, UringDriver};
use crate::send::{Payload, Pushed, Submit};
use crate::sys::uring::{Cqe, SendRing, IORING_NOTIF_USAGE_ZC_COPIED};
use crate::{Buf, Error, Result};
use std::os::fd::AsFd;
use std::time::Duration;

/// The longest a one-connection batch waits in one enter when its socket has a send timeout.
const STALL_SLICE: Duration = Duration::from_millis(20);

/// Completions handled between two waits from which the next wait may hold out for a batch:
/// a request answered at a time is two (its receive and its send).
const BATCH_FROM: usize = 4;

/// How [`UringDriver::run_for`] batches its waits ([`UringDriver::batch_waits`]). When the
/// loop handled `BATCH_FROM` or more completions since its last wait, completions come faster
/// than it wakes: the next wait asks for as many (at most `max`) and gives up on the rest once
/// `min_wait` has passed and at least one has come. Otherwise it wakes at the first. A loaded
/// loop thus sleeps and wakes less often per completion; a loop answering one request at a
/// time pays nothing, one in between up to `min_wait` per wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct BatchWait {
    max: usize,
    min_wait: Duration,
    /// Completions reaped since the last wait began.
    seen: usize,
}

impl BatchWait {
    /// Completions the next wait asks for (1: wake at the first).
    fn want(&self) -> usize {
        if self.seen < BATCH_FROM {
            1
        } else {
            self.seen.min(self.max).max(1)
        }
    }

    /// A wait begins: what it asks for and how long it may hold out for more than one (zero
    /// when it asks for one); counting starts again.
    fn start(&mut self) -> (usize, Duration) {
        let want = self.want();
        self.seen = 0;
        let min_wait = if want > 1 {
            self.min_wait
        } else {
            Duration::ZERO
        };
        (want, min_wait)
    }
}

impl UringDriver {
    /// Queues `buf` on `id`, after everything queued before it; `end_of_message` counts a
    /// message. A full queue becomes a chain when the connection has none in flight (pushed
    /// and submitted by the next [`UringDriver::run`]); a partial one waits for more, or for
    /// [`UringDriver::request_flush`]. The buffer comes back with the error when it cannot be
    /// queued: `WouldBlock` when the queue is full (run, then try again), the connection's
    /// error when it failed, [`Error::UnknownConn`] for an id that names no open connection.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, id: sendpath::ConnId) -> sendpath::Result<()> {
    /// let buf = ring.take_buf(id, 4096)?;
    /// if let Err((e, buf)) = ring.push(id, buf, true) {
    ///     if e.kind() == std::io::ErrorKind::WouldBlock { /* full: run, then push `buf` */ }
    ///     # let _ = buf;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn push(&mut self, id: ConnId, buf: Buf, end_of_message: bool) -> Result<(), (Error, Buf)> {
        let st = match self.open_conn_mut(id) {
            Ok(c) => &mut c.state,
            Err(e) => return Err((e, buf)),
        };
        if let Err(buf) = st.push(buf, end_of_message) {
            let e = self.conn_error(id).err().unwrap_or_else(|| {
                Error::sys("io_uring SEND (queue full)")(std::io::ErrorKind::WouldBlock.into())
            });
            return Err((e, buf));
        }
        if st.ready() {
            self.dirty.push(id.idx);
        }
        Ok(())
    }

    /// Lets what is queued on `id` go without waiting for a full batch; submitted by the next
    /// [`UringDriver::run`].
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, id: sendpath::ConnId) -> sendpath::Result<()> {
    /// ring.request_flush(id)?; // the last response of a burst
    /// ring.run(false)?;
    /// # Ok(()) }
    /// ```
    pub fn request_flush(&mut self, id: ConnId) -> Result<()> {
        let st = &mut self.open_conn_mut(id)?.state;
        st.request_flush();
        if st.ready() {
            self.dirty.push(id.idx);
        }
        Ok(())
    }

    /// One pass: routes the completions already in the CQ, enters the kernel to wait for at
    /// least one more only when `wait`, nothing became ready and something is in the kernel,
    /// then pushes and submits the chains that are ready (entering only when there is something
    /// to submit or deferred work to run). Connection errors are each connection's
    /// ([`UringDriver::conn_error`]); an error here is the ring's own.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver) -> sendpath::Result<()> {
    /// let mut writable = Vec::new();
    /// loop {
    ///     ring.take_writable(&mut writable);
    ///     for id in writable.drain(..) { /* push what id has to send */ }
    ///     ring.run(true)?;
    ///     # break;
    /// }
    /// # Ok(()) }
    /// ```
    pub fn run(&mut self, wait: bool) -> Result<()> {
        self.pass(wait.then_some(None))
    }

    /// [`UringDriver::run`], waiting at most `timeout` for a completion: for loops that must
    /// also check a clock or a stop flag.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver) -> sendpath::Result<()> {
    /// ring.run_for(std::time::Duration::from_millis(50))?;
    /// # Ok(()) }
    /// ```
    pub fn run_for(&mut self, timeout: Duration) -> Result<()> {
        self.pass(Some(Some(timeout)))
    }

    /// Whether the kernel lets a wait hold out for a batch for a bounded time
    /// (`IORING_FEAT_MIN_TIMEOUT`, Linux 6.12), which [`UringDriver::batch_waits`] needs.
    ///
    /// ```no_run
    /// # let ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// println!("batched waits: {}", ring.has_min_wait());
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn has_min_wait(&self) -> bool {
        self.ring.has_min_wait()
    }

    /// Lets [`UringDriver::run_for`] hold out for a batch of up to `max` completions, for at
    /// most `min_wait` once one has come, whenever the loop handled several since its last
    /// wait: fewer and fuller wake-ups under load, for up to `min_wait` of added latency per
    /// wait below it; a loop answering one request at a time still wakes at the first
    /// completion. Returns false, and changes nothing, without
    /// [`UringDriver::has_min_wait`].
    ///
    /// ```no_run
    /// # let mut ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// ring.batch_waits(32, std::time::Duration::from_micros(50));
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn batch_waits(&mut self, max: usize, min_wait: Duration) -> bool {
        if !self.has_min_wait() {
            return false;
        }
        let seen = self.batch.map_or(0, |b| b.seen);
        self.batch = (max > 1 && !min_wait.is_zero()).then_some(BatchWait {
            max,
            min_wait,
            seen,
        });
        true
    }

    /// Moves into `out` the connections whose queue gained room (or that failed) since the last
    /// call, so a loop over thousands of connections visits only those.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver) {
    /// let mut writable = Vec::new();
    /// ring.take_writable(&mut writable);
    /// # }
    /// ```
    pub fn take_writable(&mut self, out: &mut Vec<ConnId>) {
        out.append(&mut self.writable);
    }

    /// The error that ended `id`, if one did: the failed request's errno, named.
    ///
    /// ```no_run
    /// # fn f(ring: &sendpath::UringDriver, id: sendpath::ConnId) {
    /// if let Err(e) = ring.conn_error(id) { eprintln!("{e}"); }
    /// # }
    /// ```
    pub fn conn_error(&self, id: ConnId) -> Result<()> {
        let st = &self.conn(id)?.state;
        match st.error() {
            None => Ok(()),
            Some(errno) => {
                let e = std::io::Error::from_raw_os_error(errno);
                Err(if errno == libc::EIO {
                    Error::Chain(e)
                } else if st.config().zc.is_some() && st.stats().zerocopy.attempts > 0 {
                    Error::sys("io_uring SEND_ZC")(e)
                } else {
                    Error::sys("io_uring SEND")(e)
                })
            }
        }
    }

    /// Routes every completion in the CQ to its connection as it is read (counting them for
    /// [`BatchWait`]); then gives the ring the slots the connections let go of, and the
    /// connections the buffers the ring released.
    pub(super) fn reap(&mut self) {
        let UringDriver {
            ring,
            conns,
            gens,
            serial,
            dirty,
            writable,
            zc_inflight,
            letting_go,
            ..
        } = self;
        let mut to = ToConn {
            conns,
            gens,
            serial: *serial,
            dirty,
            writable,
            zc_inflight,
            letting_go,
        };
        let n = ring.reap_with(|c| to.route(c));
        if let Some(b) = &mut self.batch {
            b.seen += n;
        }
        if self.ring.has_lane_tallies() {
            self.take_lane_tallies();
        }
        for i in 0..self.letting_go.len() {
            let tag = self.letting_go[i];
            let Some(c) = self.conns[tag as usize].as_mut() else {
                continue;
            };
            c.state.drain_unheld(&mut self.unheld);
            for &slot in &self.unheld {
                if let Some(b) = self.ring.unhold(slot) {
                    c.state.on_released(b);
                }
            }
            self.unheld.clear();
        }
        self.letting_go.clear();
        self.ring.take_released(&mut self.released);
        if !self.released.is_empty() {
            for (tag, b) in self.released.drain(..) {
                if let Some(c) = self.conns.get_mut(tag as usize).and_then(|c| c.as_mut()) {
                    c.state.on_released(b);
                }
            }
        }
        if self.ring.has_aux() {
            self.dispatch_aux();
        }
        self.sweep_closed();
    }

    /// Hands each connection what its lane datagrams' completions in this reap came to.
    fn take_lane_tallies(&mut self) {
        let UringDriver {
            ring,
            conns,
            dirty,
            zc_inflight,
            ..
        } = self;
        ring.take_lane_tallies(|tag, t| {
            let Some(c) = conns.get_mut(tag as usize).and_then(|c| c.as_mut()) else {
                return;
            };
            let before = c.state.zc_inflight();
            c.state.on_lane_tally(t);
            *zc_inflight = (*zc_inflight + c.state.zc_inflight()).saturating_sub(before);
            // Room in the kernel: what the queue holds may go.
            if c.state.ready() {
                dirty.push(tag);
            }
        });
    }

    /// Pushes the next chain of every connection that has one ready; returns how many requests
    /// were pushed.
    fn start_chains(&mut self) -> usize {
        let mut total = 0;
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for id in dirty.drain(..) {
            let Some(Conn { sock, state, .. }) = self.conns[id as usize].as_mut() else {
                continue;
            };
            let ring = &mut self.ring;
            let fd = sock.as_fd();
            let before = state.zc_inflight();
            state.share_ring_cap(self.cfg.ring_zc_inflight, self.zc_inflight);
            let pushed = state.submit_chain(|s| push_request(ring, fd, s, id));
            self.zc_inflight = (self.zc_inflight + state.zc_inflight()).saturating_sub(before);
            total += pushed.as_ref().map_or(0, |n| *n);
            if pushed.is_err() {
                // The ring refused the SQE (it is full of work that cannot be submitted):
                // nothing more can go on this connection.
                state.fail(libc::EBUSY);
            }
            // Room was made, or the connection failed: either way its owner should look.
            if pushed.is_ok_and(|n| n > 0) || state.error().is_some() {
                let c = self.id_of(id);
                // One entry per burst: an owner that never takes them (one connection
                // driven by wait_room and flush) must not grow the list per chain.
                if self.writable.last() != Some(&c) {
                    self.writable.push(c);
                }
            }
        }
        self.dirty = dirty;
        total
    }

    /// Lets go of closing connections that no completion can name any more.
    fn sweep_closed(&mut self) {
        let mut i = 0;
        while i < self.closing.len() {
            let id = self.closing[i];
            if self.ring.in_kernel_for(id) > 0 {
                i += 1;
                continue;
            }
            self.closing.swap_remove(i);
            if let Some(c) = self.conns[id as usize].take() {
                self.closed_stats.merge(c.state.stats());
                self.zc_inflight = self.zc_inflight.saturating_sub(c.state.zc_inflight());
            }
            self.free_ids.push(id);
            self.events.push(super::Event::Closed(self.id_of(id)));
        }
    }

    /// `wait`: `None` no wait, `Some(None)` until a completion, `Some(Some(t))` at most `t`.
    /// What is already in the CQ is routed first; the pass waits only when that made nothing
    /// ready to submit, so a chain that completed while the caller filled the next one costs no
    /// extra syscall.
    pub(super) fn pass(&mut self, wait: Option<Option<Duration>>) -> Result<()> {
        self.reap();
        self.run_deferred()?;
        let armed = self.ring.in_kernel() > 0 || self.ring.aux_pending() > 0;
        // Events already in hand (a request received, room made) are the owner's to act on
        // now: waiting would delay them by the whole timeout.
        let idle = self.dirty.is_empty()
            && self.rearm.is_empty()
            && !self.rearm_accept
            && self.events.is_empty()
            && self.writable.is_empty();
        if idle && armed {
            match wait {
                Some(None) => {
                    self.ring
                        .submit_and_wait(1)
                        .map_err(Error::sys("io_uring_enter"))?;
                }
                Some(Some(t)) => {
                    let (want, min_wait) = self
                        .batch
                        .as_mut()
                        .map_or((1, Duration::ZERO), BatchWait::start);
                    self.ring
                        .wait_batch(want, min_wait, t)
                        .map_err(Error::sys("io_uring_enter"))?;
                }
                None => {}
            }
            self.reap();
            self.run_deferred()?;
        }
        self.rearm();
        if !self.dirty.is_empty() || self.ring.needs_enter() {
            self.start_chains();
            self.ring.submit().map_err(Error::sys("io_uring_enter"))?;
            self.reap();
        }
        Ok(())
    }

    /// A DEFER_TASKRUN ring runs a bounded batch of deferred completions per plain enter (20
    /// items), which is what a pass usually finds. Work still waiting after one is a backlog:
    /// it runs a CQ's worth an enter, or lagging notifications hold zero-copy buffers the
    /// kernel is done with (they fill the in-flight cap, and with many connections the sender
    /// makes a new buffer for nearly every send).
    fn run_deferred(&mut self) -> Result<()> {
        for i in 0..8 {
            if !self.ring.taskrun_pending() {
                break;
            }
            // The larger enter waits on a timer that has already run out: dearer than a plain
            // one when there is little to run.
            let entered = match i {
                0 => self.ring.submit().map(drop),
                _ => self.ring.run_deferred_work(),
            };
            entered.map_err(Error::sys("io_uring_enter"))?;
            self.reap();
        }
        Ok(())
    }

    /// Pushes and submits the chains that are ready (full queues, flushes, resends), after
    /// routing the completions already in the CQ, and waits in the same syscall until as many
    /// completions as requests pushed have come, or `id`'s send timeout passed: a chain on a
    /// DEFER_TASKRUN ring advances only while its thread is in the kernel, so this runs the
    /// batch through in one `io_uring_enter`. No syscall when nothing is ready. What a
    /// one-connection sender calls after queueing; loops over many connections use
    /// [`UringDriver::run`].
    pub(crate) fn submit_ready(&mut self, id: ConnId) -> Result<()> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        self.reap();
        let n = self.start_chains();
        self.enter_and_route(n, id)
    }

    /// Submits what is queued and waits in the same `io_uring_enter` until `n` more completions
    /// have come, then routes them. With a send timeout on `id`, the wait lasts at most a
    /// slice of it: a batch that does not go through at once is then waited for by a wait that
    /// counts the connection's progress (so the timeout is kept, not doubled).
    pub(crate) fn enter_and_route(&mut self, n: usize, id: ConnId) -> Result<()> {
        match self.conn(id)?.timeout {
            Some(t) => self
                .ring
                .wait_batch(n, Duration::ZERO, t.min(STALL_SLICE))
                .map(drop),
            None => self.ring.submit_and_wait(n).map(drop),
        }
        .map_err(Error::sys("io_uring_enter"))?;
        self.reap();
        Ok(())
    }
}

/// Pushes one request of connection `tag` on `ring`: a `SEND`/`SEND_ZC` for one buffer, a
/// vectored `SENDMSG`/`SENDMSG_ZC` for several. Each new buffer goes to a ring slot.
#[inline]
fn push_request(
    ring: &mut SendRing,
    fd: std::os::fd::BorrowedFd<'_>,
    s: Submit<'_>,
    tag: u32,
) -> std::io::Result<Pushed> {
    if let [part] = s.parts {
        let slot = match part.payload {
            Payload::Held(slot) => slot,
            Payload::New => {
                let buf = s
                    .queue
                    .pop_front()
                    .ok_or(std::io::Error::from_raw_os_error(libc::EBADSLT))?;
                let now = ring.clock(s.op);
                let slot = ring.hold(buf, tag, now);
                // Named from here on, so a failed push below still lets the slot go.
                part.payload = Payload::Held(slot);
                slot
            }
        };
        let (req, registered) = ring.push_slot(fd, slot, part.range.clone(), s.op, s.link)?;
        return Ok(Pushed { req, registered });
    }
    let (req, registered) = ring.push_vectored(fd, s.parts, s.queue, s.op, s.link, tag)?;
    Ok(Pushed { req, registered })
}

/// What routing a completion to its connection touches of the driver: all but the ring, which
/// is reading the completions meanwhile.
struct ToConn<'a> {
    conns: &'a mut [Option<Conn>],
    gens: &'a [u32],
    serial: u32,
    dirty: &'a mut Vec<u32>,
    writable: &'a mut Vec<ConnId>,
    zc_inflight: &'a mut usize,
    /// Connections that let go of slots, for the ring to take once the reap is over.
    letting_go: &'a mut Vec<u32>,
}

impl ToConn<'_> {
    /// One send completion, to its connection's state.
    #[inline]
    fn route(&mut self, c: Cqe) {
        let Some(conn) = self.conns.get_mut(c.tag as usize).and_then(|c| c.as_mut()) else {
            return;
        };
        let st = &mut conn.state;
        if let Some(d) = c.lane.filter(|d| !d.failed) {
            // A stream's `SEND` by the lane that sent all: it held no slot of the state's, went
            // by copy, and fails nothing; the kernel has room again.
            st.on_lane_result(c.req as u32, d, c.res);
            if st.ready() {
                self.dirty.push(c.tag);
            }
            return;
        }
        let before = st.zc_inflight();
        if c.notif {
            let copied = (c.res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0;
            st.on_notification(c.req, copied, c.age_ns);
        } else {
            let (was, failed) = (st.chain_in_flight(), st.error().is_some());
            match c.lane {
                Some(d) => st.on_lane_result(c.req as u32, d, c.res),
                None => st.on_result(c.req, c.res, c.more, c.age_ns),
            }
            if was && st.ready() {
                self.dirty.push(c.tag);
            }
            if !failed && st.error().is_some() {
                // Its owner should look: the connection is over.
                self.writable.push(ConnId {
                    ring: self.serial,
                    idx: c.tag,
                    gen: self.gens[c.tag as usize],
                });
            }
        }
        // Once per run of one connection's completions (a chain's come together).
        if st.has_unheld() && self.letting_go.last() != Some(&c.tag) {
            self.letting_go.push(c.tag);
        }
        *self.zc_inflight = (*self.zc_inflight + st.zc_inflight()).saturating_sub(before);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(max: usize) -> BatchWait {
        BatchWait {
            max,
            min_wait: Duration::from_micros(100),
            seen: 0,
        }
    }

    #[test]
    fn a_loop_answering_one_request_at_a_time_wakes_at_the_first_completion() {
        let mut b = batch(32);
        // Each wait brings a receive, answering it reaps its send: two per wait.
        for _ in 0..100 {
            assert_eq!(b.start(), (1, Duration::ZERO));
            b.seen += 2;
        }
        assert_eq!(b.want(), 1);
    }

    #[test]
    fn a_busy_loop_waits_for_as_many_as_it_handled_capped_and_a_quiet_spell_resets_it() {
        let mut b = batch(32);
        b.seen = 10;
        assert_eq!(b.start(), (10, Duration::from_micros(100)));
        assert_eq!(b.seen, 0, "counting starts again with each wait");
        b.seen = 500;
        assert_eq!(b.start().0, 32);
        // The wait timed out or brought one: back to waking at the first.
        b.seen = 1;
        assert_eq!(b.start(), (1, Duration::ZERO));
        b.seen = BATCH_FROM;
        assert_eq!(b.want(), BATCH_FROM);
        assert_eq!(batch(1).want(), 1);
    }
}
