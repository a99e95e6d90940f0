//! `uring`: io_uring SEND with `MSG_WAITALL`. Also the engine that `uring-zc` runs on.
//!
//! Sends of one socket must not overlap (a send that waits for socket space can be overtaken by
//! the next SQE), so up to `uring_depth` sends are submitted as one linked chain
//! (`IOSQE_IO_LINK`) and the chain's results are awaited before the next chain goes in. A link
//! that fails or is short cancels the rest; [`settle_chain`] decides what to resend, in order.
//! For SEND_ZC the buffer stays with the ring until the notification CQE (`IORING_CQE_F_NOTIF`)
//! that follows a result carrying `IORING_CQE_F_MORE`.

use super::{fields, SendPath};
use crate::buffer::BufPool;
use crate::completion::{settle_chain, ChainEntry, NotifOutcome, SendZcLedger};
use crate::policy::{self, FallbackReason, InflightLimits, ZcDecision};
use crate::sys::uring::{Cqe, Op, SendRing, IORING_NOTIF_USAGE_ZC_COPIED};
use crate::{Buf, Error, Msg, Options, Result, SendStats};
use std::collections::HashMap;
use std::io;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::time::Duration;

/// How the engine uses SEND_ZC.
#[derive(Debug, Clone, Copy)]
pub(super) struct ZcMode {
    pub report_usage: bool,
    pub limits: InflightLimits,
}

/// The io_uring send engine behind `uring` and `uring-zc`.
pub(super) struct UringEngine {
    name: &'static str,
    sock: TcpStream,
    ring: SendRing,
    depth: usize,
    zc: Option<ZcMode>,
    /// Count SEND sends as `unsupported` zero-copy fallbacks (uring-zc running as uring).
    count_unsupported: bool,
    note: Option<String>,
    queue: Vec<(Buf, bool)>,
    /// Zero-copy sends in `queue`, and their bytes.
    queued_zc: usize,
    queued_zc_bytes: usize,
    /// SEND_ZC requests in flight, per request, until their notification.
    ledger: SendZcLedger,
    pool: BufPool,
    stats: SendStats,
    cqes: Vec<Cqe>,
}

pub(super) fn open(sock: TcpStream, opts: &Options) -> Result<Box<dyn SendPath>> {
    Ok(Box::new(UringEngine::new("uring", sock, opts, None)?))
}

impl UringEngine {
    pub(super) fn new(
        name: &'static str,
        sock: TcpStream,
        opts: &Options,
        zc: Option<ZcMode>,
    ) -> Result<UringEngine> {
        let depth = opts.uring_depth.max(1);
        let cq_room = depth + zc.map_or(0, |z| z.limits.max_sends);
        let mut ring = SendRing::new(depth as u32, (cq_room * 2) as u32)
            .map_err(Error::sys("io_uring_setup"))?;
        let mut note = None;
        if let (Some(z), true) = (zc, opts.uring_fixed_buffers) {
            let table = (z.limits.max_sends + depth) as u32;
            if let Err(e) = ring.enable_fixed_buffers(table) {
                note = Some(format!(
                    "registering fixed buffers failed ({e}): sending from unregistered buffers"
                ));
            }
        }
        let stats = SendStats {
            copied_known: zc.is_none_or(|z| z.report_usage),
            ..SendStats::default()
        };
        Ok(UringEngine {
            name,
            sock,
            ring,
            depth,
            zc,
            count_unsupported: false,
            note,
            queue: Vec::with_capacity(depth),
            queued_zc: 0,
            queued_zc_bytes: 0,
            ledger: SendZcLedger::new(),
            pool: BufPool::new(),
            stats,
            cqes: Vec::new(),
        })
    }

    pub(super) fn with_note(mut self, note: String, count_unsupported: bool) -> UringEngine {
        self.note = Some(note);
        self.count_unsupported = count_unsupported;
        self
    }

    fn op(&self, zc: bool) -> Op {
        match (zc, self.zc) {
            (true, Some(z)) => Op::SendZc {
                report_usage: z.report_usage,
            },
            _ => Op::Send,
        }
    }

    /// Accounts for the completions in `self.cqes`; returns chain results by slot.
    fn absorb(&mut self, results: &mut HashMap<u32, i32>) {
        for c in self.cqes.drain(..) {
            let outcome = if c.notif {
                self.stats.notifications += 1;
                let copied = (c.res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0;
                Some(self.ledger.on_notification(c.req, copied))
            } else {
                results.insert(c.slot, c.res);
                self.ledger.on_result(c.req, c.res, c.more)
            };
            match outcome {
                Some(NotifOutcome::Completion { copied }) => {
                    self.stats.zc_completions += 1;
                    self.stats.zc_copied += u64::from(copied);
                    self.stats.completion_latency_ns.saturating_record(c.age_ns);
                }
                Some(NotifOutcome::Unexpected) => self.stats.unexpected_completions += 1,
                Some(NotifOutcome::NoData) | None => {}
            }
            if let Some(b) = c.released {
                self.pool.put(b);
            }
        }
    }

    /// Reaps whatever completions are ready without waiting.
    fn reap_ready(&mut self) {
        let mut none = HashMap::new();
        self.ring.reap(&mut self.cqes);
        self.absorb(&mut none);
        debug_assert!(none.is_empty(), "no chain is in flight between chains");
    }

    /// Submits the queued sends as a chain and waits until every byte is on the socket.
    fn run_chain(&mut self) -> Result<()> {
        if self.queue.is_empty() {
            return Ok(());
        }
        let mut chain = Vec::with_capacity(self.queue.len());
        let n = self.queue.len();
        (self.queued_zc, self.queued_zc_bytes) = (0, 0);
        for (i, (buf, zc)) in std::mem::take(&mut self.queue).into_iter().enumerate() {
            let len = buf.len();
            if zc {
                self.stats.zc_attempts += 1;
            }
            let op = self.op(zc);
            let (slot, req) = self
                .ring
                .push(self.sock.as_fd(), buf, 0..len, op, i + 1 < n)
                .map_err(Error::sys("io_uring_enter"))?;
            if op != Op::Send {
                self.ledger.submitted(req, len);
            }
            chain.push(ChainEntry {
                slot,
                start: 0,
                end: len,
                zc,
            });
        }
        loop {
            let mut results = HashMap::with_capacity(chain.len());
            while chain.iter().any(|e| !results.contains_key(&e.slot)) {
                self.ring
                    .submit_and_wait(1)
                    .map_err(Error::sys("io_uring_enter"))?;
                self.ring.reap(&mut self.cqes);
                self.absorb(&mut results);
            }
            let res: Vec<i32> = chain.iter().map(|e| results[&e.slot]).collect();
            let settled = settle_chain(&chain, &res);
            self.stats.bytes += settled.bytes_done;
            self.stats.short_sends += settled.short;
            self.stats.fallbacks.enomem += settled.enomem;
            if let Some(errno) = settled.error {
                let e = io::Error::from_raw_os_error(errno);
                return Err(if errno == libc::EIO {
                    Error::Chain(e)
                } else {
                    Error::sys(if self.zc.is_some() {
                        "io_uring SEND_ZC"
                    } else {
                        "io_uring SEND"
                    })(e)
                });
            }
            if settled.resend.is_empty() {
                return Ok(());
            }
            chain = settled.resend;
            let n = chain.len();
            for (i, e) in chain.iter().enumerate() {
                if e.zc {
                    self.stats.zc_attempts += 1;
                }
                let op = self.op(e.zc);
                let req = self
                    .ring
                    .push_slot(self.sock.as_fd(), e.slot, e.start..e.end, op, i + 1 < n)
                    .map_err(Error::sys("io_uring_enter"))?;
                if op != Op::Send {
                    self.ledger.submitted(req, e.end - e.start);
                }
            }
        }
    }
}

impl SendPath for UringEngine {
    fn name(&self) -> &'static str {
        self.name
    }

    fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    fn send(&mut self, msg: Msg) -> Result<()> {
        let f = fields(self.name, msg)?;
        for mut b in f {
            let zc = match self.zc {
                None => {
                    if self.count_unsupported {
                        self.stats.fallbacks.count(FallbackReason::Unsupported);
                    }
                    false
                }
                Some(z) => {
                    let mut reaped = false;
                    loop {
                        let d = policy::admit(
                            true,
                            z.limits,
                            self.ledger.inflight() + self.queued_zc,
                            self.ledger.inflight_bytes() + self.queued_zc_bytes,
                            b.len(),
                            reaped,
                        );
                        match d {
                            ZcDecision::ZeroCopy => break true,
                            ZcDecision::ReapThenRetry => {
                                self.reap_ready();
                                reaped = true;
                            }
                            ZcDecision::Copy(r) => {
                                self.stats.fallbacks.count(r);
                                break false;
                            }
                        }
                    }
                }
            };
            if zc {
                self.ring
                    .register_buf(&mut b)
                    .map_err(Error::sys("io_uring_register(BUFFERS_UPDATE)"))?;
                self.queued_zc += 1;
                self.queued_zc_bytes += b.len();
            }
            self.queue.push((b, zc));
            if self.queue.len() >= self.depth {
                self.run_chain()?;
            }
        }
        self.stats.sends += 1;
        Ok(())
    }

    fn flush(&mut self) -> Result<()> {
        self.run_chain()
    }

    fn finish(&mut self, timeout: Duration) -> Result<()> {
        self.run_chain()?;
        let left = self.ring.drain(timeout, &mut self.cqes);
        let mut none = HashMap::new();
        self.absorb(&mut none);
        // What the ring still holds after the drain it will leak on drop, never reuse.
        self.stats.leaked_buffers += left as u64;
        Ok(())
    }

    fn take_buf(&mut self, len: usize) -> Buf {
        if self.pool.free_len() == 0 && self.ledger.inflight() > 0 {
            self.reap_ready();
        }
        self.pool.take(len)
    }

    fn stats(&self) -> &SendStats {
        &self.stats
    }

    fn socket(&self) -> &TcpStream {
        &self.sock
    }
}
