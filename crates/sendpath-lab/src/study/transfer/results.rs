//! The file-transfer study's results file, `transfer-results.json`.

use super::{Cache, Method, TransferConfig};
use crate::window::{ContextSwitches, Environment, Spread};
use serde::{Deserialize, Serialize};

/// Version of the transfer results layout.
pub const SCHEMA_VERSION: u32 = 1;

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
    /// The sending and our receiving thread's context switches and system calls over the
    /// transfer (the receiver's null when it is remote; the reason system calls are null is
    /// `syscalls_unavailable`).
    #[serde(flatten)]
    pub roles: crate::window::RoleCounts,
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
    /// Context switches per transfer (voluntary + involuntary), sender and receiver threads,
    /// medians over rounds; null when not read.
    #[serde(default)]
    pub switches_sender: Option<f64>,
    /// The receiver thread's.
    #[serde(default)]
    pub switches_receiver: Option<f64>,
    /// System calls per transfer, sender and receiver threads, from [`TransferRow::counted`];
    /// null when not counted.
    #[serde(default)]
    pub syscalls_sender: Option<f64>,
    /// The receiver thread's.
    #[serde(default)]
    pub syscalls_receiver: Option<f64>,
    /// One more transfer after the rounds, the only one whose system calls are counted: the
    /// kernel's counter slows every call while it is open, so a path that makes many (read-send
    /// in small chunks) would lose time to it that one making few (sendfile) does not. Its time
    /// is in no spread above; its `round` is the number of rounds. Null when system calls
    /// cannot be counted, or the run stopped before.
    #[serde(default)]
    pub counted: Option<TransferRepeat>,
    /// What the kernel copied per file byte and in total, in [`TransferRow::counted`] (the
    /// environment's `copy_counters` say which counters attached); null when not counted.
    #[serde(default)]
    pub kernel_copies: Option<crate::window::KernelCopies>,
    /// Warnings (a cold file that was still cached, a wide spread).
    pub warnings: Vec<String>,
}

impl TransferRow {
    /// A point with nothing measured yet.
    pub(crate) fn empty(
        file_bytes: u64,
        cache: Cache,
        method: Method,
        note: Option<String>,
    ) -> TransferRow {
        TransferRow {
            file_bytes,
            cache,
            method,
            label: method.label(),
            note,
            repeats: Vec::new(),
            ms: Spread::default(),
            throughput_gbps: Spread::default(),
            cpu_sender_ms: None,
            cpu_receiver_ms: None,
            resident_fraction: None,
            switches_sender: None,
            switches_receiver: None,
            syscalls_sender: None,
            syscalls_receiver: None,
            counted: None,
            kernel_copies: None,
            warnings: Vec::new(),
        }
    }

    pub(crate) fn summarise(&mut self) {
        self.repeats.sort_by_key(|r| r.round);
        let col = |f: fn(&TransferRepeat) -> Option<f64>| -> Vec<f64> {
            self.repeats.iter().filter_map(f).collect()
        };
        self.ms = Spread::of(&col(|r| Some(r.seconds * 1000.0)));
        self.throughput_gbps = Spread::of(&col(|r| Some(r.throughput_gbps)));
        let med = |v: Vec<f64>| (!v.is_empty()).then(|| Spread::of(&v).median);
        self.cpu_sender_ms = med(col(|r| r.cpu_sender_ms));
        self.cpu_receiver_ms = med(col(|r| r.cpu_receiver_ms));
        self.switches_sender = med(col(|r| total_switches(r.roles.switches_sender)));
        self.switches_receiver = med(col(|r| total_switches(r.roles.switches_receiver)));
        let counted = self.counted.as_ref().map(|c| c.roles);
        self.syscalls_sender = counted.and_then(|c| c.syscalls_sender).map(|n| n as f64);
        self.syscalls_receiver = counted.and_then(|c| c.syscalls_receiver).map(|n| n as f64);
        self.kernel_copies = self.counted.as_ref().and_then(|c| {
            crate::window::KernelCopies::over(&[(c.bytes_received, c.roles.kernel_copied?)])
        });
        let res = col(|r| r.resident_fraction);
        self.resident_fraction = match self.cache {
            Cache::Cold => res.iter().copied().reduce(f64::max),
            Cache::Warm => res.iter().copied().reduce(f64::min),
        };
        self.warnings = self.note.iter().cloned().collect();
        match (self.cache, self.resident_fraction) {
            (Cache::Cold, Some(f)) if f > 0.05 => self.warnings.push(format!(
                "cold: {} of the file was still in the page cache at the start (a memory filesystem? set TMPDIR to a directory on a disk)",
                crate::units::percent(f)
            )),
            (Cache::Warm, Some(f)) if f < 0.95 => self.warnings.push(format!(
                "warm: only {} of the file was in the page cache at the start (memory pressure?)",
                crate::units::percent(f)
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

/// Voluntary and involuntary switches together.
fn total_switches(c: Option<ContextSwitches>) -> Option<f64> {
    c.map(|c| (c.voluntary + c.involuntary) as f64)
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
    /// TCP congestion control of each transfer's connection: `--congestion`, else the host's
    /// default. `bbr` paces each connection (on loopback, with a timer). Null when unknown.
    #[serde(default)]
    pub tcp_congestion: Option<String>,
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
    /// Why system calls are not counted here; null when they are.
    #[serde(default)]
    pub syscalls_unavailable: Option<String>,
    /// The run stopped after a signal before every transfer was made: rows may hold fewer
    /// rounds than `settings.rounds` (each row's `repeats` says how many).
    #[serde(default)]
    pub interrupted: bool,
}

impl TransferResults {
    /// Whether [`run`](super::run) transfers each point once more, after the rounds, to count
    /// its system calls ([`TransferRow::counted`]): where the kernel lets them be counted.
    pub fn counts_syscalls(&self) -> bool {
        self.syscalls_unavailable.is_none()
    }

    /// The row of a point, if measured.
    pub(crate) fn row(
        &self,
        file_bytes: u64,
        cache: Cache,
        method: &Method,
    ) -> Option<&TransferRow> {
        self.rows
            .iter()
            .find(|r| r.file_bytes == file_bytes && r.cache == cache && &r.method == method)
    }
}

impl TransferResults {
    /// Empty results for `cfg`, to be filled by [`run`](super::run).
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
                tcp_congestion: crate::workload::congestion::in_effect(cfg.congestion.as_deref()),
            },
            rows: Vec::new(),
            syscalls_unavailable: crate::measure::SyscallCount::start().unavailable(),
            interrupted: false,
        }
    }
}
