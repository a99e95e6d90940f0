//! A UDP stream (`stream --proto udp`): one connected UDP socket per sender thread, sending
//! with the path's `SendPath`, each send one datagram or, with `--gso`, one super-datagram the
//! kernel cuts into segments. Our own receiver per sender thread (on loopback or in a
//! namespace) counts datagrams, loss and reordering from the sequence number at the start of
//! each; on the black-hole route nothing receives and the window counts what was sent.

use super::{pin, stall_limit, zerocopy_counts, Outcome, Shared, StreamPoint, GRACE};
use crate::cancel::Cancel;
use crate::measure::{Meter, Roles, Snapshot};
use crate::traffic::datagram::{segments, stamp, Tally, HEADER};
use crate::traffic::RecvMode;
use crate::window::{Datagrams, Integrity};
use crate::workload::{join_senders, RecvCounters, Sent};
use anyhow::{anyhow, Context};
use sendpath::Strategy;
use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::sync::atomic::Ordering;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The receive buffer asked for each receiving socket (root may exceed `rmem_max`).
const RCVBUF: usize = 16 << 20;

/// What a receiver thread returns: its tally and its socket's drops.
type Received = anyhow::Result<(Tally, Option<u64>)>;

/// Runs one repeat of a UDP point. `Ok(None)` means Ctrl-C cut it short.
pub(super) fn run_once(
    pt: &StreamPoint,
    hw: &mut Meter,
    cpu_mhz: Option<f64>,
    cancel: &Cancel,
) -> anyhow::Result<Option<Outcome>> {
    let ours = pt.connect.is_none() && !pt.netns.as_ref().is_some_and(|n| n.is_blackhole());
    // One socket per sender thread: TCP's per-connection counts stay unused.
    let shared = Shared::new(pt.threads, 1, cancel);
    let (tid_tx, tid_rx) = mpsc::channel();
    let (mut senders, mut receivers) = (Vec::new(), Vec::new());
    for i in 0..pt.threads {
        let (tx, rx) = sockets(pt, ours)?;
        if let Some(rx) = rx {
            receivers.push(start_receiver(pt, rx, &shared, i, &tid_tx));
        }
        senders.push(start_sender(pt, tx, &shared, i, &tid_tx));
    }
    drop(tid_tx);
    let roles = Roles::gather(&tid_rx, pt.threads, ours.then_some(pt.threads));
    shared.start.wait();
    let all_done = || shared.finished.count() == pt.threads;
    let mut completed = cancel.sleep(pt.warmup);
    let mut window = None;
    if completed {
        let (s0, b0) = (Snapshot::take(hw, &roles), shared.bytes_now(ours));
        completed = cancel.sleep_unless(pt.duration, all_done);
        let (s1, b1) = (Snapshot::take(hw, &roles), shared.bytes_now(ours));
        window = Some((s0, s1, b1 - b0));
    }
    shared.stop.store(true, Ordering::Relaxed);
    let ended = join(pt, senders, receivers)?;
    let Some((s0, s1, bytes)) = window.filter(|_| completed) else {
        return Ok(None);
    };
    let mut repeat = s0.window(&s1, bytes, bytes / pt.size as u64, pt.threads, cpu_mhz);
    repeat.zerocopy = zerocopy_counts(&ended.stats);
    repeat.messages_per_call = ended.stats.messages_per_call();
    repeat.arena_registered = crate::window::arena_registered(&ended.stats);
    repeat.integrity = ended.integrity;
    repeat.datagrams = Some(ended.datagrams);
    Ok(Some(Outcome::new(repeat, ended.note, &ended.stats)))
}

/// One sender's connected socket, and our receiver's socket when the receiver is ours.
fn sockets(pt: &StreamPoint, ours: bool) -> anyhow::Result<(UdpSocket, Option<UdpSocket>)> {
    let (tx, rx) = match (&pt.netns, pt.connect) {
        (Some(ns), _) if ns.is_blackhole() => (ns.udp_sender()?, None),
        (Some(ns), _) => (bind_any()?, Some(ns.udp_receiver()?)),
        (None, Some(_)) => (bind_any()?, None),
        (None, None) => {
            let tx = UdpSocket::bind("127.0.0.1:0").context("binding a loopback UDP socket")?;
            let rx = UdpSocket::bind("127.0.0.1:0").context("binding a loopback UDP socket")?;
            (tx, Some(rx))
        }
    };
    if let Some(rx) = &rx {
        tx.connect(rx.local_addr()?).context("connecting UDP")?;
        grow_rcvbuf(rx);
    } else if let Some(a) = pt.connect {
        tx.connect(a)
            .with_context(|| format!("connecting UDP to {a}"))?;
    }
    debug_assert_eq!(rx.is_some(), ours);
    // Never let the kernel fragment: a fragmented datagram is copied, zero-copy or not; a
    // datagram over the route's MTU fails with EMSGSIZE instead.
    rustix::net::sockopt::set_ip_mtu_discover(&tx, rustix::net::sockopt::Ipv4PathMtuDiscovery::DO)
        .context("setsockopt(IP_MTU_DISCOVER, IP_PMTUDISC_DO)")?;
    if let Some(seg) = pt.gso {
        sendpath_host::socket::set_udp_segment(tx.as_fd(), seg)
            .context("setsockopt(UDP_SEGMENT): this kernel has no UDP GSO (Linux 4.18+)")?;
    }
    tx.set_write_timeout(Some(stall_limit(pt))).ok();
    Ok((tx, rx))
}

fn bind_any() -> anyhow::Result<UdpSocket> {
    UdpSocket::bind("0.0.0.0:0").context("binding a UDP socket")
}

/// A large receive buffer, so that the receiver loses what it cannot keep up with rather
/// than what a scheduling hiccup delays: forced as root, else as far as `rmem_max` allows.
fn grow_rcvbuf(s: &UdpSocket) {
    use rustix::net::sockopt;
    if sockopt::set_socket_recv_buffer_size_force(s, RCVBUF).is_err() {
        let _ = sockopt::set_socket_recv_buffer_size(s, RCVBUF);
    }
}

fn start_sender(
    pt: &StreamPoint,
    tx: UdpSocket,
    shared: &Shared,
    i: usize,
    tids: &mpsc::Sender<(bool, i32)>,
) -> JoinHandle<Sent> {
    let (strategy, size, opts) = (pt.strategy, pt.size, pt.opts.clone());
    let seg = pt.gso.map_or(size, usize::from);
    let fill = pt.recv == RecvMode::Verify;
    let (stop, sent) = (shared.stop.clone(), shared.sent[i].clone());
    let (finished, start) = (shared.finished.clone(), shared.start.clone());
    let (cpu, tids, mtu) = (pt.cpus.map(|c| c.0), tids.clone(), route_mtu(pt));
    let task = super::tokio::UdpTask {
        strategy,
        runtime: pt.runtime,
        size,
        fill,
        opts: opts.clone(),
        stall: super::stall_limit(pt),
    };
    std::thread::spawn(move || {
        pin(cpu);
        let _ = tids.send((true, sendpath_host::thread::gettid()));
        if task.runtime.is_tokio() {
            let t = super::tokio::Task {
                stop: &stop,
                sent: &sent,
                start: &start,
            };
            let result = task.run(tx, t, |b, seq, fill| stamp(b, seg, seq, fill));
            finished.one_more();
            let result = result.map_err(|e| too_big(e, size, seg, mtu));
            return result
                .with_context(|| format!("{strategy} sender (UDP, {})", task.runtime.name()));
        }
        let opened = sendpath::open(strategy, tx, &opts);
        // Datagrams go to the path [`UDP_BATCH`] at a time by one `send_bufs` (each its own
        // datagram, one return through the path per batch); `--copy-batch N` makes it N, one
        // `sendmmsg` for copy.
        let per_batch = opts.copy_batch.max(UDP_BATCH);
        let in_place = super::sender::in_place(strategy, &opts);
        start.wait();
        let result = opened.map_err(anyhow::Error::from).and_then(|mut p| {
            let mut seq = 0u64;
            let mut batch = Vec::with_capacity(per_batch);
            let sending = (|| -> anyhow::Result<()> {
                if in_place {
                    while !stop.load(Ordering::Relaxed) {
                        // Each datagram stamped where the kernel reads it.
                        p.send_in_place(per_batch, size, &mut |_, b| {
                            seq += stamp(b, seg, seq, fill);
                        })?;
                        sent.fetch_add((per_batch * size) as u64, Ordering::Relaxed);
                    }
                    return Ok(());
                }
                while !stop.load(Ordering::Relaxed) {
                    let mut b = p.take_buf(size);
                    seq += stamp(b.as_mut_slice(), seg, seq, fill);
                    batch.push(b);
                    if batch.len() == per_batch {
                        p.send_bufs(&mut batch)?;
                        sent.fetch_add((per_batch * size) as u64, Ordering::Relaxed);
                    }
                }
                Ok(())
            })();
            let fin = p.finish(Duration::from_secs(2));
            sending.map_err(|e| too_big(e, size, seg, mtu))?;
            fin?;
            Ok((p.stats().clone(), p.note().map(String::from)))
        });
        finished.one_more();
        result.with_context(|| format!("{strategy} sender (UDP)"))
    })
}

/// Datagrams a UDP sender hands the path at once, unless `--copy-batch` asks for more: as the
/// TCP sender's batches, so the per-send work is the path's, not the harness's.
const UDP_BATCH: usize = 16;

/// The route's MTU as far as the plan knows it (loopback's is 65536).
fn route_mtu(pt: &StreamPoint) -> Option<u32> {
    match (&pt.netns, pt.connect) {
        (Some(ns), _) => Some(ns.info().mtu.unwrap_or(1500)),
        (None, None) => Some(65_536),
        (None, Some(_)) => None,
    }
}

/// An `EMSGSIZE` named as what it means and what to change.
fn too_big(e: anyhow::Error, size: usize, seg: usize, mtu: Option<u32>) -> anyhow::Error {
    if !crate::setting::io_error_in(&e, |io| io.raw_os_error() == Some(libc::EMSGSIZE)) {
        return e;
    }
    let mtu = mtu.map_or("the route's MTU".to_string(), |m| {
        format!("the route's MTU ({m})")
    });
    e.context(crate::setting::SettingError {
        setting: crate::setting::Setting::Datagram,
        message: format!(
            "EMSGSIZE: a {size}-byte send in datagrams of {seg} bytes does not fit: each datagram must fit {mtu} with its 28 bytes of headers, since sendpath forbids fragmentation (a fragmented datagram is copied); use a GSO segment below the MTU, a smaller message, or a larger MTU"
        ),
    })
}

fn start_receiver(
    pt: &StreamPoint,
    rx: UdpSocket,
    shared: &Shared,
    i: usize,
    tids: &mpsc::Sender<(bool, i32)>,
) -> JoinHandle<Received> {
    let (mode, c, finished) = (pt.recv, shared.received[i].clone(), shared.finished.clone());
    let (cpu, tids, threads) = (pt.cpus.map(|c| c.1), tids.clone(), pt.threads);
    std::thread::spawn(move || {
        pin(cpu);
        let _ = tids.send((false, sendpath_host::thread::gettid()));
        receive(&rx, mode, &c, || finished.count() == threads)
    })
}

/// Reads datagrams until the senders are done and none came for 50 ms (or [`GRACE`] after
/// they are done, whatever still comes).
fn receive(
    s: &UdpSocket,
    mode: RecvMode,
    c: &RecvCounters,
    senders_done: impl Fn() -> bool,
) -> Received {
    s.set_read_timeout(Some(Duration::from_millis(50)))?;
    let mut t = Tally::default();
    let mut buf = vec![0u8; 1 << 16];
    let mut done_at: Option<Instant> = None;
    let verify = mode == RecvMode::Verify;
    loop {
        let r = match mode {
            RecvMode::Discard => {
                rustix::net::recv(s, &mut buf[..HEADER], rustix::net::RecvFlags::TRUNC)
                    .map_err(std::io::Error::from)
            }
            _ => s.recv(&mut buf).map(|n| (n, n)),
        };
        match r {
            Ok((got, len)) => {
                t.on_datagram(&buf[..got], len, verify);
                c.bytes.fetch_add(len as u64, Ordering::Relaxed);
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) if crate::setting::is_timeout(&e) => {
                if senders_done() {
                    break;
                }
            }
            Err(e) => return Err(e).context("UDP receiver"),
        }
        if senders_done() && *done_at.get_or_insert_with(Instant::now) + GRACE < Instant::now() {
            break;
        }
    }
    let drops = sendpath_host::socket::socket_drops(s.as_fd())
        .ok()
        .map(u64::from);
    Ok((t, drops))
}

/// What the threads left once joined.
struct Ended {
    stats: sendpath::SendStats,
    note: Option<String>,
    integrity: Integrity,
    datagrams: Datagrams,
}

/// Joins the senders, then the receivers; the first error of any thread.
fn join(
    pt: &StreamPoint,
    senders: Vec<JoinHandle<Sent>>,
    receivers: Vec<JoinHandle<Received>>,
) -> anyhow::Result<Ended> {
    let mut first_err = None;
    let (stats, note) = join_senders(senders, "a UDP sender thread", &mut first_err)?;
    let ours = !receivers.is_empty();
    let (mut tally, mut drops) = (Tally::default(), Some(0u64));
    for r in receivers {
        match r
            .join()
            .map_err(|_| anyhow!("a UDP receiver thread panicked"))?
        {
            Ok((t, d)) => {
                tally.merge(&t);
                drops = drops.zip(d).map(|(a, b)| a + b);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let seg = pt.gso.map_or(pt.size, usize::from);
    let sent = stats.bytes / pt.size as u64 * segments(pt.size, seg);
    let received = ours.then_some(tally.datagrams);
    let datagrams = Datagrams {
        sent,
        received,
        lost: received.map(|r| sent.saturating_sub(r)),
        reordered: ours.then_some(tally.reordered),
        receiver_drops: drops.filter(|_| ours),
    };
    let integrity = Integrity {
        bytes_sent: stats.bytes,
        bytes_received: ours.then_some(tally.bytes),
        bytes_verified: tally.verified,
        mismatches: tally.mismatches,
        // Datagrams are checked one by one: no stream offset to name.
        first_mismatch: None,
        bytes_mapped: None,
    };
    Ok(Ended {
        stats,
        note,
        integrity,
        datagrams,
    })
}

/// Whether `strategy` can send UDP datagrams (memory paths; file paths stream a file).
pub fn sends_datagrams(strategy: Strategy) -> bool {
    strategy.source() == sendpath::Source::Memory && strategy != Strategy::Vmsplice
}
