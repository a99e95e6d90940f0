//! One control session of the agent: the hello with its token, then one request at a time.

use super::clients::run_rr_clients;
use super::receive::{start_receive, Receiving};
use super::AgentConfig;
use crate::cancel::Cancel;
use crate::remote::proto::{self, Reply, Request, MAX_LINE};
use crate::remote::read_line;
use crate::traffic::RecvMode;
use anyhow::Context;
use std::io::{BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

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

/// One control connection: hello (with the token), then receives and clients.
pub(super) fn session(
    s: TcpStream,
    peer: SocketAddr,
    cfg: &AgentConfig,
    cancel: &Cancel,
) -> anyhow::Result<()> {
    let started = Instant::now();
    s.set_read_timeout(Some(cfg.idle))?;
    let local_ip = s.local_addr()?.ip();
    let mut session = Session {
        ctl: Control {
            w: s.try_clone()?,
            r: BufReader::with_capacity(MAX_LINE, s),
            buf: Vec::with_capacity(MAX_LINE + 1),
            peer,
        },
        cfg,
        cancel,
        local_ip,
        current: None,
    };
    if !session.hello()? {
        return Ok(());
    }
    loop {
        if cancel.is_cancelled() || started.elapsed() > cfg.max_session {
            session
                .ctl
                .send(&Reply::error("the session's time is up"))?;
            return Ok(());
        }
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
}

impl Session<'_> {
    /// Reads the hello and checks the token; `false` when the session is refused or over.
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
        self.ctl.send(&Reply {
            agent: Some(format!("sendpath {}", env!("CARGO_PKG_VERSION"))),
            ..Reply::ok()
        })?;
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
        let limit = Duration::from_secs(u64::from(max_seconds)).min(self.cfg.max_receive);
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
