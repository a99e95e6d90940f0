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

/// A memory message as it came: one buffer ([`SendPath::send_buf`]), a list of fields
/// ([`SendPath::send`]), or one of the path's own slots, written in place
/// ([`SendPath::send_in_place`]). A one-buffer message is held as itself, not in a list.
pub(super) enum Fields {
    One(Buf),
    List(Vec<Buf>),
    Slot(u32),
}

/// A message's bytes: in one piece, or in several buffers.
enum Bytes<'a> {
    One(&'a [u8]),
    Many(&'a [Buf]),
}

impl Fields {
    /// The message's bytes (a slot's among `slots`).
    #[inline(always)]
    fn bytes<'a>(&'a self, slots: &'a [Slot]) -> Bytes<'a> {
        match self {
            Fields::One(b) => Bytes::One(b.as_slice()),
            Fields::List(l) if l.len() == 1 => Bytes::One(l[0].as_slice()),
            Fields::List(l) => Bytes::Many(l),
            Fields::Slot(i) => Bytes::One(slots[*i as usize].bytes()),
        }
    }

    /// Gives the buffers back to `pool` (and a list's emptied list, for the next message), a
    /// slot to `free_slots`.
    #[inline(always)]
    fn put_into(self, pool: &mut BufPool, free_slots: &mut Vec<u32>) {
        match self {
            Fields::One(b) => pool.put(b),
            Fields::List(l) => pool.put_fields(l),
            Fields::Slot(i) => free_slots.push(i),
        }
    }
}

/// A buffer of `send_in_place`, kept by the path: bytes of its own from a page boundary (a
/// zero-copy send pins every page its bytes touch), `v[off..]`, written again only once the
/// kernel's notification has released it.
struct Slot {
    v: Vec<u8>,
    off: usize,
}

impl Slot {
    fn new(len: usize) -> Slot {
        let (v, off) = crate::buffer::aligned_vec(len, crate::buffer::FILL);
        Slot { v, off }
    }

    #[inline(always)]
    fn bytes(&self) -> &[u8] {
        &self.v[self.off..]
    }

    /// The slot cut (or grown) to `len` bytes, to write.
    #[inline(always)]
    fn bytes_mut(&mut self, len: usize) -> &mut [u8] {
        if self.v.len() != self.off + len {
            self.resize(len);
        }
        &mut self.v[self.off..]
    }

    #[cold]
    fn resize(&mut self, len: usize) {
        match self.off + len <= self.v.capacity() {
            true => self.v.resize(self.off + len, crate::buffer::FILL),
            false => *self = Slot::new(len),
        }
    }
}

/// What [`HeldMessages`] holds of a message until its ids are reported: a slot's index, or
/// where its own buffers wait in [`Kept`]. A few bytes, where each id used to carry the buffers.
#[derive(Clone, Copy)]
enum Held {
    Slot(u32),
    Owned(u32),
}

/// Messages' own buffers while the kernel may read them, found by index.
#[derive(Default)]
struct Kept {
    owned: Vec<Option<Fields>>,
    free: Vec<u32>,
}

impl Kept {
    /// Keeps `f`'s buffers (a slot is already the path's: only its index is held).
    #[inline(always)]
    fn keep(&mut self, f: Fields) -> Held {
        if let Fields::Slot(i) = f {
            return Held::Slot(i);
        }
        match self.free.pop() {
            Some(k) => {
                self.owned[k as usize] = Some(f);
                Held::Owned(k)
            }
            None => {
                self.owned.push(Some(f));
                Held::Owned((self.owned.len() - 1) as u32)
            }
        }
    }

    /// The message `h` stands for, no longer kept.
    #[inline(always)]
    fn take(&mut self, h: Held) -> Option<Fields> {
        match h {
            Held::Slot(i) => Some(Fields::Slot(i)),
            Held::Owned(k) => {
                let f = self.owned.get_mut(k as usize)?.take();
                self.free.push(k);
                f
            }
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
    held: HeldMessages<Held>,
    kept: Kept,
    pool: BufPool,
    /// The buffers `send_in_place` writes messages in, each page-aligned (a zero-copy send
    /// pins every page its bytes touch); they never leave the path, and a message holds its
    /// slot's index until the kernel's notification.
    slots: Vec<Slot>,
    /// Slots no send holds, the last released first.
    free_slots: Vec<u32>,
    /// Where [`MsgZerocopy::send_copy_in_place`] writes each message it sends by copy.
    copy_slot: Slot,
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
            kept: Kept::default(),
            pool: BufPool::new(),
            slots: Vec::new(),
            free_slots: Vec::new(),
            copy_slot: Slot::new(0),
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

    /// Message `i` of `len` bytes written by `fill` in a slot, and sent from it as
    /// [`MsgZerocopy::send_fields`] decides (with `MSG_ZEROCOPY`, holding the slot until its
    /// notification, or by copy): one message of [`SendPath::send_in_place`].
    #[inline(always)]
    pub(super) fn send_zc_in_place(
        &mut self,
        i: usize,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        let slot = self.free_slot(len);
        fill(i, self.slots[slot as usize].bytes_mut(len));
        // Taken only once written: a `fill` that panics leaves it free.
        self.free_slots.pop();
        self.send_fields(Fields::Slot(slot), len)
    }

    /// Message `i` of `len` bytes written by `fill` in a buffer of the path's and sent by
    /// copy, counted as a send: `adaptive`'s copy tier in place. The kernel has copied the
    /// bytes when `send` returns, so one buffer serves every such message.
    #[inline(always)]
    pub(super) fn send_copy_in_place(
        &mut self,
        i: usize,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        fill(i, self.copy_slot.bytes_mut(len));
        send_counted(self.sock.as_fd(), self.copy_slot.bytes(), &mut self.stats)
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
        let (pool, free_slots, kept) = (&mut self.pool, &mut self.free_slots, &mut self.kept);
        for n in self.scratch.drain(..) {
            let lat = &mut stats.completion_latency_ns;
            let r = self.held.release(
                n,
                now,
                |h| {
                    if let Some(f) = kept.take(h) {
                        f.put_into(pool, free_slots);
                    }
                },
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
        let sent = match f.bytes(&self.slots) {
            Bytes::One(one) => send_all(fd, one, &mut self.stats),
            Bytes::Many(many) => {
                let iov: Vec<&[u8]> = many.iter().map(Buf::as_slice).collect();
                let flags = crate::sys::SendFlags::default();
                let (_, sent) = sendmsg_all(fd, &iov, flags, &mut self.stats);
                sent.map_err(Error::sys("sendmsg"))
            }
        };
        f.put_into(&mut self.pool, &mut self.free_slots);
        sent
    }

    /// Sends a message of `len` bytes with `MSG_ZEROCOPY` when the policy admits it (reading
    /// completions first when too much is in flight), by copy when not, counted as a send.
    /// Always inline: each caller's kind of message (one buffer, a slot) is then known, and
    /// the tests of its kind fold away.
    #[inline(always)]
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
                    let back = self.hold(f, calls, len, at);
                    match (sent, back) {
                        (Ok(()), back) => {
                            if let Some(back) = back {
                                back.put_into(&mut self.pool, &mut self.free_slots);
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
                                back.put_into(&mut self.pool, &mut self.free_slots);
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

    /// Holds `f` for the ids its `calls` consumed, or hands it back when they consumed none.
    #[inline(always)]
    fn hold(&mut self, f: Fields, calls: u32, len: usize, at: Option<u64>) -> Option<Fields> {
        if calls == 0 {
            return Some(f);
        }
        let h = self.kept.keep(f);
        let back = self.held.sent(h, calls, len, at);
        back.and_then(|h| self.kept.take(h))
    }

    /// The message's `sendmsg(MSG_ZEROCOPY)` calls: how many consumed an id, and how they
    /// ended.
    #[inline(always)]
    fn sendmsg_zerocopy(&mut self, f: &Fields) -> (u32, std::io::Result<()>) {
        let flags = crate::sys::SendFlags::ZEROCOPY;
        let fd = self.sock.as_fd();
        match f.bytes(&self.slots) {
            Bytes::One(one) => sendmsg_one(fd, one, flags, &mut self.stats),
            Bytes::Many(many) => {
                let iov: Vec<&[u8]> = many.iter().map(Buf::as_slice).collect();
                sendmsg_all(fd, &iov, flags, &mut self.stats)
            }
        }
    }

    /// With no free buffer (or slot) to take: reads the error queue when the policy says
    /// completions are due. They usually wait there by now, merged into ranges; reading them
    /// keeps the pool from growing. An error here resurfaces on the next send.
    #[inline]
    fn reap_before_take(&mut self) {
        let (sends, bytes) = (self.held.outstanding(), self.held.outstanding_bytes());
        if policy::reap_before_take(0, sends, bytes, self.reap_every, self.limits) {
            let _ = self.reap(0);
        }
    }

    /// The slot the next message is written in, left last in `free_slots`: a released one,
    /// after reading the error queue when the policy says completions are due, else a new one.
    #[inline]
    fn free_slot(&mut self, len: usize) -> u32 {
        if self.free_slots.is_empty() {
            self.reap_before_take();
        }
        if let Some(&i) = self.free_slots.last() {
            return i;
        }
        self.slots.push(Slot::new(len));
        self.free_slots.push((self.slots.len() - 1) as u32);
        (self.slots.len() - 1) as u32
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
        let (mut leaked, mut slots) = (0, false);
        for h in self.held.abandon() {
            let Some(f) = self.kept.take(h) else {
                continue;
            };
            leaked += match &f {
                Fields::List(l) => l.len() as u64,
                _ => 1,
            };
            slots |= matches!(f, Fields::Slot(_));
            // The kernel may still read these pages: never reuse or free them.
            std::mem::forget(f);
        }
        if slots {
            // Every slot is let go with them, free ones too: the next messages get new ones.
            std::mem::forget(std::mem::take(&mut self.slots));
            self.free_slots.clear();
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
        if self.pool.free_len() == 0 {
            self.reap_before_take();
        }
        self.pool.take(len)
    }

    fn take_fields(&mut self) -> Vec<Buf> {
        self.pool.take_fields()
    }

    /// Each message written in a slot of the path's own and sent from it with `MSG_ZEROCOPY`
    /// (or by copy, as `send_buf` decides): only the slot's index is held until the kernel's
    /// notification, and no buffer moves.
    fn send_in_place(
        &mut self,
        n: usize,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        for i in 0..n {
            self.send_zc_in_place(i, len, fill)?;
        }
        Ok(())
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

#[cfg(test)]
mod tests {
    use super::*;

    /// Messages written in place hold only their slot until the kernel's notification; then
    /// the slot is written again, so a steady loop needs about as many slots as sends in
    /// flight, and every slot and kept message is back once the path has finished.
    #[test]
    fn slots_come_back_with_their_notifications_and_are_written_again() {
        let rx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let mut p = MsgZerocopy::new(Socket::from(tx), InflightLimits::default(), 32);
        if !p.supported {
            return crate::test_support::skip(p.note.as_deref().unwrap_or("SO_ZEROCOPY"));
        }
        let mut written = 0u64;
        for round in 0..200u64 {
            // Owned buffers between, on the same ids: both kinds are held by one tracker.
            let b = p.take_buf(1000);
            p.send_buf(b).unwrap();
            p.send_in_place(16, 1400, &mut |i, b| {
                assert_eq!(b.len(), 1400);
                b[..8].copy_from_slice(&(round * 16 + i as u64).to_le_bytes());
                written += 1;
            })
            .unwrap();
        }
        p.finish(Duration::from_secs(5)).unwrap();
        let z = &p.stats.zerocopy;
        assert_eq!((written, p.stats.sends), (3200, 3400));
        assert_eq!(z.completions, z.attempts, "every id reported: {z:?}");
        assert_eq!(p.free_slots.len(), p.slots.len(), "every slot back");
        assert_eq!(
            p.kept.free.len(),
            p.kept.owned.len(),
            "every owned message back"
        );
        assert!(p.kept.owned.iter().all(Option::is_none));
        // Reaped every 32 sends in flight at most, and the policy's caps bound the rest.
        assert!(
            p.slots.len() <= 256,
            "{} slots for 3200 messages",
            p.slots.len()
        );
        assert!(
            p.slots
                .iter()
                .all(|b| (b.bytes().as_ptr() as usize).is_multiple_of(4096)),
            "each slot starts on a page"
        );
    }
}
