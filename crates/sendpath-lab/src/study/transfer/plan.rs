//! What the file-transfer study runs: the methods (path and read size), cache states, the
//! receiver's sink, and the `file-transfer` preset with the transferTo study's sizes.

use crate::units::fmt_size;
use anyhow::bail;
use sendpath::Strategy;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

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
pub(crate) const STUDY_TABLE: [(u64, f64, f64); 8] = [
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
    pub(crate) fn label(&self) -> String {
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
    pub(crate) fn recv_mode(&self) -> crate::traffic::RecvMode {
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
    /// TCP congestion control of each transfer's connection (`--congestion`); `None`: the
    /// host's default.
    pub congestion: Option<String>,
}

/// The `read-send 4KiB` method the study's "normal" transfer is.
pub(crate) const STUDY_BASELINE: Method = Method {
    strategy: Strategy::ReadSend,
    chunk_bytes: Some(4096),
};

/// `sendfile` (the study's transferTo).
pub(crate) const STUDY_ZEROCOPY: Method = Method {
    strategy: Strategy::Sendfile,
    chunk_bytes: None,
};

/// The preset name of the file-transfer study.
pub(crate) const PRESET: &str = "file-transfer";

/// What `sweep --list-presets` says of it.
pub(crate) const ABOUT: &str = "whole files of 7 MB..1 GB over a fresh connection each, open() to acknowledgement: read-send (4K, 64K, 1M reads), mmap-send, sendfile, splice, uring-splice, warm and cold, 3 rounds (the transferTo study's table; about 2 minutes with 2.4 GB of source files)";

/// The preset's file paths.
const PRESET_PATHS: [Strategy; 5] = [
    Strategy::ReadSend,
    Strategy::MmapSend,
    Strategy::Sendfile,
    Strategy::Splice,
    Strategy::UringSplice,
];

/// The preset's read sizes for `read-send`.
const PRESET_CHUNKS: [usize; 3] = [4 << 10, 64 << 10, 1 << 20];

/// The preset's configuration: the study's sizes, every file path (read-send at three read
/// sizes), warm and cold, a copying receiver; `rounds` (default 3), `seed` and the receiver's
/// place from the command line.
pub fn preset_config(
    rounds: Option<u32>,
    seed: u64,
    agent: Option<crate::remote::AgentTarget>,
    netns: Option<std::sync::Arc<crate::topology::Netns>>,
) -> anyhow::Result<TransferConfig> {
    Ok(TransferConfig {
        sizes: STUDY_SIZES.to_vec(),
        methods: Method::list(&PRESET_PATHS, &PRESET_CHUNKS)?,
        caches: vec![Cache::Warm, Cache::Cold],
        sink: Sink::Copy,
        recv_size: 128 << 10,
        rounds: rounds.unwrap_or(3),
        seed,
        cpus: None,
        timeout: Duration::from_secs(120),
        agent,
        netns,
        congestion: None,
    })
}

impl TransferConfig {
    /// Points: sizes x cache states x methods.
    pub fn points(&self) -> usize {
        self.sizes.len() * self.caches.len() * self.methods.len()
    }
}

/// The preset's points, from its plan.
pub(crate) fn preset_points() -> usize {
    preset_config(None, 0, None, None).map_or(0, |c| c.points())
}
