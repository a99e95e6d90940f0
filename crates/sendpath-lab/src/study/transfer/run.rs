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

use crate::cancel::Cancel;
use crate::measure::{process_cpu_ns, thread_cpu_ns};
use crate::results::{Environment, Spread};
use crate::study::sweep::round_order;
use crate::units::fmt_size;
use crate::workload::PatternFile;
use anyhow::{bail, Context};
use sendpath::{Msg, Strategy};
use serde::{Deserialize, Serialize};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, AsRawFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// Version of the transfer results layout.
pub const SCHEMA_VERSION: u32 = 1;

/// The study's file sizes (7 MB .. 1 GB, in its decimal megabytes).
pub const STUDY_SIZES: [u64; 8] = [
    7_000_000,
    21_000_000,
    63_000_000,
    98_000_000,
    200_000_000,
    350_000_000,
    700_000_000,
    1_000_000_000,
];

/// The study's Table 1, milliseconds: file size, "normal" (4 KiB read + send), transferTo
/// (sendfile). Linux 2.6, a disk, Java; set beside the rows measured here.
pub const STUDY_TABLE: [(u64, f64, f64); 8] = [
    (7_000_000, 156.0, 45.0),
    (21_000_000, 337.0, 128.0),
    (63_000_000, 843.0, 387.0),
    (98_000_000, 1320.0, 617.0),
    (200_000_000, 2124.0, 1150.0),
    (350_000_000, 3631.0, 1762.0),
    (700_000_000, 13498.0, 4422.0),
    (1_000_000_000, 18399.0, 8537.0),
];

/// How a file is sent: a file path and, for `read-send`, the bytes per read.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct Method {
    /// The send path (`read-send`, `mmap-send`, `sendfile`, `splice`, `uring-splice`).
    pub strategy: Strategy,
    /// Bytes per `read()` + `send()` (`read-send`); null for paths that take the whole file.
    pub chunk_bytes: Option<usize>,
}

impl Method {
    /// `read-send 4KiB`, `sendfile`.
    pub fn label(&self) -> String {
        match self.chunk_bytes {
            Some(c) => format!("{} {}", self.strategy, fmt_size(c)),
            None => self.strategy.to_string(),
        }
    }

    /// The methods of `strategies`, `read-send` once per chunk size.
    pub fn list(strategies: &[Strategy], chunks: &[usize]) -> anyhow::Result<Vec<Method>> {
        let mut v = Vec::new();
        for &s in strategies {
            if s.source() != sendpath::Source::File {
                bail!("{s} sends from memory; transfer takes the file paths: read-send, mmap-send, sendfile, splice, uring-splice");
            }
            if s == Strategy::ReadSend {
                v.extend(chunks.iter().map(|&c| Method {
                    strategy: s,
                    chunk_bytes: Some(c),
                }));
            } else {
                v.push(Method {
                    strategy: s,
                    chunk_bytes: None,
                });
            }
        }
        Ok(v)
    }
}

/// The page cache state a transfer starts from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Cache {
    /// The whole file in the page cache.
    Warm,
    /// Dropped from the page cache (`posix_fadvise(DONTNEED)`) just before.
    Cold,
}

impl Cache {
    /// `warm`, `cold`.
    pub fn name(self) -> &'static str {
        match self {
            Cache::Warm => "warm",
            Cache::Cold => "cold",
        }
    }

    /// Parses `warm` or `cold`.
    pub fn parse(s: &str) -> Result<Cache, String> {
        match s {
            "warm" => Ok(Cache::Warm),
            "cold" => Ok(Cache::Cold),
            _ => Err(format!(
                "unknown cache state `{s}`: give warm, cold or warm,cold"
            )),
        }
    }
}

/// What the receiver does with the bytes.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Sink {
    /// Dropped in the kernel (`recv(MSG_TRUNC)`).
    Discard,
    /// Read into a buffer.
    Copy,
    /// Read and written to this file (truncated first), `fsync`ed before the acknowledgement
    /// when `fsync`.
    File {
        /// Where.
        path: PathBuf,
        /// `fsync()` before acknowledging.
        fsync: bool,
    },
}

impl Sink {
    /// How a receiver reads for this sink (a file sink reads as `copy`, then writes).
    pub fn recv_mode(&self) -> crate::traffic::RecvMode {
        match self {
            Sink::Discard => crate::traffic::RecvMode::Discard,
            Sink::Copy | Sink::File { .. } => crate::traffic::RecvMode::Copy,
        }
    }

    /// `discard`, `copy`, `file`, `file+fsync`.
    pub fn name(&self) -> &'static str {
        match self {
            Sink::Discard => "discard",
            Sink::Copy => "copy",
            Sink::File { fsync: false, .. } => "file",
            Sink::File { fsync: true, .. } => "file+fsync",
        }
    }
}

/// A transfer run.
#[derive(Debug, Clone)]
pub struct TransferConfig {
    /// File sizes, bytes.
    pub sizes: Vec<u64>,
    /// How each file is sent.
    pub methods: Vec<Method>,
    /// Warm, cold or both.
    pub caches: Vec<Cache>,
    /// What the receiver does.
    pub sink: Sink,
    /// Bytes the receiver asks for per read.
    pub recv_size: usize,
    /// Rounds: each transfers every (size, cache, method) once, in a shuffled order.
    pub rounds: u32,
    /// Seed of the shuffles.
    pub seed: u64,
    /// Pin the sender and the receiver to these CPUs.
    pub cpus: Option<(usize, usize)>,
    /// The longest one transfer may take.
    pub timeout: Duration,
    /// Receive in this namespace (`--topology netns`) instead of on loopback.
    pub netns: Option<std::sync::Arc<crate::topology::Netns>>,
    /// Have `sendpath agent` receive (it acknowledges through its control connection).
    pub agent: Option<crate::remote::AgentTarget>,
}

/// One transfer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct TransferRepeat {
    /// Round (0-based).
    pub round: u32,
    /// From `open()` to the acknowledgement, seconds.
    pub seconds: f64,
    /// File bytes over that time, Gbit/s.
    pub throughput_gbps: f64,
    /// Fraction of the file in the page cache when the clock started.
    pub resident_fraction: Option<f64>,
    /// Sender CPU time over the transfer, milliseconds: the process's CPU time less the
    /// receiver thread's, so the kernel workers io_uring hands a splice to count as sending.
    pub cpu_sender_ms: Option<f64>,
    /// Receiver thread CPU time over the transfer, milliseconds.
    pub cpu_receiver_ms: Option<f64>,
    /// Bytes the receiver got (always the file size, or the run fails).
    pub bytes_received: u64,
}

/// One (size, cache, method) point over its rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferRow {
    /// File size, bytes.
    pub file_bytes: u64,
    /// Warm or cold.
    pub cache: Cache,
    /// How it was sent.
    pub method: Method,
    /// `read-send 4KiB`, `sendfile`, ...
    pub label: String,
    /// Why the path is not the one asked for, if it fell back.
    pub note: Option<String>,
    /// One per round.
    pub repeats: Vec<TransferRepeat>,
    /// Time per transfer, milliseconds, over rounds.
    pub ms: Spread,
    /// Throughput over rounds.
    pub throughput_gbps: Spread,
    /// Sender CPU per transfer, milliseconds (median over rounds); null when not measured.
    pub cpu_sender_ms: Option<f64>,
    /// Receiver CPU per transfer, milliseconds (median over rounds).
    pub cpu_receiver_ms: Option<f64>,
    /// The largest resident fraction at a cold start, or the smallest at a warm one.
    pub resident_fraction: Option<f64>,
    /// Warnings (a cold file that was still cached, a wide spread).
    pub warnings: Vec<String>,
}

impl TransferRow {
    fn summarise(&mut self) {
        self.repeats.sort_by_key(|r| r.round);
        let col = |f: fn(&TransferRepeat) -> Option<f64>| -> Vec<f64> {
            self.repeats.iter().filter_map(f).collect()
        };
        self.ms = Spread::of(&col(|r| Some(r.seconds * 1000.0)));
        self.throughput_gbps = Spread::of(&col(|r| Some(r.throughput_gbps)));
        let med = |v: Vec<f64>| (!v.is_empty()).then(|| Spread::of(&v).median);
        self.cpu_sender_ms = med(col(|r| r.cpu_sender_ms));
        self.cpu_receiver_ms = med(col(|r| r.cpu_receiver_ms));
        let res = col(|r| r.resident_fraction);
        self.resident_fraction = match self.cache {
            Cache::Cold => res.iter().copied().reduce(f64::max),
            Cache::Warm => res.iter().copied().reduce(f64::min),
        };
        self.warnings = self.note.iter().cloned().collect();
        match (self.cache, self.resident_fraction) {
            (Cache::Cold, Some(f)) if f > 0.05 => self.warnings.push(format!(
                "cold: {:.0}% of the file was still in the page cache at the start (a memory filesystem? set TMPDIR to a directory on a disk)",
                f * 100.0
            )),
            (Cache::Warm, Some(f)) if f < 0.95 => self.warnings.push(format!(
                "warm: only {:.0}% of the file was in the page cache at the start (memory pressure?)",
                f * 100.0
            )),
            _ => {}
        }
        if self.repeats.len() > 1 && self.ms.relative_range() > 0.25 {
            self.warnings.push(format!(
                "the time varied by {:.0}% of the median across {} rounds: raise --repeat",
                self.ms.relative_range() * 100.0,
                self.repeats.len()
            ));
        }
    }
}

/// Settings a results file records.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct TransferSettings {
    /// What the receiver did (`discard`, `copy`, `file`, `file+fsync`).
    pub sink: String,
    /// Receiver read size, bytes.
    pub recv_size_bytes: usize,
    /// The filesystem the source files were on.
    pub filesystem: String,
    /// Rounds.
    pub rounds: u32,
    /// Seed of the round order.
    pub seed: u64,
}

/// A whole transfer run: the one typed result its exporters read.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct TransferResults {
    /// [`SCHEMA_VERSION`].
    pub schema_version: u32,
    /// Where and how.
    pub environment: Environment,
    /// The run's settings.
    pub settings: TransferSettings,
    /// One row per (size, cache, method).
    pub rows: Vec<TransferRow>,
}

impl TransferResults {
    /// The row of a point, if measured.
    pub fn row(&self, file_bytes: u64, cache: Cache, method: &Method) -> Option<&TransferRow> {
        self.rows
            .iter()
            .find(|r| r.file_bytes == file_bytes && r.cache == cache && &r.method == method)
    }
}

/// The `read-send 4KiB` method the study's "normal" transfer is.
pub const STUDY_BASELINE: Method = Method {
    strategy: Strategy::ReadSend,
    chunk_bytes: Some(4096),
};

/// `sendfile` (the study's transferTo).
pub const STUDY_ZEROCOPY: Method = Method {
    strategy: Strategy::Sendfile,
    chunk_bytes: None,
};

/// What the receiver of one transfer reports.
struct Received {
    bytes: u64,
    cpu_ns: u64,
}

/// Reads one connection to end of file, doing with the bytes what `sink` says, then
/// acknowledges with one byte.
fn receive_one(
    mut conn: TcpStream,
    sink: &Sink,
    recv_size: usize,
    timeout: Duration,
) -> anyhow::Result<Received> {
    conn.set_read_timeout(Some(timeout)).ok();
    let cpu0 = thread_cpu_ns();
    let bytes = match sink {
        Sink::File { path, fsync } => {
            let mut out = std::fs::File::create(path)
                .with_context(|| format!("--sink-file {}: cannot create it", path.display()))?;
            let mut buf = vec![0u8; recv_size.max(1)];
            let mut bytes = 0u64;
            loop {
                let n = match conn.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => n,
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(e) => return Err(e).context("the receiver's read"),
                };
                out.write_all(&buf[..n])
                    .context("writing the --sink-file (is the disk full?)")?;
                bytes += n as u64;
            }
            if *fsync {
                out.sync_all().context("fsync of the --sink-file")?;
            }
            bytes
        }
        Sink::Discard | Sink::Copy => {
            let c = crate::workload::RecvCounters::default();
            crate::workload::receive(conn.try_clone()?, sink.recv_mode(), &c, recv_size)?;
            c.bytes.load(std::sync::atomic::Ordering::Relaxed)
        }
    };
    let cpu_ns = thread_cpu_ns() - cpu0;
    conn.write_all(b"k")
        .context("the receiver's acknowledgement")?;
    Ok(Received { bytes, cpu_ns })
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

/// The receiving end of one transfer: a thread of ours, or `sendpath agent`.
enum Far {
    Local(std::thread::JoinHandle<anyhow::Result<Received>>),
    Agent(crate::remote::AgentClient),
    /// The agent's report, once it acknowledged.
    Done(Received),
}

impl Far {
    /// Readies a receiver for one connection; the address to send to.
    fn open(listener: &TcpListener, cfg: &TransferConfig) -> anyhow::Result<(Far, SocketAddr)> {
        if let Some(t) = &cfg.agent {
            let mut c = crate::remote::AgentClient::connect(t)?;
            let at = c.receive(t.addr, 1, cfg.sink.recv_mode(), cfg.recv_size, cfg.timeout)?;
            return Ok((Far::Agent(c), at));
        }
        let (sink, recv_size, timeout) = (cfg.sink.clone(), cfg.recv_size, cfg.timeout);
        let cpu_rx = cfg.cpus.map(|c| c.1);
        let l = listener.try_clone()?;
        let h = std::thread::spawn(move || -> anyhow::Result<Received> {
            crate::workload::stream::pin(cpu_rx);
            let (conn, _) = l.accept().context("accepting the transfer's connection")?;
            receive_one(conn, &sink, recv_size, timeout)
        });
        Ok((Far::Local(h), listener.local_addr()?))
    }

    /// Waits for the acknowledgement of the last byte: our receiver's one byte on `sock`, or
    /// the agent's reply to `finish` (sent once it read to end of file).
    fn acknowledged(&mut self, sock: &sendpath::Socket, timeout: Duration) -> anyhow::Result<()> {
        match self {
            Far::Local(_) => {
                let mut s = TcpStream::from(sock.as_fd().try_clone_to_owned()?);
                s.set_read_timeout(Some(timeout)).ok();
                s.read_exact(&mut [0u8; 1])
                    .context("waiting for the receiver's acknowledgement")
            }
            Far::Agent(c) => {
                let (total, _, _) = c.finish()?;
                *self = Far::Done(Received {
                    bytes: total.bytes,
                    cpu_ns: total.user_ns + total.system_ns,
                });
                Ok(())
            }
            Far::Done(_) => Ok(()),
        }
    }
}

/// One transfer of `file` with `method`, and the path's fallback note.
fn transfer_once(
    listener: &TcpListener,
    file: &PatternFile,
    method: &Method,
    cfg: &TransferConfig,
) -> anyhow::Result<(TransferRepeat, Option<String>)> {
    let timeout = cfg.timeout;
    let (mut far, addr) = Far::open(listener, cfg)?;
    let resident = file.resident_fraction();
    // The file is opened again by its descriptor's /proc path: a real open(), timed.
    let path = format!("/proc/self/fd/{}", file.file.as_raw_fd());
    let cpu0 = process_cpu_ns();
    let t0 = Instant::now();
    let mut connected = false;
    let sent = (|| -> anyhow::Result<Option<String>> {
        let f = std::fs::File::open(&path).context("opening the source file")?;
        let sock = TcpStream::connect(addr).context("connecting to the receiver")?;
        connected = true;
        let opts = sendpath::Options {
            file: Some(std::sync::Arc::new(f)),
            ..sendpath::Options::default()
        };
        let mut p = sendpath::open(method.strategy, sock, &opts)?;
        let chunk = method.chunk_bytes.unwrap_or(file.len as usize).max(1) as u64;
        let mut off = 0u64;
        while off < file.len {
            let len = chunk.min(file.len - off) as usize;
            p.send(Msg::File { offset: off, len })?;
            off += len as u64;
        }
        p.finish(timeout)?;
        let note = p.note().map(String::from);
        p.socket()
            .shutdown(std::net::Shutdown::Write)
            .context("half-closing the connection")?;
        far.acknowledged(p.socket(), timeout)?;
        Ok(note)
    })();
    let seconds = t0.elapsed().as_secs_f64();
    let cpu_all = process_cpu_ns() - cpu0;
    if !connected {
        // Our receiver waits in accept(): a connection that closes at once releases it.
        let _ = TcpStream::connect(addr);
    }
    let (got, remote) = match far {
        Far::Local(h) => (
            h.join()
                .map_err(|_| anyhow::anyhow!("the receiver thread panicked"))?,
            false,
        ),
        Far::Done(r) => (Ok(r), true),
        Far::Agent(_) => (Err(anyhow::anyhow!("the agent did not report")), true),
    };
    let note =
        sent.with_context(|| format!("{} of {}", method.label(), fmt_size(file.len as usize)))?;
    let got = got?;
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
        },
        note,
    ))
}

/// Creates the source files (one per size) where cold runs can drop them from the cache.
fn source_files(sizes: &[u64], cold: bool) -> anyhow::Result<Vec<PatternFile>> {
    let dir = if cold {
        crate::workload::cold_file_dir().map_err(|fs| {
            anyhow::anyhow!("cold transfers need the source files on a disk, but the temp dir and /var/tmp are on {fs}: set TMPDIR to a directory on a disk, or give --cache warm")
        })?
    } else {
        None
    };
    sizes
        .iter()
        .map(|&s| PatternFile::create(s, false, dir.as_deref()))
        .collect()
}

impl TransferResults {
    /// Empty results for `cfg`, to be filled by [`run`].
    pub fn new(cfg: &TransferConfig, mut environment: Environment) -> TransferResults {
        environment.topology = cfg.netns.as_ref().map(|n| n.info().clone());
        environment.agent = cfg.agent.as_ref().map(|a| a.addr.to_string());
        TransferResults {
            schema_version: SCHEMA_VERSION,
            environment,
            settings: TransferSettings {
                sink: cfg.sink.name().into(),
                recv_size_bytes: cfg.recv_size,
                filesystem: String::new(),
                rounds: cfg.rounds,
                seed: cfg.seed,
            },
            rows: Vec::new(),
        }
    }
}

/// Runs every (size, cache, method) `cfg.rounds` times into `results`, rounds interleaved, the
/// methods of one (size, cache) back to back in a shuffled order. `on_window` hears each
/// transfer. On an error or Ctrl-C, what was measured stays in `results`.
pub fn run(
    cfg: &TransferConfig,
    results: &mut TransferResults,
    cancel: &Cancel,
    mut on_window: impl FnMut(&TransferRow, &TransferRepeat),
) -> anyhow::Result<()> {
    if cfg.sizes.is_empty() || cfg.methods.is_empty() || cfg.caches.is_empty() {
        bail!("nothing to transfer: give at least one size, path and cache state");
    }
    if cfg.agent.is_some() && matches!(cfg.sink, Sink::File { .. }) {
        bail!("--sink-file writes on this host: it cannot go with --agent (the agent copies or discards)");
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
    for round in 0..cfg.rounds {
        for i in round_order(&blocks, cfg.seed, round) {
            if cancel.is_cancelled() {
                return Ok(());
            }
            let (fi, cache, m) = points[i];
            let file = &files[fi];
            match cache {
                Cache::Cold => file.make_cold()?,
                Cache::Warm => warm_up(file)?,
            }
            let (mut rep, note) = transfer_once(&listener, file, &m, cfg)
                .with_context(|| format!("round {}", round + 1))?;
            rep.round = round;
            let row = match results
                .rows
                .iter()
                .position(|r| r.file_bytes == file.len && r.cache == cache && r.method == m)
            {
                Some(j) => &mut results.rows[j],
                None => {
                    results.rows.push(TransferRow {
                        file_bytes: file.len,
                        cache,
                        method: m,
                        label: m.label(),
                        note,
                        repeats: Vec::new(),
                        ms: Spread::default(),
                        throughput_gbps: Spread::default(),
                        cpu_sender_ms: None,
                        cpu_receiver_ms: None,
                        resident_fraction: None,
                        warnings: Vec::new(),
                    });
                    results.rows.last_mut().expect("pushed")
                }
            };
            row.repeats.push(rep.clone());
            row.summarise();
            on_window(row, &rep);
        }
    }
    Ok(())
}

/// `1 - sendfile / read-send 4KiB` per round: the fraction of the time sendfile saves.
pub fn saved_per_round(base: &TransferRow, other: &TransferRow) -> Option<Spread> {
    let v: Vec<f64> = base
        .repeats
        .iter()
        .filter_map(|b| {
            let o = other.repeats.iter().find(|o| o.round == b.round)?;
            (b.seconds > 0.0).then(|| 1.0 - o.seconds / b.seconds)
        })
        .collect();
    (!v.is_empty()).then(|| Spread::of(&v))
}

/// The route of the transfers, in words.
fn route(env: &Environment) -> String {
    match (&env.agent, &env.topology) {
        (Some(a), _) => format!("received by `sendpath agent` at {a}"),
        (None, Some(t)) => format!(
            "through a veth pair into namespace {}{}",
            t.namespace,
            t.rate_bits_per_s
                .map_or(String::new(), |b| format!(", {:.3} Gbit/s", b as f64 / 1e9))
        ),
        (None, None) => "loopback".into(),
    }
}

/// `7 MB` for the study's decimal sizes, `64 MiB` otherwise.
pub fn size_label(b: u64) -> String {
    if b.is_multiple_of(1_000_000) && b >= 1_000_000 {
        if b.is_multiple_of(1_000_000_000) {
            format!("{} GB", b / 1_000_000_000)
        } else {
            format!("{} MB", b / 1_000_000)
        }
    } else {
        fmt_size(b as usize)
    }
}

/// The study's Table 1 layout, one table per cache state: time per transfer for every method,
/// the share `sendfile` saves over 4 KiB `read-send` (per round), and the study's figures.
pub fn summary(r: &TransferResults) -> String {
    let mut out = String::new();
    let mut methods: Vec<Method> = r.rows.iter().map(|x| x.method).collect();
    methods.sort();
    methods.dedup();
    let mut sizes: Vec<u64> = r.rows.iter().map(|x| x.file_bytes).collect();
    sizes.sort();
    sizes.dedup();
    let mut caches: Vec<Cache> = r.rows.iter().map(|x| x.cache).collect();
    caches.sort();
    caches.dedup();
    let has = |m: &Method| methods.contains(m);
    for cache in caches {
        out += &format!(
            "\n### {} file, receiver {}: time per transfer, ms, median (min..max) of {} rounds\n\n",
            cache.name(),
            r.settings.sink,
            r.settings.rounds
        );
        out += "| file size |";
        for m in &methods {
            out += &format!(" {} |", m.label());
        }
        let compare = has(&STUDY_BASELINE) && has(&STUDY_ZEROCOPY);
        if compare {
            out += " sendfile saves vs read-send 4KiB (per round) |";
        }
        out += " study: normal / transferTo, ms (saved) |\n|---|";
        for _ in &methods {
            out += "---|";
        }
        if compare {
            out += "---|";
        }
        out += "---|\n";
        for &size in &sizes {
            out += &format!("| {} |", size_label(size));
            for m in &methods {
                out += &match r.row(size, cache, m) {
                    Some(x) => format!(" {:.0} ({:.0}..{:.0}) |", x.ms.median, x.ms.min, x.ms.max),
                    None => " null |".into(),
                };
            }
            if compare {
                let saved = r
                    .row(size, cache, &STUDY_BASELINE)
                    .zip(r.row(size, cache, &STUDY_ZEROCOPY))
                    .and_then(|(b, o)| saved_per_round(b, o));
                out += &match saved {
                    Some(s) => format!(
                        " {:.0}% ({:.0}..{:.0}) |",
                        s.median * 100.0,
                        s.min * 100.0,
                        s.max * 100.0
                    ),
                    None => " null |".into(),
                };
            }
            out += &match STUDY_TABLE.iter().find(|t| t.0 == size) {
                Some((_, n, z)) => format!(" {n:.0} / {z:.0} ({:.0}%) |\n", (1.0 - z / n) * 100.0),
                None => " - |\n".into(),
            };
        }
        out += &format!(
            "\nCPU per transfer, ms, sender (process less receiver) / receiver thread (medians), {} file:\n\n| file size |",
            cache.name()
        );
        for m in &methods {
            out += &format!(" {} |", m.label());
        }
        out += "\n|---|";
        for _ in &methods {
            out += "---|";
        }
        out += "\n";
        for &size in &sizes {
            out += &format!("| {} |", size_label(size));
            for m in &methods {
                let cell = r.row(size, cache, m).map(|x| {
                    let f = |v: Option<f64>| v.map_or("null".into(), |v| format!("{v:.0}"));
                    format!(" {} / {} |", f(x.cpu_sender_ms), f(x.cpu_receiver_ms))
                });
                out += &cell.unwrap_or_else(|| " null |".into());
            }
            out += "\n";
        }
    }
    out += &format!(
        "\nSource files on {}; each transfer timed from open() to the receiver's acknowledgement of the last byte, over a fresh connection ({}). The study's figures: Linux 2.6, Java, files on a disk, receiver reading 4 KiB at a time.\n",
        r.settings.filesystem,
        route(&r.environment)
    );
    let warned: Vec<String> = r
        .rows
        .iter()
        .flat_map(|x| {
            x.warnings.iter().map(move |w| {
                format!(
                    "- {} {} {}: {w}",
                    size_label(x.file_bytes),
                    x.cache.name(),
                    x.label
                )
            })
        })
        .collect();
    if !warned.is_empty() {
        out += "\nWarnings:\n";
        out += &warned.join("\n");
        out += "\n";
    }
    out
}

/// One CSV line per transfer.
pub fn write_csv(r: &TransferResults, path: &std::path::Path) -> anyhow::Result<()> {
    let mut w =
        csv::Writer::from_path(path).with_context(|| format!("writing {}", path.display()))?;
    w.write_record([
        "file_bytes",
        "cache",
        "method",
        "strategy",
        "chunk_bytes",
        "sink",
        "round",
        "seconds",
        "throughput_gbps",
        "resident_fraction",
        "cpu_sender_ms",
        "cpu_receiver_ms",
        "bytes_received",
    ])?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    for row in &r.rows {
        for x in &row.repeats {
            w.write_record([
                row.file_bytes.to_string(),
                row.cache.name().into(),
                row.label.clone(),
                row.method.strategy.to_string(),
                row.method
                    .chunk_bytes
                    .map_or(String::new(), |c| c.to_string()),
                r.settings.sink.clone(),
                x.round.to_string(),
                x.seconds.to_string(),
                x.throughput_gbps.to_string(),
                opt(x.resident_fraction),
                opt(x.cpu_sender_ms),
                opt(x.cpu_receiver_ms),
                x.bytes_received.to_string(),
            ])?;
        }
    }
    w.flush()?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn read_send_takes_each_chunk_and_memory_paths_are_refused() {
        let m = Method::list(&[Strategy::ReadSend, Strategy::Sendfile], &[4096, 65536]).unwrap();
        let labels: Vec<String> = m.iter().map(Method::label).collect();
        assert_eq!(labels, ["read-send 4KiB", "read-send 64KiB", "sendfile"]);
        let e = Method::list(&[Strategy::Copy], &[4096]).unwrap_err();
        assert!(e.to_string().contains("file paths"), "{e}");
    }

    #[test]
    fn saved_pairs_rounds() {
        let row = |secs: &[f64]| TransferRow {
            file_bytes: 1,
            cache: Cache::Warm,
            method: STUDY_BASELINE,
            label: String::new(),
            note: None,
            repeats: secs
                .iter()
                .enumerate()
                .map(|(i, &s)| TransferRepeat {
                    round: i as u32,
                    seconds: s,
                    ..Default::default()
                })
                .collect(),
            ms: Spread::default(),
            throughput_gbps: Spread::default(),
            cpu_sender_ms: None,
            cpu_receiver_ms: None,
            resident_fraction: None,
            warnings: vec![],
        };
        let s = saved_per_round(&row(&[1.0, 2.0, 4.0]), &row(&[0.5, 0.5, 3.0])).unwrap();
        assert_eq!((s.min, s.median, s.max), (0.25, 0.5, 0.75));
        assert_eq!(size_label(7_000_000), "7 MB");
        assert_eq!(size_label(1_000_000_000), "1 GB");
    }
}
