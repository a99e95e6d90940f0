//! `sendpath serve`: an HTTP/1.1 keep-alive server answering every GET with the same body, one
//! worker thread per CPU, each with its own `SO_REUSEPORT` listener.
//!
//! The io_uring modes (`copy`, `uring`, `uring-zc`) run one [`UringDriver`](sendpath::UringDriver) per worker:
//! multishot accept, multishot receive into a provided buffer ring, and the responses through
//! each connection's send state, so pipelined requests are answered in order and one
//! `io_uring_enter` submits the responses of every connection that has some. `uring` sends
//! with SEND, `uring-zc` with SEND_ZC (from registered buffers, under a cap per worker with
//! fallback by copy), `copy` writes with `send(2)` from the worker and queues on the ring only
//! what the socket did not take (`ring`). `epoll` is the classic baseline: non-blocking
//! sockets, `epoll_wait`, `read` and `writev` (`epoll`). Both share their setup, counters
//! and idle sweep (`worker`).

mod epoll;
mod ring;
mod worker;

use crate::cancel::Cancel;
use sendpath::SendStatsSummary;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};
use worker::{Counts, Gauge, Open, WorkerResult};

/// How responses are sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum SendMode {
    /// `send(2)` from the worker; what the socket does not take goes on the ring by SEND.
    Copy,
    /// io_uring SEND.
    Uring,
    /// io_uring SEND_ZC.
    UringZc,
    /// epoll and `writev(2)`, no io_uring.
    Epoll,
    /// io_uring SEND or SEND_ZC per send, by the host profile (the adaptive sender).
    Adaptive,
}

impl SendMode {
    /// Every mode, in the order of `--send` help.
    pub const ALL: [SendMode; 5] = [
        SendMode::Copy,
        SendMode::Uring,
        SendMode::UringZc,
        SendMode::Epoll,
        SendMode::Adaptive,
    ];

    /// The name on the command line and in results.
    pub fn name(self) -> &'static str {
        match self {
            SendMode::Copy => "copy",
            SendMode::Uring => "uring",
            SendMode::UringZc => "uring-zc",
            SendMode::Epoll => "epoll",
            SendMode::Adaptive => "adaptive",
        }
    }
}

impl std::str::FromStr for SendMode {
    type Err = String;
    fn from_str(s: &str) -> Result<Self, String> {
        SendMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                let names: Vec<_> = SendMode::ALL.iter().map(|m| m.name()).collect();
                format!("unknown send mode {s:?}; one of: {}", names.join(", "))
            })
    }
}

/// What `serve` runs with.
#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// Worker threads, each with its own listener and ring.
    pub workers: usize,
    /// CPUs to pin workers to, in turn; empty to leave them unpinned.
    pub cpus: Vec<usize>,
    /// How responses are sent.
    pub send: SendMode,
    /// Body bytes of every 200 response (the file's size with `file`).
    pub body_len: usize,
    /// Serve this file's bytes as the body: spliced through a pipe on the ring, or sent with
    /// `sendfile(2)` by `--send epoll`.
    pub file: Option<std::path::PathBuf>,
    /// Seed of the body bytes (see `http::body_bytes`).
    pub seed: u64,
    /// SEND_ZC requests awaiting notification per worker before sends go by copy.
    pub zc_inflight: usize,
    /// A connection with no complete request for this long is closed.
    pub idle_timeout: Duration,
    /// Connections per worker beyond which new ones are closed at once.
    pub max_connections: usize,
    /// Requests per io_uring chain per connection.
    pub depth: usize,
    /// Ring modes: the most completions a batched wait holds out for (also at most the
    /// worker's connections; see `min_wait`).
    pub wait_nr: usize,
    /// Ring modes: how long a batched wait holds out once one completion has come (io_uring's
    /// `min_wait_usec`, Linux 6.12; `UringDriver::batch_waits`); zero wakes at the first.
    pub min_wait: Duration,
    /// The server stops by itself after this long.
    pub duration: Duration,
    /// The host profile `--send adaptive` decides from (`None`: the defaults).
    pub profile: Option<std::sync::Arc<sendpath::Profile>>,
}

/// What a run of `serve` did, summed over workers.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ServeReport {
    /// The address served.
    pub listen: String,
    /// The send mode.
    pub send: String,
    /// Workers.
    pub workers: usize,
    /// Body bytes per response.
    pub body_bytes: usize,
    /// How the rings were set up (io_uring modes).
    pub ring_setup: Option<String>,
    /// The batch a worker's wait asked for (`--wait-nr`), and how long it waited for one
    /// (`--min-wait`), microseconds; null when workers woke at each completion (epoll, a zero
    /// `--min-wait`, or a kernel without `IORING_FEAT_MIN_TIMEOUT`).
    pub wait_nr: Option<usize>,
    /// See `wait_nr`.
    pub min_wait_us: Option<u64>,
    /// Seconds served.
    pub seconds: f64,
    /// Requests answered with 200.
    pub requests: u64,
    /// Response bytes handed to the kernel (heads and bodies).
    pub response_bytes: u64,
    /// Requests refused (400, 405, 431; 503 for pipelining past what is held), by reason.
    pub refused: BTreeMap<String, u64>,
    /// Connections accepted.
    pub accepted: u64,
    /// Connections closed at once because the worker had `max_connections`.
    pub rejected: u64,
    /// Accepts that failed (EMFILE and the like), by errno name.
    pub accept_errors: BTreeMap<String, u64>,
    /// Connections closed for idling past `--idle-timeout` (a half-sent request included).
    pub idle_timeouts: u64,
    /// Connections the client reset (`ECONNRESET`, `EPIPE`): a client that vanished, or one
    /// that closed with responses unread (as load generators do when they stop).
    pub resets: u64,
    /// Connections that ended with another receive error.
    pub receive_errors: u64,
    /// Connections closed for pipelining more than the server queues.
    pub pipeline_overflows: u64,
    /// Most connections open at once, over all workers.
    pub peak_connections: u64,
    /// Resident memory added per open connection, at the sample with the most connections;
    /// null when it was never measured with connections open, or when the process then held
    /// less than at the baseline (something else was let go, so the connections' share
    /// cannot be told).
    pub memory_per_connection_bytes: Option<u64>,
    /// CPU time of the whole process (all threads, user and system), seconds.
    pub cpu_seconds: f64,
    /// `cpu_seconds` per 200 response, microseconds; null without requests.
    pub cpu_us_per_request: Option<f64>,
    /// Completions the kernel held back because a CQ was full (io_uring modes).
    pub cq_overflows: u64,
    /// Send accounting of the ring modes: sends, zero-copy attempts, copied notifications,
    /// fallbacks by reason.
    pub send_stats: Option<SendStatsSummary>,
    /// The fraction of zero-copy sends the kernel copied; null when not known.
    pub copied_fraction: Option<f64>,
    /// Why a worker stopped early, if one did.
    pub worker_errors: Vec<String>,
}

/// Binds `workers` listeners on `addr` with `SO_REUSEPORT` (the kernel spreads connections
/// over them); a port of 0 is chosen by the first and shared by the rest.
pub fn bind_listeners(addr: SocketAddr, workers: usize) -> std::io::Result<Vec<OwnedFd>> {
    use rustix::net::{self, sockopt, AddressFamily, SocketType};
    let mut out = Vec::new();
    let mut at = addr;
    for _ in 0..workers.max(1) {
        let fam = if at.is_ipv4() {
            AddressFamily::INET
        } else {
            AddressFamily::INET6
        };
        let fd = net::socket_with(fam, SocketType::STREAM, net::SocketFlags::CLOEXEC, None)?;
        sockopt::set_socket_reuseaddr(&fd, true)?;
        sockopt::set_socket_reuseport(&fd, true)?;
        net::bind(&fd, &at)?;
        net::listen(&fd, 4096)?;
        if at.port() == 0 {
            at = local_addr(&fd)?;
        }
        out.push(fd);
    }
    Ok(out)
}

/// The address a listener is bound to.
pub fn local_addr(fd: &OwnedFd) -> std::io::Result<SocketAddr> {
    rustix::net::getsockname(fd)?
        .try_into()
        .map_err(|_| std::io::Error::other("not an IP socket"))
}

/// Runs the server until `cancel` or `cfg.duration`, on listeners from [`bind_listeners`].
pub fn serve(cfg: &ServeConfig, listeners: Vec<OwnedFd>, cancel: &Cancel) -> ServeReport {
    let started = Instant::now();
    let cpu0 = process_cpu();
    let ready = Arc::new(AtomicUsize::new(0));
    let open = Arc::new(Open {
        per_worker: (0..listeners.len()).map(|_| AtomicUsize::new(0)).collect(),
        peak: AtomicUsize::new(0),
    });
    let listen = listeners
        .first()
        .and_then(|l| local_addr(l).ok())
        .map_or_else(|| cfg.listen.to_string(), |a| a.to_string());
    let handles = spawn_workers(cfg, listeners, cancel, &open, &ready);
    let per_conn = watch_memory(cfg, &handles, cancel, &open, &ready, started);
    let (total, worker_errors) = join_workers(handles);
    let cpu_seconds = (process_cpu() - cpu0).as_secs_f64();
    ServeReport {
        listen,
        send: cfg.send.name().into(),
        workers: cfg.workers,
        body_bytes: cfg.body_len,
        ring_setup: total.setup.clone(),
        wait_nr: total.batched.then_some(cfg.wait_nr),
        min_wait_us: total
            .batched
            .then(|| u64::try_from(cfg.min_wait.as_micros()).unwrap_or(u64::MAX)),
        seconds: started.elapsed().as_secs_f64(),
        requests: total.requests,
        response_bytes: total.response_bytes,
        accepted: total.accepted,
        rejected: total.rejected,
        idle_timeouts: total.idle_timeouts,
        resets: total.resets,
        receive_errors: total.receive_errors,
        pipeline_overflows: total.pipeline_overflows,
        peak_connections: open.peak.load(Ordering::Relaxed) as u64,
        memory_per_connection_bytes: per_conn,
        cpu_seconds,
        cpu_us_per_request: (total.requests > 0).then(|| cpu_seconds * 1e6 / total.requests as f64),
        cq_overflows: total.cq_overflows,
        send_stats: total.send.as_ref().map(|s| s.summary()),
        copied_fraction: total.send.as_ref().and_then(|s| s.copied_fraction()),
        refused: total.refused,
        accept_errors: total.accept_errors,
        worker_errors,
    }
}

/// One worker thread per listener, pinned round-robin to `cfg.cpus` when given.
fn spawn_workers(
    cfg: &ServeConfig,
    listeners: Vec<OwnedFd>,
    cancel: &Cancel,
    open: &Arc<Open>,
    ready: &Arc<AtomicUsize>,
) -> Vec<JoinHandle<WorkerResult>> {
    let mut handles = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let cfg = cfg.clone();
        let cancel = cancel.clone();
        let open = open.clone();
        let ready = ready.clone();
        let cpu = (!cfg.cpus.is_empty()).then(|| cfg.cpus[i % cfg.cpus.len()]);
        handles.push(std::thread::spawn(move || {
            if let Some(c) = cpu {
                let _ = sendpath_host::thread::pin_current_thread(c);
            }
            let open = Gauge(&open, i);
            match cfg.send {
                SendMode::Epoll => epoll::epoll_worker(&cfg, l, &cancel, &open, &ready),
                _ => ring::ring_worker(&cfg, l, &cancel, &open, &ready),
            }
        }));
    }
    handles
}

/// Samples memory against open connections while the workers run, from a baseline taken once
/// every worker has set up (rings, receive buffers) and before connections count; cancels
/// the workers 5 s past the end. The resident bytes per connection at the peak.
fn watch_memory(
    cfg: &ServeConfig,
    handles: &[JoinHandle<WorkerResult>],
    cancel: &Cancel,
    open: &Open,
    ready: &AtomicUsize,
    started: Instant,
) -> Option<u64> {
    let (mut peak, mut per_conn) = (0u64, None);
    let end = started + cfg.duration;
    let mut rss0 = None;
    while handles.iter().any(|h| !h.is_finished()) {
        if rss0.is_none() && ready.load(Ordering::Acquire) == handles.len() {
            rss0 = rss_bytes();
        }
        std::thread::sleep(Duration::from_millis(200));
        if Instant::now() > end + Duration::from_secs(5) {
            cancel.cancel();
        }
        let n = open.total();
        if n as u64 > peak && rss0.is_some() {
            peak = n as u64;
            if let (Some(now), Some(base)) = (rss_bytes(), rss0) {
                per_conn = per_connection(now, base, n as u64);
            }
        }
    }
    per_conn
}

/// The workers' counts added up, and each error a worker gave up with.
fn join_workers(handles: Vec<JoinHandle<WorkerResult>>) -> (Counts, Vec<String>) {
    let mut total = Counts::default();
    let mut worker_errors = Vec::new();
    for h in handles {
        match h.join() {
            Ok(Ok(c)) => total.add(c),
            Ok(Err(b)) => {
                let (c, e) = *b;
                total.add(c);
                worker_errors.push(e);
            }
            Err(_) => worker_errors.push("a worker panicked".into()),
        }
    }
    (total, worker_errors)
}

/// CPU time of the whole process so far (`CLOCK_PROCESS_CPUTIME_ID`).
pub(crate) fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Resident bytes added per connection, from `now` and `base` resident bytes; `None` when the
/// process holds less than at the baseline.
fn per_connection(now: u64, base: u64, connections: u64) -> Option<u64> {
    Some(now.checked_sub(base)? / connections.max(1))
}

/// Resident memory of this process (`/proc/self/statm`), bytes.
pub(crate) fn rss_bytes() -> Option<u64> {
    let s = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = s.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * rustix::param::page_size() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_below_the_baseline_is_not_counted_as_zero_per_connection() {
        assert_eq!(
            per_connection(1_000_000 + 17_000 * 100, 1_000_000, 100),
            Some(17_000)
        );
        assert_eq!(per_connection(1_000_000, 1_000_000, 100), Some(0));
        assert_eq!(per_connection(900_000, 1_000_000, 100), None);
    }
}
