//! `sendpath sweep` and `sendpath report`.

use crate::cli::{ReportArgs, SweepArgs};
use crate::measure::Meter;
use crate::presets::{self, Preset};
use crate::report;
use crate::results::SweepInfo;
use crate::run_cmd::{source_file, stream_point, Recorder};
use crate::workload::stream::StreamPoint;
use crate::workload::{RecvMode, INTERRUPTED};
use anyhow::{bail, Context};
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::sync::atomic::Ordering;

/// `YYYYmmdd-HHMMSS` in UTC, for result directory names.
fn timestamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs()) as i64;
    let (days, rem) = (secs.div_euclid(86_400), secs.rem_euclid(86_400));
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let d = doy - (153 * mp + 2) / 5 + 1;
    let m = if mp < 10 { mp + 3 } else { mp - 9 };
    let y = yoe + era * 400 + i64::from(m <= 2);
    format!(
        "{y:04}{m:02}{d:02}-{:02}{:02}{:02}",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}

fn list() {
    println!("{:<16}{:>7}  about", "preset", "points");
    for p in presets::all() {
        let n = p.strategies.len() * p.sizes.len() * p.threads.len();
        println!("{:<16}{:>7}  {}", p.name, n, p.about);
    }
}

fn key(strategy: &str, size: usize, threads: usize) -> (String, usize, usize) {
    (strategy.to_string(), size, threads)
}

pub fn sweep(a: &SweepArgs) -> anyhow::Result<ExitCode> {
    if a.list_presets {
        list();
        return Ok(ExitCode::SUCCESS);
    }
    let (dir, mut rec, preset) = match &a.resume {
        Some(dir) => {
            let path = dir.join("results.json");
            let results = report::load(&path)
                .context("--resume needs a sweep directory holding its results.json")?;
            let Some(info) = results.sweep.clone() else {
                bail!(
                    "{} was not written by `sendpath sweep`; --resume continues sweeps only",
                    path.display()
                );
            };
            let mut preset = presets::find(&info.preset).map_err(anyhow::Error::msg)?;
            preset.duration = std::time::Duration::from_secs_f64(info.duration_s);
            preset.warmup = std::time::Duration::from_secs_f64(info.warmup_s);
            preset.repeat = info.repeat;
            let rec = Recorder::with_results(results, Some(path), Some(dir.join("results.csv")));
            (dir.clone(), rec, preset)
        }
        None => {
            let mut preset: Preset = presets::find(&a.preset).map_err(anyhow::Error::msg)?;
            if let Some(d) = a.duration {
                preset.duration = d;
            }
            if let Some(w) = a.warmup {
                preset.warmup = w;
            }
            if let Some(n) = a.repeat {
                preset.repeat = n;
            }
            let dir = match &a.out {
                Some(d) => d.clone(),
                None => {
                    let base = PathBuf::from("sendpath-results");
                    let d = base.join(format!("{}-{}", preset.name, timestamp()));
                    std::fs::create_dir_all(&d)
                        .with_context(|| format!("cannot create {}", d.display()))?;
                    let latest = base.join("latest");
                    let _ = std::fs::remove_file(&latest);
                    let _ = std::os::unix::fs::symlink(d.file_name().expect("dir name"), &latest);
                    d
                }
            };
            if dir.join("results.json").exists() {
                bail!(
                    "{} already holds results; continue it with --resume {} or choose another --out",
                    dir.display(),
                    dir.display()
                );
            }
            std::fs::create_dir_all(&dir)
                .with_context(|| format!("cannot create {}", dir.display()))?;
            let mut rec = Recorder::new(
                Some(dir.join("results.json")),
                Some(dir.join("results.csv")),
            );
            rec.results.sweep = Some(SweepInfo {
                preset: preset.name.into(),
                duration_s: preset.duration.as_secs_f64(),
                warmup_s: preset.warmup.as_secs_f64(),
                repeat: preset.repeat,
                points_total: preset.strategies.len() * preset.sizes.len() * preset.threads.len(),
            });
            (dir, rec, preset)
        }
    };
    let done: std::collections::BTreeSet<_> = rec
        .results
        .results
        .iter()
        .map(|r| key(&r.strategy, r.size_bytes, r.threads))
        .collect();
    let mut todo = Vec::new();
    for &s in &preset.strategies {
        for &size in &preset.sizes {
            for &t in &preset.threads {
                if !done.contains(&key(s.name(), size, t)) {
                    todo.push((s, size, t));
                }
            }
        }
    }
    eprintln!(
        "sweep {}: {} points to measure ({} already done), {} x {:.2} s each, results in {}",
        preset.name,
        todo.len(),
        done.len(),
        preset.repeat,
        preset.duration.as_secs_f64(),
        dir.display()
    );
    // Each repeat also sets up and tears down its connections (about 0.1 s).
    let per_point = ((preset.duration + preset.warmup).as_secs_f64() + 0.1) * preset.repeat as f64;
    let pb = indicatif::ProgressBar::new(todo.len() as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} points, ETA {eta} {msg}")
            .expect("valid template"),
    );
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        rec.progress = Some(pb.clone());
    } else {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    rec.say(&crate::output::table_header());
    let mut meter = Meter::open(false);
    let mut current_file: Option<(sendpath::Strategy, usize, crate::workload::PatternFile)> = None;
    for (i, &(strategy, size, threads)) in todo.iter().enumerate() {
        if INTERRUPTED.load(Ordering::Relaxed) {
            break;
        }
        pb.set_message(format!(
            "{strategy} {} x{threads}",
            crate::units::fmt_size(size)
        ));
        if rec.progress.is_none() {
            eprintln!(
                "[{}/{}] {strategy} {} x{threads}, about {:.0} s left",
                i + 1,
                todo.len(),
                crate::units::fmt_size(size),
                (todo.len() - i) as f64 * per_point
            );
        }
        if strategy.source() == sendpath::Source::File
            && !matches!(&current_file, Some((s, z, _)) if *s == strategy && *z == size)
        {
            current_file = source_file(strategy, size, None, false)?.map(|f| (strategy, size, f));
        }
        let file = current_file
            .as_ref()
            .filter(|(s, z, _)| *s == strategy && *z == size)
            .map(|(_, _, f)| f);
        let pt = StreamPoint {
            strategy,
            size,
            threads,
            fields: preset.fields,
            recv: RecvMode::Copy,
            duration: preset.duration,
            warmup: preset.warmup,
            connect: None,
            cpus: None,
            opts: sendpath::Options::default(),
        };
        let cpu_mhz = rec.cpu_mhz();
        match stream_point(&pt, preset.repeat, file, false, &mut meter, cpu_mhz) {
            Ok((row, outs)) => rec.push(row, outs)?,
            Err(e) => {
                pb.finish_and_clear();
                rec.write(true)?;
                report::write(&dir, &rec.results)?;
                return Err(e).context(format!(
                    "resume with: sendpath sweep --resume {}",
                    dir.display()
                ));
            }
        }
        pb.inc(1);
    }
    pb.finish_and_clear();
    let a = report::write(&dir, &rec.results)?;
    println!(
        "wrote {}/results.json, results.csv, summary.md, report.html",
        dir.display()
    );
    if INTERRUPTED.load(Ordering::Relaxed) {
        eprintln!("continue with: sendpath sweep --resume {}", dir.display());
    } else {
        if let Some(n) = &a.copied_notice {
            println!("\nRead this first: {n}");
        }
        println!("\nRecommendation:");
        for x in &a.recommendations {
            println!(
                "  {} messages {} ({} connection(s)): {} ({})",
                x.source,
                report::size_range(x.from_size, x.to_size),
                x.threads,
                x.path,
                x.why
            );
        }
    }
    rec.finish()
}

pub fn report_cmd(a: &ReportArgs) -> anyhow::Result<ExitCode> {
    let r = report::load(&a.results)?;
    let out: &Path = a
        .out
        .as_deref()
        .unwrap_or_else(|| a.results.parent().unwrap_or(Path::new(".")));
    report::write(out, &r)?;
    println!("wrote {}/summary.md and report.html", out.display());
    Ok(ExitCode::SUCCESS)
}
