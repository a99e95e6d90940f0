//! rr with its clients on `sendpath agent`: our servers here, the agent's clients there.

use super::{serve, RrPoint};
use crate::cancel::Cancel;
use crate::measure::{Edges, Meter, Roles, Snapshot};
use crate::remote::proto::{RrClientSpec, MAX_WINDOW_MS};
use crate::remote::RrRemote;
use crate::traffic::RecvMode;
use crate::units::new_histogram;
use crate::window::{Integrity, LatencyUs, Repeat};
use crate::workload::join_senders;
use crate::workload::stream::{pin, zerocopy_counts, Outcome};
use anyhow::{anyhow, Context};
use sendpath::SendStats;
use std::net::TcpListener;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// What the agent's clients run for `pt`, against our servers on `port`.
fn client_spec(pt: &RrPoint, port: u16) -> RrClientSpec {
    let ms = |d: Duration| d.as_millis().min(u128::from(MAX_WINDOW_MS)) as u32;
    RrClientSpec {
        connections: pt.concurrency as u32,
        port,
        request: pt.request as u32,
        response: pt.response as u32,
        size_mix: pt.mix.clone(),
        rate: pt.rate,
        recv: pt.recv,
        warmup_ms: ms(pt.warmup),
        duration_ms: ms(pt.duration),
    }
}

/// One repeat with the clients on `sendpath agent`: our servers listen on the address the
/// agent reached us at, the agent connects, runs the warmup and the window by its clock and
/// replies with the window's transactions, latency histogram and client CPU.
pub(super) fn run_once_with_agent(
    pt: &RrPoint,
    t: &crate::remote::AgentTarget,
    hw: &mut Meter,
    cpu_mhz: Option<f64>,
    cancel: &Cancel,
) -> anyhow::Result<Option<Outcome>> {
    let mut agent = crate::remote::AgentClient::connect(t)?;
    let l = TcpListener::bind((agent.local_ip(), 0))
        .context("binding a listener on the address the agent reached us at")?;
    let port = l.local_addr()?.port();
    let spec = client_spec(pt, port);
    let asked = std::thread::spawn(move || agent.rr_clients(&spec));
    let (tid_tx, tid_rx) = mpsc::channel::<(bool, i32)>();
    let release = Arc::new(AtomicBool::new(false));
    let (servers, asked) = match serve_agent_clients(pt, &l, asked, &tid_tx, &release) {
        Ok(x) => x,
        Err(e) => {
            release.store(true, Ordering::Relaxed);
            return Err(e);
        }
    };
    drop(tid_tx);
    let roles = Roles::gather(&tid_rx, pt.concurrency, None);
    let mut ok = cancel.sleep(pt.warmup);
    let mut window = None;
    if ok {
        let start = Snapshot::take(hw, &roles);
        ok = cancel.sleep(pt.duration);
        let end = Snapshot::take(hw, &roles);
        window = Some(Edges { start, end });
    }
    release.store(true, Ordering::Relaxed);
    let remote = asked
        .join()
        .map_err(|_| anyhow!("the agent's control thread panicked"))?;
    let mut first_err = None;
    let (stats, note) = join_senders(servers, "an rr server", &mut first_err)?;
    let remote = remote?;
    if let Some(e) = first_err {
        return Err(e);
    }
    let (Some(w), true) = (window, ok) else {
        return Ok(None);
    };
    if remote.bytes != stats.bytes {
        anyhow::bail!(
            "the servers sent {} response bytes but the agent's clients read {}",
            stats.bytes,
            remote.bytes
        );
    }
    let repeat = agent_repeat(pt, &w, remote, &stats, cpu_mhz);
    Ok(Some(Outcome::new(repeat, note, &stats)))
}

type Asked = JoinHandle<anyhow::Result<RrRemote>>;
type Server = JoinHandle<super::super::Sent>;

/// Accepts the agent's `pt.concurrency` connections (10 s at most), a server thread each that
/// stays until `release` (our window's last CPU reading needs it); the agent's reason when it
/// fails first.
fn serve_agent_clients(
    pt: &RrPoint,
    l: &TcpListener,
    asked: Asked,
    tid_tx: &mpsc::Sender<(bool, i32)>,
    release: &Arc<AtomicBool>,
) -> anyhow::Result<(Vec<Server>, Asked)> {
    let deadline = Instant::now() + Duration::from_secs(10);
    l.set_nonblocking(true)?;
    let mut servers = Vec::new();
    for conn in 0..pt.concurrency as u64 {
        let accepted = super::super::accept_before(l, deadline, || asked.is_finished());
        let sv = match accepted {
            Ok(Some((s, _))) => s,
            Ok(None) => {
                // The agent failed (its reply says why) or never connected.
                return Err(match asked.join() {
                    Ok(Err(e)) => e,
                    _ => anyhow!("the agent's clients did not connect within 10 s"),
                });
            }
            Err(e) => return Err(e).context("accepting the agent's connection"),
        };
        sv.set_nodelay(true)?;
        crate::workload::congestion::apply(&sv, pt.congestion.as_deref())?;
        let p = pt.clone();
        let fill = pt.recv == RecvMode::Verify;
        let tids = tid_tx.clone();
        let held = release.clone();
        servers.push(std::thread::spawn(move || {
            pin(p.cpus.map(|c| c.0));
            let _ = tids.send((true, sendpath_host::thread::gettid()));
            let r = serve(sv, &p, fill, conn);
            // The agent's clock ends its window, and its clients close: stay until our
            // window's last CPU reading, which needs this thread.
            while !held.load(Ordering::Relaxed) {
                std::thread::sleep(Duration::from_millis(1));
            }
            r
        }));
    }
    Ok((servers, asked))
}

/// The repeat of a window whose clients ran on the agent: its transactions, latency and
/// client CPU, with our servers' CPU and zero-copy counts.
fn agent_repeat(
    pt: &RrPoint,
    w: &Edges,
    remote: RrRemote,
    stats: &SendStats,
    cpu_mhz: Option<f64>,
) -> Repeat {
    let mut hist = new_histogram();
    for &(v, c) in &remote.latency_hist_ns {
        hist.saturating_record_n(v, c);
    }
    let bytes = remote.transactions * (pt.request + pt.response) as u64;
    let mut repeat = w.repeat(bytes, remote.transactions, pt.concurrency, cpu_mhz);
    if let Some(cpu) = repeat.cpu.as_mut() {
        cpu.set_remote(remote.cpu.user_ns, remote.cpu.system_ns, bytes);
    }
    repeat.latency_us = (!hist.is_empty()).then(|| LatencyUs::of(&hist));
    repeat.latency_hist_ns = remote.latency_hist_ns;
    repeat.zerocopy = zerocopy_counts(stats);
    repeat.messages_per_call = stats.messages_per_call();
    repeat.integrity = Integrity {
        bytes_sent: stats.bytes,
        bytes_received: Some(remote.bytes),
        bytes_verified: if pt.recv == RecvMode::Verify {
            remote.verified
        } else {
            0
        },
        mismatches: remote.mismatches,
        // The agent counts wrong bytes; it does not say where.
        first_mismatch: None,
        bytes_mapped: None,
    };
    repeat
}
