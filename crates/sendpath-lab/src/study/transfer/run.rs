//! `sendpath transfer` and the `file-transfer` preset: whole files, each sent over a fresh
//! connection, timed from opening the file to the receiver's acknowledgement of the last byte
//! (what a file server, a backup tool or an object store does), warm or cold, with the
//! receiver discarding, copying, or writing to a file.
//!
//! One transfer: (cold) drop the file from the page cache, or (warm) read it into the cache;
//! record the resident fraction (`mincore`); start the clock; `open()` the file, connect, send
//! it whole with the path (`read-send` in `chunk`-sized reads, the others as one message the
//! path loops over), half-close; the receiver reads to end of file (and writes, and fsyncs
//! when asked), then answers one byte; stop the clock when it arrives. The receiver's CPU is
//! its thread's CPU time; the sender's is the process's less the receiver's, so the io-wq
//! workers io_uring hands file splices to are counted.
//!
//! System calls are counted in one more transfer of each point after the timed rounds, not in
//! the timed ones: the kernel's counter slows every system call while it is open, read-send's
//! thousands far more than sendfile's few (read-send 4 KiB ran at 0.87 of its uncounted speed
//! on the project's machine, sendfile unchanged), which would tilt the study's comparison.

use super::{Cache, Method, Sink, TransferConfig, TransferRepeat, TransferResults, TransferRow};
use crate::cancel::Cancel;
use crate::measure::{grew, process_cpu_ns, thread_context_switches, thread_cpu_ns, SyscallCount};
use crate::setting::{invalid, About, Setting};
use crate::study::rows::round_order;
use crate::units::fmt_size;
use crate::window::ContextSwitches;
use crate::window::KernelCopied;
use crate::workload::PatternFile;
use anyhow::{bail, Context};
use sendpath::Msg;
use sendpath_host::copies::{Copied, CopyCounter};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

/// What the receiver of one transfer reports.
struct Received {
    bytes: u64,
    cpu_ns: u64,
    /// Our receiving thread's context switches over the transfer.
    switches: Option<ContextSwitches>,
    /// Its system calls.
    syscalls: Option<u64>,
}

/// Reads one connection to end of file, doing with the bytes what `sink` says, then
/// acknowledges with one byte.
fn receive_one(
    mut conn: TcpStream,
    sink: &Sink,
    recv_size: usize,
    timeout: Duration,
    count: bool,
) -> anyhow::Result<Received> {
    conn.set_read_timeout(Some(timeout)).ok();
    let cpu0 = thread_cpu_ns();
    let sw0 = thread_context_switches();
    let mut calls = count.then(SyscallCount::start);
    let bytes = match sink {
        Sink::File { path, fsync } => {
            let mut out = std::fs::File::create(path).about(Setting::SinkFile, || {
                format!("{}: cannot create it", path.display())
            })?;
            let mut buf = vec![0u8; recv_size.max(1)];
            let mut bytes = 0u64;
            loop {
                let n = match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e).context("the receiver's read"),
                };
                out.write_all(&buf[..n]).about(Setting::SinkFile, || {
                    "writing the sink file (is the disk full?)".into()
                })?;
                bytes += n as u64;
            }
            if *fsync {
                out.sync_all()
                    .about(Setting::SinkFile, || "fsync of the sink file".into())?;
            }
            bytes
        }
        Sink::Discard | Sink::Copy => {
            let c = crate::workload::RecvCounters::default();
            crate::workload::receive(&conn, sink.recv_mode(), &c, recv_size, None)?;
            c.bytes.load(std::sync::atomic::Ordering::Relaxed)
        }
    };
    let syscalls = calls.as_mut().and_then(SyscallCount::since_start);
    let cpu_ns = thread_cpu_ns() - cpu0;
    let switches = thread_context_switches().zip(sw0).map(|(b, a)| b.since(a));
    conn.write_all(b"k")
        .context("the receiver's acknowledgement")?;
    Ok(Received {
        bytes,
        cpu_ns,
        switches,
        syscalls,
    })
}

/// Reads the file into the page cache (for a warm start).
fn warm_up(f: &PatternFile) -> anyhow::Result<()> {
    if f.resident_fraction().is_some_and(|r| r >= 0.999) {
        return Ok(());
    }
    let mut buf = vec![0u8; 1 << 20];
    let mut off = 0u64;
    while off < f.len {
        let n = std::os::unix::fs::FileExt::read_at(&*f.file, &mut buf, off)
            .context("reading the source file into the page cache")?;
        if n == 0 {
            break;
        }
        off += n as u64;
    }
    Ok(())
}

/// The receiving end of one transfer: a thread of ours (and its thread id), or `sendpath
/// agent`.
enum Far {
    Local(std::thread::JoinHandle<anyhow::Result<Received>>, i32),
    Agent(crate::remote::AgentClient),
    /// The agent's report, once it acknowledged.
    Done(Received),
}

impl Far {
    /// Readies a receiver for one connection, counting its system calls when `count`; the
    /// address to send to.
    fn open(
        listener: &TcpListener,
        cfg: &TransferConfig,
        count: bool,
    ) -> anyhow::Result<(Far, SocketAddr)> {
        if let Some(t) = &cfg.agent {
            let mut c = crate::remote::AgentClient::connect(t)?;
            let at = c.receive(t.addr, 1, cfg.sink.recv_mode(), cfg.recv_size, cfg.timeout)?;
            return Ok((Far::Agent(c), at));
        }
        let (sink, recv_size, timeout) = (cfg.sink.clone(), cfg.recv_size, cfg.timeout);
        let cpu_rx = cfg.cpus.map(|c| c.1);
        let l = listener.try_clone()?;
        let (tid_tx, tid_rx) = std::sync::mpsc::channel();
        let h = std::thread::spawn(move || -> anyhow::Result<Received> {
            let _ = tid_tx.send(sendpath_host::thread::gettid());
            crate::workload::stream::pin(cpu_rx);
            let (conn, _) = l.accept().context("accepting the transfer's connection")?;
            receive_one(conn, &sink, recv_size, timeout, count)
        });
        let tid = tid_rx.recv().context("the receiver thread did not start")?;
        Ok((Far::Local(h, tid), listener.local_addr()?))
    }

    /// Waits for the acknowledgement of the last byte: our receiver's one byte on `sock`, or
    /// the agent's reply to `finish` (sent once it read to end of file).
    fn acknowledged(&mut self, sock: &sendpath::Socket, timeout: Duration) -> anyhow::Result<()> {
        match self {
            Far::Local(..) => {
                let mut s = TcpStream::from(sock.as_fd().try_clone_to_owned()?);
                s.set_read_timeout(Some(timeout)).ok();
                s.read_exact(&mut [0u8; 1])
                    .context("waiting for the receiver's acknowledgement")
            }
            Far::Agent(c) => {
                let total = c.finish()?.total;
                *self = Far::Done(Received {
                    bytes: total.bytes,
                    cpu_ns: total.user_ns + total.system_ns,
                    switches: None,
                    syscalls: None,
                });
                Ok(())
            }
            Far::Done(_) => Ok(()),
        }
    }
}

/// The copy counter watching one transfer's sending thread (this one) and receiving thread,
/// with the sender's counts at the start (the receiver's thread is new, at 0).
struct CopyWatch<'a> {
    c: &'a mut CopyCounter,
    sender: i32,
    receiver: i32,
    start: Copied,
    deferred: Option<u64>,
}

impl<'a> CopyWatch<'a> {
    fn start(c: &'a mut CopyCounter, far: &Far) -> Option<CopyWatch<'a>> {
        let Far::Local(_, receiver) = *far else {
            return None;
        };
        let sender = sendpath_host::thread::gettid();
        c.watch(&[sender, receiver]).ok()?;
        Some(CopyWatch {
            start: c.read(sender)?,
            deferred: c.deferred(),
            c,
            sender,
            receiver,
        })
    }

    /// What each thread copied since the start, each direction null where its counter did
    /// not attach.
    fn end(self) -> Option<KernelCopied> {
        let (s, r) = (self.c.read(self.sender)?, self.c.read(self.receiver)?);
        Some(KernelCopied {
            from_user_sender: grew(self.start.from_user, s.from_user),
            to_user_sender: grew(self.start.to_user, s.to_user),
            to_user_receiver: r.to_user,
            from_user_receiver: r.from_user,
            deferred: grew(self.deferred, self.c.deferred()),
        })
    }
}

/// One transfer of `file` with `method`, its system calls counted when `count` (and the
/// kernel's copies, when `copies` is given), and the path's fallback note.
fn transfer_once(
    listener: &TcpListener,
    file: &PatternFile,
    method: &Method,
    cfg: &TransferConfig,
    (count, copies): (bool, Option<&mut CopyCounter>),
) -> anyhow::Result<(TransferRepeat, Option<String>)> {
    let (mut far, addr) = Far::open(listener, cfg, count)?;
    let watch = copies.and_then(|c| CopyWatch::start(c, &far));
    let resident = file.resident_fraction();
    // The file is opened again by its descriptor's /proc path: a real open(), timed.
    let path = format!("/proc/self/fd/{}", file.file.as_raw_fd());
    let cpu0 = process_cpu_ns();
    let sw0 = thread_context_switches();
    let mut calls = count.then(SyscallCount::start);
    let t0 = Instant::now();
    let mut connected = false;
    let sent = send_file(&path, addr, method, file.len, cfg, &mut far, &mut connected);
    let seconds = t0.elapsed().as_secs_f64();
    let syscalls_sender = calls.as_mut().and_then(SyscallCount::since_start);
    let cpu_all = process_cpu_ns() - cpu0;
    let switches_sender = thread_context_switches().zip(sw0).map(|(b, a)| b.since(a));
    if !connected {
        // Our receiver waits in accept(): a connection that closes at once releases it.
        let _ = TcpStream::connect(addr);
    }
    let what = || format!("{} of {}", method.label(), fmt_size(file.len as usize));
    let (note, got, remote) = settle(far, sent, what)?;
    let kernel_copied = watch.and_then(CopyWatch::end);
    if got.bytes != file.len {
        bail!(
            "{}: the receiver got {} bytes of a {}-byte file",
            method.label(),
            got.bytes,
            file.len
        );
    }
    // Our receiver thread is part of this process; an agent's is not.
    let local_rx = if remote { 0 } else { got.cpu_ns };
    Ok((
        TransferRepeat {
            round: 0,
            seconds,
            throughput_gbps: file.len as f64 * 8.0 / seconds / 1e9,
            resident_fraction: resident,
            cpu_sender_ms: Some(cpu_all.saturating_sub(local_rx) as f64 / 1e6),
            cpu_receiver_ms: Some(got.cpu_ns as f64 / 1e6),
            bytes_received: got.bytes,
            roles: crate::window::RoleCounts {
                switches_sender,
                switches_receiver: got.switches,
                syscalls_sender,
                syscalls_receiver: got.syscalls,
                kernel_copied,
            },
        },
        note,
    ))
}

/// Opens the file at `path`, connects to `addr` (with the run's congestion control; sets
/// `connected`), sends all `len` bytes by `method`, half-closes and waits for the far end's
/// acknowledgement; the path's fallback note.
fn send_file(
    path: &str,
    addr: std::net::SocketAddr,
    method: &Method,
    len: u64,
    cfg: &TransferConfig,
    far: &mut Far,
    connected: &mut bool,
) -> anyhow::Result<Option<String>> {
    let f = std::fs::File::open(path).context("opening the source file")?;
    let sock = TcpStream::connect(addr).context("connecting to the receiver")?;
    *connected = true;
    crate::workload::congestion::apply(&sock, cfg.congestion.as_deref())?;
    let opts = sendpath::Options {
        file: Some(std::sync::Arc::new(f)),
        ..sendpath::Options::default()
    };
    let mut p = sendpath::open(method.strategy, sock, &opts)?;
    let chunk = method.chunk_bytes.unwrap_or(len as usize).max(1) as u64;
    let mut off = 0u64;
    while off < len {
        let n = chunk.min(len - off) as usize;
        p.send(Msg::File {
            offset: off,
            len: n,
        })?;
        off += n as u64;
    }
    p.finish(cfg.timeout)?;
    let note = p.note().map(String::from);
    p.socket()
        .shutdown(std::net::Shutdown::Write)
        .context("half-closing the connection")?;
    far.acknowledged(p.socket(), cfg.timeout)?;
    Ok(note)
}

/// The far end's side of a transfer once the sender is done: what the sender noted, what the
/// receiver got, and whether the receiver was remote. When both ends failed, the receiver's
/// error is the cause (the sender saw its effect, a reset).
fn settle(
    far: Far,
    sent: anyhow::Result<Option<String>>,
    what: impl Fn() -> String,
) -> anyhow::Result<(Option<String>, Received, bool)> {
    let (got, remote) = match far {
        Far::Local(h, _) => (
            h.join()
                .map_err(|_| anyhow::anyhow!("the receiver thread panicked"))?,
            false,
        ),
        Far::Done(r) => (Ok(r), true),
        Far::Agent(_) => (Err(anyhow::anyhow!("the agent did not report")), true),
    };
    match (sent, got) {
        (Err(tx), Err(rx)) => Err(rx.context(format!(
            "{}: the receiver failed (the sender saw: {tx:#})",
            what()
        ))),
        (sent, got) => Ok((sent.with_context(&what)?, got?, remote)),
    }
}

/// Creates the source files (one per size) where cold runs can drop them from the cache.
fn source_files(sizes: &[u64], cold: bool) -> anyhow::Result<Vec<PatternFile>> {
    let dir = if cold {
        crate::workload::cold_file_dir().map_err(|fs| {
            invalid(Setting::Cache, format!("cold transfers need the source files on a disk, but the temp dir and /var/tmp are on {fs}: set TMPDIR to a directory on a disk, or transfer warm files"))
        })?
    } else {
        None
    };
    sizes
        .iter()
        .map(|&s| PatternFile::create(s, false, dir.as_deref()))
        .collect()
}

/// Runs every (size, cache, method) `cfg.rounds` times into `results`, rounds interleaved, the
/// methods of one (size, cache) back to back in a shuffled order; then, where the kernel lets
/// system calls be counted, once more each with them counted ([`TransferRow::counted`]).
/// `on_window` hears each transfer. On an error or Ctrl-C, what was measured stays in
/// `results`.
pub fn run(
    cfg: &TransferConfig,
    results: &mut TransferResults,
    cancel: &Cancel,
    mut on_window: impl FnMut(&TransferRow, &TransferRepeat, Pass),
) -> anyhow::Result<()> {
    if cfg.sizes.is_empty() || cfg.methods.is_empty() || cfg.caches.is_empty() {
        bail!("nothing to transfer: give at least one size, path and cache state");
    }
    if cfg.agent.is_some() && matches!(cfg.sink, Sink::File { .. }) {
        return Err(invalid(
            Setting::SinkFile,
            "the sink file is written on this host, and the agent receives elsewhere (it copies or discards)",
        ));
    }
    let files = source_files(&cfg.sizes, cfg.caches.contains(&Cache::Cold))?;
    results.settings.filesystem = files[0].filesystem.clone();
    let listener = match &cfg.netns {
        Some(ns) => ns.listen()?,
        None => TcpListener::bind("127.0.0.1:0").context("binding a loopback listener")?,
    };
    crate::workload::stream::pin(cfg.cpus.map(|c| c.0));
    let mut points = Vec::new();
    for (fi, _) in cfg.sizes.iter().enumerate() {
        for &cache in &cfg.caches {
            for m in &cfg.methods {
                points.push((fi, cache, *m));
            }
        }
    }
    let blocks: Vec<(usize, Cache)> = points.iter().map(|p| (p.0, p.1)).collect();
    let counted = results.counts_syscalls().then_some(cfg.rounds);
    // The kernel's copies are counted in the untimed pass too, where our receiver can be
    // watched.
    let mut copies = None;
    if counted.is_some() && cfg.agent.is_none() {
        let (c, states) = crate::probe::open_copy_counter();
        copies = c;
        results.environment.copy_counters = Some(states);
    }
    for round in (0..cfg.rounds).chain(counted) {
        let pass = if round < cfg.rounds {
            Pass::Timed
        } else {
            Pass::Counted
        };
        for i in round_order(&blocks, cfg.seed, round) {
            if cancel.is_cancelled() {
                results.interrupted = true;
                return Ok(());
            }
            let (fi, cache, m) = points[i];
            let file = &files[fi];
            match cache {
                Cache::Cold => file.make_cold()?,
                Cache::Warm => warm_up(file)?,
            }
            let counting = pass == Pass::Counted;
            let watch = (counting, copies.as_mut().filter(|_| counting));
            let (mut rep, note) =
                transfer_once(&listener, file, &m, cfg, watch).with_context(|| match pass {
                    Pass::Timed => format!("round {}", round + 1),
                    Pass::Counted => "the transfer that counts system calls".into(),
                })?;
            rep.round = round;
            let row = row_of(results, file.len, cache, m, note);
            match pass {
                Pass::Timed => row.repeats.push(rep.clone()),
                Pass::Counted => row.counted = Some(rep.clone()),
            }
            row.summarise();
            on_window(row, &rep, pass);
        }
    }
    Ok(())
}

/// Which pass a transfer belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pass {
    /// A timed round: system calls not counted.
    Timed,
    /// The transfer after the rounds that counts system calls; its time is not a round's.
    Counted,
}

/// The row of a point, made empty the first time.
fn row_of(
    results: &mut TransferResults,
    file_bytes: u64,
    cache: Cache,
    m: Method,
    note: Option<String>,
) -> &mut TransferRow {
    let at = results
        .rows
        .iter()
        .position(|r| r.file_bytes == file_bytes && r.cache == cache && r.method == m);
    let j = at.unwrap_or_else(|| {
        results
            .rows
            .push(TransferRow::empty(file_bytes, cache, m, note));
        results.rows.len() - 1
    });
    &mut results.rows[j]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::transfer::{saved_per_round, size_label, STUDY_BASELINE};
    use sendpath::Strategy;

    #[test]
    fn read_send_takes_each_chunk_and_memory_paths_are_refused() {
        let m = Method::list(&[Strategy::ReadSend, Strategy::Sendfile], &[4096, 65536]).unwrap();
        let labels: Vec<String> = m.iter().map(Method::label).collect();
        assert_eq!(labels, ["read-send 4KiB", "read-send 64KiB", "sendfile"]);
        let e = Method::list(&[Strategy::Copy], &[4096]).unwrap_err();
        assert!(e.to_string().contains("file paths"), "{e}");
    }

    #[test]
    fn system_calls_and_time_come_from_their_own_passes() {
        let rep = |round, seconds, calls| TransferRepeat {
            round,
            seconds,
            roles: crate::window::RoleCounts {
                syscalls_sender: calls,
                ..Default::default()
            },
            ..Default::default()
        };
        let mut row = TransferRow {
            repeats: vec![rep(0, 1.0, None), rep(1, 3.0, None)],
            ..TransferRow::empty(1, Cache::Warm, STUDY_BASELINE, None)
        };
        row.summarise();
        assert_eq!(row.syscalls_sender, None);
        row.counted = Some(rep(2, 50.0, Some(1234)));
        row.summarise();
        assert_eq!(row.syscalls_sender, Some(1234.0));
        // The counted transfer's slower time is no round's.
        assert_eq!((row.ms.min, row.ms.max), (1000.0, 3000.0));
        assert_eq!(row.repeats.len(), 2);
    }

    #[test]
    fn saved_pairs_rounds() {
        let row = |secs: &[f64]| TransferRow {
            repeats: secs
                .iter()
                .enumerate()
                .map(|(i, &s)| TransferRepeat {
                    round: i as u32,
                    seconds: s,
                    ..Default::default()
                })
                .collect(),
            ..TransferRow::empty(1, Cache::Warm, STUDY_BASELINE, None)
        };
        let s = saved_per_round(&row(&[1.0, 2.0, 4.0]), &row(&[0.5, 0.5, 3.0])).unwrap();
        assert_eq!((s.min, s.median, s.max), (0.25, 0.5, 0.75));
        assert_eq!(size_label(7_000_000), "7 MB");
        assert_eq!(size_label(1_000_000_000), "1 GB");
    }
}
