//! The async sender's socket half: `send` (copy), `sendmsg(MSG_ZEROCOPY)` and `sendfile` with
//! `MSG_DONTWAIT` on a non-blocking socket registered with the tokio reactor, awaiting
//! writability when the socket is full and the error queue's readiness for MSG_ZEROCOPY
//! completions. A message in progress stays here (with what of it went, and the completion
//! ids it consumed) when a future is dropped, and the next call finishes it first: the byte
//! stream stays whole, and no buffer the kernel may read is freed or handed out.
//!
//! The socket joins the reactor's epoll on its first wait, not before: while it is in an
//! epoll set, every freed send buffer and every completion wakes that set (a locked
//! callback per datagram), which a sender that never fills its socket need not pay.

use crate::buffer::{Buf, BufPool};
use crate::completion::{HeldMessages, ZcNotification};
use crate::policy::{self, InflightLimits, ZcDecision};
use crate::stats::SendClock;
use crate::sys::reactor::Deadline;
use crate::sys::{self, SendFlags};
use crate::{Error, Result, SendStats, Socket};
use std::collections::VecDeque;
use std::io;
use std::os::fd::{AsFd, BorrowedFd};
use std::time::{Duration, Instant};
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A message on its way: its buffer, the bytes of it already on the socket, whether it goes
/// zero-copy, and the completion ids its zero-copy calls consumed.
struct Pending {
    buf: Buf,
    done: usize,
    zc: bool,
    calls: u32,
}

/// The socket half. See the module docs.
pub(super) struct SocketHalf {
    io: Io,
    queue: VecDeque<Pending>,
    held: HeldMessages<Buf>,
    pool: BufPool,
    pub(super) stats: SendStats,
    limits: InflightLimits,
    /// Read completions before a take only once this many sends await them.
    reap_every: usize,
    zc_supported: bool,
    /// Completions read from the error queue and not yet applied.
    notes: Vec<ZcNotification>,
    clock: SendClock,
}

impl SocketHalf {
    /// Registers `sock` (non-blocking, as the caller made it) with the current tokio
    /// runtime's reactor; `zerocopy` enables `SO_ZEROCOPY` (its refusal is kept in the note
    /// and counted per send).
    pub(super) fn new(
        sock: Socket,
        zerocopy: bool,
        limits: InflightLimits,
        reap_every: usize,
    ) -> Result<(SocketHalf, Option<String>)> {
        let (supported, note) = match zerocopy.then(|| sys::socket::enable_zerocopy(sock.as_fd())) {
            Some(Ok(())) => (true, None),
            Some(Err(e)) => (false, Some(format!(
                "setsockopt(SO_ZEROCOPY) failed ({e}): every send goes by copy and is counted as an `unsupported` fallback"
            ))),
            None => (false, None),
        };
        // Registered once now, so that a thread without a runtime is refused here.
        let sock = register(sock)
            .map_err(|(e, _)| {
                Error::Config(format!(
                    "the async sender needs a tokio runtime with I/O enabled (Runtime::enable_io, or #[tokio::main]): {e}"
                ))
            })?
            .into_inner();
        let half = SocketHalf {
            io: Io::Plain(sock),
            queue: VecDeque::new(),
            held: HeldMessages::new(),
            pool: BufPool::new(),
            stats: SendStats::default(),
            limits,
            reap_every,
            zc_supported: supported,
            notes: Vec::new(),
            clock: SendClock::new(),
        };
        Ok((half, note))
    }

    /// A buffer of `len` bytes: one the kernel has released, or a new one (the blocking
    /// path's rule for when to read the error queue first).
    pub(super) fn take_buf(&mut self, len: usize) -> Buf {
        let (free, held) = (self.pool.free_len(), &self.held);
        let (n, bytes) = (held.outstanding(), held.outstanding_bytes());
        if policy::reap_before_take(free, n, bytes, self.reap_every, self.limits) {
            // Completions that wait on the error queue release buffers; an error resurfaces
            // on the next send.
            let _ = self.reap();
        }
        self.pool.take(len)
    }

    /// Queues `buf` as a message, zero-copy when `zc` (and the socket allows it).
    pub(super) fn queue(&mut self, buf: Buf, zc: bool) {
        self.stats.sends += 1;
        if zc && !self.zc_supported {
            self.stats.zerocopy.fallbacks.unsupported += 1;
        }
        self.queue.push_back(Pending {
            buf,
            done: 0,
            zc: zc && self.zc_supported,
            calls: 0,
        });
    }

    /// Zero-copy sends awaiting their completion.
    pub(super) fn zc_inflight(&self) -> usize {
        self.held.outstanding()
    }

    /// Whether nothing is queued or half sent.
    pub(super) fn is_flushed(&self) -> bool {
        self.queue.is_empty()
    }

    /// Puts every queued message on the socket, awaiting room as needed.
    pub(super) async fn drive(&mut self) -> Result<()> {
        while let Some(p) = self.queue.front_mut() {
            let zc = p.zc;
            let r = if zc {
                self.step_zerocopy()
            } else {
                self.step_copy()
            };
            match r {
                Ok(true) => self.message_done(),
                Ok(false) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable().await?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::sys(call(zc))(e)),
            }
        }
        Ok(())
    }

    /// The socket's descriptor.
    pub(super) fn fd(&self) -> BorrowedFd<'_> {
        self.io.fd()
    }

    /// The socket in the reactor's epoll, put there now if it is not yet.
    fn registered(&mut self) -> Result<&AsyncFd<Socket>> {
        if let Io::Plain(_) = self.io {
            let Io::Plain(sock) = std::mem::replace(&mut self.io, Io::Moving) else {
                unreachable!("matched above")
            };
            match register(sock) {
                Ok(r) => self.io = Io::Registered(r),
                Err((e, sock)) => {
                    self.io = Io::Plain(sock);
                    return Err(Error::sys("epoll_ctl(ADD)")(e));
                }
            }
        }
        match &self.io {
            Io::Registered(r) => Ok(r),
            _ => unreachable!("registered above"),
        }
    }

    /// Awaits room on the socket (clearing the readiness that was used up).
    ///
    /// A zero-copy completion on the error queue is an `EPOLLERR` event, which the reactor
    /// reads as "write side closed", a state it never clears: every later wait would return
    /// at once. So when a wait ends on that without room, the completions are read and the
    /// socket leaves the reactor, to join it afresh on the next wait; a real close shows in
    /// `poll` and comes back as the next send's error.
    async fn writable(&mut self) -> Result<()> {
        loop {
            let mut g = self
                .registered()?
                .writable()
                .await
                .map_err(super::reactor_gone("room on the socket"))?;
            let closed = g.ready().is_write_closed();
            g.clear_ready();
            if !closed {
                return Ok(());
            }
            self.reap().map_err(Error::sys("recvmsg(MSG_ERRQUEUE)"))?;
            let revents =
                sys::socket::poll(self.fd(), libc::POLLOUT, 0).map_err(Error::sys("poll"))?;
            if revents & (libc::POLLOUT | libc::POLLHUP) != 0 {
                return Ok(());
            }
            self.deregister();
        }
    }

    /// Takes the socket out of the reactor (forgetting a sticky readiness).
    fn deregister(&mut self) {
        if let Io::Registered(_) = self.io {
            let Io::Registered(r) = std::mem::replace(&mut self.io, Io::Moving) else {
                unreachable!("matched above")
            };
            self.io = Io::Plain(r.into_inner());
        }
    }

    /// One `send` of the front message: whether it is now whole on the socket.
    fn step_copy(&mut self) -> io::Result<bool> {
        let p = self.queue.front_mut().expect("a message in progress");
        let rest = &p.buf.as_slice()[p.done..];
        let n = sys::socket::send(self.io.fd(), rest, dontwait())?;
        self.stats.calls += 1;
        p.done += n;
        if p.done < p.buf.len() {
            self.stats.short_sends += 1;
        }
        Ok(p.done == p.buf.len())
    }

    /// One `sendmsg(MSG_ZEROCOPY)` of the front message (after reading completions when too
    /// many await them), or a copy when the in-flight cap or memory says so.
    fn step_zerocopy(&mut self) -> io::Result<bool> {
        let (len, done, calls) = {
            let p = self.queue.front().expect("a message in progress");
            (p.buf.len(), p.done, p.calls)
        };
        if calls == 0 && done == 0 {
            let admit = |s: &Self, reaped| {
                let (n, b) = (s.held.outstanding(), s.held.outstanding_bytes());
                policy::admit(true, s.limits, n, b, len, reaped)
            };
            let mut d = admit(self, false);
            if d == ZcDecision::ReapThenRetry {
                self.reap()?;
                d = admit(self, true);
            }
            if let ZcDecision::Copy(r) = d {
                self.stats.zerocopy.fallbacks.count(r);
                self.queue.front_mut().expect("front").zc = false;
                return self.step_copy();
            }
        }
        let flags = dontwait() | SendFlags::ZEROCOPY;
        let p = self.queue.front_mut().expect("a message in progress");
        let rest = &p.buf.as_slice()[p.done..];
        match sys::socket::sendmsg(self.io.fd(), &[rest], flags) {
            Ok(n) => {
                p.done += n;
                p.calls += 1;
                self.stats.calls += 1;
                self.stats.zerocopy.attempts += 1;
                if p.done < len {
                    self.stats.short_sends += 1;
                }
                Ok(p.done == len)
            }
            // Out of notification or pinned memory with nothing of the message sent: read
            // completions and copy this one (the blocking path's rule, without its wait).
            Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) && p.calls == 0 => {
                self.stats.zerocopy.fallbacks.enobufs += 1;
                p.zc = false;
                self.reap()?;
                self.step_copy()
            }
            Err(e) => Err(e),
        }
    }

    /// The front message is whole on the socket: count it, and hold its buffer until the
    /// kernel reports its ids (or give it back now, for a copy).
    fn message_done(&mut self) {
        let p = self.queue.pop_front().expect("a message in progress");
        self.stats.bytes += p.buf.len() as u64;
        if p.calls == 0 {
            return self.pool.put(p.buf);
        }
        let at = self.clock.timed();
        if let Some(back) = self.held.sent(p.buf, p.calls, p.done, at) {
            self.pool.put(back);
        }
        self.apply();
    }

    /// Reads every completion waiting on the error queue, without waiting, and applies what
    /// it can (see [`SocketHalf::apply`]).
    pub(super) fn reap(&mut self) -> io::Result<()> {
        sys::socket::recv_zc_notifications(self.io.fd(), &mut self.notes)?;
        self.apply();
        Ok(())
    }

    /// Applies the completions read so far: buffers whose last id is in go back to the pool.
    /// Not while a zero-copy message is half sent: its ids are recorded when it is whole, and
    /// a completion of one of them (the kernel may complete the first call's before the last
    /// is made) must wait until then.
    fn apply(&mut self) {
        if self.notes.is_empty() || self.queue.front().is_some_and(|p| p.calls > 0) {
            return;
        }
        let now = self.clock.now_ns();
        let (stats, pool) = (&mut self.stats, &mut self.pool);
        for n in self.notes.drain(..) {
            let lat = &mut stats.completion_latency_ns;
            let r = self
                .held
                .release(n, now, |b| pool.put(b), |l| crate::stats::record_ns(lat, l));
            stats.zerocopy.add(&r);
        }
    }

    /// Awaits the error queue's readiness and reads the completions, until none is due or
    /// `timeout` passed; the buffers still held then are leaked (never freed), counted.
    pub(super) async fn drain(&mut self, timeout: Duration) -> Result<u64> {
        let mut deadline = Deadline::after(timeout);
        self.reap().map_err(Error::sys("recvmsg(MSG_ERRQUEUE)"))?;
        while self.held.outstanding() > 0 {
            let ready = self.registered()?.ready(Interest::ERROR);
            let ready = deadline.within(ready).await;
            match ready.map_err(super::deadline_failed)? {
                Some(Ok(mut g)) => g.clear_ready_matching(tokio::io::Ready::ERROR),
                Some(Err(e)) => return Err(super::reactor_gone("the error queue")(e)),
                None => break,
            }
            self.reap().map_err(Error::sys("recvmsg(MSG_ERRQUEUE)"))?;
        }
        Ok(self.leak_held())
    }

    /// Leaks what the kernel still holds (it may read it yet), counted; how many.
    fn leak_held(&mut self) -> u64 {
        let mut n = 0;
        for b in self.held.abandon() {
            n += 1;
            std::mem::forget(b);
        }
        self.stats.leaked_buffers += n;
        n
    }

    /// `sendfile` of `len` bytes of `file` from `offset`, awaiting room as needed.
    pub(super) async fn send_file(
        &mut self,
        file: &std::fs::File,
        mut offset: u64,
        len: usize,
    ) -> Result<()> {
        let end = offset + len as u64;
        while offset < end {
            let sock = self.fd();
            let left = (end - offset) as usize;
            match sys::file::sendfile(sock, file.as_fd(), &mut offset, left) {
                Ok(0) => return Err(Error::Config("the file ended before the range did".into())),
                Ok(n) => {
                    self.stats.calls += 1;
                    if n < left {
                        self.stats.short_sends += 1;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.writable().await?,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(Error::sys("sendfile")(e)),
            }
        }
        self.stats.sends += 1;
        self.stats.bytes += len as u64;
        self.stats.zerocopy.attempts += 1;
        Ok(())
    }
}

impl Drop for SocketHalf {
    /// A message a zero-copy call already sent part of stays held (its ids are the kernel's);
    /// what the kernel holds after a short grace is leaked, counted in `leaked_on_drop`.
    fn drop(&mut self) {
        while let Some(p) = self.queue.pop_front() {
            if p.calls > 0 {
                self.held.sent(p.buf, p.calls, p.done, None);
            }
        }
        self.apply();
        if self.held.outstanding() == 0 {
            return;
        }
        let deadline = Instant::now() + crate::stats::DROP_GRACE;
        while self.held.outstanding() > 0 && Instant::now() < deadline {
            let _ = sys::socket::poll(self.fd(), 0, 5);
            if self.reap().is_err() {
                break;
            }
        }
        let leaked = self.leak_held();
        crate::stats::count_leaked_on_drop(leaked);
    }
}

/// The socket, in the reactor or not yet (`Moving` only inside a call that moves it).
enum Io {
    Plain(Socket),
    Registered(AsyncFd<Socket>),
    Moving,
}

impl Io {
    fn fd(&self) -> BorrowedFd<'_> {
        match self {
            Io::Plain(s) => s.as_fd(),
            Io::Registered(r) => r.get_ref().as_fd(),
            Io::Moving => unreachable!("the socket is always in place between calls"),
        }
    }
}

/// Registers `sock` with the current runtime's reactor for everything the half awaits.
fn register(sock: Socket) -> Result<AsyncFd<Socket>, (io::Error, Socket)> {
    let interest = Interest::READABLE | Interest::WRITABLE | Interest::ERROR;
    crate::sys::reactor::register(sock, interest)
}

/// `MSG_DONTWAIT`: the socket is non-blocking, and says so per call too.
fn dontwait() -> SendFlags {
    SendFlags::DONTWAIT
}

/// The call a failed send was, for its error.
fn call(zc: bool) -> &'static str {
    if zc {
        "sendmsg(MSG_ZEROCOPY)"
    } else {
        "send"
    }
}
