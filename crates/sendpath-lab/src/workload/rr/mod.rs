//! `sendpath rr`: request/response. Each connection's client sends a request and waits for the
//! response (closed loop), or sends on a fixed schedule (open loop, `--rate`), in which case
//! latency counts from the intended send time, so a slow response delays the clock of every
//! request behind it (no coordinated omission). The server answers with the chosen path.

mod agent;

use super::{join_senders, send_message, MsgShape, RecvMode};
use crate::cancel::Cancel;
use crate::measure::{Edges, Meter, Roles, Snapshot};
use crate::traffic::mix::{Alloc, SizeMix};
use crate::units::new_histogram;
use crate::window::Integrity;
use crate::workload::stream::{pin, zerocopy_counts, Outcome};
use anyhow::{anyhow, Context};
use hdrhistogram::Histogram;
use sendpath::SendStats;
use sendpath::{Options, Strategy};
use sendpath_host::pattern::Verifier;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, Instant};

/// One point of an rr run.
#[derive(Debug, Clone)]
pub struct RrPoint {
    pub strategy: Strategy,
    pub request: usize,
    pub response: usize,
    pub concurrency: usize,
    pub fields: usize,
    pub recv: RecvMode,
    pub duration: Duration,
    pub warmup: Duration,
    /// Open loop: requests per second over all connections.
    pub rate: Option<f64>,
    /// Pin each connection's server to the first CPU and its client to the second.
    pub cpus: Option<(usize, usize)>,
    pub opts: Options,
    /// Draw each response's size from this mix (server and client of a connection follow the
    /// same sequence); `response` is then the mix's mean, rounded.
    pub mix: Option<SizeMix>,
    /// Pooled or freshly allocated response buffers.
    pub alloc: Alloc,
    /// Run the clients on `sendpath agent` there (its latency, bytes and CPU come back).
    pub agent: Option<crate::remote::AgentTarget>,
    /// TCP congestion control of the connections (`--congestion`): both ends, or with an
    /// agent ours, which sends the responses; `None`: the host's default.
    pub congestion: Option<String>,
}

/// The response sizes of connection `conn`: the mix's sequence, or `response` again and again.
fn response_sizes(pt: &RrPoint, conn: u64) -> Box<dyn Iterator<Item = usize> + Send> {
    match &pt.mix {
        Some(m) => Box::new(m.sizes(conn)),
        None => Box::new(std::iter::repeat(pt.response)),
    }
}

/// What one client connection measured.
pub(crate) struct ClientOut {
    pub(crate) hist: Histogram<u64>,
    pub(crate) verifier: Verifier,
    /// Response bytes read.
    pub(crate) bytes: u64,
}

fn serve(
    mut s: TcpStream,
    pt: &RrPoint,
    fill: bool,
    conn: u64,
) -> anyhow::Result<(SendStats, Option<String>)> {
    let mut sizes = response_sizes(pt, conn);
    let shape = MsgShape {
        fields: pt.fields,
        fill,
        file_len: 0,
        alloc: pt.alloc,
        stamp: false,
    };
    let mut req = vec![0u8; pt.request];
    let rd = s.try_clone()?;
    let mut p = sendpath::open(pt.strategy, rd, &pt.opts)?;
    let mut off = 0u64;
    loop {
        match s.read_exact(&mut req) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => break,
            Err(e) => {
                return Err(e).with_context(|| {
                    format!("rr server: reading a request failed after {off} response bytes")
                })
            }
        }
        let size = sizes.next().unwrap_or(pt.response);
        send_message(p.as_mut(), pt.strategy, size, off, shape, None)?;
        p.flush()?;
        off += size as u64;
    }
    p.finish(Duration::from_secs(2))?;
    Ok((p.stats().clone(), p.note().map(String::from)))
}

/// Sleeps until `t` in slices of at most 20 ms; `false` as soon as `stop` is set, so an open
/// loop at a low rate ends with its window instead of at its next intended send.
fn sleep_until(t: Instant, stop: &AtomicBool) -> bool {
    loop {
        if stop.load(Ordering::Relaxed) {
            return false;
        }
        let now = Instant::now();
        if t <= now {
            return true;
        }
        std::thread::sleep((t - now).min(Duration::from_millis(20)));
    }
}

/// One client connection: requests and responses until `stop`, latencies recorded while
/// `recording` (each counted in `done`).
pub(crate) fn client(
    mut s: TcpStream,
    pt: &RrPoint,
    recording: &AtomicBool,
    stop: &AtomicBool,
    done: &AtomicU64,
    conn: u64,
) -> anyhow::Result<ClientOut> {
    let req = vec![0x42u8; pt.request];
    let mut sizes = response_sizes(pt, conn);
    let mut resp = vec![0u8; pt.mix.as_ref().map_or(pt.response, SizeMix::max)];
    let mut out = ClientOut {
        hist: new_histogram(),
        verifier: Verifier::new(),
        bytes: 0,
    };
    let interval = pt
        .rate
        .map(|r| Duration::from_secs_f64(pt.concurrency as f64 / r));
    let start = Instant::now();
    let mut k: u32 = 0;
    while !stop.load(Ordering::Relaxed) {
        let intended = match interval {
            Some(iv) => {
                let t = start + iv * k;
                k += 1;
                if !sleep_until(t, stop) {
                    break;
                }
                t
            }
            None => Instant::now(),
        };
        s.write_all(&req).with_context(|| {
            format!("rr client: write failed after {} response bytes", out.bytes)
        })?;
        let resp = &mut resp[..sizes.next().unwrap_or(pt.response)];
        s.read_exact(resp).with_context(|| {
            format!(
                "rr client: the response stream broke at byte offset {}",
                out.bytes
            )
        })?;
        out.bytes += resp.len() as u64;
        let lat = intended.elapsed().as_nanos() as u64;
        if pt.recv == RecvMode::Verify {
            out.verifier.check(resp);
        }
        if recording.load(Ordering::Relaxed) {
            out.hist.saturating_record(lat);
            done.fetch_add(1, Ordering::Relaxed);
        }
    }
    Ok(out)
}

/// What the threads of a local rr run share: when to record and stop, the transactions done.
#[derive(Default)]
struct Shared {
    stop: Arc<AtomicBool>,
    recording: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
}

type Server = std::thread::JoinHandle<super::Sent>;
type Client = std::thread::JoinHandle<anyhow::Result<ClientOut>>;

/// Runs one repeat. `Ok(None)` means Ctrl-C cut it short.
pub(crate) fn run_once(
    pt: &RrPoint,
    hw: &mut Meter,
    cpu_mhz: Option<f64>,
    cancel: &Cancel,
) -> anyhow::Result<Option<Outcome>> {
    if let Some(t) = &pt.agent {
        return agent::run_once_with_agent(pt, t, hw, cpu_mhz, cancel);
    }
    let shared = Shared::default();
    let (tid_tx, tid_rx) = mpsc::channel::<(bool, i32)>();
    let (servers, clients) = start_pairs(pt, &shared, &tid_tx)?;
    drop(tid_tx);
    let roles = Roles::gather(&tid_rx, pt.concurrency, Some(pt.concurrency));
    let mut ok = cancel.sleep(pt.warmup);
    let mut window = None;
    let mut transactions = 0;
    if ok {
        shared.recording.store(true, Ordering::Relaxed);
        let start = Snapshot::take(hw, &roles);
        ok = cancel.sleep(pt.duration);
        let end = Snapshot::take(hw, &roles);
        shared.recording.store(false, Ordering::Relaxed);
        transactions = shared.done.load(Ordering::Relaxed);
        window = Some(Edges { start, end });
    }
    shared.stop.store(true, Ordering::Relaxed);
    let mut first_err = None;
    let joined = join_clients(clients, &mut first_err)?;
    let (stats, note) = join_senders(servers, "an rr server", &mut first_err)?;
    if let Some(e) = first_err {
        if !cancel.is_cancelled() {
            return Err(e);
        }
    }
    let (Some(w), true) = (window, ok) else {
        return Ok(None);
    };
    let (hist, mut integrity) = joined;
    integrity.bytes_sent = stats.bytes;
    let received = integrity.bytes_received.unwrap_or(0);
    if received != stats.bytes {
        anyhow::bail!(
            "the servers sent {} response bytes but the clients read {received}",
            stats.bytes
        );
    }
    if pt.recv != RecvMode::Verify {
        integrity.bytes_verified = 0;
        integrity.mismatches = 0;
        integrity.first_mismatch = None;
    }
    let bytes = transactions * (pt.request + pt.response) as u64;
    let mut repeat = w.repeat(bytes, transactions, pt.concurrency, cpu_mhz);
    repeat.set_latency(&hist);
    repeat.zerocopy = zerocopy_counts(&stats);
    repeat.messages_per_call = stats.messages_per_call();
    repeat.integrity = integrity;
    Ok(Some(Outcome::new(repeat, note, &stats)))
}

/// Connects `pt.concurrency` loopback connections, a server thread and a client thread each.
fn start_pairs(
    pt: &RrPoint,
    shared: &Shared,
    tid_tx: &mpsc::Sender<(bool, i32)>,
) -> anyhow::Result<(Vec<Server>, Vec<Client>)> {
    let l = TcpListener::bind("127.0.0.1:0").context("binding a loopback listener")?;
    let addr = l.local_addr()?;
    let mut servers = Vec::new();
    let mut clients = Vec::new();
    for conn in 0..pt.concurrency as u64 {
        let c = TcpStream::connect(addr).context("rr: connecting")?;
        c.set_nodelay(true)?;
        let (sv, _) = l.accept()?;
        sv.set_nodelay(true)?;
        super::congestion::apply(&c, pt.congestion.as_deref())?;
        super::congestion::apply(&sv, pt.congestion.as_deref())?;
        let p = pt.clone();
        let fill = pt.recv == RecvMode::Verify;
        let tids = tid_tx.clone();
        servers.push(std::thread::spawn(move || {
            pin(p.cpus.map(|c| c.0));
            let _ = tids.send((true, sendpath_host::thread::gettid()));
            serve(sv, &p, fill, conn)
        }));
        let p = pt.clone();
        let (rec, st, dn) = (
            shared.recording.clone(),
            shared.stop.clone(),
            shared.done.clone(),
        );
        let tids = tid_tx.clone();
        clients.push(std::thread::spawn(move || {
            pin(p.cpus.map(|c| c.1));
            let _ = tids.send((false, sendpath_host::thread::gettid()));
            let r = client(c.try_clone()?, &p, &rec, &st, &dn, conn);
            let _ = c.shutdown(std::net::Shutdown::Both);
            r
        }));
    }
    Ok((servers, clients))
}

/// Joins the clients: their merged latency histogram, and the bytes they received and
/// verified; the first error goes to `first_err`.
fn join_clients(
    clients: Vec<Client>,
    first_err: &mut Option<anyhow::Error>,
) -> anyhow::Result<(Histogram<u64>, Integrity)> {
    let mut hist = new_histogram();
    let mut integrity = Integrity::default();
    let mut received = 0;
    for c in clients {
        match c.join().map_err(|_| anyhow!("an rr client panicked"))? {
            Ok(o) => {
                let _ = hist.add(&o.hist);
                integrity.bytes_verified += o.verifier.bytes_verified();
                integrity.mismatches += o.verifier.mismatches;
                integrity.first_mismatch = integrity.first_mismatch.or(o.verifier.first_mismatch);
                received += o.bytes;
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    integrity.bytes_received = Some(received);
    Ok((hist, integrity))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_open_loop_wait_ends_when_the_window_does() {
        let stop = Arc::new(AtomicBool::new(false));
        let s = stop.clone();
        let setter = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(30));
            s.store(true, Ordering::Relaxed);
        });
        let t0 = Instant::now();
        // The next intended send an hour away (a rate of 1 per hour per connection).
        assert!(!sleep_until(t0 + Duration::from_secs(3600), &stop));
        assert!(t0.elapsed() < Duration::from_secs(5), "{:?}", t0.elapsed());
        setter.join().unwrap();
        assert!(sleep_until(Instant::now(), &AtomicBool::new(false)));
    }
}
