//! Running points in interleaved rounds for `stream`, `rr` and `sweep`, writing results after
//! every window.
//!
//! Each round measures every point once, in an order shuffled from a recorded seed, so a slow
//! phase of a shared host spreads over all points instead of landing on one; comparisons then
//! pair the windows of one round (see `analysis`).

use crate::cancel::Cancel;
use crate::measure::Meter;
use crate::study::rows::export;
use crate::study::rows::{FileCache, Results, Row, Schedule, Workload, SCHEMA_VERSION};
use crate::traffic::mix::Alloc;
use crate::units::fmt_size;
use crate::window::{Environment, Receiver};
use crate::workload::rr::{self, RrPoint};
use crate::workload::stream::{self, Outcome, StreamPoint};
use crate::workload::{cold_file_dir, congestion, PatternFile};
use anyhow::{bail, Context};
use sendpath::{Source, Strategy};
use std::path::PathBuf;

/// The environment block of a results file.
pub fn environment() -> Environment {
    let probe = crate::probe::run();
    Environment {
        kernel: probe.kernel_release.clone(),
        cpu: probe.cpu_model.clone(),
        probe,
        command_line: std::env::args().collect(),
        start_time_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        sendpath_version: env!("CARGO_PKG_VERSION").to_string(),
        profile: None,
        topology: None,
        agent: None,
        syscalls_unavailable: Some(
            "not counted: `stream` and `rr` count them with --metrics syscalls".into(),
        ),
        copy_counters: None,
    }
}

/// A seed for the round order when none is given.
pub fn fresh_seed() -> u64 {
    fastrand::u64(..)
}

/// The order in which round `round` measures points, given each point's block (the points an
/// analysis compares with each other: same workload, size and connections, different paths).
/// A randomized block design: the blocks come in a shuffled order and the points of each block
/// in a shuffled order, one block after the other, so the windows a comparison pairs are taken
/// seconds apart, not a whole round apart. Shuffled from `seed` and the round number, so a
/// resumed run repeats it.
pub(crate) fn round_order<B: Ord + Clone>(blocks: &[B], seed: u64, round: u32) -> Vec<usize> {
    let mut rng =
        fastrand::Rng::with_seed(seed ^ u64::from(round).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut keys: Vec<B> = blocks.to_vec();
    keys.sort();
    keys.dedup();
    rng.shuffle(&mut keys);
    let mut order = Vec::with_capacity(blocks.len());
    for k in &keys {
        let mut members: Vec<usize> = (0..blocks.len()).filter(|&i| &blocks[i] == k).collect();
        rng.shuffle(&mut members);
        order.extend(members);
    }
    order
}

/// What identifies a point's row (see [`Point::key`]).
type Key = (
    Workload,
    Strategy,
    usize,
    usize,
    usize,
    Option<String>,
    Alloc,
    String,
);

/// One point to measure.
#[derive(Debug, Clone)]
pub enum Point {
    Stream(StreamPoint),
    Rr(RrPoint),
}

impl Point {
    /// The most threads whose system calls a window of this point counts: a sender per stream
    /// thread or rr connection, and its receiver unless the other end is elsewhere.
    pub fn counted_threads(&self) -> usize {
        match self {
            Point::Stream(p) if p.connect.is_some() || p.agent.is_some() => p.threads,
            Point::Stream(p) => 2 * p.threads,
            Point::Rr(p) if p.agent.is_some() => p.concurrency,
            Point::Rr(p) => 2 * p.concurrency,
        }
    }

    /// The row a point's windows go into, without any measurement yet.
    fn row(&self, file: Option<&PatternFile>) -> Row {
        match self {
            Point::Stream(p) => Row {
                workload: Workload::Stream,
                strategy: p.strategy,
                size_bytes: p.size,
                threads: p.threads,
                connections_per_thread: p.connections,
                fields: if p.strategy.source() == Source::Memory {
                    p.fields
                } else {
                    1
                },
                recv_mode: if p.connect.is_some() {
                    Receiver::Remote
                } else {
                    p.recv.into()
                },
                recv_size_bytes: p.connect.is_none().then_some(p.recv_size),
                file_cache: file
                    .filter(|_| p.strategy.source() == Source::File)
                    .map(|f| FileCache {
                        cold: p.cold,
                        filesystem: f.filesystem.clone(),
                        file_bytes: f.len,
                        resident_fraction: None,
                    }),
                size_mix: p.mix.as_ref().map(|m| m.name()),
                alloc: p.alloc,
                window_s: Some(p.duration.as_secs_f64()),
                protocol: p.proto,
                gso_segment_bytes: p.gso.map(usize::from),
                send_side_only: p.netns.as_ref().is_some_and(|n| n.is_blackhole()),
                // Registered buffers change only what sends SEND_ZC.
                fixed_buffers: p.opts.uring_fixed_buffers
                    && matches!(p.strategy, Strategy::UringZc | Strategy::Adaptive),
                burst: p.burst.map(|b| b.name()),
                runtime: p.runtime,
                uring_order: crate::window::uring_order(p.strategy),
                uring_buffers: crate::window::uring_buffers(p.strategy, &p.opts),
                tcp_congestion: (p.proto == crate::traffic::datagram::Protocol::Tcp)
                    .then(|| congestion::in_effect(p.congestion.as_deref()))
                    .flatten(),
                ..Default::default()
            },
            Point::Rr(p) => Row {
                workload: Workload::Rr,
                strategy: p.strategy,
                size_bytes: p.response,
                request_bytes: Some(p.request),
                threads: p.concurrency,
                connections_per_thread: 1,
                fields: p.fields,
                recv_mode: p.recv.into(),
                recv_size_bytes: Some(p.response),
                rate_per_s: p.rate,
                size_mix: p.mix.as_ref().map(|m| m.name()),
                alloc: p.alloc,
                window_s: Some(p.duration.as_secs_f64()),
                uring_order: crate::window::uring_order(p.strategy),
                uring_buffers: crate::window::uring_buffers(p.strategy, &p.opts),
                tcp_congestion: congestion::in_effect(p.congestion.as_deref()),
                ..Default::default()
            },
        }
    }

    /// What identifies the point's row: workload, strategy, size, threads, connections per
    /// thread, the size mix, the allocation mode, then the variant (`udp gso 1400`, `fixed`).
    fn key(&self) -> Key {
        // As its row will say it (an rr point written in place is an `arena` row too).
        let variant = self.row(None).variant();
        match self {
            Point::Stream(p) => (
                Workload::Stream,
                p.strategy,
                p.size,
                p.threads,
                p.connections,
                p.mix.as_ref().map(|m| m.name()),
                p.alloc,
                variant,
            ),
            Point::Rr(p) => (
                Workload::Rr,
                p.strategy,
                p.response,
                p.concurrency,
                1,
                p.mix.as_ref().map(|m| m.name()),
                p.alloc,
                variant,
            ),
        }
    }

    /// What identifies the point's row (for tests of plans).
    #[cfg(test)]
    pub(crate) fn row_key(&self) -> Key {
        self.key()
    }

    /// Whether `row` is this point's row.
    fn matches(&self, row: &Row) -> bool {
        self.key()
            == (
                row.workload,
                row.strategy,
                row.size_bytes,
                row.threads,
                row.connections_per_thread,
                row.size_mix.clone(),
                row.alloc,
                row.variant(),
            )
    }

    /// The points this one is compared with share its block: everything in its key but the
    /// strategy.
    fn block(&self) -> (Workload, usize, usize, usize, Option<String>, Alloc, String) {
        let (workload, _, size, threads, per_thread, mix, alloc, variant) = self.key();
        (workload, size, threads, per_thread, mix, alloc, variant)
    }

    fn label(&self) -> String {
        let (_, strategy, size, threads, per_thread, mix, alloc, variant) = self.key();
        let size = mix.map_or_else(|| fmt_size(size), |m| format!("mix {m}"));
        let alloc = match (alloc, variant.as_str()) {
            (Alloc::Pool, "") => String::new(),
            (Alloc::Pool, v) => format!(" {v}"),
            (Alloc::Fresh, _) => " fresh".into(),
            (Alloc::Shared, _) => " shared".into(),
        };
        match per_thread {
            1 => format!("{strategy} {size}{alloc} x{threads}"),
            n => format!("{strategy} {size}{alloc} x{threads}x{n}conn"),
        }
    }

    fn measure(
        &self,
        file: Option<&PatternFile>,
        meter: &mut Meter,
        cpu_mhz: Option<f64>,
        cancel: &Cancel,
    ) -> anyhow::Result<Option<Outcome>> {
        match self {
            Point::Stream(p) => {
                let f = file.filter(|_| p.strategy.source() == Source::File);
                stream::run_once(p, f, meter, cpu_mhz, cancel)
            }
            Point::Rr(p) => rr::run_once(p, meter, cpu_mhz, cancel),
        }
    }
}

/// The stream points of every strategy x size x connection count, in that order, each made by
/// `point` (rounds shuffle them).
pub fn stream_matrix(
    strategies: &[sendpath::Strategy],
    sizes: &[usize],
    threads: &[usize],
    point: impl Fn(sendpath::Strategy, usize, usize) -> StreamPoint,
) -> Vec<Point> {
    let mut v = Vec::new();
    for &strategy in strategies {
        for &size in sizes {
            for &t in threads {
                v.push(Point::Stream(point(strategy, size, t)));
            }
        }
    }
    v
}

/// Collects windows into rows and keeps the outputs current.
pub struct Recorder {
    pub results: Results,
    json: Option<PathBuf>,
    csv: Option<PathBuf>,
    /// Progress lines go through the progress bar when there is one.
    pub progress: Option<indicatif::ProgressBar>,
    /// Stops the run: windows not finished are dropped, finished ones written.
    pub cancel: Cancel,
}

impl Recorder {
    pub fn new(json: Option<PathBuf>, csv: Option<PathBuf>, schedule: Schedule) -> Recorder {
        Recorder::with_results(
            Results {
                schema_version: SCHEMA_VERSION,
                environment: environment(),
                sweep: None,
                schedule,
                results: Vec::new(),
                interrupted: false,
            },
            json,
            csv,
        )
    }

    pub fn with_results(results: Results, json: Option<PathBuf>, csv: Option<PathBuf>) -> Recorder {
        Recorder {
            results,
            json,
            csv,
            progress: None,
            cancel: Cancel::new(),
        }
    }

    fn cpu_mhz(&self) -> Option<f64> {
        self.results.environment.probe.cpu_mhz
    }

    /// Adds one window of `point` (measured in `round`) to its row, prints a progress line and
    /// rewrites the files.
    fn add(
        &mut self,
        point: &Point,
        file: Option<&PatternFile>,
        round: u32,
        o: Outcome,
    ) -> anyhow::Result<usize> {
        let rows = &mut self.results.results;
        let i = match rows.iter().position(|r| point.matches(r)) {
            Some(i) => i,
            None => {
                rows.push(point.row(file));
                rows.len() - 1
            }
        };
        let row = &mut rows[i];
        if row.zerocopy.note.is_none() {
            row.zerocopy.note = o.note;
        }
        if row.uring_order.is_none() {
            row.uring_order = o.uring_order;
        }
        let mut rep = o.repeat;
        rep.round = round;
        let line = format!(
            "  round {}: {:<26} {:>9.3} Gbit/s",
            round + 1,
            point.label(),
            rep.throughput_gbps
        );
        row.repeats.push(rep);
        row.summarise();
        self.say(&line);
        self.write(false)?;
        Ok(i)
    }

    /// Whether a machine-readable output goes to stdout (then the table goes to stderr, and
    /// stdout gets the document once, at the end).
    fn stdout_taken(&self) -> bool {
        let dash = |p: &Option<std::path::PathBuf>| p.as_deref() == Some(std::path::Path::new("-"));
        dash(&self.json) || dash(&self.csv)
    }

    /// Prints a line where it does not mix with JSON or CSV on stdout.
    pub fn say(&self, line: &str) {
        if let Some(pb) = &self.progress {
            pb.println(line);
        } else if self.stdout_taken() {
            eprintln!("{line}");
        } else {
            println!("{line}");
        }
    }

    /// Rewrites the output files; documents for stdout only when `last`.
    pub fn write(&self, last: bool) -> anyhow::Result<()> {
        let to_stdout = |p: &std::path::Path| p == std::path::Path::new("-");
        let doc = export::Document::new(&self.results);
        if let Some(p) = self.json.as_deref().filter(|p| last || !to_stdout(p)) {
            export::export(&export::Json, &doc, p)?;
        }
        if let Some(p) = self.csv.as_deref().filter(|p| last || !to_stdout(p)) {
            export::export(&export::Csv, &doc, p)?;
        }
        Ok(())
    }

    /// Prints the table of every row (medians over rounds) with its warnings, and which
    /// kernel copy counters did not attach.
    pub fn print_table(&self) {
        for c in self.results.environment.copy_counters.iter().flatten() {
            if let Some(why) = &c.unavailable {
                self.say(&format!(
                    "{} copies not counted ({}): {why}",
                    c.counts, c.hooks
                ));
            }
        }
        self.say("");
        self.say(&export::table_header());
        for row in &self.results.results {
            self.say(&export::table_line(row));
            if let Some(line) = export::fairness_line(row) {
                self.say(&line);
            }
            if let Some(line) = export::datagram_line(row) {
                self.say(&line);
            }
            let lines = [
                export::notification_line(row),
                export::kernel_copies_line(row),
            ];
            for line in lines.into_iter().flatten() {
                self.say(&line);
            }
            for w in &row.warnings {
                self.say(&format!("    warning: {w}"));
            }
        }
    }

    /// Ends the run: an error if interrupted (after writing what was measured) or if any byte
    /// was corrupted.
    pub fn finish(mut self) -> anyhow::Result<std::process::ExitCode> {
        self.results.interrupted = self.cancel.is_cancelled();
        self.write(true)?;
        if self.cancel.is_cancelled() {
            eprintln!(
                "interrupted: {} point(s) with finished windows written",
                self.results.results.len()
            );
            return Ok(std::process::ExitCode::from(130));
        }
        let rows = &self.results.results;
        let bad: u64 = rows.iter().map(|r| r.integrity.mismatches).sum();
        if let Some(r) = rows.iter().find(|r| r.integrity.mismatches > 0) {
            let at = r.integrity.first_mismatch.map_or(String::new(), |o| {
                format!(", the first at byte {o} of a connection's stream")
            });
            bail!(
                "{bad} bytes arrived corrupted ({} {} B{at}; see the warnings above): the results are written",
                r.strategy.name(),
                r.size_bytes
            );
        }
        Ok(std::process::ExitCode::SUCCESS)
    }

    /// Measures every point `rounds` times, one window per point per round, each round in the
    /// shuffled order of `round_order`, skipping windows already in the results (resume).
    /// Stops early on Ctrl-C; on an error, writes what was measured and returns it.
    pub fn run_rounds(
        &mut self,
        points: &[Point],
        file: Option<&PatternFile>,
        meter: &mut Meter,
        on_window: &dyn Fn(),
    ) -> anyhow::Result<()> {
        let Schedule { rounds, seed } = self.results.schedule;
        let blocks: Vec<_> = points.iter().map(Point::block).collect();
        for round in 0..rounds {
            for i in round_order(&blocks, seed, round) {
                let point = &points[i];
                let done = self
                    .results
                    .results
                    .iter()
                    .any(|r| point.matches(r) && r.in_round(round).is_some());
                if done {
                    continue;
                }
                if self.run_once(point, file, meter, round)?.is_none() {
                    return Ok(());
                }
                // Rows in the order of the points, whatever order rounds ran them in.
                self.results.results.sort_by_key(|r| {
                    points
                        .iter()
                        .position(|p| p.matches(r))
                        .unwrap_or(usize::MAX)
                });
                on_window();
            }
        }
        Ok(())
    }

    /// Measures one window of `point` as round `round` and adds it to its row: the row, or
    /// `None` when the run was stopped (Ctrl-C). On an error, writes what was measured and
    /// returns it.
    pub fn run_once(
        &mut self,
        point: &Point,
        file: Option<&PatternFile>,
        meter: &mut Meter,
        round: u32,
    ) -> anyhow::Result<Option<&Row>> {
        if self.cancel.is_cancelled() {
            return Ok(None);
        }
        let out = point
            .measure(file, meter, self.cpu_mhz(), &self.cancel)
            .with_context(|| {
                format!(
                    "{} failed in round {} (finished windows are written)",
                    point.label(),
                    round + 1
                )
            });
        match out {
            Ok(Some(o)) => {
                let i = self.add(point, file, round, o)?;
                Ok(Some(&self.results.results[i]))
            }
            Ok(None) => Ok(None),
            Err(e) => {
                self.write(true)?;
                Err(e)
            }
        }
    }
}

/// The one source file shared by every file-path point of a run: long enough for the largest
/// message (8 messages, at least 64 MiB; 1 GiB for cold runs, which read each byte once), or
/// `file_size`. Cold runs put it on a disk-backed filesystem, or warn that they cannot.
pub fn source_file(
    sizes: &[usize],
    file_size: Option<usize>,
    verify: bool,
    cold: bool,
) -> anyhow::Result<PatternFile> {
    let largest = sizes.iter().copied().max().unwrap_or(0) as u64;
    let default = if cold {
        (1u64 << 30).max(largest * 8)
    } else {
        (largest * 8).max(64 << 20)
    };
    let len = file_size.map_or(default, |l| l as u64);
    let dir = if cold {
        match cold_file_dir() {
            Ok(d) => d,
            Err(fs) => {
                eprintln!(
                    "warning: --cold cannot be honoured: the temp dir and /var/tmp are on {fs}, which keeps files in memory; set TMPDIR to a directory on a disk (the rows record the resident fraction)"
                );
                None
            }
        }
    } else {
        None
    };
    let f = PatternFile::create(len, verify, dir.as_deref())?;
    if cold {
        eprintln!(
            "cold runs read a {} file on {} (dropped from the page cache before each window)",
            fmt_size(f.len as usize),
            f.filesystem
        );
    }
    Ok(f)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A run whose receivers found wrong bytes fails, naming the row and the first offset,
    /// after writing what it measured.
    #[test]
    fn a_run_with_corrupted_bytes_fails_naming_where() {
        let dir = tempfile::tempdir().unwrap();
        let json = dir.path().join("r.json");
        let schedule = Schedule { rounds: 1, seed: 1 };
        let mut rec = Recorder::new(Some(json.clone()), None, schedule);
        let mut row = Row {
            size_bytes: 4096,
            ..Row::default()
        };
        row.integrity.mismatches = 3;
        row.integrity.first_mismatch = Some(70_001);
        rec.results.results.push(row);
        let e = rec.finish().unwrap_err().to_string();
        assert!(
            e.starts_with("3 bytes arrived corrupted (copy 4096 B, the first at byte 70001 of a connection's stream"),
            "{e}"
        );
        assert!(json.exists(), "the results are written first");
    }

    #[test]
    fn each_round_is_a_permutation_and_rounds_differ() {
        let blocks: Vec<usize> = (0..12).collect();
        let a = round_order(&blocks, 7, 0);
        let b = round_order(&blocks, 7, 1);
        let mut s = a.clone();
        s.sort();
        assert_eq!(s, (0..12).collect::<Vec<_>>());
        assert_ne!(a, b, "rounds are shuffled independently");
        assert_eq!(
            a,
            round_order(&blocks, 7, 0),
            "the seed reproduces the order"
        );
        assert_ne!(a, round_order(&blocks, 8, 0));
    }

    #[test]
    fn points_compared_with_each_other_run_back_to_back() {
        // 4 paths x 3 sizes: the block is the size.
        let blocks: Vec<usize> = (0..12).map(|i| i % 3).collect();
        for round in 0..5 {
            let o = round_order(&blocks, 42, round);
            for chunk in o.chunks(4) {
                assert!(
                    chunk.iter().all(|&i| blocks[i] == blocks[chunk[0]]),
                    "{o:?}"
                );
            }
        }
        let firsts: std::collections::BTreeSet<usize> = (0..20)
            .map(|r| blocks[round_order(&blocks, 1, r)[0]])
            .collect();
        assert_eq!(firsts.len(), 3, "the block order is shuffled too");
    }
}
