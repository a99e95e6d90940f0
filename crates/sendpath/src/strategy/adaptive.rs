//! `adaptive`: each send takes the path the host profile says wins at its size, among `copy`
//! (`send()`), `msg-zerocopy` (`sendmsg(MSG_ZEROCOPY)`), `uring` (io_uring SEND) and `uring-zc`
//! (SEND_ZC), and file data goes by `sendfile()`. The decisions are
//! [`policy::adaptive`](crate::policy::adaptive)'s (tiers, runs, back-off where the kernel
//! copies, the in-flight cap); this file only carries them out on one socket.
//!
//! Byte order: the blocking calls put their bytes on the socket before they return, so a ring
//! send after a blocking one is in order. Before a blocking send after ring sends, the ring is
//! flushed (every queued byte on the socket); the ring is also flushed before its operation
//! changes between SEND and SEND_ZC, so each queued buffer goes with the operation chosen for it.
//! The ring is created on the first send that needs it, on a duplicate of the socket's fd.
//!
//! Buffers come back only once the kernel has released them: each half keeps its own pool
//! (`take_buf` draws from the half the size's tier uses).

use super::msg_zerocopy::{Fields, MsgZerocopy};
use super::{fields, sendfile::sendfile_all, SendPath};
use crate::engine::{Choice, Choose, ConnId, ConnState, DriverConfig, SendContext, UringDriver};
use crate::policy::adaptive::Adaptive;
use crate::{Buf, Error, Msg, Options, Result, SendStats, Socket, Strategy};
use std::fs::File;
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

/// The ring's chooser: the operation the adaptive path set before queuing.
#[derive(Debug)]
struct Switch(Arc<AtomicBool>);

impl Choose for Switch {
    fn choose(&mut self, _: &SendContext) -> Choice {
        if self.0.load(Ordering::Relaxed) {
            Choice::ZeroCopy
        } else {
            Choice::Copy
        }
    }
}

/// Completion counters of a half already passed on to the decisions.
#[derive(Debug, Default, Clone, Copy)]
struct Seen {
    completions: u64,
    copied: u64,
    no_memory: u64,
}

impl Seen {
    /// Feeds what `stats` counted since the last call into `decide`.
    fn feed(&mut self, stats: &SendStats, no_memory: u64, decide: &mut Adaptive) {
        let (c, k) = (stats.zc_completions, stats.zc_copied);
        if c > self.completions {
            decide.on_completions(c - self.completions, k.saturating_sub(self.copied));
        }
        for _ in self.no_memory..no_memory {
            decide.on_no_memory();
        }
        *self = Seen {
            completions: c,
            copied: k,
            no_memory,
        };
    }
}

/// The io_uring half: one connection on its own ring.
struct Ring {
    driver: UringDriver,
    id: ConnId,
    zc: Arc<AtomicBool>,
    seen: Seen,
}

/// The `adaptive` path. See the module docs.
pub(super) struct AdaptivePath {
    blocking: MsgZerocopy,
    /// The emptied list of the last message sent on the ring ([`SendPath::take_fields`]).
    spare: Vec<Buf>,
    blocking_seen: Seen,
    ring: Option<Ring>,
    /// Why the ring could not be made (its tiers then run on the blocking half).
    note: Option<String>,
    opts: Options,
    decide: Adaptive,
    file: Option<Arc<File>>,
    file_stats: SendStats,
    /// The last send went on the ring (flush it before a blocking one).
    on_ring: bool,
    /// Every half's counts and the decisions, refreshed by `flush`, `finish` and every 4096
    /// sends (merging the halves' histograms costs microseconds: not per send).
    stats: SendStats,
    sends: u64,
    /// The size, in a copy tier, whose last send went by copy with nothing zero-copy in flight
    /// and nothing on the ring (`usize::MAX`: none): its next sends go straight to `copy`,
    /// since the policy picks copy for a copy tier whatever its state ...
    copy_len: usize,
    /// ... and are counted here, then in the policy's decisions by `refresh`.
    copy_streak: u64,
}

impl AdaptivePath {
    fn new(sock: Socket, opts: &Options) -> AdaptivePath {
        let profile = opts
            .profile
            .as_deref()
            .cloned()
            .unwrap_or_else(crate::profile::Profile::defaults);
        let decide = Adaptive::new(profile, opts.adaptive);
        let mut p = AdaptivePath {
            blocking: MsgZerocopy::new(sock, opts.inflight, opts.zc_reap_every),
            spare: Vec::new(),
            blocking_seen: Seen::default(),
            ring: None,
            note: None,
            opts: opts.clone(),
            decide,
            file: opts.file.clone(),
            file_stats: SendStats::default(),
            on_ring: false,
            stats: SendStats::default(),
            sends: 0,
            copy_len: usize::MAX,
            copy_streak: 0,
        };
        p.refresh();
        p
    }

    /// The ring, made on first use; `None` (with a note) when io_uring is unavailable.
    fn ring(&mut self) -> Option<&mut Ring> {
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
        self.ring.as_mut()
    }

    fn make_ring(&self) -> Result<Ring> {
        let fd = self
            .blocking
            .socket()
            .as_fd()
            .try_clone_to_owned()
            .map_err(Error::sys("dup"))?;
        let mut driver =
            UringDriver::new(DriverConfig::from_options(&self.opts, 1, Choice::ZeroCopy))?;
        let zc = Arc::new(AtomicBool::new(false));
        let state = ConnState::new(
            driver.state_config(self.opts.uring_report_usage),
            Box::new(Switch(zc.clone())),
        );
        let id = driver.add_with(Socket::from(fd), state)?;
        Ok(Ring {
            driver,
            id,
            zc,
            seen: Seen::default(),
        })
    }

    /// Sends a memory message of `len` bytes by the path the decision picks for it.
    #[inline]
    fn send_memory(&mut self, f: Fields, len: usize) -> Result<()> {
        self.decide
            .count_copies(std::mem::take(&mut self.copy_streak));
        let inflight = self.zc_inflight();
        let path = self.decide.choose(len, inflight);
        match (path, f) {
            (Strategy::Uring | Strategy::UringZc, f) => {
                let msg = Msg::Fields(f.into_list(&mut self.blocking));
                self.send_on_ring(msg, path == Strategy::UringZc)?
            }
            (path, f) => {
                if self.on_ring {
                    self.flush_ring()?;
                }
                match (path == Strategy::MsgZerocopy, f) {
                    (true, f) => self.blocking.send_fields(f, len)?,
                    (false, Fields::One(b)) => self.blocking.send_copy_buf(b)?,
                    (false, f) => self.blocking.send_copy_counted(f, len)?,
                }
            }
        }
        // With nothing zero-copy in flight before a send that was not zero-copy, no
        // completion or refusal can have come in: skip the feedback (the common case below
        // the crossover, where every nanosecond per send shows).
        if inflight > 0 || path.avoids_send_copy() {
            self.feedback();
        }
        // Only a copy tier is copied whatever the policy's state (a zero-copy tier's first
        // sends of a run, or its sends while backed off, are copied too, but not for good);
        // its send flushed the ring.
        let copy_tier = self.decide.tier(len) == Strategy::Copy;
        self.copy_len = if copy_tier && inflight == 0 {
            len
        } else {
            usize::MAX
        };
        self.counted();
        Ok(())
    }

    /// Zero-copy sends not yet completed, on the socket and on the ring.
    #[inline]
    fn zc_inflight(&self) -> usize {
        self.blocking.outstanding()
            + self
                .ring
                .as_ref()
                .map_or(0, |r| r.driver.state(r.id).zc_inflight())
    }

    /// Counts a send; every 4096 sends, refreshes the merged counters.
    #[inline]
    fn counted(&mut self) {
        self.sends += 1;
        if self.sends.is_multiple_of(4096) {
            self.refresh();
        }
    }

    /// Puts every byte queued on the ring on the socket.
    fn flush_ring(&mut self) -> Result<()> {
        if let Some(r) = &mut self.ring {
            r.driver.flush(r.id)?;
        }
        self.on_ring = false;
        Ok(())
    }

    /// Passes the halves' new completions and memory refusals on to the decisions (a few
    /// integer comparisons when nothing changed).
    fn feedback(&mut self) {
        let b = self.blocking.stats();
        self.blocking_seen
            .feed(b, b.fallbacks.enobufs, &mut self.decide);
        if let Some(r) = &mut self.ring {
            let s = r.driver.stats(r.id);
            r.seen.feed(s, s.fallbacks.enomem, &mut self.decide);
        }
    }

    /// Recomputes the merged stats.
    fn refresh(&mut self) {
        self.decide
            .count_copies(std::mem::take(&mut self.copy_streak));
        let mut s = self.blocking.stats().clone();
        if let Some(r) = &self.ring {
            s.merge(r.driver.stats(r.id));
        }
        s.merge(&self.file_stats);
        s.decisions = Some(*self.decide.decisions());
        self.stats = s;
    }

    fn send_on_ring(&mut self, msg: Msg, zerocopy: bool) -> Result<()> {
        let Some(r) = self.ring() else {
            return self.blocking.send_as(msg, zerocopy);
        };
        if r.zc.load(Ordering::Relaxed) != zerocopy {
            // Queued buffers take the operation in force when their chain goes in.
            r.driver.flush(r.id)?;
            r.zc.store(zerocopy, Ordering::Relaxed);
        }
        let mut f = fields("adaptive", msg)?;
        r.driver.push_message(r.id, &mut f)?;
        // As `uring` does: a full batch goes in now, without waiting for the queue to fill.
        r.driver.submit_ready()?;
        let queued = r.driver.conn_error(r.id);
        self.spare = f;
        self.on_ring = true;
        queued
    }
}

impl Fields {
    /// The message as a list of fields (one buffer goes into a list the path kept).
    fn into_list(self, p: &mut MsgZerocopy) -> Vec<Buf> {
        match self {
            Fields::One(b) => {
                let mut f = p.take_fields();
                f.push(b);
                f
            }
            Fields::List(f) => f,
        }
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
        match msg {
            Msg::File { offset, len } => {
                self.decide
                    .count_copies(std::mem::take(&mut self.copy_streak));
                self.copy_len = usize::MAX;
                let Some(file) = self.file.clone() else {
                    return Err(Error::Config(
                        "the adaptive path sends file data with sendfile: give Options::file"
                            .into(),
                    ));
                };
                self.flush_ring()?;
                self.decide.choose_file();
                sendfile_all(
                    self.blocking.socket(),
                    &file,
                    offset,
                    len,
                    &mut self.file_stats,
                )?;
                self.feedback();
            }
            Msg::Fields(f) => {
                let len: usize = f.iter().map(Buf::len).sum();
                return self.send_memory(Fields::List(f), len);
            }
        }
        self.counted();
        Ok(())
    }

    // Always inline: `send_bufs` then loops on a copy tier's system call as `copy` does.
    #[inline(always)]
    fn send_buf(&mut self, b: Buf) -> Result<()> {
        let len = b.len();
        // The size the last send copied with nothing in flight: the common case below the
        // crossover, sent as `copy` sends it (a copy send puts nothing in flight).
        if len == self.copy_len {
            self.copy_streak += 1;
            self.blocking.send_copy_buf(b)?;
            self.counted();
            return Ok(());
        }
        self.send_memory(Fields::One(b), len)
    }

    fn flush(&mut self) -> Result<()> {
        let r = self.flush_ring();
        self.feedback();
        self.refresh();
        r
    }

    fn finish(&mut self, timeout: Duration) -> Result<()> {
        let r = self.flush_ring().and_then(|()| {
            self.blocking.finish(timeout)?;
            match &mut self.ring {
                Some(ring) => ring.driver.finish(timeout),
                None => Ok(()),
            }
        });
        self.feedback();
        self.refresh();
        r
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        if len == self.copy_len {
            return self.blocking.take_buf(len);
        }
        let on_ring = matches!(self.decide.tier(len), Strategy::Uring | Strategy::UringZc);
        let ring = if on_ring { self.ring() } else { None };
        match ring {
            Some(r) => {
                if r.driver.state(r.id).free_bufs() == 0 && r.driver.state(r.id).zc_inflight() > 0 {
                    // Completions that are ready may release a buffer.
                    let _ = r.driver.run(false);
                }
                r.driver.take_buf(r.id, len)
            }
            None => self.blocking.take_buf(len),
        }
    }

    fn take_fields(&mut self) -> Vec<Buf> {
        match self.spare.capacity() {
            0 => self.blocking.take_fields(),
            _ => std::mem::take(&mut self.spare),
        }
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
    open: |sock, opts| Ok(Box::new(AdaptivePath::new(sock, opts))),
};
