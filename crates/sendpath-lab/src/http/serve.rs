//! `sendpath serve`: an HTTP/1.1 keep-alive server answering every GET with the same body, one
//! worker thread per CPU, each with its own `SO_REUSEPORT` listener.
//!
//! The io_uring modes (`copy`, `uring`, `uring-zc`) run one [`UringDriver`] per worker:
//! multishot accept, multishot receive into a provided buffer ring, and the responses through
//! each connection's send state, so pipelined requests are answered in order and one
//! `io_uring_enter` submits the responses of every connection that has some. `uring` sends
//! with SEND, `uring-zc` with SEND_ZC (from registered buffers, under a cap per worker with
//! fallback by copy), `copy` writes with `send(2)` from the worker and queues on the ring only
//! what the socket did not take. `epoll` is the classic baseline: non-blocking sockets,
//! `epoll_wait`, `read` and `writev`.

use super::{body_bytes, parse_request, Heads, Parsed, Refusal, MAX_HEAD};
use crate::cancel::Cancel;
use sendpath::engine::{
    Choice, ConnId, ConnState, DriverConfig, Event, Fixed, RecvBuf, RecvConfig, SpliceFailure,
    SpliceJob, SplicePipe, SpliceProgress, UringDriver,
};
use sendpath::metrics::SendStatsSummary;
use sendpath::policy::InflightLimits;
use sendpath::{Buf, SendStats, Socket};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, VecDeque};
use std::net::SocketAddr;
use std::os::fd::OwnedFd;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

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
    /// Seed of the body bytes (see [`body_bytes`]).
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
    pub profile: Option<std::sync::Arc<sendpath::profile::Profile>>,
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
    /// Requests refused (400, 405, 431), by reason.
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

/// Counters of one worker.
#[derive(Debug, Default)]
struct Counts {
    requests: u64,
    response_bytes: u64,
    refused: BTreeMap<String, u64>,
    accepted: u64,
    rejected: u64,
    accept_errors: BTreeMap<String, u64>,
    idle_timeouts: u64,
    resets: u64,
    receive_errors: u64,
    pipeline_overflows: u64,
    cq_overflows: u64,
    send: Option<SendStats>,
    setup: Option<String>,
    /// The worker's waits were batched (`--wait-nr`, `--min-wait`).
    batched: bool,
}

impl Counts {
    fn add(&mut self, o: Counts) {
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

    fn refuse(&mut self, r: Refusal) {
        *self.refused.entry(r.name().to_string()).or_default() += 1;
    }

    /// A connection ended with `errno`.
    fn ended(&mut self, errno: Option<i32>) {
        match errno {
            Some(libc::ECONNRESET) | Some(libc::EPIPE) => self.resets += 1,
            _ => self.receive_errors += 1,
        }
    }

    fn accept_error(&mut self, e: &std::io::Error) {
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
const MAX_OWED: usize = 4096;
/// A head and body up to this size go out as one buffer (copied in); larger bodies are sent
/// from the one shared body buffer.
const INLINE: usize = 16 * 1024;

/// The bytes every worker answers with.
struct Responses {
    heads: Heads,
    body: Buf,
    inline: bool,
    /// The ring modes with `--file`: the file and its length, spliced instead of `body`.
    file: Option<(std::fs::File, u64)>,
}

impl Responses {
    /// What a worker answers with: heads for `body_len` bytes, and the body in memory, or
    /// the `--file` opened (the body then never lives in memory).
    fn new(cfg: &ServeConfig) -> Result<Responses, String> {
        let file = match &cfg.file {
            Some(p) => Some((
                std::fs::File::open(p).map_err(|e| format!("opening {}: {e}", p.display()))?,
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

    fn len(&self, head_only: bool) -> usize {
        self.heads.ok().len() + if head_only { 0 } else { self.body.len() }
    }

    fn write(&self, head_only: bool, out: &mut Vec<u8>) {
        out.extend_from_slice(self.heads.ok());
        if !head_only {
            out.extend_from_slice(self.body.as_slice());
        }
    }
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
    let mut handles = Vec::new();
    for (i, l) in listeners.into_iter().enumerate() {
        let cfg = cfg.clone();
        let cancel = cancel.clone();
        let open = open.clone();
        let ready = ready.clone();
        let cpu = (!cfg.cpus.is_empty()).then(|| cfg.cpus[i % cfg.cpus.len()]);
        handles.push(std::thread::spawn(move || {
            if let Some(c) = cpu {
                let _ = sendpath::host::pin_current_thread(c);
            }
            let open = Gauge(&open, i);
            match cfg.send {
                SendMode::Epoll => epoll_worker(&cfg, l, &cancel, &open, &ready),
                _ => ring_worker(&cfg, l, &cancel, &open, &ready),
            }
        }));
    }
    // Sample memory against open connections while the workers run, from a baseline taken
    // once every worker has set up (rings, receive buffers) and before connections count.
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
    let cpu_seconds = (process_cpu() - cpu0).as_secs_f64();
    let send_stats = total.send.as_ref().map(|s| s.summary());
    let copied_fraction = total.send.as_ref().and_then(|s| s.copied_fraction());
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
        refused: total.refused,
        accepted: total.accepted,
        rejected: total.rejected,
        accept_errors: total.accept_errors,
        idle_timeouts: total.idle_timeouts,
        resets: total.resets,
        receive_errors: total.receive_errors,
        pipeline_overflows: total.pipeline_overflows,
        peak_connections: open.peak.load(Ordering::Relaxed) as u64,
        memory_per_connection_bytes: per_conn,
        cpu_seconds,
        cpu_us_per_request: (total.requests > 0).then(|| cpu_seconds * 1e6 / total.requests as f64),
        cq_overflows: total.cq_overflows,
        send_stats,
        copied_fraction,
        worker_errors,
    }
}

type WorkerResult = Result<Counts, Box<(Counts, String)>>;

/// Open connections per worker, and the most open at once over all of them.
struct Open {
    per_worker: Vec<AtomicUsize>,
    peak: AtomicUsize,
}

impl Open {
    fn total(&self) -> usize {
        self.per_worker
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .sum()
    }
}

/// A worker's handle on [`Open`].
struct Gauge<'a>(&'a Open, usize);

impl Gauge<'_> {
    /// This worker has `n` connections open now.
    fn set(&self, n: usize) {
        self.0.per_worker[self.1].store(n, Ordering::Relaxed);
        self.0.peak.fetch_max(self.0.total(), Ordering::Relaxed);
    }
}

/// Counts a worker as set up when its loop starts ([`Ready::mark`]), or when it gives up
/// before that (on drop).
struct Ready<'a>(&'a AtomicUsize, bool);

impl Ready<'_> {
    fn mark(&mut self) {
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

/// A connection's state in a ring worker.
#[derive(Debug)]
struct Client {
    /// The connection (its generation tells it from a later one at the same index).
    id: ConnId,
    /// The start of a request not yet whole.
    partial: Vec<u8>,
    /// Requests parsed and not yet answered, in order (`true`: HEAD).
    owed: VecDeque<bool>,
    /// A refusal to send after the owed responses, then close.
    refusal: Option<Refusal>,
    /// Close once everything queued is on the socket (`Connection: close`, end of file).
    close_when_flushed: bool,
    /// When the connection opened or its last whole request arrived: a client that sends
    /// nothing, or trickles a request, for `--idle-timeout` is closed.
    last_active: Instant,
    /// Since when responses have been waiting to go out (seen at a tick): a client that stops
    /// reading is closed after `--idle-timeout` too.
    unflushed_since: Option<Instant>,
    /// `--file`: the pipe the body is spliced through, and the response being spliced.
    pipe: Option<(SplicePipe, u64)>,
    /// The response being spliced.
    job: Option<SpliceJob>,
}

fn ring_worker(
    cfg: &ServeConfig,
    listener: OwnedFd,
    cancel: &Cancel,
    open: &Gauge<'_>,
    ready: &AtomicUsize,
) -> WorkerResult {
    let mut c = Counts::default();
    // Counted ready even when setup fails, so the memory baseline is not held up.
    let mut ready = Ready(ready, false);
    // Modes that may send zero-copy get registered bodies and the per-worker cap.
    let zc = matches!(cfg.send, SendMode::UringZc | SendMode::Adaptive);
    let choice = if cfg.send == SendMode::UringZc {
        Choice::ZeroCopy
    } else {
        Choice::Copy
    };
    let opts = sendpath::Options {
        profile: cfg.profile.clone(),
        ..sendpath::Options::default()
    };
    let mut d = match UringDriver::new(DriverConfig {
        connections: cfg.max_connections.min(4096),
        depth: cfg.depth,
        inflight: InflightLimits::default(),
        fixed_buffers: zc,
        ring_zc_inflight: zc.then_some(cfg.zc_inflight),
    }) {
        Ok(d) => d,
        Err(e) => return Err(Box::new((c, format!("io_uring setup: {e}")))),
    };
    c.setup = Some(d.setup().name().to_string());
    // Batched waits only when the kernel takes a minimum wait; else each completion wakes.
    c.batched = cfg.wait_nr > 1 && !cfg.min_wait.is_zero() && d.has_min_wait();
    if let Err(e) = d.provide_recv_buffers(RecvConfig {
        buffers: 2048,
        size: 4096,
    }) {
        return Err(Box::new((c, format!("{e}"))));
    }
    if let Err(e) = d.listen(Socket::from(listener)) {
        return Err(Box::new((c, format!("{e}"))));
    }
    let mut r = match Responses::new(cfg) {
        Ok(r) => r,
        Err(e) => return Err(Box::new((c, e))),
    };
    if zc && !r.inline {
        d.register(&mut r.body);
    }
    let mut clients: Vec<Option<Client>> = Vec::new();
    let mut events = Vec::new();
    let mut writable = Vec::new();
    let mut scratch = Vec::new();
    let mut now = Instant::now();
    let end = now + cfg.duration;
    let mut next_tick = now + Duration::from_secs(1);
    ready.mark();
    while !cancel.is_cancelled() && now < end {
        if c.batched {
            // No more completions can be waited for than connections could send requests.
            d.batch_waits(cfg.wait_nr.min(d.open_connections()), cfg.min_wait);
        }
        if let Err(e) = d.run_for(Duration::from_millis(100)) {
            c.send = Some(d.total_stats());
            return Err(Box::new((c, format!("{e}"))));
        }
        // One clock reading per pass: what a request's arrival and the idle checks need.
        now = Instant::now();
        d.take_events(&mut events);
        for ev in events.drain(..) {
            match ev {
                Event::Accepted(sock) => {
                    c.accepted += 1;
                    if d.open_connections() >= cfg.max_connections {
                        c.rejected += 1;
                        continue;
                    }
                    let _ = rustix::net::sockopt::set_tcp_nodelay(&sock, true);
                    let chooser: Box<dyn sendpath::engine::Choose> = match cfg.send {
                        SendMode::Adaptive => {
                            sendpath::engine::chooser_for(sendpath::Strategy::Adaptive, &opts)
                                .expect("adaptive runs on the ring")
                        }
                        _ => Box::new(Fixed(choice)),
                    };
                    let state = ConnState::new(d.state_config(true), chooser);
                    match d.add_receiving(sock, state) {
                        Ok(id) => {
                            if clients.len() <= id.index() {
                                clients.resize_with(id.index() + 1, || None);
                            }
                            clients[id.index()] = Some(Client {
                                id,
                                partial: Vec::new(),
                                owed: VecDeque::new(),
                                refusal: None,
                                close_when_flushed: false,
                                last_active: now,
                                unflushed_since: None,
                                pipe: None,
                                job: None,
                            });
                            open.set(d.open_connections());
                        }
                        Err(e) => {
                            c.accept_error(&std::io::Error::other(e.to_string()));
                        }
                    }
                }
                Event::AcceptFailed(e) => c.accept_error(&e),
                Event::Received { conn, buf } => {
                    on_received(&mut d, &mut clients, &mut c, conn, buf, now, &mut scratch);
                    respond(
                        &mut d,
                        &mut clients,
                        &mut c,
                        &r,
                        conn,
                        cfg.send,
                        &mut scratch,
                    );
                }
                Event::RecvEnded { conn, error } => {
                    if let Some(e) = error {
                        c.ended(e.raw_os_error());
                        d.close(conn);
                    } else if let Some(cl) = client(&mut clients, conn) {
                        cl.close_when_flushed = true;
                        respond(
                            &mut d,
                            &mut clients,
                            &mut c,
                            &r,
                            conn,
                            cfg.send,
                            &mut scratch,
                        );
                    }
                }
                Event::Spliced {
                    conn,
                    into_pipe,
                    res,
                } => {
                    on_spliced(&mut d, &mut clients, &mut c, &r, conn, into_pipe, res);
                    respond(
                        &mut d,
                        &mut clients,
                        &mut c,
                        &r,
                        conn,
                        cfg.send,
                        &mut scratch,
                    );
                }
                Event::Closed(id) => {
                    // Only if the slot still holds that connection, not a later one at the
                    // same index.
                    if let Some(x) = clients.get_mut(id.index()) {
                        if x.as_ref().is_some_and(|c| c.id == id) {
                            *x = None;
                        }
                    }
                    open.set(d.open_connections());
                }
            }
        }
        d.take_writable(&mut writable);
        for id in writable.drain(..) {
            respond(&mut d, &mut clients, &mut c, &r, id, cfg.send, &mut scratch);
        }
        if now >= next_tick {
            next_tick = now + Duration::from_secs(1);
            // Only the heads change (they are copied into each response); the body buffer the
            // kernel may be reading is never touched.
            r.heads.refresh(SystemTime::now());
            for cl in clients.iter_mut().flatten() {
                if !d.is_open(cl.id) {
                    continue;
                }
                let waiting = !d.state(cl.id).is_flushed() || cl.job.is_some();
                let since = idle_since(waiting, cl.last_active, &mut cl.unflushed_since, now);
                if now.duration_since(since) > cfg.idle_timeout {
                    c.idle_timeouts += 1;
                    d.close(cl.id);
                }
            }
        }
    }
    // Closing: stop accepting, close every connection, wait for the kernel to let go.
    for cl in clients.iter().flatten() {
        d.close(cl.id);
    }
    let deadline = Instant::now() + Duration::from_secs(2);
    while d.open_connections() > 0 && Instant::now() < deadline {
        if d.run_for(Duration::from_millis(10)).is_err() {
            break;
        }
        d.take_events(&mut events);
        for ev in events.drain(..) {
            if let Event::Received { buf, .. } = ev {
                d.recycle(buf);
            }
        }
    }
    open.set(0);
    c.cq_overflows = d.cq_overflows();
    c.send = Some(d.total_stats());
    Ok(c)
}

/// The state of connection `id`, if the table holds that very connection.
fn client(clients: &mut [Option<Client>], id: ConnId) -> Option<&mut Client> {
    clients.get_mut(id.index())?.as_mut().filter(|c| c.id == id)
}

/// Parses what arrived, queueing a response per whole request.
fn on_received(
    d: &mut UringDriver,
    clients: &mut [Option<Client>],
    c: &mut Counts,
    conn: ConnId,
    buf: RecvBuf,
    now: Instant,
    scratch: &mut Vec<u8>,
) {
    let Some(cl) = client(clients, conn) else {
        d.recycle(buf);
        return;
    };
    if cl.refusal.is_some() || cl.close_when_flushed {
        // Already refused or closing: ignore what else comes.
        d.recycle(buf);
        return;
    }
    let data = d.received(&buf);
    let rest: &[u8] = if cl.partial.is_empty() {
        data
    } else {
        cl.partial
            .extend_from_slice(&data[..data.len().min(MAX_HEAD + 1)]);
        scratch.clear();
        scratch.append(&mut cl.partial);
        scratch
    };
    let mut at = 0;
    while at < rest.len() {
        match parse_request(&rest[at..]) {
            Parsed::Request {
                len,
                head_only,
                close,
            } => {
                at += len;
                cl.last_active = now;
                cl.owed.push_back(head_only);
                if close {
                    cl.close_when_flushed = true;
                    break;
                }
                if cl.owed.len() > MAX_OWED {
                    c.pipeline_overflows += 1;
                    cl.refusal = Some(Refusal::TooLarge);
                    cl.owed.clear();
                    break;
                }
            }
            Parsed::Partial => {
                cl.partial.extend_from_slice(&rest[at..]);
                at = rest.len();
            }
            Parsed::Refused(why) => {
                c.refuse(why);
                cl.refusal = Some(why);
                break;
            }
        }
    }
    d.recycle(buf);
}

/// Queues the owed responses that fit, then a refusal, and closes once all is out when asked.
fn respond(
    d: &mut UringDriver,
    clients: &mut [Option<Client>],
    c: &mut Counts,
    r: &Responses,
    conn: ConnId,
    mode: SendMode,
    scratch: &mut Vec<u8>,
) {
    if !d.is_open(conn) {
        return;
    }
    let Some(cl) = client(clients, conn) else {
        return;
    };
    if let Some(file) = &r.file {
        if cl.job.is_some() {
            return;
        }
        if let Some(head_only) = cl.owed.pop_front() {
            return start_file_response(d, cl, c, &r.heads, file, conn, head_only);
        }
    }
    let mut queued = false;
    while !cl.owed.is_empty() && d.room(conn) > 0 {
        if r.inline {
            // As many responses as fit in one buffer of at most 64 KiB.
            scratch.clear();
            while let Some(&head_only) = cl.owed.front() {
                if !scratch.is_empty() && scratch.len() + r.len(head_only) > 64 * 1024 {
                    break;
                }
                r.write(head_only, scratch);
                cl.owed.pop_front();
                c.requests += 1;
            }
            c.response_bytes += scratch.len() as u64;
            let sent = if mode == SendMode::Copy && d.state(conn).is_flushed() {
                send_now(d.socket(conn), scratch)
            } else {
                0
            };
            if sent < scratch.len() {
                let mut b = d.take_buf(conn, scratch.len() - sent);
                b.as_mut_slice().copy_from_slice(&scratch[sent..]);
                let _ = d.push(conn, b, true);
                queued = true;
            }
        } else {
            let head_only = *cl.owed.front().expect("not empty");
            if !head_only && d.room(conn) < 2 {
                break;
            }
            cl.owed.pop_front();
            c.requests += 1;
            let head = r.heads.ok();
            let mut b = d.take_buf(conn, head.len());
            b.as_mut_slice().copy_from_slice(head);
            c.response_bytes += head.len() as u64;
            let _ = d.push(conn, b, head_only);
            if !head_only {
                let body = r.body.share().expect("the body is a shared buffer");
                c.response_bytes += body.len() as u64;
                let _ = d.push(conn, body, true);
            }
            queued = true;
        }
    }
    if cl.owed.is_empty() {
        if let Some(why) = cl.refusal.take() {
            let bytes = Heads::refusal(why);
            if d.room(conn) > 0 {
                let mut b = d.take_buf(conn, bytes.len());
                b.as_mut_slice().copy_from_slice(&bytes);
                let _ = d.push(conn, b, true);
                queued = true;
                cl.close_when_flushed = true;
            } else {
                cl.refusal = Some(why);
            }
        }
    }
    if queued {
        d.request_flush(conn);
    }
    if cl.close_when_flushed
        && cl.owed.is_empty()
        && cl.refusal.is_none()
        && d.state(conn).is_flushed()
    {
        d.close(conn);
    }
}

/// Starts a `--file` response on `conn`: the head is written into the connection's pipe, then
/// the file is spliced in behind it and the pipe out to the socket, a pipe-full at a time.
fn start_file_response(
    d: &mut UringDriver,
    cl: &mut Client,
    c: &mut Counts,
    heads: &Heads,
    file: &(std::fs::File, u64),
    conn: ConnId,
    head_only: bool,
) {
    if cl.pipe.is_none() {
        match new_pipe() {
            Ok(p) => cl.pipe = Some(p),
            Err(e) => {
                c.ended(Some(e.raw_os_error()));
                return d.close(conn);
            }
        }
    }
    let (pipe, _) = cl.pipe.as_ref().expect("made above");
    let head = heads.ok();
    // The pipe is empty between responses and holds at least 4 KiB: this write never waits.
    if rustix::io::write(&pipe.write, head).ok() != Some(head.len()) {
        c.receive_errors += 1;
        return d.close(conn);
    }
    c.requests += 1;
    let body = if head_only { 0 } else { file.1 };
    c.response_bytes += head.len() as u64 + body;
    cl.job = Some(SpliceJob::new(0, body, head.len() as u64));
    next_splice(d, cl, c, file, conn);
}

/// A pipe for splicing, as large as the system lets it be (up to 1 MiB), and its size.
fn new_pipe() -> rustix::io::Result<(SplicePipe, u64)> {
    let (read, write) = rustix::pipe::pipe_with(rustix::pipe::PipeFlags::CLOEXEC)?;
    let _ = rustix::pipe::fcntl_setpipe_size(&write, 1 << 20);
    let size = rustix::pipe::fcntl_getpipe_size(&write)? as u64;
    Ok((SplicePipe { read, write }, size))
}

/// Splices the next part of the job: more of the file into the pipe and the pipe out, or only
/// the pipe out when it is full.
fn next_splice(
    d: &mut UringDriver,
    cl: &mut Client,
    c: &mut Counts,
    file: &(std::fs::File, u64),
    conn: ConnId,
) {
    let (Some(job), Some((pipe, size))) = (cl.job.as_mut(), cl.pipe.as_ref()) else {
        return;
    };
    let step = job.next(*size);
    use std::os::fd::AsFd;
    let sent = step.map_err(|_| ()).and_then(|st| {
        d.splice(conn, file.0.as_fd(), st.offset, st.len, pipe, st.in_pipe)
            .map_err(|_| ())
    });
    if sent.is_err() {
        // A pipe too small to take a page past the head, or a closing connection.
        c.receive_errors += 1;
        cl.job = None;
        d.close(conn);
    }
}

/// One half of a splice completed on `conn`.
fn on_spliced(
    d: &mut UringDriver,
    clients: &mut [Option<Client>],
    c: &mut Counts,
    r: &Responses,
    conn: ConnId,
    into_pipe: bool,
    res: i32,
) {
    let (Some(cl), Some(file)) = (client(clients, conn), r.file.as_ref()) else {
        return;
    };
    let Some(job) = cl.job.as_mut() else { return };
    match job.on_spliced(into_pipe, res) {
        Ok(SpliceProgress::Waiting) => {}
        Ok(SpliceProgress::Done) => cl.job = None,
        Ok(SpliceProgress::Next) => next_splice(d, cl, c, file, conn),
        Err(f) => {
            // A file that ended early (it shrank) would leave a short body under its
            // Content-Length and corrupt the stream: the connection ends either way.
            if let SpliceFailure::Os(e) = f {
                c.ended(Some(e));
            }
            cl.job = None;
            d.close(conn);
        }
    }
}

/// Since when a connection has been idle at `now`: since its last whole request (or its
/// opening), or, while responses are `waiting` to go out, since they were first seen waiting
/// (kept in `unflushed_since`), so a client that stops reading times out too.
fn idle_since(
    waiting: bool,
    last_active: Instant,
    unflushed_since: &mut Option<Instant>,
    now: Instant,
) -> Instant {
    if waiting {
        *unflushed_since.get_or_insert(now)
    } else {
        *unflushed_since = None;
        last_active
    }
}

/// `send(2)` with `MSG_DONTWAIT`: how many bytes the socket took (0 when it would block or
/// failed; the ring then sends the rest and reports any error).
fn send_now(sock: &Socket, bytes: &[u8]) -> usize {
    use rustix::net::SendFlags;
    rustix::net::send(sock, bytes, SendFlags::DONTWAIT | SendFlags::NOSIGNAL).unwrap_or(0)
}

/// A connection's state in the epoll worker.
struct EClient {
    fd: OwnedFd,
    partial: Vec<u8>,
    /// Bytes to write, in order: owned bytes, or the shared body from an offset.
    out: VecDeque<Chunk>,
    close_when_flushed: bool,
    /// As in the ring workers: opened or last whole request; and since when output waits.
    last_active: Instant,
    unflushed_since: Option<Instant>,
    writing: bool,
}

enum Chunk {
    Owned(Vec<u8>, usize),
    Body(usize),
    /// The file body from this offset, sent with `sendfile(2)`.
    File(u64),
}

fn epoll_worker(
    cfg: &ServeConfig,
    listener: OwnedFd,
    cancel: &Cancel,
    open: &Gauge<'_>,
    ready: &AtomicUsize,
) -> WorkerResult {
    use rustix::event::epoll;
    let mut c = Counts::default();
    let mut ready = Ready(ready, false);
    let fail =
        |c: Counts, what: &str, e: rustix::io::Errno| Err(Box::new((c, format!("{what}: {e}"))));
    if let Err(e) = rustix::io::ioctl_fionbio(&listener, true) {
        return fail(c, "ioctl(FIONBIO)", e);
    }
    let ep = match epoll::create(epoll::CreateFlags::CLOEXEC) {
        Ok(e) => e,
        Err(e) => return fail(c, "epoll_create", e),
    };
    const LISTENER: u64 = u64::MAX;
    if let Err(e) = epoll::add(
        &ep,
        &listener,
        epoll::EventData::new_u64(LISTENER),
        epoll::EventFlags::IN,
    ) {
        return fail(c, "epoll_ctl", e);
    }
    let mut r = match Responses::new(cfg) {
        Ok(r) => r,
        Err(e) => return Err(Box::new((c, e))),
    };
    let mut clients: Vec<Option<EClient>> = Vec::new();
    let mut free: Vec<usize> = Vec::new();
    let mut events = Vec::with_capacity(512);
    let mut rbuf = vec![0u8; 16 * 1024];
    let end = Instant::now() + cfg.duration;
    let mut next_tick = Instant::now() + Duration::from_secs(1);
    let mut live = 0usize;
    ready.mark();
    while !cancel.is_cancelled() && Instant::now() < end {
        if let Err(e) = super::epoll_wait(&ep, &mut events, Duration::from_millis(100)) {
            if e != rustix::io::Errno::INTR {
                return fail(c, "epoll_wait", e);
            }
        }
        for ev in events.iter() {
            let (key, flags) = (ev.data.u64(), { ev.flags });
            if key == LISTENER {
                loop {
                    match rustix::net::accept_with(
                        &listener,
                        rustix::net::SocketFlags::NONBLOCK | rustix::net::SocketFlags::CLOEXEC,
                    ) {
                        Ok(fd) => {
                            c.accepted += 1;
                            if live >= cfg.max_connections {
                                c.rejected += 1;
                                continue;
                            }
                            let _ = rustix::net::sockopt::set_tcp_nodelay(&fd, true);
                            let i = free.pop().unwrap_or_else(|| {
                                clients.push(None);
                                clients.len() - 1
                            });
                            if epoll::add(
                                &ep,
                                &fd,
                                epoll::EventData::new_u64(i as u64),
                                epoll::EventFlags::IN,
                            )
                            .is_err()
                            {
                                free.push(i);
                                continue;
                            }
                            clients[i] = Some(EClient {
                                fd,
                                partial: Vec::new(),
                                out: VecDeque::new(),
                                close_when_flushed: false,
                                last_active: Instant::now(),
                                unflushed_since: None,
                                writing: false,
                            });
                            live += 1;
                            open.set(live);
                        }
                        Err(rustix::io::Errno::AGAIN) => break,
                        Err(e) => {
                            c.accept_error(&std::io::Error::from(e));
                            break;
                        }
                    }
                }
                continue;
            }
            let i = key as usize;
            let Some(cl) = clients.get_mut(i).and_then(|x| x.as_mut()) else {
                continue;
            };
            let mut close = false;
            if flags
                .intersects(epoll::EventFlags::IN | epoll::EventFlags::HUP | epoll::EventFlags::ERR)
            {
                match rustix::io::read(&cl.fd, &mut rbuf) {
                    Ok(0) => {
                        cl.close_when_flushed = true;
                    }
                    Ok(n) => {
                        if !cl.close_when_flushed {
                            close |= epoll_parse(cl, &rbuf[..n], &r, &mut c);
                        }
                    }
                    Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => {}
                    Err(e) => {
                        c.ended(Some(e.raw_os_error()));
                        close = true;
                    }
                }
            }
            if !close {
                if let Err(e) = epoll_write(cl, &r) {
                    c.ended(e.raw_os_error());
                    close = true;
                }
            }
            if !close {
                let want_out = !cl.out.is_empty();
                if want_out != cl.writing {
                    cl.writing = want_out;
                    let flags = if want_out {
                        epoll::EventFlags::IN | epoll::EventFlags::OUT
                    } else {
                        epoll::EventFlags::IN
                    };
                    let _ = epoll::modify(&ep, &cl.fd, epoll::EventData::new_u64(i as u64), flags);
                }
                if cl.close_when_flushed && cl.out.is_empty() {
                    close = true;
                }
            }
            if close {
                let _ = epoll::delete(&ep, &cl.fd);
                clients[i] = None;
                free.push(i);
                live -= 1;
            }
        }
        open.set(live);
        let now = Instant::now();
        if now >= next_tick {
            next_tick = now + Duration::from_secs(1);
            r.heads.refresh(SystemTime::now());
            for (i, slot) in clients.iter_mut().enumerate() {
                let Some(cl) = slot.as_mut() else { continue };
                let since = idle_since(
                    !cl.out.is_empty(),
                    cl.last_active,
                    &mut cl.unflushed_since,
                    now,
                );
                if now.duration_since(since) > cfg.idle_timeout {
                    c.idle_timeouts += 1;
                    if let Some(cl) = slot.take() {
                        let _ = epoll::delete(&ep, &cl.fd);
                    }
                    free.push(i);
                    live -= 1;
                }
            }
        }
    }
    open.set(0);
    Ok(c)
}

/// Parses `data` on an epoll connection and queues the responses; true to close at once.
fn epoll_parse(cl: &mut EClient, data: &[u8], r: &Responses, c: &mut Counts) -> bool {
    let heads = &r.heads;
    let file_len = r.file.as_ref().map(|f| f.1);
    let mut buf = std::mem::take(&mut cl.partial);
    buf.extend_from_slice(data);
    let mut at = 0;
    let mut small: Vec<u8> = Vec::new();
    while at < buf.len() {
        match parse_request(&buf[at..]) {
            Parsed::Request {
                len,
                head_only,
                close,
            } => {
                at += len;
                cl.last_active = Instant::now();
                c.requests += 1;
                let body_len = file_len.unwrap_or(r.body.len() as u64);
                let n = heads.ok().len() as u64 + if head_only { 0 } else { body_len };
                c.response_bytes += n;
                small.extend_from_slice(heads.ok());
                if !head_only {
                    if file_len.is_some() {
                        cl.out
                            .push_back(Chunk::Owned(std::mem::take(&mut small), 0));
                        cl.out.push_back(Chunk::File(0));
                    } else if r.inline {
                        small.extend_from_slice(r.body.as_slice());
                    } else {
                        cl.out
                            .push_back(Chunk::Owned(std::mem::take(&mut small), 0));
                        cl.out.push_back(Chunk::Body(0));
                    }
                }
                if cl.out.len() > MAX_OWED {
                    c.pipeline_overflows += 1;
                    return true;
                }
                if close {
                    cl.close_when_flushed = true;
                    break;
                }
            }
            Parsed::Partial => {
                cl.partial = buf[at..].to_vec();
                break;
            }
            Parsed::Refused(why) => {
                c.refuse(why);
                small.extend_from_slice(&Heads::refusal(why));
                cl.close_when_flushed = true;
                break;
            }
        }
    }
    if !small.is_empty() {
        cl.out.push_back(Chunk::Owned(small, 0));
    }
    false
}

/// Writes what is queued until the socket is full: bytes in memory with `writev`, the file
/// body with `sendfile(2)`. An error closes.
fn epoll_write(cl: &mut EClient, r: &Responses) -> std::io::Result<()> {
    let (body, file) = (r.body.as_slice(), r.file.as_ref());
    while let Some(front) = cl.out.front_mut() {
        if let Chunk::File(off) = front {
            let Some((f, len)) = file else {
                cl.out.pop_front();
                continue;
            };
            let left = (len - *off) as usize;
            match rustix::fs::sendfile(&cl.fd, f, Some(off), left) {
                Ok(0) if left > 0 => {
                    // The file is shorter than when the server started: end the connection
                    // rather than send a short body under a longer Content-Length.
                    return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                }
                Ok(_) => {
                    if *off >= *len {
                        cl.out.pop_front();
                    }
                    continue;
                }
                Err(rustix::io::Errno::AGAIN) => return Ok(()),
                Err(rustix::io::Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let iov: Vec<std::io::IoSlice<'_>> = cl
            .out
            .iter()
            .take(8)
            .map_while(|ch| match ch {
                Chunk::Owned(v, off) => Some(std::io::IoSlice::new(&v[*off..])),
                Chunk::Body(off) => Some(std::io::IoSlice::new(&body[*off..])),
                Chunk::File(_) => None,
            })
            .collect();
        let mut n = match rustix::io::writev(&cl.fd, &iov) {
            Ok(n) => n,
            Err(rustix::io::Errno::AGAIN) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        while n > 0 {
            let front = cl.out.front_mut().expect("written bytes belong to a chunk");
            let (left, off) = match front {
                Chunk::Owned(v, off) => (v.len() - *off, off),
                Chunk::Body(off) => (body.len() - *off, off),
                Chunk::File(_) => unreachable!("writev stops before a file chunk"),
            };
            if n >= left {
                n -= left;
                cl.out.pop_front();
            } else {
                *off += n;
                n = 0;
            }
        }
    }
    Ok(())
}

/// CPU time of the whole process so far (`CLOCK_PROCESS_CPUTIME_ID`).
pub fn process_cpu() -> Duration {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::ProcessCPUTime);
    Duration::new(t.tv_sec as u64, t.tv_nsec as u32)
}

/// Resident bytes added per connection, from `now` and `base` resident bytes; `None` when the
/// process holds less than at the baseline.
fn per_connection(now: u64, base: u64, connections: u64) -> Option<u64> {
    Some(now.checked_sub(base)? / connections.max(1))
}

/// Resident memory of this process (`/proc/self/statm`), bytes.
pub fn rss_bytes() -> Option<u64> {
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
