//! A stream run's sender threads: one connection with the path's `SendPath`, or several
//! multiplexed on one io_uring ring.

use super::StreamPoint;
use crate::cancel::Cancel;
use crate::setting::{invalid, Setting};
use crate::traffic::mix::{Alloc, Burst, MixSizes};
use crate::traffic::RecvMode;
use crate::workload::{
    file_message, message_buf, one_buf, send_message, MsgShape, PatternFile, PART_ALIGN,
};
use anyhow::Context;
use sendpath::{ConnId, DriverConfig, UringDriver};
use sendpath::{Options, SendStats, Source, Strategy};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::Barrier;
use std::time::Duration;

/// The file range `[start, end)` sender `i` of `n` streams from: the whole file for warm runs
/// (round and round), a part of its own for cold runs (once), so no range is read twice.
pub(super) fn file_part(file_len: u64, i: usize, n: usize, cold: bool) -> (u64, Option<u64>) {
    if !cold || file_len == 0 {
        return (0, None);
    }
    let part = (file_len / n as u64 / PART_ALIGN).max(1) * PART_ALIGN;
    let start = (part * i as u64).min(file_len);
    (start, Some((start + part).min(file_len)))
}

/// How many sender threads have ended. Each end rings the run's bell ([`Cancel::ring`]), so
/// the wait for the window ends as soon as the last sender does, without waking to look.
pub(super) struct Finished {
    count: AtomicUsize,
    bell: Cancel,
}

impl Finished {
    pub(super) fn new(bell: &Cancel) -> Finished {
        Finished {
            count: AtomicUsize::new(0),
            bell: bell.clone(),
        }
    }

    /// One more sender thread has ended.
    pub(super) fn one_more(&self) {
        self.count.fetch_add(1, Ordering::Relaxed);
        self.bell.ring();
    }

    /// Sender threads ended so far.
    pub(super) fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }
}

/// One sender thread's many connections on one io_uring ring.
struct Multiplexed<'a> {
    strategy: Strategy,
    size: usize,
    fill: bool,
    opts: &'a Options,
}

impl Multiplexed<'_> {
    /// Keeps every connection's queue full, round-robin, until `stop`; then flushes, waits for
    /// the notifications and half-closes every connection.
    fn send(
        &self,
        txs: Vec<TcpStream>,
        stop: &AtomicBool,
        sent: &AtomicU64,
        finished: &Finished,
        start: &Barrier,
    ) -> anyhow::Result<(SendStats, Option<String>)> {
        let opened = self.open(txs);
        start.wait();
        let result = opened.and_then(|(mut d, ids)| {
            let r = self.pump(&mut d, &ids, stop, sent);
            let fin = d.finish(Duration::from_secs(2));
            for &id in &ids {
                let _ = d.socket(id).map(|s| s.shutdown(std::net::Shutdown::Write));
            }
            r?;
            // Buffers the kernel held past the deadline are counted in the stats, and rows
            // report them: not an error of the run.
            match fin {
                Err(sendpath::Error::Leaked { .. }) | Ok(()) => {}
                Err(e) => return Err(e.into()),
            }
            let mut stats = SendStats::default();
            for &id in &ids {
                stats.merge(d.stats(id)?);
            }
            Ok((stats, d.note()))
        });
        finished.one_more();
        result.with_context(|| format!("{} sender", self.strategy))
    }

    fn open(&self, txs: Vec<TcpStream>) -> anyhow::Result<(UringDriver, Vec<ConnId>)> {
        let mut d = UringDriver::new(DriverConfig {
            connections: txs.len(),
            ring_zc_inflight: None,
            options: self.opts.clone(),
        })?;
        let mut ids = Vec::with_capacity(txs.len());
        for s in txs {
            let id = d.add(s, self.strategy).map_err(|e| {
                invalid(
                    Setting::Connections,
                    format!("several connections per thread share one io_uring ring: {e}"),
                )
            })?;
            ids.push(id);
        }
        Ok((d, ids))
    }

    fn pump(
        &self,
        d: &mut UringDriver,
        ids: &[ConnId],
        stop: &AtomicBool,
        sent: &AtomicU64,
    ) -> anyhow::Result<()> {
        let mut offsets = vec![0u64; ids.len()];
        let mut writable = Vec::with_capacity(ids.len());
        while !stop.load(Ordering::Relaxed) {
            let mut queued = false;
            d.take_writable(&mut writable);
            for id in writable.drain(..) {
                let c = id.index();
                d.conn_error(id)
                    .with_context(|| format!("connection {c} of this thread"))?;
                while d.room(id) > 0 {
                    // In place when the driver has an arena (else a buffer from the pool).
                    let mut msg = d.reserve(id, self.size)?;
                    if self.fill {
                        sendpath_host::pattern::fill(&mut msg, offsets[c]);
                    }
                    if msg.commit().is_err() {
                        break;
                    }
                    offsets[c] += self.size as u64;
                    sent.fetch_add(self.size as u64, Ordering::Relaxed);
                    queued = true;
                }
            }
            if queued {
                d.run(false)?;
            } else {
                d.run_for(Duration::from_millis(50))?;
            }
        }
        Ok(())
    }
}

/// One sender thread's settings, moved into it.
pub(super) struct Sender {
    /// How long one send may make no progress (its socket's send timeout).
    pub(super) stall: Duration,
    pub(super) strategy: Strategy,
    pub(super) size: usize,
    sizes: Option<MixSizes>,
    pub(super) shape: MsgShape,
    pub(super) opts: Options,
    pub(super) cpu: Option<usize>,
    /// What runs it: this thread, or a tokio task on it.
    pub(super) runtime: crate::traffic::Runtime,
    /// The file range it streams: from `first`, up to `limit` (cold runs).
    pub(super) first: u64,
    limit: Option<u64>,
    burst: Option<Burst>,
    /// The pool every sender thread of the repeat shares (`--alloc shared`).
    shared: Option<sendpath::SharedPool>,
}

impl Sender {
    pub(super) fn new(
        pt: &StreamPoint,
        i: usize,
        file: Option<&PatternFile>,
        shared: &sendpath::SharedPool,
    ) -> Sender {
        let stall = super::stall_limit(pt);
        let mut opts = pt.opts.clone();
        opts.file = file.map(|f| f.file.clone());
        let file_len = file.map_or(0, |f| f.len);
        let cold = pt.cold && file.is_some();
        let (first, limit) = file_part(file_len, i, pt.threads, cold);
        Sender {
            stall,
            strategy: pt.strategy,
            size: pt.size,
            sizes: pt.mix.as_ref().map(|m| m.sizes(i as u64)),
            shape: MsgShape {
                fields: pt.fields,
                fill: pt.recv == RecvMode::Verify,
                file_len,
                alloc: pt.alloc,
                stamp: pt.msg_latency,
            },
            opts,
            cpu: pt.cpus.map(|c| c.0),
            runtime: pt.runtime,
            first,
            limit,
            burst: pt.burst,
            shared: (pt.alloc == Alloc::Shared).then(|| shared.clone()),
        }
    }

    /// Sends until `stop` on one connection, or on several multiplexed on one ring.
    pub(super) fn run(
        mut self,
        mut txs: Vec<TcpStream>,
        stop: &AtomicBool,
        sent: &AtomicU64,
        finished: &Finished,
        start: &Barrier,
    ) -> anyhow::Result<(SendStats, Option<String>)> {
        if txs.len() > 1 {
            if self.sizes.is_some() || self.shape.alloc != Alloc::Pool || self.burst.is_some() {
                return Err(invalid(
                    Setting::Connections,
                    "a size mix, fresh or shared buffers and bursts run one connection per sender thread, not several on one ring",
                ));
            }
            let run = Multiplexed {
                strategy: self.strategy,
                size: self.size,
                fill: self.shape.fill,
                opts: &self.opts,
            };
            return run.send(txs, stop, sent, finished, start);
        }
        let strategy = self.strategy;
        if self.runtime.is_tokio() {
            let task = super::tokio::Task { stop, sent, start };
            let result = self.run_tokio(txs.remove(0), task);
            finished.one_more();
            return result
                .map_err(|e| stalled(e, self.stall))
                .with_context(|| format!("{strategy} sender ({})", self.runtime.name()));
        }
        let opened = sendpath::open(strategy, txs.remove(0), &self.opts);
        start.wait();
        let mut p = opened?;
        let result = self.pump(p.as_mut(), stop, sent);
        finished.one_more();
        let _ = p.socket().shutdown(std::net::Shutdown::Write);
        result
            .map_err(|e| stalled(e, self.stall))
            .with_context(|| format!("{strategy} sender"))?;
        Ok((p.stats().clone(), p.note().map(String::from)))
    }

    /// The send loop of one connection, then the wait for its last completions. One-buffer
    /// messages go in batches of up to [`BATCH_MESSAGES`] and [`BATCH_BYTES`] by one
    /// `send_bufs` (one return through the path per batch, not per send); `stop` and the byte
    /// counter are read and written once per batch.
    fn pump(
        &mut self,
        p: &mut dyn sendpath::SendPath,
        stop: &AtomicBool,
        sent: &AtomicU64,
    ) -> anyhow::Result<()> {
        if self.plain_in_place() {
            return self.pump_in_place(p, stop, sent);
        }
        if self.plain() {
            return self.pump_plain(p, stop, sent);
        }
        if self.plain_file() {
            return self.pump_file(p, stop, sent);
        }
        let mut off = self.first;
        let mut total = sent.load(Ordering::Relaxed);
        let mut in_burst = 0u32;
        let mut batch = Vec::with_capacity(BATCH_MESSAGES);
        let mut more = true;
        while more && !stop.load(Ordering::Relaxed) {
            if let Some(b) = self.burst.filter(|b| in_burst == b.messages) {
                idle(b.gap(), stop);
                in_burst = 0;
                continue;
            }
            let (mut bytes, mut taken) = (0u64, 0usize);
            // `--copy-batch N`: at least N messages a batch, whatever their size (a message of
            // several fields is sent at once, not batched: `taken` bounds the loop then).
            let least = self.opts.copy_batch;
            while batch.len() < BATCH_MESSAGES.max(least)
                && (bytes < BATCH_BYTES || (least > 1 && taken < least))
            {
                taken += 1;
                if self.burst.is_some_and(|b| in_burst == b.messages) {
                    break;
                }
                let size = match self.sizes.as_mut() {
                    Some(s) => s.next().unwrap_or(self.size),
                    None => self.size,
                };
                if self.limit.is_some_and(|l| off + size as u64 > l) {
                    more = false;
                    break;
                }
                in_burst += 1;
                self.message(p, &mut batch, size, off)?;
                off += size as u64;
                bytes += size as u64;
            }
            if !batch.is_empty() {
                p.send_bufs(&mut batch)?;
            }
            // This thread is the counter's only writer: a plain store, not a locked add.
            total += bytes;
            sent.store(total, Ordering::Relaxed);
        }
        p.finish(Duration::from_secs(2))?;
        Ok(())
    }

    /// Whether every message is one pooled buffer of one size with nothing to write into it,
    /// and the stream has no limit or bursts: the default `stream`.
    fn plain(&self) -> bool {
        self.steady() && self.shape.taken_as_is() && one_buf(self.strategy, self.size, &self.shape)
    }

    /// One size, no limit and no bursts: every message alike, sent back to back until `stop`.
    fn steady(&self) -> bool {
        self.sizes.is_none() && self.limit.is_none() && self.burst.is_none()
    }

    /// [`Sender::pump`] for a [`Sender::plain`] stream: whole batches of buffers, taken and
    /// sent with no per-message test between (as `bare --lib` sends).
    fn pump_plain(
        &self,
        p: &mut dyn sendpath::SendPath,
        stop: &AtomicBool,
        sent: &AtomicU64,
    ) -> anyhow::Result<()> {
        let mut bufs = Vec::with_capacity(self.per_batch());
        self.pump_batches(p, stop, sent, |p, n| {
            for _ in 0..n {
                bufs.push(p.take_buf(self.size));
            }
            Ok(p.send_bufs(&mut bufs)?)
        })
    }

    /// Whether every message is one buffer of one size from the path's own pool, written in
    /// place ([`in_place`]), and the stream has no limit or bursts.
    fn plain_in_place(&self) -> bool {
        self.steady()
            && in_place(self.strategy, &self.opts)
            && self.shape.alloc == Alloc::Pool
            && one_buf(self.strategy, self.size, &self.shape)
    }

    /// [`Sender::pump`] for a [`Sender::plain_in_place`] stream: whole batches written by
    /// `send_in_place` where the kernel reads them (the pattern and the time stamp when the
    /// run asks for them), nothing moved.
    fn pump_in_place(
        &self,
        p: &mut dyn sendpath::SendPath,
        stop: &AtomicBool,
        sent: &AtomicU64,
    ) -> anyhow::Result<()> {
        let (size, shape) = (self.size, &self.shape);
        let mut off = self.first;
        self.pump_batches(p, stop, sent, |p, n| {
            p.send_in_place(n, size, &mut |i, b| {
                if shape.fill {
                    sendpath_host::pattern::fill(b, off + (i * size) as u64);
                }
                if shape.stamp {
                    crate::traffic::stamp::stamp(b);
                }
            })?;
            off += (n * size) as u64;
            Ok(())
        })
    }

    /// Whether a file path streams the whole file round and round in one size, with no
    /// bursts: the default `stream` of a file path (warm).
    fn plain_file(&self) -> bool {
        self.steady() && self.strategy.source() == Source::File && self.shape.file_len > 0
    }

    /// [`Sender::pump`] for a [`Sender::plain_file`] stream: batches of file ranges sent by
    /// one `send_ranges` each, as [`Sender::pump_plain`] sends buffers.
    fn pump_file(
        &self,
        p: &mut dyn sendpath::SendPath,
        stop: &AtomicBool,
        sent: &AtomicU64,
    ) -> anyhow::Result<()> {
        let len = self.shape.file_len;
        // A message that runs past the file's end is two ranges (or more).
        let mut ranges = Vec::with_capacity(2 * self.per_batch());
        let mut at = self.first % len;
        self.pump_batches(p, stop, sent, |p, n| {
            for _ in 0..n {
                at = file_message(at, self.size, len, |r| {
                    ranges.push(r);
                    Ok(())
                })?;
            }
            p.send_ranges(&ranges)?;
            ranges.clear();
            Ok(())
        })
    }

    /// Sends a batch of [`Sender::per_batch`] messages by `batch` until `stop`, the byte
    /// counter stored once per batch, then waits for the last completions.
    #[inline]
    fn pump_batches(
        &self,
        p: &mut dyn sendpath::SendPath,
        stop: &AtomicBool,
        sent: &AtomicU64,
        mut batch: impl FnMut(&mut dyn sendpath::SendPath, usize) -> anyhow::Result<()>,
    ) -> anyhow::Result<()> {
        let n = self.per_batch();
        let mut total = sent.load(Ordering::Relaxed);
        while !stop.load(Ordering::Relaxed) {
            batch(p, n)?;
            total += (n * self.size) as u64;
            sent.store(total, Ordering::Relaxed);
        }
        p.finish(Duration::from_secs(2))?;
        Ok(())
    }

    /// Messages per batch, as [`Sender::pump`] batches them: up to 16, until one takes the
    /// batch to 64 KiB; at least `copy`'s batch (`--copy-batch`), so that a batched `copy`
    /// puts as many messages in a call at every size as io_uring puts in a request.
    pub(super) fn per_batch(&self) -> usize {
        let by_bytes = BATCH_BYTES
            .div_ceil(self.size as u64)
            .min(BATCH_MESSAGES as u64) as usize;
        by_bytes.max(self.opts.copy_batch)
    }

    /// One message at `off`: its buffer onto `batch` when it is one buffer, else sent now,
    /// after the batch (a size mix with several fields may have both kinds).
    #[inline]
    fn message(
        &self,
        p: &mut dyn sendpath::SendPath,
        batch: &mut Vec<sendpath::Buf>,
        size: usize,
        off: u64,
    ) -> anyhow::Result<()> {
        let shared = self.shared.as_ref();
        if one_buf(self.strategy, size, &self.shape) {
            // A pooled buffer with nothing to write goes straight onto the batch: no
            // `Result` around it to move through (about 1.5% of a 4 KiB copy send).
            let b = match self.shape.taken_as_is() {
                true => p.take_buf(size),
                false => message_buf(p, size, off, &self.shape, shared)?,
            };
            batch.push(b);
            return Ok(());
        }
        if !batch.is_empty() {
            p.send_bufs(batch)?;
        }
        send_message(p, self.strategy, size, off, self.shape, shared)
    }
}

/// Whether `strategy` writes its messages in place with `opts`: `uring` and `uring-zc` with an
/// arena (slots the kernel reads by index), `copy` always (in its own buffers, which the kernel
/// has copied when the call returns, as an application writes a message and sends it),
/// `msg-zerocopy` always (in its own page-aligned slots, each held until its notification) and
/// `adaptive` always (where the half its tier uses sends from: the blocking half's buffers, or
/// its ring's arena slots, or heap buffers of its ring without an arena).
/// They then go by `SendPath::send_in_place`, and no buffer moves.
pub(super) fn in_place(strategy: Strategy, opts: &Options) -> bool {
    match strategy {
        Strategy::Copy | Strategy::MsgZerocopy | Strategy::Adaptive => true,
        Strategy::Uring | Strategy::UringZc => opts.uring_arena.is_some(),
        _ => false,
    }
}

/// Most one-buffer messages a stream sender hands to one `send_bufs`.
const BATCH_MESSAGES: usize = 16;
/// Most bytes in one batch: a batch of large messages is one message. The byte counter a
/// remote receiver's windows read moves by at most this much at once, less than the socket's
/// send buffer already holds ahead of the wire.
const BATCH_BYTES: u64 = 64 << 10;

/// Sleeps `gap`, or until `stop` (checked every 5 ms at most).
fn idle(gap: Duration, stop: &AtomicBool) {
    let end = std::time::Instant::now() + gap;
    loop {
        let now = std::time::Instant::now();
        if now >= end || stop.load(Ordering::Relaxed) {
            return;
        }
        std::thread::sleep((end - now).min(Duration::from_millis(5)));
    }
}

/// A send that timed out (`EAGAIN` after the socket's send timeout) named as what it means.
fn stalled(e: anyhow::Error, limit: Duration) -> anyhow::Error {
    if !crate::setting::timed_out(&e) {
        return e;
    }
    e.context(super::stall::told(
        super::stall::Stall::Timeout(limit),
        None,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cold_senders_get_disjoint_aligned_parts() {
        let len = 10 * PART_ALIGN + 7;
        assert_eq!(file_part(len, 0, 2, false), (0, None));
        let a = file_part(len, 0, 2, true);
        let b = file_part(len, 1, 2, true);
        assert_eq!(a, (0, Some(5 * PART_ALIGN)));
        assert_eq!(b, (5 * PART_ALIGN, Some(10 * PART_ALIGN)));
        assert_eq!(b.0 % PART_ALIGN, 0);
    }
}
