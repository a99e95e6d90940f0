//! One control session of the agent: the hello with its token, then one request at a time.

use super::clients::run_rr_clients;
use super::receive::{start_receive, Receiving};
use super::{AgentConfig, Slot, Slots};
use crate::cancel::Cancel;
use crate::remote::proto::{self, Reply, Request, MAX_LINE};
use crate::remote::read_line;
use crate::traffic::RecvMode;
use anyhow::Context;
use std::io::{BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// After a refusal: stops writing and reads (at most 1 MiB, for at most a second) what the
/// client is still sending, so the refusal reaches it instead of being lost to a reset.
fn linger(r: &mut BufReader<Timed>) {
    r.get_mut().within(Duration::from_secs(1));
    let _ = r.get_ref().s.shutdown(std::net::Shutdown::Write);
    let _ = std::io::copy(&mut r.take(1 << 20), &mut std::io::sink());
}

/// The control connection's reads, all before one deadline: a line must be whole by then,
/// however its bytes trickle in (each read waits at most what is left).
pub(super) struct Timed {
    s: TcpStream,
    until: Instant,
    /// How long the current deadline gave, for the refusal.
    span: Duration,
}

impl Timed {
    /// The next reads end `span` from now.
    fn within(&mut self, span: Duration) {
        (self.until, self.span) = (Instant::now() + span, span);
    }
}

impl Read for Timed {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        let left = self.until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::ErrorKind::TimedOut.into());
        }
        self.s.set_read_timeout(Some(left))?;
        self.s.read(buf)
    }
}

/// The agent's end of one control connection.
struct Control {
    r: BufReader<Timed>,
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
                let why = match crate::setting::timed_out(&e) {
                    true => format!("no complete line within {:?}", self.r.get_ref().span),
                    false => format!("{e:#}"),
                };
                eprintln!("agent: refused {}: {why}", self.peer);
                let _ = self.send(&Reply::error(why));
                linger(&mut self.r);
                false
            }
        }
    }
}

/// One control connection: hello (with the token), then receives and clients.
pub(super) fn session(
    s: TcpStream,
    peer: SocketAddr,
    cfg: &AgentConfig,
    cancel: &Cancel,
    (slots, pending): (&Arc<Slots>, Slot),
) -> anyhow::Result<()> {
    let started = Instant::now();
    let local_ip = s.local_addr()?.ip();
    // The whole hello, however it trickles in, by one deadline.
    let timed = Timed {
        s: s.try_clone()?,
        until: started + cfg.hello_timeout,
        span: cfg.hello_timeout,
    };
    let mut session = Session {
        ctl: Control {
            w: s,
            r: BufReader::with_capacity(MAX_LINE, timed),
            buf: Vec::with_capacity(MAX_LINE + 1),
            peer,
        },
        cfg,
        cancel,
        local_ip,
        current: None,
        ends: started + cfg.max_session,
    };
    if !session.hello()? {
        return Ok(());
    }
    drop(pending);
    let Some(_slot) = slots.session() else {
        let busy = format!(
            "busy: {} sessions are running, the most this agent serves at once (--max-sessions): try again when one ends",
            cfg.max_sessions
        );
        eprintln!("agent: refused {peer}: {busy}");
        return session.ctl.send(&Reply::error(busy));
    };
    session.welcome()?;
    loop {
        let left = session.left();
        if cancel.is_cancelled() || left.is_zero() {
            session
                .ctl
                .send(&Reply::error("the session's time is up"))?;
            return Ok(());
        }
        // A silent client is dropped after --idle, and a session ends with its time.
        let wait = cfg.idle.min(left).max(Duration::from_millis(1));
        session.ctl.r.get_mut().within(wait);
        if !session.ctl.next_line() {
            return Ok(());
        }
        match proto::parse_request(&session.ctl.buf) {
            Ok(req) => session.handle(req)?,
            Err(e) => {
                eprintln!("agent: refused a request from {peer}: {e}");
                session.ctl.send(&Reply::error(e.0))?;
            }
        }
    }
}

/// A session after its hello: the control connection and the receive it runs, if any.
struct Session<'a> {
    ctl: Control,
    cfg: &'a AgentConfig,
    cancel: &'a Cancel,
    /// The address the client reached us at: receivers listen there.
    local_ip: IpAddr,
    current: Option<Receiving>,
    /// When the session's time (`max_session`) is up: no request may outlast it.
    ends: Instant,
}

impl Session<'_> {
    /// The session's time left.
    fn left(&self) -> Duration {
        self.ends.saturating_duration_since(Instant::now())
    }

    /// Refuses a request whose window (`warmup_ms` + `duration_ms`) would outlast the
    /// session; `true` when it was refused.
    fn outlasts(&mut self, warmup_ms: u32, duration_ms: u32) -> anyhow::Result<bool> {
        let window = Duration::from_millis(u64::from(warmup_ms) + u64::from(duration_ms));
        let left = self.left();
        if window <= left {
            return Ok(false);
        }
        eprintln!(
            "agent: refused a request from {}: a {window:?} window, {left:?} of the session left",
            self.ctl.peer
        );
        self.ctl.send(&Reply::error(format!(
            "the session has {:.0} s left, less than this window ({:.0} s): start a new session",
            left.as_secs_f64(),
            window.as_secs_f64()
        )))?;
        Ok(true)
    }

    /// The reply to a hello that was accepted.
    fn welcome(&mut self) -> anyhow::Result<()> {
        self.ctl.send(&Reply {
            agent: Some(format!("sendpath {}", env!("CARGO_PKG_VERSION"))),
            ..Reply::ok()
        })
    }

    /// Reads the hello and checks the token; `false` when the session is refused or over.
    /// The reply to an accepted hello waits for a session slot ([`Session::welcome`]).
    fn hello(&mut self) -> anyhow::Result<bool> {
        let peer = self.ctl.peer;
        if !self.ctl.next_line() {
            return Ok(false);
        }
        // What to log and what to reply, when the hello is refused.
        let refusal = match proto::parse_request(&self.ctl.buf) {
            Ok(Request::Hello { token }) => match &self.cfg.token {
                Some(want) if !proto::token_matches(token.as_deref(), want) => Some((
                    "wrong or missing token".to_string(),
                    "wrong or missing token".to_string(),
                )),
                _ => None,
            },
            Ok(_) => Some(("no hello".to_string(), "say hello first".to_string())),
            Err(e) => Some((e.to_string(), e.0)),
        };
        if let Some((logged, reply)) = refusal {
            eprintln!("agent: refused {peer}: {logged}");
            self.ctl.send(&Reply::error(reply))?;
            return Ok(false);
        }
        Ok(true)
    }

    /// Answers one request.
    fn handle(&mut self, req: Request) -> anyhow::Result<()> {
        let running = self.current.is_some();
        match (req, running) {
            (Request::Hello { .. }, _) => self.ctl.send(&Reply::error("hello was already said")),
            (Request::HttpLoad(_) | Request::RrClient(_) | Request::Receive { .. }, true) => self
                .ctl
                .send(&Reply::error("a receive is running: finish it first")),
            (Request::Sample | Request::Finish, false) => {
                self.ctl.send(&Reply::error("no receive is running"))
            }
            (Request::HttpLoad(spec), false) => self.http_load(&spec),
            (Request::RrClient(spec), false) => self.rr_clients(&spec),
            (
                Request::Receive {
                    connections,
                    recv,
                    recv_size,
                    max_seconds,
                },
                false,
            ) => self.receive(connections, recv, recv_size, max_seconds),
            (Request::Sample, true) => self.sample(),
            (Request::Finish, true) => self.finish(),
        }
    }

    /// Runs `http-load` against the client's server and replies with its report.
    fn http_load(&mut self, spec: &proto::HttpLoadSpec) -> anyhow::Result<()> {
        if self.outlasts(spec.warmup_ms, spec.duration_ms)? {
            return Ok(());
        }
        let peer = self.ctl.peer;
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
        let report = crate::http::load::run(&cfg, self.cancel);
        self.ctl.send(&Reply {
            http_load: Some(report),
            ..Reply::ok()
        })
    }

    /// Runs request/response clients against the client's servers and replies with the
    /// window's transactions, latency and CPU.
    fn rr_clients(&mut self, spec: &proto::RrClientSpec) -> anyhow::Result<()> {
        if self.outlasts(spec.warmup_ms, spec.duration_ms)? {
            return Ok(());
        }
        let peer = self.ctl.peer;
        eprintln!(
            "agent: {peer}: rr clients, {} connection(s) to port {}, {} B requests, {} B responses, {} ms + {} ms",
            spec.connections, spec.port, spec.request, spec.response, spec.warmup_ms, spec.duration_ms
        );
        let reply = run_rr_clients(peer.ip(), spec, self.cancel).unwrap_or_else(|e| {
            eprintln!("agent: {peer}: the rr clients failed: {e:#}");
            Reply::error(format!("the rr clients failed: {e:#}"))
        });
        self.ctl.send(&reply)
    }

    /// Starts a receive and replies with its port.
    fn receive(
        &mut self,
        connections: u32,
        recv: RecvMode,
        recv_size: u32,
        max_seconds: u32,
    ) -> anyhow::Result<()> {
        let peer = self.ctl.peer;
        let limit = Duration::from_secs(u64::from(max_seconds))
            .min(self.cfg.max_receive)
            .min(self.left());
        let deadline = Instant::now() + limit;
        match start_receive(
            self.local_ip,
            connections,
            recv,
            recv_size as usize,
            deadline,
        ) {
            Ok((port, rx)) => {
                eprintln!(
                    "agent: {peer}: receiving {connections} connection(s) on port {port} ({}, {recv_size} B reads, at most {limit:?})",
                    recv.name()
                );
                self.current = Some(rx);
                self.ctl.send(&Reply {
                    port: Some(port),
                    ..Reply::ok()
                })
            }
            Err(e) => self.ctl.send(&Reply::error(format!("{e:#}"))),
        }
    }

    /// The running receive's bytes and CPU so far.
    fn sample(&mut self) -> anyhow::Result<()> {
        let rx = self.current.as_ref().expect("running");
        let c = rx.cpu();
        let bytes = rx.counters.bytes.load(Ordering::Relaxed);
        self.ctl.send(&Reply {
            bytes: Some(bytes),
            cpu_user_ns: Some(c.user_ns),
            cpu_system_ns: Some(c.system_ns),
            ..Reply::ok()
        })
    }

    /// Waits for the running receive's end and replies with its totals.
    fn finish(&mut self) -> anyhow::Result<()> {
        let peer = self.ctl.peer;
        let rx = self.current.take().expect("running");
        match rx.finish() {
            Ok(f) => {
                eprintln!("agent: {peer}: received {} bytes", f.bytes);
                self.ctl.send(&Reply {
                    bytes: Some(f.bytes),
                    cpu_user_ns: Some(f.cpu.user_ns),
                    cpu_system_ns: Some(f.cpu.system_ns),
                    bytes_verified: Some(f.verified),
                    mismatches: Some(f.mismatches),
                    bytes_mapped: f.mapped,
                    ..Reply::ok()
                })
            }
            Err(e) => {
                eprintln!("agent: {peer}: the receive failed: {e:#}");
                self.ctl
                    .send(&Reply::error(format!("the receive failed: {e:#}")))
            }
        }
    }
}
