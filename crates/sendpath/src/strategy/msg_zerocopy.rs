//! `msg-zerocopy`: `sendmsg(MSG_ZEROCOPY)` with one iovec per field. The kernel pins the pages
//! instead of copying them and reports, on the socket's error queue, when it is done with them
//! and whether it had to copy after all (always, for a receiver on the same host).
//!
//! Buffers stay owned by this path until every completion id their message consumed is reported
//! ([`HeldMessages`]), also when a later call of the same message failed; only then do they go
//! back to the pool that [`SendPath::take_buf`] draws from.

use super::{fields, send_all, send_counted, sendmsg_all, sendmsg_one, SendPath};
use crate::buffer::BufPool;
use crate::completion::{HeldMessages, ZcNotification};
use crate::policy::{self, InflightLimits, ZcDecision};
use crate::stats::SendClock;
use crate::Socket;
use crate::{sys, Buf, Error, Msg, Result, SendStats};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// A memory message as it came: one buffer ([`SendPath::send_buf`]) or a list of fields
/// ([`SendPath::send`]). A one-buffer message is held as itself, not in a list.
pub(super) enum Fields {
    One(Buf),
    List(Vec<Buf>),
}

impl Fields {
    /// The buffers the message owns, in order.
    #[inline]
    fn bufs(&self) -> &[Buf] {
        match self {
            Fields::One(b) => std::slice::from_ref(b),
            Fields::List(l) => l,
        }
    }

    /// Gives the buffers back to `pool` (and a list's emptied list, for the next message).
    #[inline]
    fn put_into(self, pool: &mut BufPool) {
        match self {
            Fields::One(b) => pool.put(b),
            Fields::List(l) => pool.put_fields(l),
        }
    }
}

/// The MSG_ZEROCOPY path (and the blocking half of `adaptive`, which also sends by copy
/// through it: [`MsgZerocopy::send_as`]).
pub(super) struct MsgZerocopy {
    sock: Socket,
    stats: SendStats,
    limits: InflightLimits,
    /// Read the error queue once this many sends await completion (and no buffer is free).
    reap_every: usize,
    supported: bool,
    note: Option<String>,
    held: HeldMessages<Fields>,
    pool: BufPool,
    clock: SendClock,
    scratch: Vec<ZcNotification>,
}

impl MsgZerocopy {
    pub(super) fn new(sock: Socket, limits: InflightLimits, reap_every: usize) -> MsgZerocopy {
        let (supported, note) = match sys::socket::enable_zerocopy(sock.as_fd()) {
            Ok(()) => (true, None),
            Err(e) => (
                false,
                Some(format!(
                    "setsockopt(SO_ZEROCOPY) failed ({e}): every send goes by copy and is counted as an `unsupported` fallback"
                )),
            ),
        };
        MsgZerocopy {
            sock,
            stats: SendStats::default(),
            limits,
            reap_every,
            supported,
            note,
            held: HeldMessages::new(),
            pool: BufPool::new(),
            clock: SendClock::new(),
            scratch: Vec::new(),
        }
    }

    /// Sends `msg` with `MSG_ZEROCOPY` (as [`SendPath::send`]) or, when `zerocopy` is false,
    /// by copy; either way counted as a send.
    pub(super) fn send_as(&mut self, msg: Msg, zerocopy: bool) -> Result<()> {
        if zerocopy {
            return self.send(msg);
        }
        let f = fields("adaptive", msg)?;
        let len: usize = f.iter().map(Buf::len).sum();
        self.send_copy_counted(Fields::List(f), len)
    }

    /// Sends the fields of a message of `len` bytes by copy, counted as a send: `adaptive`'s
    /// copy tier, as lean as the `copy` path (at 256 B the sender spends ~1.3 us per send).
    #[inline]
    pub(super) fn send_copy_counted(&mut self, f: Fields, len: usize) -> Result<()> {
        self.send_copy(f)?;
        self.stats.sends += 1;
        self.stats.bytes += len as u64;
        Ok(())
    }

    /// Sends one buffer by copy, counted as a send: [`MsgZerocopy::send_copy_counted`] without
    /// the list, `adaptive`'s copy tier for [`SendPath::send_buf`].
    #[inline(always)]
    pub(super) fn send_copy_buf(&mut self, b: Buf) -> Result<()> {
        send_counted(self.sock.as_fd(), b.as_slice(), &mut self.stats)?;
        self.pool.put(b);
        Ok(())
    }

    /// Zero-copy sends awaiting their completion.
    #[inline]
    pub(super) fn outstanding(&self) -> usize {
        self.held.outstanding()
    }

    /// Reads every completion waiting on the error queue; with `wait_ms > 0`, first waits that
    /// long for one to arrive.
    fn reap(&mut self, wait_ms: i32) -> Result<()> {
        if wait_ms > 0 {
            sys::socket::poll(self.sock.as_fd(), 0, wait_ms).map_err(Error::sys("poll"))?;
        }
        self.scratch.clear();
        sys::socket::recv_zc_notifications(self.sock.as_fd(), &mut self.scratch)
            .map_err(Error::sys("recvmsg(MSG_ERRQUEUE)"))?;
        let now = self.clock.now_ns();
        let stats = &mut self.stats;
        let pool = &mut self.pool;
        for n in self.scratch.drain(..) {
            let lat = &mut stats.completion_latency_ns;
            let r = self.held.release(
                n,
                now,
                |f| f.put_into(pool),
                |l| crate::stats::record_ns(lat, l),
            );
            stats.zerocopy.add(&r);
        }
        Ok(())
    }

    /// Sends by copy (`send` for one buffer, `sendmsg` without `MSG_ZEROCOPY` for several);
    /// the buffers are free at once. Inlined into `adaptive`'s copy tier, which should cost
    /// what `copy` costs.
    #[inline(always)]
    fn send_copy(&mut self, f: Fields) -> Result<()> {
        let fd = self.sock.as_fd();
        let sent = match f.bufs() {
            [one] => send_all(fd, one.as_slice(), &mut self.stats),
            many => {
                let iov: Vec<&[u8]> = many.iter().map(Buf::as_slice).collect();
                let flags = crate::sys::SendFlags::default();
                let (_, sent) = sendmsg_all(fd, &iov, flags, &mut self.stats);
                sent.map_err(Error::sys("sendmsg"))
            }
        };
        f.put_into(&mut self.pool);
        sent
    }

    /// Sends a message of `len` bytes with `MSG_ZEROCOPY` when the policy admits it (reading
    /// completions first when too much is in flight), by copy when not, counted as a send.
    #[inline]
    pub(super) fn send_fields(&mut self, mut f: Fields, len: usize) -> Result<()> {
        let mut reaped = false;
        let mut enobufs_retries = 0;
        loop {
            let decision = policy::admit(
                self.supported,
                self.limits,
                self.held.outstanding(),
                self.held.outstanding_bytes(),
                len,
                reaped,
            );
            match decision {
                ZcDecision::ZeroCopy => {
                    let (calls, sent) = self.sendmsg_zerocopy(&f);
                    self.stats.zerocopy.attempts += calls as u64;
                    // Whatever `sent` says, the ids the calls consumed are the kernel's to
                    // report: the buffers are held until they are (or come back if none).
                    let at = if calls > 0 { self.clock.timed() } else { None };
                    let back = self.held.sent(f, calls, len, at);
                    match (sent, back) {
                        (Ok(()), back) => {
                            if let Some(back) = back {
                                back.put_into(&mut self.pool);
                            }
                            break;
                        }
                        // ENOBUFS before any byte went: nothing is held, decide what to do.
                        (Err(e), Some(back)) if e.raw_os_error() == Some(libc::ENOBUFS) => {
                            f = back;
                            match policy::on_enobufs(enobufs_retries) {
                                ZcDecision::Copy(r) => {
                                    self.stats.zerocopy.fallbacks.count(r);
                                    self.send_copy(f)?;
                                    break;
                                }
                                _ => {
                                    enobufs_retries += 1;
                                    self.reap(1)?;
                                }
                            }
                        }
                        (Err(e), back) => {
                            if let Some(back) = back {
                                back.put_into(&mut self.pool);
                            }
                            return Err(Error::sys("sendmsg(MSG_ZEROCOPY)")(e));
                        }
                    }
                }
                ZcDecision::ReapThenRetry => {
                    self.reap(0)?;
                    reaped = true;
                }
                ZcDecision::Copy(r) => {
                    self.stats.zerocopy.fallbacks.count(r);
                    self.send_copy(f)?;
                    break;
                }
            }
        }
        self.stats.sends += 1;
        self.stats.bytes += len as u64;
        Ok(())
    }

    /// The message's `sendmsg(MSG_ZEROCOPY)` calls: how many consumed an id, and how they
    /// ended.
    #[inline]
    fn sendmsg_zerocopy(&mut self, f: &Fields) -> (u32, std::io::Result<()>) {
        let flags = crate::sys::SendFlags::ZEROCOPY;
        let fd = self.sock.as_fd();
        match f.bufs() {
            [one] => sendmsg_one(fd, one.as_slice(), flags, &mut self.stats),
            many => {
                let iov: Vec<&[u8]> = many.iter().map(Buf::as_slice).collect();
                sendmsg_all(fd, &iov, flags, &mut self.stats)
            }
        }
    }

    /// Reads completions until none is outstanding or `timeout` passed; leaks (never reuses
    /// or frees) the buffers still held then, counted. Returns how many it leaked.
    fn drain(&mut self, timeout: Duration) -> u64 {
        let deadline = Instant::now() + timeout;
        let _ = self.reap(0);
        while self.held.outstanding() > 0 && Instant::now() < deadline {
            let ms = deadline
                .saturating_duration_since(Instant::now())
                .as_millis();
            if self.reap(ms.clamp(1, 10) as i32).is_err() {
                break;
            }
        }
        let mut leaked = 0;
        for f in self.held.abandon() {
            // The kernel may still read these pages: never reuse or free them.
            leaked += f.bufs().len() as u64;
            std::mem::forget(f);
        }
        self.stats.leaked_buffers += leaked;
        leaked
    }
}

impl SendPath for MsgZerocopy {
    fn name(&self) -> &'static str {
        "msg-zerocopy"
    }

    fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let f = fields(self.name(), msg)?;
        let len: usize = f.iter().map(Buf::len).sum();
        self.send_fields(Fields::List(f), len)
    }

    // Inline: `send_bufs` then loops on one buffer's zero-copy `sendmsg`, without a list.
    #[inline]
    fn send_buf(&mut self, b: Buf) -> Result<()> {
        let len = b.len();
        self.send_fields(Fields::One(b), len)
    }

    fn finish(&mut self, timeout: Duration) -> Result<()> {
        match self.drain(timeout) {
            0 => Ok(()),
            buffers => Err(Error::Leaked {
                buffers,
                stats: Box::new(self.stats.clone()),
            }),
        }
    }

    #[inline]
    fn take_buf(&mut self, len: usize) -> Buf {
        // A free buffer first: then nothing of the completions' state is touched.
        let reap = self.pool.free_len() == 0
            && policy::reap_before_take(
                self.pool.free_len(),
                self.held.outstanding(),
                self.held.outstanding_bytes(),
                self.reap_every,
                self.limits,
            );
        if reap {
            // Completions usually wait on the error queue by now, merged into ranges; reading
            // them keeps the pool from growing. An error here resurfaces on the next send.
            let _ = self.reap(0);
        }
        self.pool.take(len)
    }

    fn take_fields(&mut self) -> Vec<Buf> {
        self.pool.take_fields()
    }

    fn stats(&self) -> &SendStats {
        &self.stats
    }

    fn socket(&self) -> &Socket {
        &self.sock
    }
}

impl Drop for MsgZerocopy {
    /// Waits at most a short grace (`DROP_GRACE`) for the completions still due, then leaks what the kernel
    /// holds, counted in [`leaked_on_drop`](crate::leaked_on_drop): a drop never blocks for
    /// long (close the path to wait, and to get the count as an error).
    fn drop(&mut self) {
        if self.held.outstanding() > 0 {
            let leaked = self.drain(crate::stats::DROP_GRACE);
            crate::stats::count_leaked_on_drop(leaked);
        }
    }
}

/// `msg-zerocopy` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "msg-zerocopy",
    source: super::Source::Memory,
    avoids_send_copy: true,
    has_zc_completions: true,
    uses_fields: true,
    copies: Some(super::copies::PAGES_BY_REFERENCE),
    waits: crate::socket::Waits::InTheKernel,
    open: |sock, opts| {
        Ok(Box::new(MsgZerocopy::new(
            sock,
            opts.inflight,
            opts.zc_reap_every,
        )))
    },
};
