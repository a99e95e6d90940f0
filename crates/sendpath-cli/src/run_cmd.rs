//! Running a matrix of points for `stream` and `rr`, writing results after each point.

use crate::cli::{RrArgs, RunArgs, StreamArgs};
use crate::measure::Meter;
use crate::output;
use crate::results::{Environment, Results, Row, Zerocopy, SCHEMA_VERSION};
use crate::workload::rr::{self, RrPoint};
use crate::workload::stream::{self, StreamOutcome, StreamPoint};
use crate::workload::{PatternFile, INTERRUPTED};
use anyhow::{bail, Context};
use sendpath::metrics::SendStats;
use sendpath::Source;
use std::path::PathBuf;
use std::sync::atomic::Ordering;

/// The environment block of a results file.
pub fn environment() -> Environment {
    let probe = sendpath::probe::run();
    Environment {
        kernel: probe.kernel_release.clone(),
        cpu: probe.cpu_model.clone(),
        probe,
        command_line: std::env::args().collect(),
        start_time_unix_s: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_secs()),
        sendpath_version: env!("CARGO_PKG_VERSION").to_string(),
    }
}

/// Collects repeats into a row and keeps the outputs current.
pub struct Recorder {
    pub results: Results,
    json: Option<PathBuf>,
    csv: Option<PathBuf>,
    /// Table lines go through the progress bar when there is one.
    pub progress: Option<indicatif::ProgressBar>,
}

impl Recorder {
    pub fn new(json: Option<PathBuf>, csv: Option<PathBuf>) -> Recorder {
        Recorder::with_results(
            Results {
                schema_version: SCHEMA_VERSION,
                environment: environment(),
                sweep: None,
                results: Vec::new(),
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
        }
    }

    fn args_for(a: &RunArgs) -> (Option<PathBuf>, Option<PathBuf>) {
        (a.json.clone(), a.csv.clone())
    }

    pub fn cpu_mhz(&self) -> Option<f64> {
        self.results.environment.probe.cpu_mhz
    }

    /// Adds a finished row (if it has any repeat), prints it, rewrites the files.
    pub fn push(&mut self, mut row: Row, outs: Vec<StreamOutcome>) -> anyhow::Result<()> {
        if outs.is_empty() {
            return Ok(());
        }
        let mut stats = SendStats::default();
        for o in &outs {
            stats.merge(&o.stats);
            row.integrity.bytes_verified += o.integrity.bytes_verified;
            row.integrity.mismatches += o.integrity.mismatches;
        }
        let s = stats.summary();
        row.zerocopy = Zerocopy {
            attempts: s.zc_attempts,
            completions: s.zc_completions,
            copied_fraction: s.copied_fraction,
            fallbacks: s.fallbacks,
            completion_p50_us: (s.completion_latency.count > 0)
                .then(|| s.completion_latency.p50_ns as f64 / 1000.0),
            note: outs.iter().find_map(|o| o.note.clone()),
        };
        if let Some(n) = &row.zerocopy.note {
            row.warnings.push(n.clone());
        }
        if let Some(f) = s.copied_fraction.filter(|f| *f > 0.5) {
            row.warnings.push(format!(
                "the kernel copied {:.0}% of the zero-copy sends (a local receiver always forces the copy): this measures zero-copy bookkeeping plus a copy",
                f * 100.0
            ));
        }
        if row.strategy == "msg-zerocopy" && s.copied_fraction.is_some() {
            row.warnings.push(
                "msg-zerocopy copies are counted per notification range: a merged range carries only its first send's COPIED bit, so the fraction is approximate".into(),
            );
        }
        row.repeats = outs.into_iter().map(|o| o.repeat).collect();
        row.summarise();
        self.say(&output::table_line(&row));
        for w in &row.warnings {
            self.say(&format!("    warning: {w}"));
        }
        self.results.results.push(row);
        self.write(false)
    }

    /// Whether a machine-readable output goes to stdout (then the table goes to stderr, and
    /// stdout gets the document once, at the end).
    fn stdout_taken(&self) -> bool {
        let dash = |p: &Option<std::path::PathBuf>| p.as_deref() == Some(std::path::Path::new("-"));
        dash(&self.json) || dash(&self.csv)
    }

    /// Prints a table line where it does not mix with JSON or CSV on stdout.
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
        if let Some(p) = self.json.as_deref().filter(|p| last || !to_stdout(p)) {
            output::write_json(p, &self.results)?;
        }
        if let Some(p) = self.csv.as_deref().filter(|p| last || !to_stdout(p)) {
            output::write_csv(p, &self.results)?;
        }
        Ok(())
    }

    /// Ends the run: an error if interrupted (after writing what was measured) or if any byte
    /// was corrupted.
    pub fn finish(self) -> anyhow::Result<std::process::ExitCode> {
        self.write(true)?;
        if INTERRUPTED.load(Ordering::Relaxed) {
            eprintln!(
                "interrupted: {} finished point(s) written",
                self.results.results.len()
            );
            return Ok(std::process::ExitCode::from(130));
        }
        let bad: u64 = self
            .results
            .results
            .iter()
            .map(|r| r.integrity.mismatches)
            .sum();
        if bad > 0 {
            bail!("{bad} bytes arrived corrupted (see the warnings above)");
        }
        Ok(std::process::ExitCode::SUCCESS)
    }
}

/// Runs repeats of one point, stopping early on Ctrl-C.
fn repeats(
    n: u32,
    mut once: impl FnMut() -> anyhow::Result<Option<StreamOutcome>>,
) -> anyhow::Result<Vec<StreamOutcome>> {
    let mut outs = Vec::new();
    for _ in 0..n {
        match once()? {
            Some(o) => outs.push(o),
            None => break,
        }
    }
    Ok(outs)
}

/// The source file for a file path at this message size (`None` for memory paths).
pub fn source_file(
    strategy: sendpath::Strategy,
    size: usize,
    file_size: Option<usize>,
    verify: bool,
) -> anyhow::Result<Option<PatternFile>> {
    if strategy.source() != Source::File {
        return Ok(None);
    }
    let len = file_size.map_or((size as u64 * 8).max(64 << 20), |l| l as u64);
    PatternFile::create(len, verify).map(Some)
}

/// Measures one stream point `repeat` times: the row (not yet summarised) and its repeats.
pub fn stream_point(
    pt: &StreamPoint,
    repeat: u32,
    file: Option<&PatternFile>,
    cold: bool,
    meter: &mut Meter,
    cpu_mhz: Option<f64>,
) -> anyhow::Result<(Row, Vec<StreamOutcome>)> {
    let outs = repeats(repeat, || {
        if let (Some(f), true) = (file, cold) {
            f.make_cold()?;
        }
        stream::run_once(pt, file, meter, cpu_mhz)
    })
    .with_context(|| {
        format!(
            "{} {} B x{} failed (finished points are written)",
            pt.strategy, pt.size, pt.threads
        )
    })?;
    let row = Row {
        workload: "stream".into(),
        strategy: pt.strategy.name().into(),
        size_bytes: pt.size,
        threads: pt.threads,
        fields: if pt.strategy.uses_fields() {
            pt.fields
        } else {
            1
        },
        recv_mode: if pt.connect.is_some() {
            "remote".into()
        } else {
            pt.recv.name().into()
        },
        ..Default::default()
    };
    Ok((row, outs))
}

pub fn stream(a: &StreamArgs) -> anyhow::Result<std::process::ExitCode> {
    let (json, csv) = Recorder::args_for(&a.run);
    let mut rec = Recorder::new(json, csv);
    if a.connect.is_some() && a.run.recv != crate::workload::RecvMode::Copy {
        eprintln!("note: --recv applies to sendpath's own receiver; with --connect the remote end decides");
    }
    rec.say(&output::table_header());
    let mut hw = Meter::open(a.run.metrics == crate::cli::Metrics::Minimal);
    let verify = a.run.recv == crate::workload::RecvMode::Verify;
    'points: for &strategy in &a.run.strategy {
        for &size in &a.size {
            let file = source_file(strategy, size, a.file_size, verify)?;
            for &threads in &a.threads {
                if INTERRUPTED.load(Ordering::Relaxed) {
                    break 'points;
                }
                let pt = StreamPoint {
                    strategy,
                    size,
                    threads,
                    fields: a.run.fields,
                    recv: a.run.recv,
                    duration: a.run.duration,
                    warmup: a.run.warmup,
                    connect: a.connect,
                    cpus: a.cpu,
                    opts: a.run.options(),
                };
                let cpu_mhz = rec.cpu_mhz();
                match stream_point(&pt, a.run.repeat, file.as_ref(), a.cold, &mut hw, cpu_mhz) {
                    Ok((row, outs)) => rec.push(row, outs)?,
                    Err(e) => {
                        rec.write(true)?;
                        return Err(e);
                    }
                }
            }
        }
    }
    rec.finish()
}

pub fn rr(a: &RrArgs) -> anyhow::Result<std::process::ExitCode> {
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rate must be a positive number of requests per second");
        }
    }
    if a.run.recv == crate::workload::RecvMode::Discard {
        bail!("--recv discard does not apply to rr (the client must read each response); use copy or verify");
    }
    let (json, csv) = Recorder::args_for(&a.run);
    let mut rec = Recorder::new(json, csv);
    rec.say(&output::table_header());
    let mut hw = Meter::open(a.run.metrics == crate::cli::Metrics::Minimal);
    'points: for &strategy in &a.run.strategy {
        if strategy.source() == Source::File {
            eprintln!("note: rr sends responses from memory; skipping file path {strategy}");
            continue;
        }
        for &response in &a.response {
            for &concurrency in &a.concurrency {
                if INTERRUPTED.load(Ordering::Relaxed) {
                    break 'points;
                }
                let pt = RrPoint {
                    strategy,
                    request: a.request,
                    response,
                    concurrency,
                    fields: a.run.fields,
                    recv: a.run.recv,
                    duration: a.run.duration,
                    warmup: a.run.warmup,
                    rate: a.rate,
                    opts: a.run.options(),
                };
                let outs = match repeats(a.run.repeat, || rr::run_once(&pt, &mut hw, rec.cpu_mhz()))
                {
                    Ok(o) => o,
                    Err(e) => {
                        rec.write(true)?;
                        return Err(e).with_context(|| {
                            format!("rr {strategy} failed (finished points are written)")
                        });
                    }
                };
                let row = Row {
                    workload: "rr".into(),
                    strategy: strategy.name().into(),
                    size_bytes: response,
                    request_bytes: Some(a.request),
                    threads: concurrency,
                    fields: if strategy.uses_fields() {
                        a.run.fields
                    } else {
                        1
                    },
                    recv_mode: a.run.recv.name().into(),
                    rate_per_s: a.rate,
                    ..Default::default()
                };
                rec.push(row, outs)?;
            }
        }
    }
    rec.finish()
}
