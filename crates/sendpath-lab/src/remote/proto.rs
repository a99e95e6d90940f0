//! The agent's control protocol: JSON lines, one request and one reply at a time, versioned,
//! every line at most [`MAX_LINE`] bytes, every request parsed strictly (unknown fields,
//! unknown operations and out-of-range values are refused before anything runs).
//!
//! ```text
//! client: {"v":1,"op":"hello","token":"..."}          agent: {"v":1,"ok":true,"agent":"sendpath 0.1.0"}
//! client: {"v":1,"op":"receive","connections":2,"recv":"copy","recv_size":131072,"max_seconds":60}
//!                                                      agent: {"v":1,"ok":true,"port":40123}
//!   (the client opens 2 connections to that port and sends)
//! client: {"v":1,"op":"sample"}                        agent: {"v":1,"ok":true,"bytes":..,"cpu_user_ns":..,"cpu_system_ns":..}
//! client: {"v":1,"op":"finish"}  (after half-closing)  agent: {"v":1,"ok":true,"bytes":..,"bytes_verified":..,"mismatches":..,...}
//! client: {"v":1,"op":"rr-client","connections":8,"port":40999,"request":64,"response":64,
//!          "recv":"copy","warmup_ms":500,"duration_ms":2000}   (rate, size_mix optional)
//!   (the agent opens 8 connections to that port at the client's address, runs request/response
//!    for the warmup and the window, and replies when done)
//!                                                      agent: {"v":1,"ok":true,"transactions":..,"bytes":..,"latency_hist_ns":[[ns,count],..],...}
//! any refusal:                                         agent: {"v":1,"ok":false,"error":"..."}
//! ```

use serde::{Deserialize, Serialize};

/// The protocol version both ends speak.
pub(crate) const VERSION: u32 = 1;
/// The longest line either end sends or accepts, bytes (newline included).
pub(crate) const MAX_LINE: usize = 4096;
/// The most connections one receive may ask for.
pub(crate) const MAX_CONNECTIONS: u32 = 1024;
/// The longest receive a request may ask for, seconds.
pub(crate) const MAX_SECONDS: u32 = 3600;
/// The largest receiver read size, bytes.
pub(crate) const MAX_RECV_SIZE: u32 = 64 << 20;
/// The longest token, bytes.
pub(crate) const MAX_TOKEN: usize = 1024;
/// The shortest token the agent takes, bytes.
pub(crate) const MIN_TOKEN: usize = 16;
/// The lowest open-loop rate a client may ask for, requests per second over all connections:
/// below it a window would hold no request at all.
pub(crate) const MIN_RATE: f64 = 1.0;
/// The longest reply line, bytes (an rr reply carries a latency histogram).
pub(crate) const MAX_REPLY: usize = 1 << 20;
/// The largest rr request, bytes.
pub(crate) const MAX_REQUEST_BYTES: u32 = 1 << 20;
/// The longest rr warmup or window, milliseconds.
pub(crate) const MAX_WINDOW_MS: u32 = 600_000;
/// The most connections one `http-load` may open.
pub(crate) const MAX_HTTP_CONNECTIONS: u32 = 20_000;
/// The most load threads.
pub(crate) const MAX_THREADS: u32 = 256;

/// A request, as sent on the wire.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct RequestLine {
    /// Protocol version ([`VERSION`]).
    pub(crate) v: u32,
    /// `hello`, `receive`, `sample` or `finish`.
    pub(crate) op: String,
    /// `hello`: the shared secret, when the agent requires one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) token: Option<String>,
    /// `receive`: connections to accept.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) connections: Option<u32>,
    /// `receive`: `copy`, `discard`, `verify` or `zerocopy`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) recv: Option<String>,
    /// `receive`: bytes per read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) recv_size: Option<u32>,
    /// `receive`: the longest the receive may last, seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) max_seconds: Option<u32>,
    /// `rr-client`: the port of the servers, at the client's address.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) port: Option<u16>,
    /// `rr-client`: request bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) request: Option<u32>,
    /// `rr-client`: response bytes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) response: Option<u32>,
    /// `rr-client`: response sizes drawn from this mix (`SIZE:WEIGHT,...`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) size_mix: Option<String>,
    /// `rr-client`: open loop, requests per second over all connections.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) rate: Option<f64>,
    /// `rr-client`: unrecorded time first, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) warmup_ms: Option<u32>,
    /// `rr-client`: the recorded window, milliseconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) duration_ms: Option<u32>,
    /// `http-load`: load threads.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) threads: Option<u32>,
    /// `http-load`: the request target (`/`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) path: Option<String>,
}

impl RequestLine {
    /// A request of `op` with no arguments.
    pub(crate) fn op(op: &str) -> RequestLine {
        RequestLine {
            v: VERSION,
            op: op.into(),
            ..RequestLine::default()
        }
    }

    /// Whether any field only `receive` or `rr-client` takes is set.
    fn has_run_fields(&self) -> bool {
        self.connections.is_some()
            || self.recv.is_some()
            || self.recv_size.is_some()
            || self.max_seconds.is_some()
            || self.port.is_some()
            || self.request.is_some()
            || self.response.is_some()
            || self.size_mix.is_some()
            || self.rate.is_some()
            || self.warmup_ms.is_some()
            || self.duration_ms.is_some()
            || self.threads.is_some()
            || self.path.is_some()
    }
}

/// What an `rr-client` request asks the agent to run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct RrClientSpec {
    /// Connections, one client thread each.
    pub(crate) connections: u32,
    /// The servers' port at the client's address.
    pub(crate) port: u16,
    /// Request bytes.
    pub(crate) request: u32,
    /// Response bytes (the mix's mean with a mix).
    pub(crate) response: u32,
    /// Response sizes drawn from this mix.
    pub(crate) size_mix: Option<crate::traffic::mix::SizeMix>,
    /// Open loop rate over all connections.
    pub(crate) rate: Option<f64>,
    /// `copy` or `verify`.
    pub(crate) recv: crate::traffic::RecvMode,
    /// Unrecorded time first.
    pub(crate) warmup_ms: u32,
    /// The recorded window.
    pub(crate) duration_ms: u32,
}

/// A request, validated.
#[derive(Debug, Clone, PartialEq)]
pub(crate) enum Request {
    /// Opens the session.
    Hello {
        /// The token offered.
        token: Option<String>,
    },
    /// Accept `connections` connections on a new port and receive on them.
    Receive {
        /// Connections.
        connections: u32,
        /// What to do with the bytes.
        recv: crate::traffic::RecvMode,
        /// Bytes per read.
        recv_size: u32,
        /// Upper bound on the receive, seconds.
        max_seconds: u32,
    },
    /// Bytes and receiver CPU so far.
    Sample,
    /// Wait for every connection's end of file and report.
    Finish,
    /// Run the clients of request/response against the caller's servers.
    RrClient(RrClientSpec),
    /// Run `http-load` against the caller's HTTP server.
    HttpLoad(HttpLoadSpec),
}

/// What an `http-load` request asks the agent to run.
#[derive(Debug, Clone, PartialEq)]
pub(crate) struct HttpLoadSpec {
    /// Connections in total.
    pub(crate) connections: u32,
    /// Load threads.
    pub(crate) threads: u32,
    /// The server's port at the client's address.
    pub(crate) port: u16,
    /// Open loop rate over all connections.
    pub(crate) rate: Option<f64>,
    /// The request target.
    pub(crate) path: String,
    /// Unrecorded time first.
    pub(crate) warmup_ms: u32,
    /// The recorded window.
    pub(crate) duration_ms: u32,
}

/// The reply to every request.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct Reply {
    /// Protocol version.
    pub(crate) v: u32,
    /// Whether the request was carried out.
    pub(crate) ok: bool,
    /// Why not.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) error: Option<String>,
    /// `hello`: the agent's name and version.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) agent: Option<String>,
    /// `receive`: the port to connect to.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) port: Option<u16>,
    /// `sample`, `finish`: bytes received so far.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bytes: Option<u64>,
    /// `sample`, `finish`: the receiver threads' user CPU time so far, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cpu_user_ns: Option<u64>,
    /// `sample`, `finish`: the receiver threads' system CPU time so far, ns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) cpu_system_ns: Option<u64>,
    /// `finish`: bytes checked against the pattern (verify).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bytes_verified: Option<u64>,
    /// `finish`: bytes that differed (verify).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) mismatches: Option<u64>,
    /// `finish`: bytes mapped rather than copied (zerocopy).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) bytes_mapped: Option<u64>,
    /// `rr-client`: transactions completed in the window.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) transactions: Option<u64>,
    /// `rr-client`: the window's latency histogram, (ns, count) pairs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) latency_hist_ns: Option<Vec<(u64, u64)>>,
    /// `http-load`: its report.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub(crate) http_load: Option<crate::http::load::LoadReport>,
}

impl Reply {
    /// A success with nothing else.
    pub(crate) fn ok() -> Reply {
        Reply {
            v: VERSION,
            ok: true,
            ..Reply::default()
        }
    }

    /// A refusal.
    pub(crate) fn error(msg: impl Into<String>) -> Reply {
        Reply {
            v: VERSION,
            ok: false,
            error: Some(msg.into()),
            ..Reply::default()
        }
    }

    /// The line to send (newline included).
    pub(crate) fn line(&self) -> String {
        let mut s = serde_json::to_string(self).expect("a reply serializes");
        s.push('\n');
        s
    }
}

/// Why a line was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Refused(pub String);

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Parses and validates one request line (without or with its newline).
pub(crate) fn parse_request(line: &[u8]) -> Result<Request, Refused> {
    if line.len() > MAX_LINE {
        return Err(Refused(format!("line longer than {MAX_LINE} bytes")));
    }
    let r: RequestLine =
        serde_json::from_slice(line).map_err(|e| Refused(format!("malformed request: {e}")))?;
    if r.v != VERSION {
        return Err(Refused(format!(
            "protocol version {} (this agent speaks {VERSION})",
            r.v
        )));
    }
    let no_receive_fields = !r.has_run_fields();
    match r.op.as_str() {
        "hello" => {
            if !no_receive_fields {
                return Err(Refused("hello takes only a token".into()));
            }
            if r.token.as_ref().is_some_and(|t| t.len() > MAX_TOKEN) {
                return Err(Refused(format!("token longer than {MAX_TOKEN} bytes")));
            }
            Ok(Request::Hello { token: r.token })
        }
        "receive" => parse_receive(&r),
        "sample" | "finish" => {
            if !no_receive_fields || r.token.is_some() {
                return Err(Refused(format!("{} takes no arguments", r.op)));
            }
            Ok(if r.op == "sample" {
                Request::Sample
            } else {
                Request::Finish
            })
        }
        "rr-client" => parse_rr_client(&r).map(Request::RrClient),
        "http-load" => parse_http_load(&r).map(Request::HttpLoad),
        other => Err(Refused(format!(
            "unknown operation `{}` (hello, receive, sample, finish, rr-client, http-load)",
            other.chars().take(32).collect::<String>()
        ))),
    }
}

/// Validates a `receive` request.
fn parse_receive(r: &RequestLine) -> Result<Request, Refused> {
    let receive_only = r.threads.is_none()
        && r.path.is_none()
        && r.port.is_none()
        && r.request.is_none()
        && r.response.is_none()
        && r.size_mix.is_none()
        && r.rate.is_none()
        && r.warmup_ms.is_none()
        && r.duration_ms.is_none();
    if r.token.is_some() || !receive_only {
        return Err(Refused(
            "receive takes connections, recv, recv_size and max_seconds only".into(),
        ));
    }
    let connections = r
        .connections
        .filter(|c| (1..=MAX_CONNECTIONS).contains(c))
        .ok_or_else(|| Refused(format!("connections must be 1..{MAX_CONNECTIONS}")))?;
    let recv = match r.recv.as_deref() {
        Some("copy") => crate::traffic::RecvMode::Copy,
        Some("discard") => crate::traffic::RecvMode::Discard,
        Some("verify") => crate::traffic::RecvMode::Verify,
        Some("zerocopy") => crate::traffic::RecvMode::Zerocopy,
        _ => {
            return Err(Refused(
                "recv must be copy, discard, verify or zerocopy".into(),
            ))
        }
    };
    let recv_size = r
        .recv_size
        .filter(|s| (1..=MAX_RECV_SIZE).contains(s))
        .ok_or_else(|| Refused(format!("recv_size must be 1..{MAX_RECV_SIZE}")))?;
    let max_seconds = r
        .max_seconds
        .filter(|s| (1..=MAX_SECONDS).contains(s))
        .ok_or_else(|| Refused(format!("max_seconds must be 1..{MAX_SECONDS}")))?;
    Ok(Request::Receive {
        connections,
        recv,
        recv_size,
        max_seconds,
    })
}

/// `v` when within `lo..=hi`, else a refusal naming `what`.
fn range(v: Option<u32>, lo: u32, hi: u32, what: &str) -> Result<u32, Refused> {
    v.filter(|x| (lo..=hi).contains(x))
        .ok_or_else(|| Refused(format!("{what} must be {lo}..{hi}")))
}

/// A positive, finite rate of at most 1e8 per second, when given.
fn rate(r: Option<f64>) -> Result<Option<f64>, Refused> {
    match r {
        Some(x) if !(x.is_finite() && (MIN_RATE..=1e8).contains(&x)) => Err(Refused(format!(
            "rate must be {MIN_RATE} to 1e8 requests per second"
        ))),
        _ => Ok(r),
    }
}

/// Validates an `http-load` request.
fn parse_http_load(r: &RequestLine) -> Result<HttpLoadSpec, Refused> {
    if r.token.is_some()
        || r.recv.is_some()
        || r.recv_size.is_some()
        || r.max_seconds.is_some()
        || r.request.is_some()
        || r.response.is_some()
        || r.size_mix.is_some()
    {
        return Err(Refused(
            "http-load takes connections, threads, port, rate, path, warmup_ms and duration_ms"
                .into(),
        ));
    }
    let path = r.path.clone().unwrap_or_else(|| "/".into());
    if path.len() > 256 || !path.starts_with('/') || !path.bytes().all(|b| b.is_ascii_graphic()) {
        return Err(Refused(
            "path must start with / and be at most 256 printable characters".into(),
        ));
    }
    Ok(HttpLoadSpec {
        connections: range(r.connections, 1, MAX_HTTP_CONNECTIONS, "connections")?,
        threads: range(r.threads.or(Some(1)), 1, MAX_THREADS, "threads")?,
        port: r
            .port
            .filter(|p| *p > 0)
            .ok_or_else(|| Refused("port must be 1..65535".into()))?,
        rate: rate(r.rate)?,
        path,
        warmup_ms: range(r.warmup_ms.or(Some(0)), 0, MAX_WINDOW_MS, "warmup_ms")?,
        duration_ms: range(r.duration_ms, 1, MAX_WINDOW_MS, "duration_ms")?,
    })
}

/// Validates an `rr-client` request.
fn parse_rr_client(r: &RequestLine) -> Result<RrClientSpec, Refused> {
    if r.token.is_some()
        || r.recv_size.is_some()
        || r.max_seconds.is_some()
        || r.threads.is_some()
        || r.path.is_some()
    {
        return Err(Refused(
            "rr-client takes no token, recv_size, max_seconds, threads or path".into(),
        ));
    }
    let connections = range(r.connections, 1, MAX_CONNECTIONS, "connections")?;
    let port = r
        .port
        .filter(|p| *p > 0)
        .ok_or_else(|| Refused("port must be 1..65535".into()))?;
    let request = range(r.request, 1, MAX_REQUEST_BYTES, "request")?;
    let response = range(r.response, 1, MAX_RECV_SIZE, "response")?;
    let warmup_ms = range(r.warmup_ms.or(Some(0)), 0, MAX_WINDOW_MS, "warmup_ms")?;
    let duration_ms = range(r.duration_ms, 1, MAX_WINDOW_MS, "duration_ms")?;
    let recv = match r.recv.as_deref() {
        Some("copy") => crate::traffic::RecvMode::Copy,
        Some("verify") => crate::traffic::RecvMode::Verify,
        _ => return Err(Refused("rr-client: recv must be copy or verify".into())),
    };
    rate(r.rate)?;
    let size_mix = match &r.size_mix {
        Some(m) if m.len() <= 256 => Some(
            crate::traffic::mix::SizeMix::parse(m, MAX_RECV_SIZE as usize)
                .map_err(|e| Refused(format!("size_mix: {e}")))?,
        ),
        Some(_) => return Err(Refused("size_mix longer than 256 bytes".into())),
        None => None,
    };
    Ok(RrClientSpec {
        connections,
        port,
        request,
        response,
        size_mix,
        rate: r.rate,
        recv,
        warmup_ms,
        duration_ms,
    })
}

/// Parses a reply line.
pub(crate) fn parse_reply(line: &[u8]) -> Result<Reply, Refused> {
    if line.len() > MAX_REPLY {
        return Err(Refused(format!("reply longer than {MAX_REPLY} bytes")));
    }
    let r: Reply =
        serde_json::from_slice(line).map_err(|e| Refused(format!("malformed reply: {e}")))?;
    if r.v != VERSION {
        return Err(Refused(format!(
            "the agent speaks protocol version {} (this sendpath speaks {VERSION}): run the same sendpath version on both hosts",
            r.v
        )));
    }
    Ok(r)
}

/// Compares a token offered with the one required, in time that does not depend on where
/// they differ.
pub(crate) fn token_matches(offered: Option<&str>, required: &str) -> bool {
    use subtle::ConstantTimeEq;
    let offered = offered.unwrap_or("");
    bool::from(offered.as_bytes().ct_eq(required.as_bytes()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn valid_requests_parse() {
        assert_eq!(
            parse_request(br#"{"v":1,"op":"hello","token":"s3cret"}"#),
            Ok(Request::Hello {
                token: Some("s3cret".into())
            })
        );
        assert_eq!(
            parse_request(
                br#"{"v":1,"op":"receive","connections":2,"recv":"verify","recv_size":65536,"max_seconds":10}"#
            ),
            Ok(Request::Receive {
                connections: 2,
                recv: crate::traffic::RecvMode::Verify,
                recv_size: 65536,
                max_seconds: 10
            })
        );
        assert_eq!(
            parse_request(b"{\"v\":1,\"op\":\"sample\"}\n"),
            Ok(Request::Sample)
        );
        match parse_request(
            br#"{"v":1,"op":"rr-client","connections":8,"port":40999,"request":64,"response":64,"recv":"verify","size_mix":"88:70,4K:30","rate":1000,"duration_ms":2000}"#,
        ) {
            Ok(Request::RrClient(r)) => {
                assert_eq!((r.connections, r.port, r.request, r.warmup_ms), (8, 40999, 64, 0));
                assert_eq!(r.size_mix.unwrap().name(), "88:70,4K:30");
                assert_eq!(r.rate, Some(1000.0));
            }
            other => panic!("{other:?}"),
        }
        let e = parse_request(br#"{"v":1,"op":"rr-client","connections":1,"port":1,"request":1,"response":1,"recv":"copy","duration_ms":1,"rate":-1}"#).unwrap_err();
        assert!(e.0.contains("rate"), "{e}");
        let e = parse_request(br#"{"v":1,"op":"receive","connections":1,"recv":"copy","recv_size":1,"max_seconds":1,"port":5}"#).unwrap_err();
        assert!(e.0.contains("receive takes"), "{e}");
    }

    #[test]
    fn bad_requests_are_refused_with_a_reason() {
        let e = |l: &[u8]| parse_request(l).unwrap_err().0;
        assert!(e(br#"{"v":2,"op":"hello"}"#).contains("version 2"));
        assert!(e(br#"{"v":1,"op":"hello","x":1}"#).contains("unknown field"));
        assert!(e(br#"{"v":1,"op":"rm -rf"}"#).contains("unknown operation"));
        assert!(e(br#"{"v":1,"op":"receive","connections":0,"recv":"copy","recv_size":1,"max_seconds":1}"#).contains("connections"));
        assert!(e(br#"{"v":1,"op":"receive","connections":1,"recv":"copy","recv_size":1,"max_seconds":99999}"#).contains("max_seconds"));
        assert!(e(
            br#"{"v":1,"op":"receive","connections":1,"recv":"tee","recv_size":1,"max_seconds":1}"#
        )
        .contains("recv must"));
        assert!(e(br#"{"v":1,"op":"sample","connections":1}"#).contains("no arguments"));
        assert!(e(b"not json").contains("malformed"));
        assert!(e(&vec![b' '; MAX_LINE + 1]).contains("longer than"));
        let long = format!(
            r#"{{"v":1,"op":"hello","token":"{}"}}"#,
            "a".repeat(MAX_TOKEN + 1)
        );
        assert!(e(long.as_bytes()).contains("token longer"));
    }

    #[test]
    fn tokens_compare_whole() {
        assert!(token_matches(Some("abc"), "abc"));
        assert!(!token_matches(Some("abd"), "abc"));
        assert!(!token_matches(Some("ab"), "abc"));
        assert!(!token_matches(None, "abc"));
        assert!(!token_matches(Some("abcd"), "abc"));
    }

    #[test]
    fn a_million_generated_lines_parse_or_are_refused_in_bounded_memory_and_round_trip() {
        // Mutations of valid lines and random bytes: each parses or is refused; the parser
        // holds at most a small multiple of the line; what it accepts reads back the same.
        let seeds: [&[u8]; 6] = [
            br#"{"v":1,"op":"http-load","connections":100,"threads":2,"port":8080,"path":"/x","rate":500,"warmup_ms":100,"duration_ms":1000}"#,
            br#"{"v":1,"op":"hello","token":"s3cret-and-longer-than-16"}"#,
            br#"{"v":1,"op":"rr-client","connections":8,"port":40999,"request":64,"response":64,"recv":"copy","size_mix":"88:70,4K:30","rate":1000.5,"warmup_ms":500,"duration_ms":2000}"#,
            br#"{"v":1,"op":"receive","connections":2,"recv":"copy","recv_size":65536,"max_seconds":10}"#,
            br#"{"v":1,"op":"sample"}"#,
            br#"{"v":1,"ok":true,"bytes":1234,"cpu_user_ns":5,"cpu_system_ns":6}"#,
        ];
        let mut rng = fastrand::Rng::with_seed(12);
        let (mut ok, mut refused, mut replies) = (0u32, 0u32, 0u32);
        let mut buf = Vec::with_capacity(MAX_LINE * 2);
        for i in 0..1_000_000u32 {
            crate::fuzz::input(&mut rng, i, &seeds, &mut buf);
            let (parsed, peak) = crate::sys::peak_during(|| parse_request(&buf));
            assert!(
                peak <= 16 * buf.len().min(MAX_LINE + 1) + (16 << 10),
                "{peak} bytes held to parse {} bytes: {:?}",
                buf.len(),
                String::from_utf8_lossy(&buf)
            );
            match parsed {
                Ok(req) => {
                    ok += 1;
                    let line: RequestLine = serde_json::from_slice(&buf).unwrap();
                    let again = parse_request(serde_json::to_string(&line).unwrap().as_bytes());
                    assert_eq!(again.as_ref().ok(), Some(&req), "{line:?}");
                }
                Err(_) => refused += 1,
            }
            if let Ok(r) = parse_reply(&buf) {
                replies += 1;
                let again = parse_reply(r.line().as_bytes()).unwrap();
                assert_eq!(
                    serde_json::to_value(&again).unwrap(),
                    serde_json::to_value(&r).unwrap()
                );
            }
        }
        println!(
            "agent protocol: 1000000 lines, {ok} parsed, {refused} refused, {replies} replies"
        );
        assert!(ok > 0 && refused > 0 && replies > 0);
    }
}
