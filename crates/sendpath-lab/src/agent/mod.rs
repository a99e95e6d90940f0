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
    /// The longest the agent waits for a new connection's hello. Connections that have not
    /// said hello hold no session slot; at most [`MAX_UNAUTHENTICATED`] wait at once.
    pub hello_timeout: Duration,
}

/// Connections still to say hello, served at once; more are refused as busy.
pub const MAX_UNAUTHENTICATED: usize = 16;

/// The agent's slots: sessions (after a hello with the right token), and connections that
/// have not said hello yet, counted apart so that silent connections cannot take the
/// sessions' slots.
pub(super) struct Slots {
    sessions: AtomicUsize,
    pending: AtomicUsize,
    max_sessions: usize,
}

/// A slot held until dropped: a session's, or a connection's that has yet to say hello.
pub(super) struct Slot {
    slots: Arc<Slots>,
    pending: bool,
}

impl Drop for Slot {
    fn drop(&mut self) {
        self.slots
            .count(self.pending)
            .fetch_sub(1, Ordering::AcqRel);
    }
}

impl Slots {
    fn count(&self, pending: bool) -> &AtomicUsize {
        if pending {
            &self.pending
        } else {
            &self.sessions
        }
    }

    fn take(self: &Arc<Slots>, pending: bool) -> Option<Slot> {
        let max = if pending {
            MAX_UNAUTHENTICATED
        } else {
            self.max_sessions
        };
        self.count(pending)
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| {
                (k < max).then_some(k + 1)
            })
            .ok()
            .map(|_| Slot {
                slots: self.clone(),
                pending,
            })
    }

    /// A slot for a connection that has yet to say hello.
    pub(super) fn pending(self: &Arc<Slots>) -> Option<Slot> {
        self.take(true)
    }

    /// A session's slot, for a connection that said hello.
    pub(super) fn session(self: &Arc<Slots>) -> Option<Slot> {
        self.take(false)
    }
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
    let slots = Arc::new(Slots {
        sessions: AtomicUsize::new(0),
        pending: AtomicUsize::new(0),
        max_sessions: cfg.max_sessions,
    });
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
        let Some(pending) = slots.pending() else {
            eprintln!(
                "agent: refused {peer}: busy ({MAX_UNAUTHENTICATED} connections yet to say hello)"
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
        };
        let (cfg, slots, cancel) = (cfg.clone(), slots.clone(), cancel.clone());
        std::thread::spawn(
            move || match session(s, peer, &cfg, &cancel, (&slots, pending)) {
                Ok(()) => eprintln!("agent: session {peer} ended"),
                Err(e) => eprintln!("agent: session {peer} ended: {e:#}"),
            },
        );
    }
    Ok(())
}
