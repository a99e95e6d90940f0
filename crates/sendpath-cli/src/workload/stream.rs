//! `sendpath stream`: one-way bulk transfer, one sender and one receiver per connection.

use super::{receive, send_message, PatternFile, RecvCounters, RecvMode, INTERRUPTED};
use crate::measure::{Meter, Snapshot};
use crate::results::{Integrity, Repeat};
use anyhow::{anyhow, Context};
use sendpath::metrics::SendStats;
use sendpath::{sys, Options, Strategy};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// One point of a stream run.
#[derive(Debug, Clone)]
pub struct StreamPoint {
    pub strategy: Strategy,
    pub size: usize,
    pub threads: usize,
    pub fields: usize,
    pub recv: RecvMode,
    pub duration: Duration,
    pub warmup: Duration,
    /// Send to this address instead of a receiver of our own.
    pub connect: Option<SocketAddr>,
    /// Pin each connection's sender and receiver to these CPUs.
    pub cpus: Option<(usize, usize)>,
    pub opts: Options,
}

/// What one repeat produced.
pub struct StreamOutcome {
    pub repeat: Repeat,
    pub stats: SendStats,
    pub integrity: Integrity,
    pub note: Option<String>,
}

/// Sleeps up to `d`, waking early on Ctrl-C. Returns false if interrupted.
pub fn sleep_unless_interrupted(d: Duration) -> bool {
    let end = Instant::now() + d;
    while Instant::now() < end {
        if INTERRUPTED.load(Ordering::Relaxed) {
            return false;
        }
        std::thread::sleep((end - Instant::now()).min(Duration::from_millis(20)));
    }
    !INTERRUPTED.load(Ordering::Relaxed)
}

fn pin(cpu: Option<usize>) {
    if let Some(c) = cpu {
        // Pinning is best effort: a CPU outside the allowed set leaves the thread unpinned.
        let _ = sys::host::pin_current_thread(c);
    }
}

/// Runs one repeat. `Ok(None)` means Ctrl-C cut it short (nothing to record).
pub fn run_once(
    pt: &StreamPoint,
    file: Option<&PatternFile>,
    hw: &mut Meter,
    cpu_mhz: Option<f64>,
) -> anyhow::Result<Option<StreamOutcome>> {
    let listener = match pt.connect {
        None => Some(TcpListener::bind("127.0.0.1:0").context("binding a loopback listener")?),
        Some(_) => None,
    };
    let target = match (&listener, pt.connect) {
        (Some(l), _) => l.local_addr()?,
        (None, Some(a)) => a,
        (None, None) => unreachable!(),
    };
    let stop = Arc::new(AtomicBool::new(false));
    let mut receivers = Vec::new();
    let mut senders = Vec::new();
    let recv_counters: Vec<Arc<RecvCounters>> = (0..pt.threads).map(|_| Arc::default()).collect();
    let sent: Vec<Arc<AtomicU64>> = (0..pt.threads).map(|_| Arc::default()).collect();
    let file_len = file.map_or(0, |f| f.len);
    for i in 0..pt.threads {
        let tx = TcpStream::connect_timeout(&target, Duration::from_secs(3))
            .with_context(|| format!("--connect {target}: cannot connect"))?;
        tx.set_nodelay(false).ok();
        if let Some(l) = &listener {
            let (rx, _) = l.accept().context("accepting the loopback connection")?;
            let c = recv_counters[i].clone();
            let (mode, size) = (pt.recv, pt.size);
            let cpu = pt.cpus.map(|c| c.1);
            receivers.push(std::thread::spawn(move || {
                pin(cpu);
                receive(rx, mode, &c, size)
            }));
        }
        let mut opts = pt.opts.clone();
        opts.file = file.map(|f| f.file.clone());
        let (stop, sent) = (stop.clone(), sent[i].clone());
        let (strategy, size, fields) = (pt.strategy, pt.size, pt.fields);
        let fill = pt.recv == RecvMode::Verify;
        let cpu = pt.cpus.map(|c| c.0);
        senders.push(std::thread::spawn(
            move || -> anyhow::Result<(SendStats, Option<String>)> {
                pin(cpu);
                let mut p = sendpath::open(strategy, tx, &opts)?;
                let mut off = 0u64;
                let result = (|| {
                    while !stop.load(Ordering::Relaxed) {
                        send_message(p.as_mut(), strategy, size, fields, off, fill, file_len)?;
                        off += size as u64;
                        sent.fetch_add(size as u64, Ordering::Relaxed);
                    }
                    p.finish(Duration::from_secs(2))?;
                    Ok::<(), anyhow::Error>(())
                })();
                let _ = p.socket().shutdown(std::net::Shutdown::Write);
                result.with_context(|| format!("{strategy} sender"))?;
                Ok((p.stats().clone(), p.note().map(String::from)))
            },
        ));
    }
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
    let mut completed = sleep_unless_interrupted(pt.warmup);
    let mut window = None;
    if completed {
        let (s0, b0) = (Snapshot::take(hw), bytes_now());
        completed = sleep_unless_interrupted(pt.duration);
        let (s1, b1) = (Snapshot::take(hw), bytes_now());
        window = Some((s0, s1, b1 - b0));
    }
    stop.store(true, Ordering::Relaxed);
    let mut stats = SendStats::default();
    let mut note = None;
    let mut first_err = None;
    for s in senders {
        match s.join().map_err(|_| anyhow!("a sender thread panicked"))? {
            Ok((st, n)) => {
                stats.merge(&st);
                note = note.or(n);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    let mut integrity = Integrity::default();
    for r in receivers {
        let v = r
            .join()
            .map_err(|_| anyhow!("a receiver thread panicked"))??;
        if pt.recv == RecvMode::Verify {
            integrity.bytes_verified += v.bytes_verified();
            integrity.mismatches += v.mismatches;
        }
    }
    if let Some(e) = first_err {
        return Err(e);
    }
    let (Some((s0, s1, bytes)), true) = (window, completed) else {
        return Ok(None);
    };
    let messages = bytes / pt.size as u64;
    let repeat = s0.window(&s1, bytes, messages, pt.threads, cpu_mhz);
    Ok(Some(StreamOutcome {
        repeat,
        stats,
        integrity,
        note,
    }))
}
