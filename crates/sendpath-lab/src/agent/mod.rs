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
use crate::remote::proto::{Reply, VERSION};
use crate::setting::{invalid, About, Setting};
use session::session;
use std::collections::VecDeque;
use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
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
    /// The longest the agent waits for a new connection's whole hello, however it trickles in.
    /// Connections that have not said hello hold no session slot; at most
    /// [`MAX_UNAUTHENTICATED`] wait at once, a new one ending the oldest.
    pub hello_timeout: Duration,
}

/// Connections still to say hello, at most, at once: a new one past this ends the oldest, so
/// connections that never finish their hello cannot keep a client with the token out.
pub const MAX_UNAUTHENTICATED: usize = 16;

/// The agent's slots: sessions (after a hello with the right token), and connections that
/// have not said hello yet, kept apart so that silent connections cannot take the sessions'
/// slots.
pub(super) struct Slots {
    sessions: AtomicUsize,
    /// Connections yet to say hello, oldest first, each with a handle to end it.
    pending: Mutex<VecDeque<(u64, TcpStream)>>,
    next: AtomicU64,
    max_sessions: usize,
}

/// A slot held until dropped: a session's, or a connection's that has yet to say hello.
pub(super) struct Slot {
    slots: Arc<Slots>,
    /// The pending connection's id; `None` for a session.
    pending: Option<u64>,
}

impl Drop for Slot {
    fn drop(&mut self) {
        match self.pending {
            Some(id) => self.slots.lock_pending().retain(|(k, _)| *k != id),
            None => {
                self.slots.sessions.fetch_sub(1, Ordering::AcqRel);
            }
        }
    }
}

impl Slots {
    fn lock_pending(&self) -> std::sync::MutexGuard<'_, VecDeque<(u64, TcpStream)>> {
        // A thread that panicked while holding it left the list whole (push and retain).
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a connection that has yet to say hello (`s`, a handle on it). When
    /// [`MAX_UNAUTHENTICATED`] wait already, the oldest of them is ended (its hello read
    /// fails, and its session with it); returns whom it ended.
    pub(super) fn pending(self: &Arc<Slots>, s: TcpStream) -> (Slot, Option<SocketAddr>) {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut list = self.lock_pending();
        let mut ended = None;
        if list.len() >= MAX_UNAUTHENTICATED {
            if let Some((_, mut oldest)) = list.pop_front() {
                ended = oldest.peer_addr().ok();
                let why = format!("ended: the oldest of {MAX_UNAUTHENTICATED} connections yet to say hello, for a newer one: say hello at once");
                let _ = oldest.write_all(Reply::error(why).line().as_bytes());
                let _ = oldest.shutdown(std::net::Shutdown::Both);
            }
        }
        list.push_back((id, s));
        let slot = Slot {
            slots: self.clone(),
            pending: Some(id),
        };
        (slot, ended)
    }

    /// A session's slot, for a connection that said hello.
    pub(super) fn session(self: &Arc<Slots>) -> Option<Slot> {
        self.sessions
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |k| {
                (k < self.max_sessions).then_some(k + 1)
            })
            .ok()
            .map(|_| Slot {
                slots: self.clone(),
                pending: None,
            })
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
        pending: Mutex::new(VecDeque::new()),
        next: AtomicU64::new(0),
        max_sessions: cfg.max_sessions,
    });
    let end = Instant::now() + until;
    while !cancel.is_cancelled() && Instant::now() < end {
        let (s, peer) = match l.accept() {
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
        let Ok(handle) = s.try_clone() else {
            eprintln!("agent: refused {peer}: out of descriptors");
            continue;
        };
        let (pending, ended) = slots.pending(handle);
        if let Some(old) = ended {
            eprintln!(
                "agent: ended {old}: the oldest of {MAX_UNAUTHENTICATED} connections yet to say hello, for {peer}"
            );
        }
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
