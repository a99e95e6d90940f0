//! The client side of `sendpath agent`: where an agent is, the control connection that asks it
//! to receive, sample, finish or run clients, and the protocol both ends speak (`proto`).
//! Workloads and studies use [`AgentClient`]; the agent itself serves it.

pub(crate) mod proto;

use crate::setting::{invalid, About, Setting};
use crate::traffic::RecvMode;
use anyhow::{bail, Context};
use proto::{Reply, RequestLine, MAX_LINE};
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::time::Duration;

/// The port the agent listens on by default.
pub const DEFAULT_PORT: u16 = 5300;

/// How long the agent may take to answer a request that does no work of its own (`hello`,
/// `receive`, `sample`): a stalled agent cannot hold a run for longer.
const ANSWER: Duration = Duration::from_secs(10);

/// Reads one line of at most `max` bytes; `Ok(None)` at end of file.
pub(crate) fn read_line(
    r: &mut impl BufRead,
    buf: &mut Vec<u8>,
    max: usize,
) -> anyhow::Result<Option<()>> {
    buf.clear();
    let n = r
        .take(max as u64 + 1)
        .read_until(b'\n', buf)
        .context("reading the control connection")?;
    if n == 0 {
        return Ok(None);
    }
    if buf.len() > max || buf.last() != Some(&b'\n') {
        bail!("line longer than {max} bytes, or cut short");
    }
    Ok(Some(()))
}

/// What the agent's rr clients report.
#[derive(Debug, Clone, Default)]
pub(crate) struct RrRemote {
    /// Transactions in the window.
    pub(crate) transactions: u64,
    /// Response bytes read over the whole run.
    pub(crate) bytes: u64,
    /// The window's latency histogram, (ns, count).
    pub(crate) latency_hist_ns: Vec<(u64, u64)>,
    /// The client threads' CPU over the window.
    pub(crate) cpu: RemoteSample,
    /// Bytes verified (verify).
    pub(crate) verified: u64,
    /// Bytes that differed.
    pub(crate) mismatches: u64,
}

/// Where an agent is, and the token to present.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AgentTarget {
    /// The agent's control address.
    pub addr: SocketAddr,
    /// The token, when the agent requires one.
    pub token: Option<String>,
}

/// The receiver's bytes and CPU so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct RemoteSample {
    /// Bytes received.
    pub bytes: u64,
    /// Receiver threads' user CPU, ns.
    pub user_ns: u64,
    /// Receiver threads' system CPU, ns.
    pub system_ns: u64,
}

/// What the agent's receivers read, once every connection ended.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Finished {
    /// Bytes and CPU.
    pub total: RemoteSample,
    /// Bytes checked against the pattern (`verify`).
    pub verified: u64,
    /// Bytes that differed.
    pub mismatches: u64,
    /// Bytes mapped rather than copied (`zerocopy`); `None` for the other receivers.
    pub mapped: Option<u64>,
}

/// A control connection to an agent.
pub struct AgentClient {
    r: BufReader<TcpStream>,
    w: TcpStream,
    buf: Vec<u8>,
}

impl AgentClient {
    /// Connects and says hello.
    pub fn connect(t: &AgentTarget) -> anyhow::Result<AgentClient> {
        let s = TcpStream::connect_timeout(&t.addr, Duration::from_secs(5)).about(
            Setting::Agent,
            || {
                format!(
                    "the agent at {}: cannot connect (is `sendpath agent` running there?)",
                    t.addr
                )
            },
        )?;
        let w = s.try_clone()?;
        let mut c = AgentClient {
            r: BufReader::with_capacity(MAX_LINE, s),
            w,
            buf: Vec::with_capacity(MAX_LINE + 1),
        };
        c.call(
            RequestLine {
                token: t.token.clone(),
                ..RequestLine::op("hello")
            },
            ANSWER,
        )
        .about(Setting::Agent, || format!("the agent at {}", t.addr))?;
        Ok(c)
    }

    /// Sends `req` and reads the agent's reply, waiting at most `wait` for it.
    fn call(&mut self, req: RequestLine, wait: Duration) -> anyhow::Result<Reply> {
        let mut line = serde_json::to_string(&req)?;
        line.push('\n');
        self.w
            .write_all(line.as_bytes())
            .context("writing to the agent")?;
        self.w.set_read_timeout(Some(wait))?;
        let got = read_line(&mut self.r, &mut self.buf, proto::MAX_REPLY);
        if got.as_ref().is_err_and(crate::setting::timed_out) {
            bail!(
                "the agent did not answer `{}` within {wait:?}: it stalled or is gone",
                req.op
            );
        }
        if got?.is_none() {
            bail!("the agent closed the control connection");
        }
        let reply = proto::parse_reply(&self.buf).map_err(|e| anyhow::anyhow!("{e}"))?;
        if !reply.ok {
            bail!(
                "the agent refused: {}",
                reply.error.as_deref().unwrap_or("(no reason given)")
            );
        }
        Ok(reply)
    }

    /// Asks for a receiver of `connections` connections; the address to connect them to.
    pub(crate) fn receive(
        &mut self,
        agent: SocketAddr,
        connections: usize,
        mode: RecvMode,
        recv_size: usize,
        max: Duration,
    ) -> anyhow::Result<SocketAddr> {
        let r = self.call(
            RequestLine {
                connections: Some(connections as u32),
                recv: Some(mode.name().into()),
                recv_size: Some(recv_size.min(proto::MAX_RECV_SIZE as usize) as u32),
                max_seconds: Some(max.as_secs().clamp(1, u64::from(proto::MAX_SECONDS)) as u32),
                ..RequestLine::op("receive")
            },
            ANSWER,
        )?;
        let port = r.port.context("the agent's reply lacks the port")?;
        Ok(SocketAddr::new(agent.ip(), port))
    }

    /// The address of this end of the control connection (where the agent reaches us).
    pub fn local_ip(&self) -> IpAddr {
        self.w
            .local_addr()
            .map_or(IpAddr::from([127, 0, 0, 1]), |a| a.ip())
    }

    /// Has the agent run ``spec`'s clients against our servers on its port; returns when the
    /// window is over.
    pub(crate) fn rr_clients(&mut self, spec: &proto::RrClientSpec) -> anyhow::Result<RrRemote> {
        let window = u64::from(spec.warmup_ms) + u64::from(spec.duration_ms);
        let wait = Duration::from_millis(window) + Duration::from_secs(60);
        let r = self.call(
            RequestLine {
                connections: Some(spec.connections),
                port: Some(spec.port),
                request: Some(spec.request),
                response: Some(spec.response),
                size_mix: spec.size_mix.as_ref().map(|m| m.name()),
                rate: spec.rate,
                recv: Some(spec.recv.name().into()),
                warmup_ms: Some(spec.warmup_ms),
                duration_ms: Some(spec.duration_ms.max(1)),
                ..RequestLine::op("rr-client")
            },
            wait,
        )?;
        Ok(RrRemote {
            transactions: r
                .transactions
                .context("the agent's reply lacks transactions")?,
            bytes: r.bytes.context("the agent's reply lacks bytes")?,
            latency_hist_ns: r.latency_hist_ns.unwrap_or_default(),
            cpu: RemoteSample {
                bytes: 0,
                user_ns: r.cpu_user_ns.unwrap_or(0),
                system_ns: r.cpu_system_ns.unwrap_or(0),
            },
            verified: r.bytes_verified.unwrap_or(0),
            mismatches: r.mismatches.unwrap_or(0),
        })
    }

    /// Has the agent run `http-load` with `cfg` (its target's port, at the address the agent
    /// reached us at); returns its report when the window is over.
    pub fn http_load(
        &mut self,
        cfg: &crate::http::load::LoadConfig,
    ) -> anyhow::Result<crate::http::load::LoadReport> {
        let ms = |d: Duration| d.as_millis().min(u128::from(proto::MAX_WINDOW_MS)) as u32;
        let wait = cfg.warmup + cfg.duration + Duration::from_secs(60);
        let r = self.call(
            RequestLine {
                connections: Some(cfg.connections as u32),
                threads: Some(cfg.threads as u32),
                port: Some(cfg.target.port()),
                rate: cfg.rate,
                path: Some(cfg.path.clone()),
                warmup_ms: Some(ms(cfg.warmup)),
                duration_ms: Some(ms(cfg.duration).max(1)),
                ..RequestLine::op("http-load")
            },
            wait,
        )?;
        r.http_load
            .context("the agent's reply lacks the http-load report")
    }

    /// Bytes and CPU so far.
    pub(crate) fn sample(&mut self) -> anyhow::Result<RemoteSample> {
        let r = self.call(RequestLine::op("sample"), ANSWER)?;
        Ok(RemoteSample {
            bytes: r.bytes.context("the agent's sample lacks bytes")?,
            user_ns: r.cpu_user_ns.unwrap_or(0),
            system_ns: r.cpu_system_ns.unwrap_or(0),
        })
    }

    /// After the senders half-closed: what the receivers read.
    pub fn finish(&mut self) -> anyhow::Result<Finished> {
        // The agent answers `finish` once its receivers read to end of file, which follows the
        // senders' last byte by little: minutes of silence mean it is gone.
        let r = self.call(RequestLine::op("finish"), Duration::from_secs(300))?;
        Ok(Finished {
            total: RemoteSample {
                bytes: r.bytes.context("the agent's reply lacks bytes")?,
                user_ns: r.cpu_user_ns.unwrap_or(0),
                system_ns: r.cpu_system_ns.unwrap_or(0),
            },
            verified: r.bytes_verified.unwrap_or(0),
            mismatches: r.mismatches.unwrap_or(0),
            mapped: r.bytes_mapped,
        })
    }
}

/// Parses `HOST[:PORT]` (port [`DEFAULT_PORT`] when missing).
pub fn parse_target(s: &str) -> Result<SocketAddr, String> {
    use std::net::ToSocketAddrs;
    let with_port = if s.parse::<SocketAddr>().is_ok() {
        s.to_string()
    } else if s.parse::<IpAddr>().is_ok() {
        match s.parse::<IpAddr>() {
            Ok(IpAddr::V6(_)) => format!("[{s}]:{DEFAULT_PORT}"),
            _ => format!("{s}:{DEFAULT_PORT}"),
        }
    } else if s.contains(':') {
        s.to_string()
    } else {
        format!("{s}:{DEFAULT_PORT}")
    };
    with_port
        .to_socket_addrs()
        .map_err(|e| format!("`{s}`: not HOST[:PORT] ({e})"))?
        .next()
        .ok_or_else(|| format!("`{s}`: no address"))
}

/// Reads a token file: its first line, trimmed; refuses an empty or oversized one.
pub fn read_token(path: &std::path::Path) -> anyhow::Result<String> {
    let s = crate::files::read_bounded(path, crate::files::MAX_SMALL, "token file")
        .about(Setting::TokenFile, || {
            format!("{}: cannot read it", path.display())
        })?;
    let t = s.lines().next().unwrap_or("").trim().to_string();
    if t.is_empty() {
        return Err(invalid(
            Setting::TokenFile,
            format!("{}: the file is empty", path.display()),
        ));
    }
    if t.len() < proto::MIN_TOKEN {
        return Err(invalid(
            Setting::TokenFile,
            format!(
                "{}: a token is at least {} bytes (make one with `head -c 32 /dev/urandom | base64 > {}`)",
                path.display(),
                proto::MIN_TOKEN,
                path.display()
            ),
        ));
    }
    if t.len() > proto::MAX_TOKEN {
        return Err(invalid(
            Setting::TokenFile,
            format!(
                "{}: a token is at most {} bytes",
                path.display(),
                proto::MAX_TOKEN
            ),
        ));
    }
    Ok(t)
}
