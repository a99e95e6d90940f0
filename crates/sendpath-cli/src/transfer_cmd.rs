//! `sendpath transfer` and `sendpath sweep --preset file-transfer`.

use crate::cli::{SweepArgs, TransferArgs};
use anyhow::{bail, Context};
use sendpath_lab::cancel::Cancel;
use sendpath_lab::study::rows::{environment, fresh_seed};
use sendpath_lab::study::transfer::{
    self, Cache, Method, Sink, TransferConfig, TransferResults, STUDY_SIZES,
};
use std::path::Path;
use std::process::ExitCode;

pub(crate) fn run(a: &TransferArgs, cancel: &Cancel) -> anyhow::Result<ExitCode> {
    if a.sink_file.is_some() && a.remote.agent.is_some() {
        bail!("--sink-file writes on this host: it cannot go with --agent (the agent copies or discards)");
    }
    let sink = match (&a.sink_file, a.recv.as_str()) {
        (Some(p), _) => Sink::File {
            path: p.clone(),
            fsync: a.fsync,
        },
        (None, "discard") => Sink::Discard,
        _ => Sink::Copy,
    };
    // Before the namespace is made: a name the kernel lacks leaves nothing behind.
    crate::cli::check_congestion(a.congestion.as_deref(), a.remote.agent.is_none())?;
    crate::cli::check_outputs([("--json", a.json.as_deref()), ("--csv", a.csv.as_deref())])?;
    let methods = Method::list(&a.strategy, &a.chunk)?;
    let agent = a.remote.target()?;
    let what = format!(
        "transfer: {} method(s) x {} cache state(s), {} round(s)",
        methods.len(),
        a.cache.len(),
        a.repeat
    );
    if let Some(done) = crate::cli::dry_run(what) {
        return Ok(done);
    }
    let cfg = TransferConfig {
        sizes: a.sizes.clone().unwrap_or_else(|| STUDY_SIZES.to_vec()),
        methods,
        caches: a.cache.clone(),
        sink,
        recv_size: a.recv_size,
        rounds: a.repeat,
        seed: a.seed.unwrap_or_else(fresh_seed),
        cpus: a.cpu,
        timeout: a.timeout,
        agent,
        netns: a.topology.create(a.remote.agent.is_some(), false)?,
        congestion: a.congestion.clone(),
    };
    let r = measure(&cfg, cancel)?;
    if let Some(p) = &a.json {
        crate::http_cmd::write_json(p, &r.0)?;
    }
    if let Some(p) = &a.csv {
        transfer::write_csv(&r.0, p)?;
    }
    finish(r)
}

/// Refuses sweep flags the preset has no use for (before any directory is made).
pub(crate) fn check_sweep_args(a: &SweepArgs) -> anyhow::Result<()> {
    if a.duration.is_some() || a.warmup.is_some() {
        bail!("the file-transfer preset times whole files: --duration and --warmup do not apply (use -n for rounds)");
    }
    if a.resume.is_some() {
        bail!("the file-transfer preset cannot be resumed: run it again (-n sets the rounds)");
    }
    Ok(())
}

/// `sweep --preset file-transfer`: the preset's points, written to `dir` as
/// transfer-results.json, transfer-results.csv and summary.md.
pub(crate) fn preset(a: &SweepArgs, dir: &Path, cancel: &Cancel) -> anyhow::Result<ExitCode> {
    let mut cfg = transfer::preset_config(
        a.repeat,
        a.seed.unwrap_or_else(fresh_seed),
        a.remote.target()?,
        a.topology.create(a.remote.agent.is_some(), false)?,
    )?;
    cfg.congestion = a.congestion.clone();
    crate::cli::note_paced(a.congestion.as_deref(), a.remote.agent.is_none());
    crate::cli::check_outputs([("--out", Some(dir.join("transfer-results.json").as_path()))])?;
    let r = measure(&cfg, cancel)?;
    crate::http_cmd::write_json(&dir.join("transfer-results.json"), &r.0)?;
    transfer::write_csv(&r.0, &dir.join("transfer-results.csv"))?;
    sendpath_lab::files::write_text(&dir.join("summary.md"), &transfer::summary(&r.0))
        .with_context(|| format!("writing {}/summary.md", dir.display()))?;
    println!(
        "wrote {}/transfer-results.json, transfer-results.csv, summary.md",
        dir.display()
    );
    finish(r)
}

/// Runs `cfg` with a progress line per transfer; the results and the error, if any (what was
/// measured before it is kept).
fn measure(
    cfg: &TransferConfig,
    cancel: &Cancel,
) -> anyhow::Result<(TransferResults, Option<anyhow::Error>)> {
    check_space(cfg)?;
    let points = cfg.points();
    let bytes: u64 = cfg.sizes.iter().sum::<u64>() * (cfg.caches.len() * cfg.methods.len()) as u64;
    eprintln!(
        "transfer: {} sizes x {} cache states x {} methods = {} points, {} rounds in a shuffled order (seed {}), {:.1} GB per round; receiver: {}",
        cfg.sizes.len(),
        cfg.caches.len(),
        cfg.methods.len(),
        points,
        cfg.rounds,
        cfg.seed,
        bytes as f64 / 1e9,
        cfg.sink.name()
    );
    let mut results = TransferResults::new(cfg, environment());
    let total = points * (cfg.rounds as usize + usize::from(results.counts_syscalls()));
    let mut done = 0usize;
    let err = transfer::run(cfg, &mut results, cancel, |row, rep, pass| {
        done += 1;
        let what = match pass {
            transfer::Pass::Timed => format!("round {}", rep.round + 1),
            transfer::Pass::Counted => "syscalls".into(),
        };
        eprintln!(
            "[{done}/{total}] {what}: {} {} {:<16} {:>9.1} ms  {:>7.3} Gbit/s  resident {}  cpu {} / {} ms",
            transfer::size_label(row.file_bytes),
            row.cache.name(),
            row.label,
            rep.seconds * 1000.0,
            rep.throughput_gbps,
            rep.resident_fraction
                .map_or("null".into(), |f| format!("{:.2}", f)),
            rep.cpu_sender_ms.map_or("null".into(), |c| format!("{c:.0}")),
            rep.cpu_receiver_ms.map_or("null".into(), |c| format!("{c:.0}")),
        );
    })
    .err();
    // A signal during a transfer ends it with an error; the run was interrupted either way.
    results.interrupted |= cancel.is_cancelled();
    Ok((results, err))
}

/// Prints the table; the error of the run (after the table of what was measured), or 130 when
/// Ctrl-C cut it short.
fn finish((r, err): (TransferResults, Option<anyhow::Error>)) -> anyhow::Result<ExitCode> {
    if !r.rows.is_empty() {
        println!("{}", transfer::summary(&r));
    }
    if r.interrupted {
        let made: usize = r.rows.iter().map(|x| x.repeats.len()).sum();
        eprintln!("interrupted: {made} timed transfer(s) made and written");
        return Ok(ExitCode::from(130));
    }
    if let Some(e) = err {
        return Err(e.context("the transfer run failed (the transfers before it are written)"));
    }
    Ok(ExitCode::SUCCESS)
}

/// Refuses a run whose source files do not fit on the filesystem they go to.
fn check_space(cfg: &TransferConfig) -> anyhow::Result<()> {
    let dir = if cfg.caches.contains(&Cache::Cold) {
        sendpath_lab::workload::cold_file_dir()
            .ok()
            .flatten()
            .unwrap_or_else(std::env::temp_dir)
    } else {
        std::env::temp_dir()
    };
    let need: u64 = cfg.sizes.iter().sum::<u64>()
        + match &cfg.sink {
            Sink::File { .. } => cfg.sizes.iter().copied().max().unwrap_or(0),
            _ => 0,
        };
    if let Ok(st) = rustix::fs::statvfs(&dir) {
        let free = st.f_bavail * st.f_frsize;
        if free < need + (256 << 20) {
            bail!(
                "the source files need {:.1} GB in {} but {:.1} GB are free: give smaller --sizes or set TMPDIR elsewhere",
                need as f64 / 1e9,
                dir.display(),
                free as f64 / 1e9
            );
        }
    }
    Ok(())
}
