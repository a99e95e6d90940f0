//! `sendpath agent`: the receiving side of `stream` (and of `sweep`'s stream points) on
//! another host, run on request over a control connection (`remote::proto`), with the receiver's
//! bytes, verification and CPU sent back into the same rows (`cpu.remote`).
//!
//! Safety rails: the agent binds to loopback unless told otherwise, and a non-loopback
//! listener requires a token (compared in constant time); a session must say hello with the
//! right token before anything runs; every line is bounded and parsed strictly; sessions are
//! bounded in number (`max_sessions`) and time (`max_session`), every receive by its own
//! `max_seconds` and the agent's `max_receive`. A refusal is logged with its reason and costs
//! the refused client its connection only.

mod clients;
mod receive;
mod session;

use crate::cancel::Cancel;
use crate::remote::proto::{Reply, MAX_LINE, VERSION};
use crate::setting::{invalid, About, Setting};
use session::session;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

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
        return Err(invalid(
            Setting::TokenFile,
            format!(
                "the agent listens on {}, reachable from other hosts, and needs a token there: a file holding a secret, which the clients present too",
                cfg.listen
            ),
        ));
    }
    let l = TcpListener::bind(cfg.listen).about(Setting::Listen, || {
        format!(
            "cannot listen on {} (in use, or not a local address?)",
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
