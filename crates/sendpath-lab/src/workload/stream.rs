//! `sendpath stream`: one-way bulk transfer, one sender and one receiver per connection.

use super::{
    receive, receive_many, send_message, MsgShape, PatternFile, RecvCounters, RecvMode, PART_ALIGN,
};
use crate::cancel::Cancel;
use crate::measure::{Meter, Roles, Snapshot};
use crate::results::{ConnectionBytes, Integrity, Repeat, TcpWindow, ZerocopyCounts};
use crate::traffic::mix::{Alloc, SizeMix};
use anyhow::{anyhow, bail, Context};
use sendpath::engine::{chooser_for, Choice, ConnState, DriverConfig, UringDriver};
use sendpath::metrics::SendStats;
use sendpath::{Options, Strategy};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc, Barrier};
use std::time::Duration;

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
}

/// What one repeat produced.
pub struct Outcome {
    /// The window's values, zero-copy counts and integrity (its round is set by the caller).
    pub repeat: Repeat,
    /// Why the path is not the one asked for, if it fell back at open time.
    pub note: Option<String>,
}

/// The zero-copy counts of a repeat from its merged sender statistics.
pub fn zerocopy_counts(stats: &SendStats) -> ZerocopyCounts {
    let s = stats.summary();
    ZerocopyCounts {
        attempts: s.zc_attempts,
        completions: s.zc_completions,
        copied: s.zc_copied,
        copied_known: s.copied_fraction.is_some(),
        fallbacks: s.fallbacks,
        registered: s.registered_sends,
        completion_p50_us: (s.completion_latency.count > 0)
            .then(|| s.completion_latency.p50_ns as f64 / 1000.0),
        decisions: s.decisions,
    }
}

pub fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        // The CPU was checked against the allowed set when the flag was parsed.
        let _ = sendpath::host::pin_current_thread(c);
    }
}

/// The file range `[start, end)` sender `i` of `n` streams from: the whole file for warm runs
/// (round and round), a part of its own for cold runs (once), so no range is read twice.
fn file_part(file_len: u64, i: usize, n: usize, cold: bool) -> (u64, Option<u64>) {
    if !cold || file_len == 0 {
        return (0, None);
    }
    let part = (file_len / n as u64 / PART_ALIGN).max(1) * PART_ALIGN;
    let start = (part * i as u64).min(file_len);
    (start, Some((start + part).min(file_len)))
}

/// One sender thread's many connections on one io_uring ring.
struct Multiplexed<'a> {
    strategy: Strategy,
    size: usize,
    fill: bool,
    opts: &'a Options,
}

impl Multiplexed<'_> {
    /// Keeps every connection's queue full, round-robin, until `stop`; then flushes, waits for
    /// the notifications and half-closes every connection.
    fn send(
        &self,
        txs: Vec<TcpStream>,
        stop: &AtomicBool,
        sent: &AtomicU64,
        finished: &AtomicUsize,
        start: &Barrier,
    ) -> anyhow::Result<(SendStats, Option<String>)> {
        let opened = self.open(txs);
        start.wait();
        let result = opened.and_then(|(mut d, ids)| {
            let r = self.pump(&mut d, &ids, stop, sent);
            let fin = d.finish(Duration::from_secs(2));
            for &id in &ids {
                let _ = d.socket(id).shutdown(std::net::Shutdown::Write);
            }
            r?;
            fin?;
            let mut stats = SendStats::default();
            for &id in &ids {
                stats.merge(d.stats(id));
            }
            Ok((stats, d.note()))
        });
        finished.fetch_add(1, Ordering::Relaxed);
        result.with_context(|| format!("{} sender", self.strategy))
    }

    fn open(
        &self,
        txs: Vec<TcpStream>,
    ) -> anyhow::Result<(UringDriver, Vec<sendpath::engine::ConnId>)> {
        if !sendpath::engine::on_ring(self.strategy) {
            bail!("--connections above 1 puts the connections of a thread on one io_uring ring: use --strategy uring, uring-zc or adaptive (not {})", self.strategy)
        }
        // Zero-copy settings (fixed buffers) for every strategy that may choose SEND_ZC.
        let choice = Choice::of_strategy(self.strategy).unwrap_or(Choice::ZeroCopy);
        let mut d = UringDriver::new(DriverConfig::from_options(self.opts, txs.len(), choice))?;
        let mut ids = Vec::with_capacity(txs.len());
        for s in txs {
            let chooser = chooser_for(self.strategy, self.opts).expect("checked above");
            let state = ConnState::new(d.state_config(self.opts.uring_report_usage), chooser);
            ids.push(d.add_with(s, state)?);
        }
        Ok((d, ids))
    }

    fn pump(
        &self,
        d: &mut UringDriver,
        ids: &[sendpath::engine::ConnId],
        stop: &AtomicBool,
        sent: &AtomicU64,
    ) -> anyhow::Result<()> {
        let mut offsets = vec![0u64; ids.len()];
        let mut writable = Vec::with_capacity(ids.len());
        while !stop.load(Ordering::Relaxed) {
            let mut queued = false;
            d.take_writable(&mut writable);
            for id in writable.drain(..) {
                let c = id.index();
                d.conn_error(id)
                    .with_context(|| format!("connection {c} of this thread"))?;
                while d.room(id) > 0 {
                    let mut b = d.take_buf(id, self.size);
                    if self.fill {
                        sendpath::pattern::fill(b.as_mut_slice(), offsets[c]);
                    }
                    offsets[c] += self.size as u64;
                    if d.push(id, b, true).is_err() {
                        break;
                    }
                    sent.fetch_add(self.size as u64, Ordering::Relaxed);
                    queued = true;
                }
            }
            if queued {
                d.run(false)?;
            } else {
                d.run_for(Duration::from_millis(50))?;
            }
        }
        Ok(())
    }
}

/// Runs one repeat. `Ok(None)` means Ctrl-C cut it short (nothing to record).
pub fn run_once(
    pt: &StreamPoint,
    file: Option<&PatternFile>,
    hw: &mut Meter,
    cpu_mhz: Option<f64>,
    cancel: &Cancel,
) -> anyhow::Result<Option<Outcome>> {
    let per_thread = pt.connections.max(1);
    // A remote receiver: one control session per repeat.
    let mut agent = match &pt.agent {
        Some(t) => {
            let mut c = crate::remote::AgentClient::connect(t)?;
            let max = pt.warmup + pt.duration + Duration::from_secs(30);
            let at = c.receive(t.addr, pt.threads * per_thread, pt.recv, pt.recv_size, max)?;
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
    let cold = pt.cold && file.is_some();
    if let (Some(f), true) = (file, cold) {
        f.make_cold()?;
    }
    let stop = Arc::new(AtomicBool::new(false));
    let finished = Arc::new(AtomicUsize::new(0));
    let start = Arc::new(Barrier::new(pt.threads + 1));
    let (tid_tx, tid_rx) = mpsc::channel::<(bool, i32)>();
    let mut receivers = Vec::new();
    let mut senders = Vec::new();
    let recv_counters: Vec<Arc<RecvCounters>> = (0..pt.threads).map(|_| Arc::default()).collect();
    let sent: Vec<Arc<AtomicU64>> = (0..pt.threads).map(|_| Arc::default()).collect();
    let file_len = file.map_or(0, |f| f.len);
    let conn_bytes: Vec<Arc<[AtomicU64]>> = (0..pt.threads)
        .map(|_| (0..per_thread).map(|_| AtomicU64::new(0)).collect())
        .collect();
    let mut tcp_probes: (Vec<TcpStream>, Vec<TcpStream>) = (Vec::new(), Vec::new());
    // The probes duplicate both ends of every connection: only where the open-files limit
    // has room for them, so that they never cost a run its connections.
    let probe = room_for_fds(4 * pt.threads * per_thread + 64);
    for i in 0..pt.threads {
        let mut txs = Vec::with_capacity(per_thread);
        let mut rxs = Vec::with_capacity(per_thread);
        for _ in 0..per_thread {
            let tx = TcpStream::connect_timeout(&target, Duration::from_secs(3))
                .with_context(|| format!("--connect {target}: cannot connect"))?;
            tx.set_nodelay(false).ok();
            // Duplicates of both ends, to read TCP's counters around the window.
            if probe {
                tcp_probes.0.extend(tx.try_clone().ok());
            }
            txs.push(tx);
            if let Some(l) = &listener {
                let rx = l.accept().context("accepting the loopback connection")?.0;
                if probe {
                    tcp_probes.1.extend(rx.try_clone().ok());
                }
                rxs.push(rx);
            }
        }
        if listener.is_some() {
            let c = recv_counters[i].clone();
            let per_conn = conn_bytes[i].clone();
            let (mode, size) = (pt.recv, pt.recv_size);
            let cpu = pt.cpus.map(|c| c.1);
            let tids = tid_tx.clone();
            receivers.push(std::thread::spawn(move || {
                pin(cpu);
                let _ = tids.send((false, sendpath::host::gettid()));
                match rxs.len() {
                    1 => receive(rxs.remove(0), mode, &c, size).map(|v| vec![v]),
                    _ => receive_many(rxs, mode, &c, &per_conn, size),
                }
            }));
        }
        let mut opts = pt.opts.clone();
        opts.file = file.map(|f| f.file.clone());
        let (stop, sent, finished, start) = (
            stop.clone(),
            sent[i].clone(),
            finished.clone(),
            start.clone(),
        );
        let (strategy, size, fields, alloc) = (pt.strategy, pt.size, pt.fields, pt.alloc);
        let mut sizes = pt.mix.as_ref().map(|m| m.sizes(i as u64));
        let fill = pt.recv == RecvMode::Verify;
        let cpu = pt.cpus.map(|c| c.0);
        let (first, limit) = file_part(file_len, i, pt.threads, cold);
        let tids = tid_tx.clone();
        senders.push(std::thread::spawn(
            move || -> anyhow::Result<(SendStats, Option<String>)> {
                pin(cpu);
                let _ = tids.send((true, sendpath::host::gettid()));
                if txs.len() > 1 {
                    if sizes.is_some() || alloc == Alloc::Fresh {
                        bail!("--size-mix and --alloc fresh run one connection per sender thread: drop --connections");
                    }
                    let run = Multiplexed {
                        strategy,
                        size,
                        fill,
                        opts: &opts,
                    };
                    return run.send(txs, &stop, &sent, &finished, &start);
                }
                let tx = txs.remove(0);
                let opened = sendpath::open(strategy, tx, &opts);
                start.wait();
                let mut p = opened?;
                let mut off = first;
                let shape = MsgShape {
                    fields,
                    fill,
                    file_len,
                    alloc,
                };
                let result = (|| {
                    while !stop.load(Ordering::Relaxed) {
                        let size = match sizes.as_mut() {
                            Some(s) => s.next().unwrap_or(size),
                            None => size,
                        };
                        if limit.is_some_and(|l| off + size as u64 > l) {
                            break;
                        }
                        send_message(p.as_mut(), strategy, size, off, shape)?;
                        off += size as u64;
                        sent.fetch_add(size as u64, Ordering::Relaxed);
                    }
                    p.finish(Duration::from_secs(2))?;
                    Ok::<(), anyhow::Error>(())
                })();
                finished.fetch_add(1, Ordering::Relaxed);
                let _ = p.socket().shutdown(std::net::Shutdown::Write);
                result.with_context(|| format!("{strategy} sender"))?;
                Ok((p.stats().clone(), p.note().map(String::from)))
            },
        ));
    }
    drop(tid_tx);
    let roles = Roles::gather(&tid_rx, pt.threads, listener.as_ref().map(|_| pt.threads));
    let resident = file.filter(|_| cold).and_then(|f| f.resident_fraction());
    start.wait();
    let bytes_now = || -> u64 {
        if listener.is_some() {
            recv_counters
                .iter()
                .map(|c| c.bytes.load(Ordering::Relaxed))
                .sum()
        } else {
            sent.iter().map(|c| c.load(Ordering::Relaxed)).sum()
        }
    };
    // A cold run has no warmup: it would read the file into the cache.
    let warmup = if cold { Duration::ZERO } else { pt.warmup };
    let mut completed = cancel.sleep(warmup);
    let mut window = None;
    if completed {
        let resident = match (file, cold) {
            (Some(f), false) => f.resident_fraction(),
            _ => resident,
        };
        let per_conn_now = || -> Vec<u64> {
            conn_bytes
                .iter()
                .flat_map(|t| t.iter().map(|c| c.load(Ordering::Relaxed)))
                .collect()
        };
        let remote0 = agent.as_mut().map(|(c, _)| c.sample()).transpose()?;
        let complete = tcp_probes.0.len() == pt.threads * per_thread;
        let t0 = TcpCounts::read(&tcp_probes, listener.is_some());
        let (s0, b0, c0) = (Snapshot::take(hw, &roles), bytes_now(), per_conn_now());
        let all_done = || finished.load(Ordering::Relaxed) == pt.threads;
        completed = cancel.sleep_unless(pt.duration, all_done);
        let (s1, b1, c1) = (Snapshot::take(hw, &roles), bytes_now(), per_conn_now());
        let tcp = TcpCounts::read(&tcp_probes, listener.is_some())
            .since(t0)
            .filter(|_| complete);
        let remote1 = agent.as_mut().map(|(c, _)| c.sample()).transpose()?;
        let remote = remote0.zip(remote1);
        // The agent counts what arrived, as our own receiver would.
        let (b0, b1) = match remote {
            Some((r0, r1)) => (r0.bytes, r1.bytes),
            None => (b0, b1),
        };
        let fairness = (per_thread > 1 && listener.is_some()).then(|| {
            let moved: Vec<u64> = c1.iter().zip(&c0).map(|(b, a)| b - a).collect();
            ConnectionBytes::of(&moved)
        });
        window = Some((s0, s1, b1 - b0, resident, fairness, remote, tcp));
    }
    stop.store(true, Ordering::Relaxed);
    let mut first_err = None;
    let (stats, note) = super::join_senders(senders, "a sender thread", &mut first_err)?;
    let lifetime = TcpCounts::read(&tcp_probes, false)
        .senders
        .map(|c| c.retrans_segs);
    // The probes hold the senders' sockets open: a sender that failed before half-closing
    // its connection would leave its receiver waiting for the end.
    for s in &tcp_probes.0 {
        let _ = s.shutdown(std::net::Shutdown::Write);
    }
    let mut integrity = Integrity {
        bytes_sent: stats.bytes,
        ..Integrity::default()
    };
    for r in receivers {
        match r
            .join()
            .map_err(|_| anyhow!("a receiver thread panicked"))?
        {
            Ok(vs) if pt.recv == RecvMode::Verify => {
                for v in vs {
                    integrity.bytes_verified += v.bytes_verified();
                    integrity.mismatches += v.mismatches;
                }
            }
            Ok(_) => {}
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    if let Some((mut c, _)) = agent.take() {
        let (total, verified, mismatches) = c.finish()?;
        integrity.bytes_received = Some(total.bytes);
        integrity.bytes_verified = verified;
        integrity.mismatches = mismatches;
        if total.bytes != integrity.bytes_sent {
            bail!(
                "the senders put {} bytes on the sockets but the agent received {}: bytes were lost or invented",
                integrity.bytes_sent,
                total.bytes
            );
        }
    }
    if listener.is_some() {
        let got: u64 = recv_counters
            .iter()
            .map(|c| c.bytes.load(Ordering::Relaxed))
            .sum();
        integrity.bytes_received = Some(got);
        if got != integrity.bytes_sent {
            bail!(
                "the senders put {} bytes on the sockets but the receivers read {got}: bytes were lost or invented",
                integrity.bytes_sent
            );
        }
    }
    let (Some((s0, s1, bytes, resident, fairness, remote, tcp)), true) = (window, completed) else {
        return Ok(None);
    };
    // With a mix, messages are counted from its mean size.
    let messages = match &pt.mix {
        Some(m) => (bytes as f64 / m.mean()).round() as u64,
        None => bytes / pt.size as u64,
    };
    let mut repeat = s0.window(&s1, bytes, messages, pt.threads * per_thread, cpu_mhz);
    repeat.connection_bytes = fairness;
    repeat.tcp = tcp.map(|t| TcpWindow {
        connection_retrans_segs: lifetime.unwrap_or(t.retrans_segs),
        ..t
    });
    if let (Some(cpu), Some((r0, r1))) = (repeat.cpu.as_mut(), remote) {
        cpu.set_remote(
            r1.user_ns.saturating_sub(r0.user_ns),
            r1.system_ns.saturating_sub(r0.system_ns),
            bytes,
        );
    }
    repeat.file_resident_fraction = resident;
    repeat.zerocopy = zerocopy_counts(&stats);
    repeat.integrity = integrity;
    Ok(Some(Outcome { repeat, note }))
}

/// Whether `n` more descriptors fit under the soft open-files limit, counting those open now.
fn room_for_fds(n: usize) -> bool {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let open = std::fs::read_dir("/proc/self/fd").map_or(usize::MAX, |d| d.count());
    limit.is_none_or(|l| open.saturating_add(n) as u64 <= l)
}

/// TCP's counters summed over a run's connections: the senders' `TCP_INFO`, and the packets
/// the receivers' sockets dropped (when the receivers are ours).
#[derive(Debug, Clone, Copy)]
struct TcpCounts {
    senders: Option<sendpath::tcp::TcpCounters>,
    drops: Option<u64>,
}

impl TcpCounts {
    /// Reads the senders' (`probes.0`) and receivers' (`probes.1`) sockets; a value is `None`
    /// when any socket could not be read.
    fn read(probes: &(Vec<TcpStream>, Vec<TcpStream>), ours: bool) -> TcpCounts {
        let senders = probes
            .0
            .iter()
            .map(|s| sendpath::tcp::tcp_counters(s.as_fd()).ok())
            .try_fold(sendpath::tcp::TcpCounters::default(), |a, c| {
                let c = c?;
                Some(sendpath::tcp::TcpCounters {
                    retrans_segs: a.retrans_segs + c.retrans_segs,
                    busy_us: a.busy_us + c.busy_us,
                    rwnd_limited_us: a.rwnd_limited_us + c.rwnd_limited_us,
                })
            });
        let drops = if ours && !probes.1.is_empty() {
            probes
                .1
                .iter()
                .map(|s| sendpath::tcp::socket_drops(s.as_fd()).ok().map(u64::from))
                .sum()
        } else {
            None
        };
        TcpCounts { senders, drops }
    }

    /// What changed since `before`, as results record it; `None` without sender counts.
    fn since(self, before: TcpCounts) -> Option<TcpWindow> {
        let (a, b) = (self.senders?, before.senders?);
        let retrans_segs = a.retrans_segs.saturating_sub(b.retrans_segs);
        Some(TcpWindow {
            retrans_segs,
            receiver_drops: self
                .drops
                .zip(before.drops)
                .map(|(a, b)| a.saturating_sub(b)),
            connection_retrans_segs: retrans_segs,
            busy_us: a.busy_us.saturating_sub(b.busy_us),
            rwnd_limited_us: a.rwnd_limited_us.saturating_sub(b.rwnd_limited_us),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cold_senders_get_disjoint_aligned_parts() {
        let len = 10 * PART_ALIGN + 7;
        assert_eq!(file_part(len, 0, 2, false), (0, None));
        let a = file_part(len, 0, 2, true);
        let b = file_part(len, 1, 2, true);
        assert_eq!(a, (0, Some(5 * PART_ALIGN)));
        assert_eq!(b, (5 * PART_ALIGN, Some(10 * PART_ALIGN)));
        assert_eq!(b.0 % PART_ALIGN, 0);
    }
}
