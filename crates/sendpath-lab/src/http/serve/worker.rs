//! What the ring and epoll workers share: their counters, the responses they answer with,
//! their setup, their once-a-second tick and idle sweep, and the gauges the server reads.

use super::ServeConfig;
use crate::http::Refusal;
use crate::http::{body_bytes, Heads};
use sendpath::{Buf, SendStats};
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant, SystemTime};

/// Counters of one worker.
#[derive(Debug, Default)]
pub(super) struct Counts {
    pub(super) requests: u64,
    pub(super) response_bytes: u64,
    pub(super) refused: BTreeMap<String, u64>,
    pub(super) accepted: u64,
    pub(super) rejected: u64,
    pub(super) accept_errors: BTreeMap<String, u64>,
    pub(super) idle_timeouts: u64,
    pub(super) resets: u64,
    pub(super) receive_errors: u64,
    pub(super) pipeline_overflows: u64,
    pub(super) cq_overflows: u64,
    pub(super) send: Option<SendStats>,
    pub(super) setup: Option<String>,
    /// The worker's waits were batched (`--wait-nr`, `--min-wait`).
    pub(super) batched: bool,
}

impl Counts {
    pub(super) fn add(&mut self, o: Counts) {
        self.requests += o.requests;
        self.response_bytes += o.response_bytes;
        for (k, v) in o.refused {
            *self.refused.entry(k).or_default() += v;
        }
        for (k, v) in o.accept_errors {
            *self.accept_errors.entry(k).or_default() += v;
        }
        self.accepted += o.accepted;
        self.rejected += o.rejected;
        self.idle_timeouts += o.idle_timeouts;
        self.resets += o.resets;
        self.receive_errors += o.receive_errors;
        self.pipeline_overflows += o.pipeline_overflows;
        self.cq_overflows += o.cq_overflows;
        match (&mut self.send, o.send) {
            (Some(a), Some(b)) => a.merge(&b),
            (None, b) => self.send = b,
            _ => {}
        }
        self.setup = self.setup.take().or(o.setup);
        self.batched |= o.batched;
    }

    pub(super) fn refuse(&mut self, r: Refusal) {
        *self.refused.entry(r.name().to_string()).or_default() += 1;
    }

    /// A connection ended with `errno`.
    pub(super) fn ended(&mut self, errno: Option<i32>) {
        match errno {
            Some(libc::ECONNRESET) | Some(libc::EPIPE) => self.resets += 1,
            _ => self.receive_errors += 1,
        }
    }

    pub(super) fn accept_error(&mut self, e: &std::io::Error) {
        let name = e
            .raw_os_error()
            .map_or_else(|| e.kind().to_string(), |n| errno_name(n).to_string());
        *self.accept_errors.entry(name).or_default() += 1;
    }
}

fn errno_name(n: i32) -> &'static str {
    match n {
        libc::EMFILE => "EMFILE",
        libc::ENFILE => "ENFILE",
        libc::ENOBUFS => "ENOBUFS",
        libc::ENOMEM => "ENOMEM",
        libc::ECONNABORTED => "ECONNABORTED",
        _ => "other",
    }
}

/// Pipelined requests a connection may have waiting for their response before it is closed.
pub(super) const MAX_OWED: usize = 4096;

/// A head and body up to this size go out as one buffer (copied in); larger bodies are sent
/// from the one shared body buffer.
const INLINE: usize = 16 * 1024;

/// The bytes every worker answers with.
pub(super) struct Responses {
    pub(super) heads: Heads,
    pub(super) body: Buf,
    pub(super) inline: bool,
    /// The ring modes with `--file`: the file and its length, spliced instead of `body`.
    pub(super) file: Option<(std::sync::Arc<std::fs::File>, u64)>,
}

impl Responses {
    /// What a worker answers with: heads for `body_len` bytes, and the body in memory, or
    /// the `--file` opened (the body then never lives in memory).
    pub(super) fn new(cfg: &ServeConfig) -> Result<Responses, String> {
        let file = match &cfg.file {
            Some(p) => Some((
                std::sync::Arc::new(
                    std::fs::File::open(p).map_err(|e| format!("opening {}: {e}", p.display()))?,
                ),
                cfg.body_len as u64,
            )),
            None => None,
        };
        let in_memory = if file.is_some() { 0 } else { cfg.body_len };
        let body = Buf::shared(body_bytes(in_memory, cfg.seed));
        let heads = Heads::new(cfg.body_len);
        let inline = heads.ok().len() + in_memory <= INLINE;
        Ok(Responses {
            heads,
            body,
            inline,
            file,
        })
    }

    pub(super) fn len(&self, head_only: bool) -> usize {
        self.heads.ok().len() + if head_only { 0 } else { self.body.len() }
    }

    pub(super) fn write(&self, head_only: bool, out: &mut Vec<u8>) {
        out.extend_from_slice(self.heads.ok());
        if !head_only {
            out.extend_from_slice(self.body.as_slice());
        }
    }
}

pub(super) type WorkerResult = Result<Counts, Box<(Counts, String)>>;

/// Open connections per worker, and the most open at once over all of them.
pub(super) struct Open {
    pub(super) per_worker: Vec<AtomicUsize>,
    pub(super) peak: AtomicUsize,
}

impl Open {
    pub(super) fn total(&self) -> usize {
        self.per_worker
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum()
    }
}

/// A worker's handle on [`Open`].
pub(super) struct Gauge<'a>(pub(super) &'a Open, pub(super) usize);

impl Gauge<'_> {
    /// This worker has `n` connections open now.
    pub(super) fn set(&self, n: usize) {
        self.0.per_worker[self.1].store(n, Ordering::Relaxed);
        self.0.peak.fetch_max(self.0.total(), Ordering::Relaxed);
    }
}

/// Counts a worker as set up when its loop starts ([`Ready::mark`]), or when it gives up
/// before that (on drop).
pub(super) struct Ready<'a>(&'a AtomicUsize, bool);

impl Ready<'_> {
    pub(super) fn mark(&mut self) {
        if !self.1 {
            self.1 = true;
            self.0.fetch_add(1, Ordering::Release);
        }
    }
}

impl Drop for Ready<'_> {
    fn drop(&mut self) {
        self.mark();
    }
}

/// When a connection was last active, for the idle sweep both workers run once a second.
#[derive(Debug, Clone, Copy)]
pub(super) struct Activity {
    /// When the connection opened or its last whole request arrived: a client that sends
    /// nothing, or trickles a request, for `--idle-timeout` is closed.
    last_active: Instant,
    /// Since when responses have been waiting to go out (seen at a tick): a client that stops
    /// reading is closed after `--idle-timeout` too.
    unflushed_since: Option<Instant>,
}

impl Activity {
    /// A connection opened at `now`.
    pub(super) fn new(now: Instant) -> Activity {
        Activity {
            last_active: now,
            unflushed_since: None,
        }
    }

    /// A whole request arrived at `now`.
    pub(super) fn request(&mut self, now: Instant) {
        self.last_active = now;
    }

    /// Whether the connection has been idle for longer than `timeout` at `now`: since its last
    /// whole request (or its opening), or, while responses are `waiting` to go out, since
    /// they were first seen waiting, so a client that stops reading times out too.
    pub(super) fn timed_out(&mut self, waiting: bool, now: Instant, timeout: Duration) -> bool {
        let since = if waiting {
            *self.unflushed_since.get_or_insert(now)
        } else {
            self.unflushed_since = None;
            self.last_active
        };
        now.duration_since(since) > timeout
    }
}

/// What every worker sets up and keeps: its counters, its readiness, the responses, the end
/// of its run and the clock of its once-a-second tick.
pub(super) struct Base<'a> {
    pub(super) c: Counts,
    pub(super) r: Responses,
    pub(super) ready: Ready<'a>,
    pub(super) end: Instant,
    next_tick: Instant,
}

impl<'a> Base<'a> {
    /// Counts the worker ready when it starts its loop or gives up, and makes the responses.
    pub(super) fn new(
        cfg: &ServeConfig,
        ready: &'a AtomicUsize,
    ) -> Result<Base<'a>, Box<(Counts, String)>> {
        // Counted ready even when setup fails, so the memory baseline is not held up.
        let ready = Ready(ready, false);
        let r = Responses::new(cfg).map_err(|e| Box::new((Counts::default(), e)))?;
        let now = Instant::now();
        Ok(Base {
            c: Counts::default(),
            r,
            ready,
            end: now + cfg.duration,
            next_tick: now + Duration::from_secs(1),
        })
    }

    /// A setup that failed after the base was made: what it counted, and why.
    pub(super) fn failed_setup(b: Box<(Base<'a>, String)>) -> Box<(Counts, String)> {
        let (base, why) = *b;
        Box::new((base.c, why))
    }

    /// The worker gives up with `why`, keeping what it counted.
    pub(super) fn fail(self, why: String) -> WorkerResult {
        Err(Box::new((self.c, why)))
    }

    /// Whether a second has passed since the last tick: the heads' date is refreshed then and
    /// the idle sweep runs. Only the heads change (they are copied into each response); the
    /// body buffer the kernel may be reading is never touched.
    pub(super) fn tick(&mut self, now: Instant) -> bool {
        if now < self.next_tick {
            return false;
        }
        self.next_tick = now + Duration::from_secs(1);
        self.r.heads.refresh(SystemTime::now());
        true
    }
}
