//! `sendpath sweep` and `sendpath report`.

use crate::cli::{ReportArgs, SweepArgs};
use crate::measure::Meter;
use crate::presets::{self, Preset};
use crate::report::{self, analysis};
use crate::results::{Schedule, SweepInfo};
use crate::run_cmd::{fresh_seed, source_file, stream_matrix, Point, Recorder};
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

/// The points of a preset, in preset order (each round shuffles them).
fn points(preset: &Preset) -> Vec<Point> {
    stream_matrix(
        &preset.strategies,
        &preset.sizes,
        &preset.threads,
        |strategy, size, threads| StreamPoint {
            strategy,
            size,
            threads,
            connections: 1,
            fields: preset.fields,
            recv: RecvMode::Copy,
            recv_size: crate::workload::default_recv_size(size),
            duration: preset.duration,
            warmup: preset.warmup,
            connect: None,
            cpus: None,
            cold: false,
            opts: sendpath::Options::default(),
        },
    )
}

pub(crate) fn sweep(a: &SweepArgs) -> anyhow::Result<ExitCode> {
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
            let schedule = Schedule {
                rounds: preset.repeat,
                seed: a.seed.unwrap_or_else(fresh_seed),
            };
            let mut rec = Recorder::new(
                Some(dir.join("results.json")),
                Some(dir.join("results.csv")),
                schedule,
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
    let points = points(&preset);
    let rounds = rec.results.schedule.rounds;
    let windows_total = points.len() * rounds as usize;
    let windows_done: usize = rec.results.results.iter().map(|r| r.repeats.len()).sum();
    let todo = windows_total.saturating_sub(windows_done);
    eprintln!(
        "sweep {}: {} points x {} rounds ({} windows to measure, {} already done), {:.2} s each, each round in a shuffled order (seed {}), results in {}",
        preset.name,
        points.len(),
        rounds,
        todo,
        windows_done,
        preset.duration.as_secs_f64(),
        rec.results.schedule.seed,
        dir.display()
    );
    let pb = indicatif::ProgressBar::new(todo as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} windows, ETA {eta}")
            .expect("valid template"),
    );
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        rec.progress = Some(pb.clone());
    } else {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let has_file_paths = preset
        .strategies
        .iter()
        .any(|s| s.source() == sendpath::Source::File);
    let file = if has_file_paths {
        Some(source_file(&preset.sizes, None, false, false)?)
    } else {
        None
    };
    let mut meter = Meter::open(false);
    let ran = rec.run_rounds(&points, file.as_ref(), &mut meter, &|| pb.inc(1));
    pb.finish_and_clear();
    if let Err(e) = ran {
        report::write(&dir, &rec.results)?;
        return Err(e).context(format!(
            "resume with: sendpath sweep --resume {}",
            dir.display()
        ));
    }
    rec.progress = None;
    rec.print_table();
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
        println!("\nRecommendation ({}):", analysis::RULE_SHORT);
        for x in &a.recommendations {
            println!(
                "  {} messages {} ({} connection(s)): {}",
                x.source,
                report::size_range(x.from_size, x.to_size),
                x.threads,
                x.path,
            );
            println!("      {}", x.why);
        }
    }
    rec.finish()
}

pub(crate) fn report_cmd(a: &ReportArgs) -> anyhow::Result<ExitCode> {
    let r = report::load(&a.results)?;
    let out: &Path = a
        .out
        .as_deref()
        .unwrap_or_else(|| a.results.parent().unwrap_or(Path::new(".")));
    report::write(out, &r)?;
    println!("wrote {}/summary.md and report.html", out.display());
    Ok(ExitCode::SUCCESS)
}
