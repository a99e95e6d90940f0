//! `sendpath agent`: the receiving side of `stream` (and of `sweep`'s stream points) on
//! another host, run on request over a control connection ([`proto`]), with the receiver's
//! bytes, verification and CPU sent back into the same rows (`cpu.remote`).
//!
//! Safety rails: the agent binds to loopback unless told otherwise, and a non-loopback
//! listener requires a token (compared in constant time); a session must say hello with the
//! right token before anything runs; every line is bounded and parsed strictly; sessions are
//! bounded in number (`max_sessions`) and time (`max_session`), every receive by its own
//! `max_seconds` and the agent's `max_receive`. A refusal is logged with its reason and costs
//! the refused client its connection only.

use crate::cancel::Cancel;
use crate::remote::proto::{self, Reply, Request, MAX_LINE, VERSION};
use crate::remote::read_line;
use crate::workload::{receive, RecvCounters, RecvMode};
use anyhow::{bail, Context};
use sendpath::metrics::cpu::ThreadCpu;
use std::io::{BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

pub use crate::remote::DEFAULT_PORT;

/// How the agent runs.
#[derive(Debug, Clone)]
pub struct AgentConfig {
    /// Where to listen.
    pub listen: SocketAddr,
    /// The token a client must present; required when `listen` is not loopback.
    pub token: Option<String>,
    /// Sessions served at once; more are refused as busy.
    pub max_sessions: usize,
    /// The longest a session may last.
    pub max_session: Duration,
    /// The longest one receive may last, whatever the client asks.
    pub max_receive: Duration,
    /// The longest the agent waits for a client's next request (at least a window: a client
    /// says nothing between the samples at its edges).
    pub idle: Duration,
}

/// Serves until `cancel` (Ctrl-C) or `until`.
pub fn serve(cfg: &AgentConfig, cancel: &Cancel, until: Duration) -> anyhow::Result<()> {
    if !cfg.listen.ip().is_loopback() && cfg.token.is_none() {
        bail!(
            "--listen {} is reachable from other hosts: give --token-file FILE (a secret the clients pass with --token-file too)",
            cfg.listen
        );
    }
    let l = TcpListener::bind(cfg.listen).with_context(|| {
        format!(
            "--listen {}: cannot bind (in use, or not a local address?)",
            cfg.listen
        )
    })?;
    l.set_nonblocking(true)?;
    eprintln!(
        "agent: listening on {} (protocol {VERSION}, token {}, at most {} sessions of {:?})",
        l.local_addr()?,
        if cfg.token.is_some() {
            "required"
        } else {
            "not required (loopback)"
        },
        cfg.max_sessions,
        cfg.max_session
    );
    let active = Arc::new(AtomicUsize::new(0));
    let end = Instant::now() + until;
    while !cancel.is_cancelled() && Instant::now() < end {
        let (mut s, peer) = match l.accept() {
            Ok(x) => x,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                std::thread::sleep(Duration::from_millis(20));
                continue;
            }
            Err(e) => {
                eprintln!("agent: accept failed: {e}");
                std::thread::sleep(Duration::from_millis(100));
                continue;
            }
        };
        let _ = s.set_nonblocking(false);
        if active.load(Ordering::Acquire) >= cfg.max_sessions {
            eprintln!(
                "agent: refused {peer}: busy ({} sessions)",
                cfg.max_sessions
            );
            let _ = s.write_all(
                Reply::error("busy: too many sessions, try again later")
                    .line()
                    .as_bytes(),
            );
            // Read what already arrived (the hello), without waiting, so closing does not
            // reset the connection before the refusal is read.
            let _ = s.set_nonblocking(true);
            let _ = s.read(&mut [0u8; MAX_LINE]);
            let _ = s.shutdown(std::net::Shutdown::Write);
            continue;
        }
        active.fetch_add(1, Ordering::AcqRel);
        let (cfg, active, cancel) = (cfg.clone(), active.clone(), cancel.clone());
        std::thread::spawn(move || {
            match session(s, peer, &cfg, &cancel) {
                Ok(()) => eprintln!("agent: session {peer} ended"),
                Err(e) => eprintln!("agent: session {peer} ended: {e:#}"),
            }
            active.fetch_sub(1, Ordering::AcqRel);
        });
    }
    Ok(())
}

/// A receive in progress: the accepting thread, then one thread per connection.
struct Receiving {
    counters: Arc<RecvCounters>,
    /// Receiver thread ids, for their CPU time so far.
    tids: Arc<Mutex<Vec<i32>>>,
    /// CPU of receiver threads that have finished.
    done_cpu: Arc<Mutex<ThreadCpu>>,
    handle: std::thread::JoinHandle<anyhow::Result<(u64, u64)>>,
}

/// `base` plus the CPU time so far of the threads `tids` that are still there.
fn plus_live_cpu(mut base: ThreadCpu, tids: &Mutex<Vec<i32>>) -> ThreadCpu {
    for &t in tids.lock().expect("tid lock").iter() {
        if let Ok(x) = ThreadCpu::read(t) {
            base.user_ns += x.user_ns;
            base.system_ns += x.system_ns;
        }
    }
    base
}

impl Receiving {
    fn cpu(&self) -> ThreadCpu {
        plus_live_cpu(*self.done_cpu.lock().expect("cpu lock"), &self.tids)
    }
}

/// Starts a receive: binds `ip:0`, accepts `connections` within the deadline, one receiver
/// thread each.
fn start_receive(
    ip: IpAddr,
    connections: u32,
    mode: RecvMode,
    recv_size: usize,
    deadline: Instant,
) -> anyhow::Result<(u16, Receiving)> {
    let l = TcpListener::bind((ip, 0)).context("binding the data port")?;
    let port = l.local_addr()?.port();
    let counters = Arc::new(RecvCounters::default());
    let tids = Arc::new(Mutex::new(Vec::new()));
    let done_cpu = Arc::new(Mutex::new(ThreadCpu::default()));
    let (c, t, d) = (counters.clone(), tids.clone(), done_cpu.clone());
    let handle = std::thread::spawn(move || -> anyhow::Result<(u64, u64)> {
        l.set_nonblocking(true)?;
        let mut threads = Vec::new();
        while threads.len() < connections as usize {
            let Some((s, _)) = crate::workload::accept_before(&l, deadline, || false)
                .context("accepting a data connection")?
            else {
                bail!(
                    "{} of {connections} connections arrived before the deadline",
                    threads.len()
                );
            };
            s.set_read_timeout(Some(
                deadline
                    .saturating_duration_since(Instant::now())
                    .max(Duration::from_millis(1)),
            ))?;
            let (c, t, d) = (c.clone(), t.clone(), d.clone());
            threads.push(std::thread::spawn(move || {
                let tid = sendpath::host::gettid();
                t.lock().expect("tid lock").push(tid);
                let v = receive(s, mode, &c, recv_size);
                // Move this thread's CPU (exact, not in ticks) from the live list to the
                // finished total.
                let mine = crate::measure::own_thread_cpu(tid);
                t.lock().expect("tid lock").retain(|&x| x != tid);
                let mut dc = d.lock().expect("cpu lock");
                dc.user_ns += mine.user_ns;
                dc.system_ns += mine.system_ns;
                v
            }));
        }
        let (mut verified, mut mismatches) = (0, 0);
        let mut first_err = None;
        for h in threads {
            match h.join() {
                Ok(Ok(v)) => {
                    verified += v.bytes_verified();
                    mismatches += v.mismatches;
                }
                Ok(Err(e)) => {
                    first_err.get_or_insert(e);
                }
                Err(_) => {
                    first_err.get_or_insert(anyhow::anyhow!("a receiver thread panicked"));
                }
            }
        }
        match first_err {
            Some(e) => Err(e),
            None => Ok((verified, mismatches)),
        }
    });
    Ok((
        port,
        Receiving {
            counters,
            tids,
            done_cpu,
            handle,
        },
    ))
}

/// After a refusal: stops writing and reads (at most 1 MiB, for at most a second) what the
/// client is still sending, so the refusal reaches it instead of being lost to a reset.
fn linger(r: &mut BufReader<TcpStream>) {
    let s = r.get_ref();
    let _ = s.shutdown(std::net::Shutdown::Write);
    let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
    let _ = std::io::copy(&mut r.take(1 << 20), &mut std::io::sink());
}

/// The agent's end of one control connection.
struct Control {
    r: BufReader<TcpStream>,
    w: TcpStream,
    buf: Vec<u8>,
    peer: SocketAddr,
}

impl Control {
    fn send(&mut self, reply: &Reply) -> anyhow::Result<()> {
        self.w
            .write_all(reply.line().as_bytes())
            .context("writing a reply")
    }

    /// The next line into `buf`: `false` at end of file, or after a line too long (refused,
    /// logged, and the connection drained so the refusal is read).
    fn next_line(&mut self) -> bool {
        match read_line(&mut self.r, &mut self.buf, MAX_LINE) {
            Ok(Some(())) => true,
            Ok(None) => false,
            Err(e) => {
                eprintln!("agent: refused {}: {e:#}", self.peer);
                let _ = self.send(&Reply::error(format!("{e:#}")));
                linger(&mut self.r);
                false
            }
        }
    }
}

/// One control connection: hello (with the token), then receives.
fn session(
    s: TcpStream,
    peer: SocketAddr,
    cfg: &AgentConfig,
    cancel: &Cancel,
) -> anyhow::Result<()> {
    let started = Instant::now();
    s.set_read_timeout(Some(cfg.idle))?;
    let local_ip = s.local_addr()?.ip();
    let mut ctl = Control {
        w: s.try_clone()?,
        r: BufReader::with_capacity(MAX_LINE, s),
        buf: Vec::with_capacity(MAX_LINE + 1),
        peer,
    };
    // Hello first, with the token when one is required.
    if !ctl.next_line() {
        return Ok(());
    }
    match proto::parse_request(&ctl.buf) {
        Ok(Request::Hello { token }) => {
            if let Some(want) = &cfg.token {
                if !proto::token_matches(token.as_deref(), want) {
                    eprintln!("agent: refused {peer}: wrong or missing token");
                    ctl.send(&Reply::error("wrong or missing token"))?;
                    return Ok(());
                }
            }
            ctl.send(&Reply {
                agent: Some(format!("sendpath {}", env!("CARGO_PKG_VERSION"))),
                ..Reply::ok()
            })?;
        }
        Ok(_) => {
            eprintln!("agent: refused {peer}: no hello");
            ctl.send(&Reply::error("say hello first"))?;
            return Ok(());
        }
        Err(e) => {
            eprintln!("agent: refused {peer}: {e}");
            ctl.send(&Reply::error(e.0))?;
            return Ok(());
        }
    }
    let mut current: Option<Receiving> = None;
    loop {
        if cancel.is_cancelled() || started.elapsed() > cfg.max_session {
            ctl.send(&Reply::error("the session's time is up"))?;
            return Ok(());
        }
        if !ctl.next_line() {
            return Ok(());
        }
        let req = match proto::parse_request(&ctl.buf) {
            Ok(r) => r,
            Err(e) => {
                eprintln!("agent: refused a request from {peer}: {e}");
                ctl.send(&Reply::error(e.0))?;
                continue;
            }
        };
        match (req, current.is_some()) {
            (Request::Hello { .. }, _) => ctl.send(&Reply::error("hello was already said"))?,
            (Request::HttpLoad(_) | Request::RrClient(_), true) => {
                ctl.send(&Reply::error("a receive is running: finish it first"))?
            }
            (Request::HttpLoad(spec), false) => {
                eprintln!(
                    "agent: {peer}: http-load, {} connection(s) on {} thread(s) to port {}{}, {} ms + {} ms",
                    spec.connections,
                    spec.threads,
                    spec.port,
                    spec.rate.map_or(String::new(), |r| format!(" at {r} req/s")),
                    spec.warmup_ms,
                    spec.duration_ms
                );
                let cfg = crate::http::load::LoadConfig {
                    target: SocketAddr::new(peer.ip(), spec.port),
                    connections: spec.connections as usize,
                    threads: spec.threads as usize,
                    cpus: Vec::new(),
                    duration: Duration::from_millis(u64::from(spec.duration_ms)),
                    warmup: Duration::from_millis(u64::from(spec.warmup_ms)),
                    rate: spec.rate,
                    path: spec.path.clone(),
                    timeout: Duration::from_secs(5),
                };
                let report = crate::http::load::run(&cfg, cancel);
                ctl.send(&Reply {
                    http_load: Some(report),
                    ..Reply::ok()
                })?;
            }
            (Request::RrClient(spec), false) => {
                eprintln!(
                    "agent: {peer}: rr clients, {} connection(s) to port {}, {} B requests, {} B responses, {} ms + {} ms",
                    spec.connections, spec.port, spec.request, spec.response, spec.warmup_ms, spec.duration_ms
                );
                let reply = run_rr_clients(peer.ip(), &spec, cancel).unwrap_or_else(|e| {
                    eprintln!("agent: {peer}: the rr clients failed: {e:#}");
                    Reply::error(format!("the rr clients failed: {e:#}"))
                });
                ctl.send(&reply)?;
            }
            (Request::Receive { .. }, true) => {
                ctl.send(&Reply::error("a receive is running: finish it first"))?
            }
            (
                Request::Receive {
                    connections,
                    recv,
                    recv_size,
                    max_seconds,
                },
                false,
            ) => {
                let limit = Duration::from_secs(u64::from(max_seconds)).min(cfg.max_receive);
                match start_receive(
                    local_ip,
                    connections,
                    recv,
                    recv_size as usize,
                    Instant::now() + limit,
                ) {
                    Ok((port, rx)) => {
                        eprintln!(
                            "agent: {peer}: receiving {connections} connection(s) on port {port} ({}, {recv_size} B reads, at most {limit:?})",
                            recv.name()
                        );
                        current = Some(rx);
                        ctl.send(&Reply {
                            port: Some(port),
                            ..Reply::ok()
                        })?;
                    }
                    Err(e) => ctl.send(&Reply::error(format!("{e:#}")))?,
                }
            }
            (Request::Sample | Request::Finish, false) => {
                ctl.send(&Reply::error("no receive is running"))?
            }
            (Request::Sample, true) => {
                let rx = current.as_ref().expect("running");
                let c = rx.cpu();
                ctl.send(&Reply {
                    bytes: Some(rx.counters.bytes.load(Ordering::Relaxed)),
                    cpu_user_ns: Some(c.user_ns),
                    cpu_system_ns: Some(c.system_ns),
                    ..Reply::ok()
                })?;
            }
            (Request::Finish, true) => {
                let Receiving {
                    counters,
                    tids,
                    done_cpu,
                    handle,
                } = current.take().expect("running");
                let joined = handle
                    .join()
                    .map_err(|_| anyhow::anyhow!("the accepting thread panicked"));
                // Every receiver thread has ended: its CPU is in the finished total.
                drop(tids);
                let c = *done_cpu.lock().expect("cpu lock");
                let bytes = counters.bytes.load(Ordering::Relaxed);
                match joined.and_then(|x| x) {
                    Ok((verified, mismatches)) => {
                        eprintln!("agent: {peer}: received {bytes} bytes");
                        ctl.send(&Reply {
                            bytes: Some(bytes),
                            cpu_user_ns: Some(c.user_ns),
                            cpu_system_ns: Some(c.system_ns),
                            bytes_verified: Some(verified),
                            mismatches: Some(mismatches),
                            ..Reply::ok()
                        })?;
                    }
                    Err(e) => {
                        eprintln!("agent: {peer}: the receive failed: {e:#}");
                        ctl.send(&Reply::error(format!("the receive failed: {e:#}")))?;
                    }
                }
            }
        }
    }
}

/// Runs the clients of request/response against `ip:spec.port` (the caller's servers): the
/// warmup, then the recorded window, by this host's clock.
fn run_rr_clients(
    ip: IpAddr,
    spec: &proto::RrClientSpec,
    cancel: &Cancel,
) -> anyhow::Result<Reply> {
    use crate::workload::rr::{client, RrPoint};
    let pt = RrPoint {
        strategy: sendpath::Strategy::Copy,
        request: spec.request as usize,
        response: spec.response as usize,
        concurrency: spec.connections as usize,
        fields: 1,
        recv: spec.recv,
        duration: Duration::from_millis(u64::from(spec.duration_ms)),
        warmup: Duration::from_millis(u64::from(spec.warmup_ms)),
        rate: spec.rate,
        cpus: None,
        opts: sendpath::Options::default(),
        mix: spec.size_mix.clone(),
        alloc: crate::traffic::mix::Alloc::Pool,
        agent: None,
    };
    let addr = SocketAddr::new(ip, spec.port);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let recording = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let done = Arc::new(std::sync::atomic::AtomicU64::new(0));
    let tids = Arc::new(Mutex::new(Vec::new()));
    let mut clients = Vec::new();
    let mut connect_err = None;
    for conn in 0..u64::from(spec.connections) {
        let c = match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(c) => c,
            Err(e) => {
                connect_err = Some(anyhow::Error::from(e).context(format!("connecting to {addr}")));
                break;
            }
        };
        c.set_nodelay(true)?;
        let (p, rec, st, dn, t) = (
            pt.clone(),
            recording.clone(),
            stop.clone(),
            done.clone(),
            tids.clone(),
        );
        clients.push(std::thread::spawn(move || {
            t.lock().expect("tid lock").push(sendpath::host::gettid());
            let r = client(c.try_clone()?, &p, &rec, &st, &dn, conn);
            let _ = c.shutdown(std::net::Shutdown::Both);
            r
        }));
    }
    let cpu_now = || plus_live_cpu(ThreadCpu::default(), &tids);
    let mut window = None;
    if connect_err.is_none() && cancel.sleep(pt.warmup) {
        let c0 = cpu_now();
        recording.store(true, Ordering::Relaxed);
        let full = cancel.sleep(pt.duration);
        recording.store(false, Ordering::Relaxed);
        let c1 = cpu_now();
        if full {
            window = Some((c0, c1));
        }
    }
    stop.store(true, Ordering::Relaxed);
    let mut hist = sendpath::metrics::new_histogram();
    let (mut bytes, mut verified, mut mismatches) = (0, 0, 0);
    for h in clients {
        let o = h
            .join()
            .map_err(|_| anyhow::anyhow!("an rr client panicked"))??;
        let _ = hist.add(&o.hist);
        bytes += o.bytes;
        verified += o.verifier.bytes_verified();
        mismatches += o.verifier.mismatches;
    }
    if let Some(e) = connect_err {
        return Err(e);
    }
    let Some((c0, c1)) = window else {
        bail!("the agent was stopped during the window");
    };
    Ok(Reply {
        transactions: Some(done.load(Ordering::Relaxed)),
        bytes: Some(bytes),
        latency_hist_ns: Some(crate::results::hist_pairs(&hist)),
        cpu_user_ns: Some(c1.user_ns.saturating_sub(c0.user_ns)),
        cpu_system_ns: Some(c1.system_ns.saturating_sub(c0.system_ns)),
        bytes_verified: Some(verified),
        mismatches: Some(mismatches),
        ..Reply::ok()
    })
}
