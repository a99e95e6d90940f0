//! `adaptive`: each send takes the path the host profile says wins at its size, among `copy`
//! (`send()`), `msg-zerocopy` (`sendmsg(MSG_ZEROCOPY)`), `uring` (io_uring SEND) and `uring-zc`
//! (SEND_ZC), and file data goes by `sendfile()`. The decisions are
//! [`policy::adaptive`](crate::policy::adaptive)'s (tiers, runs, back-off where the kernel
//! copies, the in-flight cap), made by one [`Adaptive`] that both halves use; this file only
//! carries them out on one socket, with the same machinery as the fixed paths:
//!
//! - the `copy` and `msg-zerocopy` tiers go on the blocking half, the `msg-zerocopy` path's
//!   own sender ([`MsgZerocopy`]), each send decided here;
//! - the `uring` and `uring-zc` tiers go on a ring of the path's own, one connection sending
//!   batches as the `uring` path does ([`UringDriver::push_bufs`]), each send decided by the
//!   ring's connection state with the same [`Adaptive`] (moved into its chooser when the ring
//!   is made).
//!
//! Byte order: the blocking calls put their bytes on the socket before they return, so a ring
//! send after a blocking one is in order. Before a blocking send after ring sends, the ring is
//! flushed (every queued byte on the socket). The ring is made on the first send that needs
//! it, on a duplicate of the socket's fd.
//!
//! Buffers come back only once the kernel has released them: each half keeps its own pool
//! (`take_buf` draws from the half the size's tier uses). `send_in_place` moves no buffer:
//! each message is written where its half sends from (the blocking half's own buffers, a
//! slot held until its notification for `MSG_ZEROCOPY`; the ring's arena slots).

use super::msg_zerocopy::{Fields, MsgZerocopy};
use super::{fields, sendfile::sendfile_all, SendPath};
use crate::driver::{ConnId, DriverConfig, UringDriver};
use crate::policy::adaptive::Adaptive;
use crate::send::Chooser;
use crate::{Buf, Error, Msg, Options, Result, SendStats, Socket, Strategy};
use std::fs::File;
use std::os::fd::AsFd;
use std::sync::Arc;
use std::time::Duration;

/// Completion counters of the blocking half already passed on to the decisions.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    completions: u64,
    copied: u64,
    no_memory: u64,
}

/// The io_uring half: one connection on its own ring, whose chooser holds the decisions.
struct Ring {
    driver: UringDriver,
    id: ConnId,
}

/// Which half a tier's sends go on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Half {
    Copy,
    MsgZerocopy,
    Ring,
}

impl Half {
    fn of(tier: Strategy) -> Half {
        match tier {
            Strategy::Uring | Strategy::UringZc => Half::Ring,
            Strategy::MsgZerocopy => Half::MsgZerocopy,
            _ => Half::Copy,
        }
    }
}

/// The `adaptive` path. See the module docs.
pub(super) struct AdaptivePath {
    blocking: MsgZerocopy,
    seen: Seen,
    ring: Option<Ring>,
    /// The decisions while there is no ring (then they are the ring's chooser's).
    decide: Option<Adaptive>,
    /// Why the ring could not be made (its tiers then run on the blocking half).
    note: Option<String>,
    opts: Options,
    file: Option<Arc<File>>,
    file_stats: SendStats,
    /// The last send went on the ring (flush it before a blocking one).
    on_ring: bool,
    /// Every half's counts and the decisions, refreshed by `flush`, `finish` and every 4096
    /// sends (merging the halves' histograms costs microseconds: not per send).
    stats: SendStats,
    sends: u64,
    /// A list for a run of buffers, and one for a single buffer, kept between sends.
    run: Vec<Buf>,
    one: Vec<Buf>,
}

impl AdaptivePath {
    fn new(sock: Socket, opts: &Options) -> AdaptivePath {
        let profile = opts.profile.as_deref().cloned().unwrap_or_default();
        let mut p = AdaptivePath {
            blocking: MsgZerocopy::new(sock, opts.inflight, opts.zc_reap_every),
            seen: Seen::default(),
            ring: None,
            decide: Some(Adaptive::new(profile, opts.adaptive)),
            note: None,
            opts: opts.clone(),
            file: opts.file.clone(),
            file_stats: SendStats::default(),
            on_ring: false,
            stats: SendStats::default(),
            sends: 0,
            run: Vec::new(),
            one: Vec::new(),
        };
        p.refresh();
        p
    }

    /// The decisions: the ring's chooser's once there is a ring.
    #[inline]
    fn decide(&mut self) -> &mut Adaptive {
        match &mut self.ring {
            Some(r) => r
                .driver
                .chooser_mut(r.id)
                .and_then(Chooser::adaptive_mut)
                .expect("the ring's connection decides adaptively"),
            None => self.decide.as_mut().expect("no ring: the path decides"),
        }
    }

    /// The half a send of `len` bytes goes on: the ring's tiers on the blocking half when no
    /// ring can be made.
    #[inline]
    fn half(&mut self, len: usize) -> Half {
        match Half::of(self.decide().tier(len)) {
            Half::Ring if !self.has_ring() => match self.decide().tier(len) {
                Strategy::UringZc => Half::MsgZerocopy,
                _ => Half::Copy,
            },
            h => h,
        }
    }

    /// Whether there is a ring, made now if it can be (a note says why not).
    fn has_ring(&mut self) -> bool {
        if self.ring.is_none() && self.note.is_none() {
            match self.make_ring() {
                Ok(r) => self.ring = Some(r),
                Err(e) => {
                    self.note = Some(format!(
                        "io_uring unavailable ({e}): the uring and uring-zc tiers run as copy and msg-zerocopy"
                    ))
                }
            }
        }
        self.ring.is_some()
    }

    fn make_ring(&mut self) -> Result<Ring> {
        let fd = self.blocking.socket().as_fd();
        let fd = fd.try_clone_to_owned().map_err(Error::sys("dup"))?;
        let cfg = DriverConfig {
            connections: 1,
            ring_zc_inflight: None,
            options: Options {
                file: None,
                ..self.opts.clone()
            },
        };
        let mut driver = UringDriver::new(cfg)?;
        let decide = self.decide.take().expect("no ring yet: the path decides");
        let chooser = Chooser::Adaptive(Box::new(decide.clone()));
        match driver.add_with_chooser(Socket::from(fd), chooser) {
            Ok(id) => Ok(Ring { driver, id }),
            Err(e) => {
                self.decide = Some(decide);
                Err(e)
            }
        }
    }

    /// Sends the buffers of `bufs`, in order, each a message, run by run of one half; leaves
    /// `bufs` empty (its capacity kept).
    fn send_runs(&mut self, bufs: &mut Vec<Buf>) -> Result<()> {
        let mut rest = bufs.drain(..).peekable();
        while let Some(first) = rest.next() {
            let (len, half) = (first.len(), self.half(first.len()));
            let mut run = std::mem::take(&mut self.run);
            run.push(first);
            // The same size goes on the same half: the common case is one run per batch.
            while let Some(b) = rest.next_if(|b| b.len() == len) {
                run.push(b);
            }
            let r = self.send_run(half, &mut run);
            run.clear();
            self.run = run;
            r?;
        }
        Ok(())
    }

    /// Sends one run of buffers on `half`.
    fn send_run(&mut self, half: Half, run: &mut Vec<Buf>) -> Result<()> {
        let (n, len) = (run.len(), run[0].len());
        if half == Half::Ring {
            let r = self.ring.as_mut().expect("a ring half has a ring");
            r.driver.push_bufs(r.id, run)?;
            self.on_ring = true;
        } else {
            let mut owned = Owned(run.drain(..));
            self.send_blocking(half, len, n, &mut owned)?;
        }
        self.counted(n as u64);
        Ok(())
    }

    /// Sends `n` messages of `len` bytes on the blocking `half`, each decided here and sent by
    /// `msgs`: messages owned by the caller or written in place go by the same decisions.
    #[inline(always)]
    fn send_blocking(
        &mut self,
        half: Half,
        len: usize,
        n: usize,
        msgs: &mut impl Messages,
    ) -> Result<()> {
        self.flush_ring()?;
        if half == Half::Copy {
            let inflight = self.blocking.outstanding();
            if self.decide().tier(len) == Strategy::Copy {
                // A copy tier is copied whatever the decisions' state: the first send is
                // decided (it may be a switch), the rest counted at once, as deciding each
                // would count them.
                self.decide().choose(len, inflight);
                self.decide().count_copies(n as u64 - 1);
                msgs.copies(&mut self.blocking, n)?;
            } else {
                for i in 0..n {
                    self.decide().choose(len, inflight);
                    msgs.one(&mut self.blocking, i, false)?;
                }
            }
            if inflight > 0 {
                self.feedback();
            }
            return Ok(());
        }
        for i in 0..n {
            let inflight = self.blocking.outstanding();
            let zc = self.decide().choose(len, inflight).avoids_send_copy();
            msgs.one(&mut self.blocking, i, zc)?;
            self.feedback();
        }
        Ok(())
    }

    /// Sends a message of several fields on the half its size's tier uses.
    fn send_fields(&mut self, mut f: Vec<Buf>) -> Result<()> {
        let len: usize = f.iter().map(Buf::len).sum();
        match self.half(len) {
            Half::Ring => {
                let r = self.ring.as_mut().expect("a ring half has a ring");
                r.driver.push_message("adaptive", r.id, &mut f)?;
                r.driver.submit_ready(r.id)?;
                r.driver.conn_error(r.id)?;
                self.on_ring = true;
            }
            _ => {
                self.flush_ring()?;
                let inflight = self.blocking.outstanding();
                let zc = self.decide().choose(len, inflight).avoids_send_copy();
                self.blocking.send_as(Msg::Fields(f), zc)?;
                self.feedback();
            }
        }
        self.counted(1);
        Ok(())
    }

    /// Counts sends; every 4096, refreshes the merged counters.
    #[inline]
    fn counted(&mut self, n: u64) {
        let before = self.sends / 4096;
        self.sends += n;
        if self.sends / 4096 != before {
            self.refresh();
        }
    }

    /// Puts every byte queued on the ring on the socket.
    fn flush_ring(&mut self) -> Result<()> {
        if let (Some(r), true) = (&mut self.ring, self.on_ring) {
            r.driver.flush(r.id)?;
        }
        self.on_ring = false;
        Ok(())
    }

    /// Passes the blocking half's new completions and memory refusals on to the decisions (a
    /// few integer comparisons when nothing changed). The ring's go to its chooser directly.
    fn feedback(&mut self) {
        let b = self.blocking.stats();
        let now = Seen {
            completions: b.zerocopy.completions,
            copied: b.zerocopy.copied,
            no_memory: b.zerocopy.fallbacks.enobufs,
        };
        let was = std::mem::replace(&mut self.seen, now);
        if now.completions > was.completions {
            let copied = now.copied.saturating_sub(was.copied);
            self.decide()
                .on_completions(now.completions - was.completions, copied);
        }
        for _ in was.no_memory..now.no_memory {
            self.decide().on_no_memory();
        }
    }

    /// Recomputes the merged stats.
    fn refresh(&mut self) {
        let mut s = self.blocking.stats().clone();
        if let Some(r) = &self.ring {
            s.merge(r.driver.stats(r.id).expect("the ring's one connection"));
        }
        s.merge(&self.file_stats);
        s.decisions = Some(*self.decide().decisions());
        self.stats = s;
    }
}

/// The messages of a run on the blocking half, as [`AdaptivePath::send_blocking`] sends them.
trait Messages {
    /// Sends message `i`, with `MSG_ZEROCOPY` when `zc`, else by copy.
    fn one(&mut self, blocking: &mut MsgZerocopy, i: usize, zc: bool) -> Result<()>;

    /// Sends all `n` by copy.
    fn copies(&mut self, blocking: &mut MsgZerocopy, n: usize) -> Result<()> {
        (0..n).try_for_each(|i| self.one(blocking, i, false))
    }
}

/// A run of the caller's buffers, each a message.
struct Owned<'a>(std::vec::Drain<'a, Buf>);

impl Messages for Owned<'_> {
    #[inline(always)]
    fn one(&mut self, blocking: &mut MsgZerocopy, _: usize, zc: bool) -> Result<()> {
        let b = self.0.next().expect("one buffer per message of the run");
        match zc {
            true => {
                let len = b.len();
                blocking.send_fields(Fields::One(b), len)
            }
            false => blocking.send_copy_buf(b),
        }
    }
}

/// Messages of `len` bytes that `fill` writes in the blocking half's own buffers.
struct InPlace<'a> {
    len: usize,
    fill: &'a mut dyn FnMut(usize, &mut [u8]),
}

impl Messages for InPlace<'_> {
    fn one(&mut self, blocking: &mut MsgZerocopy, i: usize, zc: bool) -> Result<()> {
        match zc {
            true => blocking.send_zc_in_place(i, self.len, self.fill),
            false => blocking.send_copy_in_place(i, self.len, self.fill),
        }
    }

    /// One tight loop: the copy tier's messages, each written and sent from one buffer.
    fn copies(&mut self, blocking: &mut MsgZerocopy, n: usize) -> Result<()> {
        (0..n).try_for_each(|i| blocking.send_copy_in_place(i, self.len, self.fill))
    }
}

impl SendPath for AdaptivePath {
    fn name(&self) -> &'static str {
        "adaptive"
    }

    fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let (offset, len) = match msg {
            Msg::File { offset, len } => (offset, len),
            f => return self.send_fields(fields("adaptive", f)?),
        };
        let Some(file) = self.file.clone() else {
            return Err(Error::Config(
                "the adaptive path sends file data with sendfile: give Options::file".into(),
            ));
        };
        self.flush_ring()?;
        self.decide().choose_file();
        sendfile_all(
            self.blocking.socket(),
            &file,
            offset,
            len,
            &mut self.file_stats,
        )?;
        self.feedback();
        self.counted(1);
        Ok(())
    }

    fn send_buf(&mut self, b: Buf) -> Result<()> {
        let mut one = std::mem::take(&mut self.one);
        one.push(b);
        let r = self.send_runs(&mut one);
        self.one = one;
        r
    }

    fn send_bufs(&mut self, bufs: &mut Vec<Buf>) -> Result<()> {
        self.send_runs(bufs)
    }

    /// Each message written where the half its size's tier uses sends it from: the ring's
    /// slots ([`UringDriver::send_in_place`]), or the blocking half's own buffers, by copy or
    /// zero-copy as each send is decided. No buffer moves between the path and the caller.
    fn send_in_place(
        &mut self,
        n: usize,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        match self.half(len) {
            Half::Ring => {
                let r = self.ring.as_mut().expect("a ring half has a ring");
                r.driver.send_in_place(r.id, n, len, fill)?;
                self.on_ring = true;
            }
            half => self.send_blocking(half, len, n, &mut InPlace { len, fill })?,
        }
        self.counted(n as u64);
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        let r = self.flush_ring();
        self.feedback();
        self.refresh();
        r
    }

    fn finish(&mut self, timeout: Duration) -> Result<()> {
        let r = self.flush_ring().and_then(|()| {
            let blocking = self.blocking.finish(timeout);
            let ring = match &mut self.ring {
                Some(ring) => ring.driver.finish(timeout),
                None => Ok(()),
            };
            blocking.and(ring)
        });
        self.feedback();
        self.refresh();
        match r {
            // Each half counted its own: report the whole path's.
            Err(Error::Leaked { .. }) => Err(Error::Leaked {
                buffers: self.stats.leaked_buffers,
                stats: Box::new(self.stats.clone()),
            }),
            r => r,
        }
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        if self.half(len) != Half::Ring {
            return self.blocking.take_buf(len);
        }
        let r = self.ring.as_mut().expect("a ring half has a ring");
        let (zc_inflight, free) = r.driver.zc_and_free(r.id);
        if free == 0 && zc_inflight > 0 {
            // Completions that are ready may release a buffer.
            let _ = r.driver.run(false);
        }
        match r.driver.take_buf(r.id, len) {
            Ok(b) => b,
            Err(_) => self.blocking.take_buf(len),
        }
    }

    fn take_fields(&mut self) -> Vec<Buf> {
        self.blocking.take_fields()
    }

    fn stats(&self) -> &SendStats {
        &self.stats
    }

    fn socket(&self) -> &Socket {
        self.blocking.socket()
    }
}

/// `adaptive` in the table of paths.
pub(super) const INFO: super::PathInfo = super::PathInfo {
    name: "adaptive",
    source: super::Source::Memory,
    avoids_send_copy: true,
    has_zc_completions: true,
    uses_fields: false,
    copies: None,
    waits: crate::socket::Waits::InTheKernel,
    open: |sock, opts| Ok(Box::new(AdaptivePath::new(sock, opts))),
};
