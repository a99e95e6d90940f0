//! The request/response clients the agent runs against a client's servers.

use super::receive::plus_live_cpu;
use crate::cancel::Cancel;
use crate::remote::proto::{self, Reply};
use crate::workload::rr::{client, ClientOut, RrPoint};
use anyhow::bail;
use sendpath_host::cpu::ThreadCpu;
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

/// The rr point the clients run for `spec`: copy sends, one field, pooled buffers.
fn point(spec: &proto::RrClientSpec) -> RrPoint {
    RrPoint {
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
        congestion: None,
    }
}

/// What the client threads share: when to record and stop, the transactions done, and their
/// thread ids (for their CPU).
#[derive(Default)]
struct Shared {
    stop: Arc<AtomicBool>,
    recording: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    tids: Arc<Mutex<Vec<i32>>>,
}

/// Runs the clients of request/response against `ip:spec.port` (the caller's servers): the
/// warmup, then the recorded window, by this host's clock.
pub(super) fn run_rr_clients(
    ip: IpAddr,
    spec: &proto::RrClientSpec,
    cancel: &Cancel,
) -> anyhow::Result<Reply> {
    let pt = point(spec);
    let shared = Shared::default();
    let (clients, connect_err) = start_clients(SocketAddr::new(ip, spec.port), &pt, &shared)?;
    let cpu_now = || plus_live_cpu(ThreadCpu::default(), &shared.tids);
    let mut window = None;
    if connect_err.is_none() && cancel.sleep(pt.warmup) {
        let c0 = cpu_now();
        shared.recording.store(true, Ordering::Relaxed);
        let full = cancel.sleep(pt.duration);
        shared.recording.store(false, Ordering::Relaxed);
        let c1 = cpu_now();
        if full {
            window = Some((c0, c1));
        }
    }
    shared.stop.store(true, Ordering::Relaxed);
    let mut hist = crate::units::new_histogram();
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
        transactions: Some(shared.done.load(Ordering::Relaxed)),
        bytes: Some(bytes),
        latency_hist_ns: Some(crate::window::hist_pairs(&hist)),
        cpu_user_ns: Some(c1.user_ns.saturating_sub(c0.user_ns)),
        cpu_system_ns: Some(c1.system_ns.saturating_sub(c0.system_ns)),
        bytes_verified: Some(verified),
        mismatches: Some(mismatches),
        ..Reply::ok()
    })
}

type Client = JoinHandle<anyhow::Result<ClientOut>>;

/// Connects `pt.concurrency` clients to `addr`, a thread each; the threads started, and the
/// error that stopped the connecting early, if any.
fn start_clients(
    addr: SocketAddr,
    pt: &RrPoint,
    shared: &Shared,
) -> anyhow::Result<(Vec<Client>, Option<anyhow::Error>)> {
    let mut clients = Vec::new();
    for conn in 0..pt.concurrency as u64 {
        let c = match TcpStream::connect_timeout(&addr, Duration::from_secs(5)) {
            Ok(c) => c,
            Err(e) => {
                let e = anyhow::Error::from(e).context(format!("connecting to {addr}"));
                return Ok((clients, Some(e)));
            }
        };
        c.set_nodelay(true)?;
        let p = pt.clone();
        let (rec, st, dn, t) = (
            shared.recording.clone(),
            shared.stop.clone(),
            shared.done.clone(),
            shared.tids.clone(),
        );
        clients.push(std::thread::spawn(move || {
            t.lock()
                .expect("tid lock")
                .push(sendpath_host::thread::gettid());
            let r = client(c.try_clone()?, &p, &rec, &st, &dn, conn);
            let _ = c.shutdown(std::net::Shutdown::Both);
            r
        }));
    }
    Ok((clients, None))
}
