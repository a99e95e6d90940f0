//! `sendpath stream`: one-way bulk transfer, one sender and one receiver per connection.

mod ending;
mod sender;
mod shared;
pub(crate) mod stall;
mod tcp;
mod tokio;
pub mod udp;

use super::{receive, receive_many, OwnLine, PatternFile, RecvCounters, RecvMode};
use crate::cancel::Cancel;
use crate::measure::{Meter, Roles, Snapshot};
use crate::remote::RemoteSample;
use crate::setting::{About, Setting};
use crate::traffic::mix::{Alloc, SizeMix};
use crate::traffic::stamp::{Sizes, StampReader};
use crate::window::{ConnectionBytes, Integrity, Repeat, TcpWindow, ZerocopyWindow};
use anyhow::{anyhow, Context};
use ending::{check_arrival, stalled_senders, stop_draining, stop_stalled_senders};
use sender::{Finished, Sender};
use sendpath::SendStats;
use sendpath::{Options, Strategy};
use sendpath_host::pattern::Verifier;
use shared::Shared;
use stall::Stall;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::Ordering;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::Duration;
use tcp::{room_for_fds, TcpCounts};

/// One point of a stream run.
#[derive(Debug, Clone)]
pub struct StreamPoint {
    pub strategy: Strategy,
    pub size: usize,
    pub threads: usize,
    /// Connections per sender thread: above 1, multiplexed on one io_uring ring per thread
    /// (uring and uring-zc only) and read by one receiver thread per sender thread.
    pub connections: usize,
    pub fields: usize,
    pub recv: RecvMode,
    /// Bytes the receiver asks for per read.
    pub recv_size: usize,
    pub duration: Duration,
    pub warmup: Duration,
    /// Send to this address instead of a receiver of our own.
    pub connect: Option<SocketAddr>,
    /// Pin each connection's sender and receiver to these CPUs.
    pub cpus: Option<(usize, usize)>,
    /// File paths: drop the file from the page cache first, no warmup, each byte range once.
    pub cold: bool,
    pub opts: Options,
    /// Draw each message's size from this mix (the same sequence for every path) instead of
    /// sending `size`; `size` is then the mix's mean, rounded.
    pub mix: Option<SizeMix>,
    /// Pooled or freshly allocated message buffers (memory paths).
    pub alloc: Alloc,
    /// Run the receiver in this namespace (`--topology netns`) instead of on loopback.
    pub netns: Option<Arc<crate::topology::Netns>>,
    /// Have `sendpath agent` there receive (its bytes, verification and CPU come back).
    pub agent: Option<crate::remote::AgentTarget>,
    /// TCP, or UDP datagrams (`--proto udp`).
    pub proto: crate::traffic::datagram::Protocol,
    /// UDP: cut each send into datagrams of this many bytes (`--gso`, `UDP_SEGMENT`).
    pub gso: Option<u16>,
    /// Stamp each message with its send time and time it at our receiver (`--msg-latency`):
    /// memory paths, one connection per thread, our own receiver reading the bytes.
    pub msg_latency: bool,
    /// Send in bursts with idle gaps between them (`--burst`); `None`: flat out.
    pub burst: Option<crate::traffic::mix::Burst>,
    /// TCP congestion control of the senders' connections (`--congestion`); `None`: the
    /// namespace's default.
    pub congestion: Option<String>,
    /// What runs the senders: threads, or tokio tasks with sendpath's async sender or with
    /// tokio's own writes (`--runtime`).
    pub runtime: crate::traffic::Runtime,
}

impl StreamPoint {
    /// Whether this point's messages are timed: asked for, and a memory path (file paths
    /// send the file's bytes, with no room for a stamp).
    fn timed(&self) -> bool {
        self.msg_latency && self.strategy.source() == sendpath::Source::Memory
    }
}

/// What one repeat produced.
pub(crate) struct Outcome {
    /// The window's values, zero-copy counts and integrity (its round is set by the caller).
    pub(crate) repeat: Repeat,
    /// Why the path is not the one asked for, if it fell back at open time.
    pub(crate) note: Option<String>,
    /// How the ring kept the senders' sends in order, as the library set them up.
    pub(crate) uring_order: Option<String>,
}

impl Outcome {
    /// A repeat, with what the senders' counters say of how they sent.
    pub(crate) fn new(repeat: Repeat, note: Option<String>, stats: &SendStats) -> Outcome {
        Outcome {
            repeat,
            note,
            uring_order: stats.uring_order.map(|o| o.name().to_string()),
        }
    }
}

/// The zero-copy counts of a repeat from its merged sender statistics.
pub(crate) fn zerocopy_counts(stats: &SendStats) -> ZerocopyWindow {
    let s = stats.summary();
    let measured = s.completion_latency.count > 0;
    let us = |ns: u64| measured.then(|| ns as f64 / 1000.0);
    ZerocopyWindow {
        counts: s.zerocopy,
        completion_p50_us: us(s.completion_latency.p50_ns),
        completion_p99_us: us(s.completion_latency.p99_ns),
        completion_max_us: us(s.completion_latency.max_ns),
        decisions: s.decisions,
    }
}

pub(crate) fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        // The CPU was checked against the allowed set when the flag was parsed.
        let _ = sendpath_host::thread::pin_current_thread(c);
    }
}

/// Where a run's senders connect, and who receives: our own receiver on loopback or in a
/// namespace (`listener`), `sendpath agent`, or another program at `--connect`.
struct Peer {
    /// The agent's control session and the address it receives at.
    agent: Option<(crate::remote::AgentClient, SocketAddr)>,
    /// Our own receiver's listener.
    listener: Option<TcpListener>,
    /// Where the senders connect.
    target: SocketAddr,
}

impl Peer {
    /// Opens the receiving side of `pt`: one agent session per repeat, or a listener.
    fn open(pt: &StreamPoint) -> anyhow::Result<Peer> {
        let agent = match &pt.agent {
            Some(t) => {
                let mut c = crate::remote::AgentClient::connect(t)?;
                let max = pt.warmup + pt.duration + Duration::from_secs(30);
                let conns = pt.threads * pt.connections.max(1);
                let at = c.receive(t.addr, conns, pt.recv, pt.recv_size, max)?;
                Some((c, at))
            }
            None => None,
        };
        let listener = match (pt.connect, &pt.netns, &agent) {
            (None, None, None) => {
                Some(TcpListener::bind("127.0.0.1:0").context("binding a loopback listener")?)
            }
            (None, Some(ns), None) => Some(ns.listen()?),
            _ => None,
        };
        let target = match (&listener, pt.connect, &agent) {
            (Some(l), _, _) => l.local_addr()?,
            (None, _, Some((_, at))) => *at,
            (None, Some(a), None) => a,
            (None, None, None) => unreachable!(),
        };
        Ok(Peer {
            agent,
            listener,
            target,
        })
    }

    /// Whether the receiver is our own (its bytes and CPU are read here).
    fn ours(&self) -> bool {
        self.listener.is_some()
    }

    /// The agent's bytes and CPU now, when the agent receives.
    fn sample(&mut self) -> anyhow::Result<Option<RemoteSample>> {
        self.agent.as_mut().map(|(c, _)| c.sample()).transpose()
    }
}

/// What a receiver thread returns: a verifier per connection, and its stamp reader when it
/// timed messages.
type Received = (Vec<Verifier>, Option<StampReader>);

/// A run's threads, and its handles on their sockets.
#[derive(Default)]
struct Threads {
    senders: Vec<JoinHandle<super::Sent>>,
    receivers: Vec<JoinHandle<anyhow::Result<Received>>>,
    /// Whether to duplicate the senders' ends (to read TCP's counters and shut down stalled
    /// sends): only where the open-files limit has room.
    probe: bool,
    /// Duplicates of the senders' ends (the send paths own the sockets themselves).
    tx_dups: Vec<TcpStream>,
    /// Our receivers' sockets, shared with the receiver threads: read for their drops, and
    /// their reads ended when the link cannot drain in time, with no descriptor of their own.
    rx: Vec<Arc<TcpStream>>,
}

/// One measured window of a stream run.
struct Window {
    start: Snapshot,
    end: Snapshot,
    /// Bytes that arrived in it.
    bytes: u64,
    /// The file's page-cache residency at its start (file paths).
    resident: Option<f64>,
    /// How evenly the connections shared it (several connections per thread).
    fairness: Option<ConnectionBytes>,
    /// The agent's samples at its edges.
    remote: Option<(RemoteSample, RemoteSample)>,
    /// TCP's counters over it, when every connection's were read.
    tcp: Option<TcpWindow>,
    /// How long its end had gone without a byte moving (sampled every 100 ms).
    idle_tail: Duration,
}

/// Runs one repeat. `Ok(None)` means Ctrl-C cut it short (nothing to record).
pub(crate) fn run_once(
    pt: &StreamPoint,
    file: Option<&PatternFile>,
    hw: &mut Meter,
    cpu_mhz: Option<f64>,
    cancel: &Cancel,
) -> anyhow::Result<Option<Outcome>> {
    if pt.proto == crate::traffic::datagram::Protocol::Udp {
        return udp::run_once(pt, hw, cpu_mhz, cancel);
    }
    let mut peer = Peer::open(pt)?;
    let cold = pt.cold && file.is_some();
    if let (Some(f), true) = (file, cold) {
        f.make_cold()?;
    }
    let shared = Shared::new(pt.threads, pt.connections.max(1), cancel);
    let (tid_tx, tid_rx) = mpsc::channel::<(bool, i32)>();
    // The duplicates of the senders' ends: only where the open-files limit has room for them
    // (both ends of every connection, the duplicates, a margin), so that they never cost a run
    // its connections.
    let mut threads = Threads {
        probe: room_for_fds(3 * pt.threads * pt.connections.max(1) + 64),
        ..Threads::default()
    };
    for i in 0..pt.threads {
        start_thread(pt, i, &peer, file, &shared, &tid_tx, &mut threads)?;
    }
    drop(tid_tx);
    let ours = peer.ours();
    let roles = Roles::gather(&tid_rx, pt.threads, ours.then_some(pt.threads));
    let resident = file.filter(|_| cold).and_then(|f| f.resident_fraction());
    shared.start.wait();
    // A cold run has no warmup: it would read the file into the cache.
    let warmup = if cold { Duration::ZERO } else { pt.warmup };
    let mut completed = cancel.sleep(warmup);
    let mut window = None;
    if completed {
        let resident = match (file, cold) {
            (Some(f), false) => f.resident_fraction(),
            _ => resident,
        };
        let w = measure_window(pt, &mut peer, &shared, &threads, hw, &roles, cancel)?;
        completed = w.1;
        window = Some(Window { resident, ..w.0 });
    }
    shared.stop.store(true, Ordering::Relaxed);
    let ended = join(pt, &mut peer, &shared, threads)?;
    match (window, completed) {
        (Some(w), true) => Ok(Some(outcome(pt, w, ended, cpu_mhz))),
        _ => Ok(None),
    }
}

/// What a repeat may run past its warmup and window before a send that makes no progress is
/// abandoned.
pub const GRACE: Duration = Duration::from_secs(2);

/// How long one blocking send may make no progress: the whole repeat and its grace.
fn stall_limit(pt: &StreamPoint) -> Duration {
    pt.warmup + pt.duration + GRACE
}

/// Connects sender thread `i`'s connections (accepting them when the receiver is ours) and
/// starts its receiver and sender threads.
fn start_thread(
    pt: &StreamPoint,
    i: usize,
    peer: &Peer,
    file: Option<&PatternFile>,
    shared: &Shared,
    tids: &mpsc::Sender<(bool, i32)>,
    threads: &mut Threads,
) -> anyhow::Result<()> {
    let per_thread = pt.connections.max(1);
    let probe = threads.probe;
    let target = peer.target;
    let mut txs = Vec::with_capacity(per_thread);
    let mut rxs = Vec::with_capacity(per_thread);
    for _ in 0..per_thread {
        let tx = TcpStream::connect_timeout(&target, Duration::from_secs(3));
        let what = || format!("cannot connect to {target}");
        let tx = match pt.connect {
            Some(_) => tx.about(Setting::Connect, what)?,
            None => tx.with_context(what)?,
        };
        tx.set_nodelay(false).ok();
        super::congestion::apply(&tx, pt.congestion.as_deref())?;
        // A send that makes no progress for the whole repeat and the grace after it ends with
        // EAGAIN (blocking paths), so a stalled receiver cannot hold the run for ever.
        tx.set_write_timeout(Some(stall_limit(pt))).ok();
        // A duplicate of the sender's end, to read TCP's counters around the window.
        if probe {
            threads.tx_dups.extend(tx.try_clone().ok());
        }
        txs.push(tx);
        if let Some(l) = &peer.listener {
            let rx = Arc::new(l.accept().context("accepting the loopback connection")?.0);
            threads.rx.push(rx.clone());
            rxs.push(rx);
        }
    }
    if peer.ours() {
        let c = shared.received[i].clone();
        let per_conn = shared.conn_bytes[i].clone();
        let (mode, size) = (pt.recv, pt.recv_size);
        let cpu = pt.cpus.map(|c| c.1);
        let tids = tids.clone();
        let mut stamps = pt.timed().then(|| stamp_reader(pt, i));
        let on = shared.measuring.clone();
        threads.receivers.push(std::thread::spawn(move || {
            pin(cpu);
            let _ = tids.send((false, sendpath_host::thread::gettid()));
            let v = match rxs.as_slice() {
                [one] => receive(one, mode, &c, size, stamps.as_mut().map(|r| (r, &on.0)))
                    .map(|v| vec![v]),
                many => receive_many(many, mode, &c, &per_conn, size),
            };
            v.map(|v| (v, stamps))
        }));
    }
    let sender = Sender::new(pt, i, file, &shared.pool);
    let (stop, sent) = (shared.stop.clone(), shared.sent[i].clone());
    let (finished, start) = (shared.finished.clone(), shared.start.clone());
    let tids = tids.clone();
    threads.senders.push(std::thread::spawn(move || {
        pin(sender.cpu);
        let _ = tids.send((true, sendpath_host::thread::gettid()));
        sender.run(txs, &stop, &sent, &finished, &start)
    }));
    Ok(())
}

/// The reader of sender `i`'s stamps: its messages' sizes, as the sender draws them.
fn stamp_reader(pt: &StreamPoint, i: usize) -> StampReader {
    let sizes = match &pt.mix {
        Some(m) => Sizes::Mix(m.sizes(i as u64)),
        None => Sizes::Fixed(pt.size),
    };
    StampReader::new(sizes, pt.recv == RecvMode::Verify)
}

/// Measures the window after the warmup: snapshots, bytes, the agent's samples and TCP's
/// counters at both edges. The window's residency is the caller's; `false` when Ctrl-C cut
/// it short.
fn measure_window(
    pt: &StreamPoint,
    peer: &mut Peer,
    shared: &Shared,
    threads: &Threads,
    hw: &mut Meter,
    roles: &Roles,
    cancel: &Cancel,
) -> anyhow::Result<(Window, bool)> {
    let per_thread = pt.connections.max(1);
    let ours = peer.ours();
    let (tx_dups, rx) = (&threads.tx_dups, &threads.rx);
    let remote0 = peer.sample()?;
    let complete = tx_dups.len() == pt.threads * per_thread;
    let t0 = TcpCounts::read(tx_dups, rx, ours);
    let (s0, b0, c0) = (
        Snapshot::take(hw, roles),
        shared.bytes_now(ours),
        shared.per_conn_now(),
    );
    shared.measuring.store(true, Ordering::Relaxed);
    let (completed, idle_tail) = stall::sleep_window(pt, shared, ours, cancel);
    shared.measuring.store(false, Ordering::Relaxed);
    let (s1, b1, c1) = (
        Snapshot::take(hw, roles),
        shared.bytes_now(ours),
        shared.per_conn_now(),
    );
    let tcp = TcpCounts::read(tx_dups, rx, ours)
        .since(t0)
        .filter(|_| complete);
    let remote = remote0.zip(peer.sample()?);
    // The agent counts what arrived, as our own receiver would.
    let (b0, b1) = match remote {
        Some((r0, r1)) => (r0.bytes, r1.bytes),
        None => (b0, b1),
    };
    let fairness = (per_thread > 1 && ours).then(|| {
        let moved: Vec<u64> = c1.iter().zip(&c0).map(|(b, a)| b - a).collect();
        ConnectionBytes::of(&moved)
    });
    let window = Window {
        start: s0,
        end: s1,
        bytes: b1 - b0,
        resident: None,
        fairness,
        remote,
        tcp,
        idle_tail,
    };
    Ok((window, completed))
}

/// What the threads left once joined.
struct Ended {
    stats: SendStats,
    note: Option<String>,
    integrity: Integrity,
    /// The senders' retransmissions over the connections' lifetime.
    lifetime_retrans: Option<u64>,
    /// How the senders stalled, if they did (a send's timeout, or still sending after the
    /// window).
    stall: Option<Stall>,
    /// Why the receivers' reads were ended before every byte arrived, if they were.
    drained: Option<String>,
    /// The window's messages' latencies, ns, merged over receivers (`--msg-latency`).
    latency: Option<hdrhistogram::Histogram<u64>>,
}

/// Joins the senders and receivers, and checks that every byte sent arrived (at our
/// receivers or the agent's); the first error of any thread.
fn join(
    pt: &StreamPoint,
    peer: &mut Peer,
    shared: &Shared,
    threads: Threads,
) -> anyhow::Result<Ended> {
    let mut first_err = None;
    let abandoned = stop_stalled_senders(&threads.senders, &threads.tx_dups);
    let (stats, note) = super::join_senders(threads.senders, "a sender thread", &mut first_err)?;
    // A send that stalled after the window (its timeout ran out, or the run shut its
    // connection down) leaves the window measured: the repeat is recorded as cut short, and
    // what the receivers then report (a reset, a short stream) follows from it.
    let stalled = stalled_senders(abandoned, stall_limit(pt), &mut first_err);
    let lifetime_retrans = TcpCounts::read(&threads.tx_dups, &[], false)
        .senders
        .map(|c| c.retrans_segs);
    // The probes hold the senders' sockets open: a sender that failed before half-closing
    // its connection would leave its receiver waiting for the end.
    for s in &threads.tx_dups {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut integrity = Integrity {
        bytes_sent: stats.bytes,
        ..Integrity::default()
    };
    let drained = stop_draining(&threads.receivers, &threads.rx);
    let mut latency: Option<hdrhistogram::Histogram<u64>> = None;
    for r in threads.receivers {
        match r
            .join()
            .map_err(|_| anyhow!("a receiver thread panicked"))?
        {
            Ok((vs, stamps)) => {
                if pt.recv == RecvMode::Verify {
                    for v in vs {
                        integrity.bytes_verified += v.bytes_verified();
                        integrity.mismatches += v.mismatches;
                        integrity.first_mismatch = integrity.first_mismatch.or(v.first_mismatch);
                    }
                }
                if let Some(st) = stamps {
                    // A stamp that cannot be a send time is a corrupted message.
                    integrity.mismatches += st.implausible;
                    match latency.as_mut() {
                        Some(h) => h.add(&st.hist).context("merging latency histograms")?,
                        None => latency = Some(st.hist),
                    }
                }
            }
            Err(_) if stalled.is_some() => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let cut_short = stalled.is_some() || drained.is_some();
    check_arrival(peer, shared, &mut integrity, cut_short)?;
    if pt.recv == RecvMode::Zerocopy && peer.ours() {
        integrity.bytes_mapped = Some(shared.bytes_mapped());
    }
    Ok(Ended {
        stats,
        note,
        integrity,
        lifetime_retrans,
        stall: stalled,
        drained,
        latency,
    })
}

/// The repeat a finished window records.
fn outcome(pt: &StreamPoint, w: Window, ended: Ended, cpu_mhz: Option<f64>) -> Outcome {
    let conns = pt.threads * pt.connections.max(1);
    // With a mix, messages are counted from its mean size.
    let messages = match &pt.mix {
        Some(m) => (w.bytes as f64 / m.mean()).round() as u64,
        None => w.bytes / pt.size as u64,
    };
    let mut repeat = w.start.window(&w.end, w.bytes, messages, conns, cpu_mhz);
    repeat.connection_bytes = w.fairness;
    repeat.tcp = w.tcp.map(|t| TcpWindow {
        connection_retrans_segs: ended.lifetime_retrans.unwrap_or(t.retrans_segs),
        ..t
    });
    if let (Some(cpu), Some((r0, r1))) = (repeat.cpu.as_mut(), w.remote) {
        cpu.set_remote(
            r1.user_ns.saturating_sub(r0.user_ns),
            r1.system_ns.saturating_sub(r0.system_ns),
            w.bytes,
        );
    }
    repeat.file_resident_fraction = w.resident;
    repeat.zerocopy = zerocopy_counts(&ended.stats);
    repeat.messages_per_call = ended.stats.messages_per_call();
    repeat.arena_registered = crate::window::arena_registered(&ended.stats);
    repeat.integrity = ended.integrity;
    repeat.cut_short = stall::cut_short(pt, &w, &ended, &repeat);
    if let Some(h) = &ended.latency {
        repeat.set_latency(h);
    }
    Outcome::new(repeat, ended.note, &ended.stats)
}
