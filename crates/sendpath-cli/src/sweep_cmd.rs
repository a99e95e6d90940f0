//! `sendpath sweep` and `sendpath report`.

use crate::cli::{ReportArgs, SweepArgs};
use anyhow::{bail, Context};
use sendpath_lab::cancel::Cancel;
use sendpath_lab::measure::Meter;
use sendpath_lab::setting::{invalid, Setting};
use sendpath_lab::study::http as http_study;
use sendpath_lab::study::presets::{self, Study};
use sendpath_lab::study::rows::analysis;
use sendpath_lab::study::rows::{self as rows, Overrides};
use sendpath_lab::study::rows::{fresh_seed, source_file, Recorder};
use std::path::{Path, PathBuf};
use std::process::ExitCode;

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
    println!("{:<16}{:<10}{:>6}  about", "preset", "study", "points");
    for e in presets::table() {
        let study = e.study.name();
        println!("{:<16}{study:<10}{:>6}  {}", e.name, e.points, e.about);
    }
}

pub(crate) fn sweep(a: &SweepArgs, cancel: &Cancel) -> anyhow::Result<ExitCode> {
    if a.list_presets {
        list();
        return Ok(ExitCode::SUCCESS);
    }
    let study = match &a.resume {
        Some(_) => None,
        None => Some(
            presets::lookup(&a.preset)
                .map_err(|e| anyhow::anyhow!("{e} (see `sendpath sweep --list-presets`)"))?
                .study,
        ),
    };
    check_congestion_flag(a, study.as_ref())?;
    if let Some(Study::Http) = study {
        if a.topology.topology != "loopback" {
            bail!("the http-server preset runs its servers here and the load here or on --agent: --topology applies to the other presets");
        }
        let dir = out_dir(a.out.as_deref(), &a.preset)?;
        return crate::http_cmd::study(a, &dir, cancel);
    }
    if let Some(Study::Transfer) = study {
        crate::transfer_cmd::check_sweep_args(a)?;
        if let Some(done) = crate::cli::dry_run(format!("sweep {}", a.preset)) {
            return Ok(done);
        }
        let dir = out_dir(a.out.as_deref(), &a.preset)?;
        return crate::transfer_cmd::preset(a, &dir, cancel);
    }
    let (dir, mut rec, mut plan, receiver) = open_plan(a)?;
    let what = format!(
        "sweep {}: {} points x {} rounds, results in {}",
        plan.preset.name,
        plan.points.len(),
        plan.schedule.rounds,
        dir.display()
    );
    if let Some(done) = crate::cli::dry_run(what) {
        return Ok(done);
    }
    crate::cli::check_outputs([("--out", Some(dir.join("results.json").as_path()))])?;
    rec.cancel = cancel.clone();
    attach_receiver(a, &mut rec, &mut plan, receiver)?;
    eprintln!(
        "sweep {}: {} points x {} rounds ({} windows to measure, {} already done), {:.2} s each, each round in a shuffled order (seed {}), results in {}",
        plan.preset.name,
        plan.points.len(),
        plan.schedule.rounds,
        plan.windows_left(),
        plan.windows_done,
        plan.preset.duration.as_secs_f64(),
        plan.schedule.seed,
        dir.display()
    );
    run_windows(&plan, &mut rec, &dir)?;
    rec.print_table();
    rec.results.interrupted = cancel.is_cancelled();
    let a = rows::write(&dir, &rec.results)?;
    println!(
        "wrote {}/results.json, results.csv, summary.md, report.html",
        dir.display()
    );
    if cancel.is_cancelled() {
        eprintln!("continue with: sendpath sweep --resume {}", dir.display());
    } else {
        print_recommendation(&a);
    }
    rec.finish()
}

/// The profile and the agent the flags name, read and checked before anything is written.
struct Receiver {
    profile: Option<std::sync::Arc<sendpath::Profile>>,
    agent: Option<sendpath_lab::remote::AgentTarget>,
}

impl Receiver {
    fn of(a: &SweepArgs, plan: &rows::SweepPlan) -> anyhow::Result<Receiver> {
        let profile = crate::cli::load_profile(a.profile.as_deref(), &plan.preset.strategies)?;
        let agent = a.remote.target()?;
        Ok(Receiver { profile, agent })
    }
}

/// The sweep to run: resumed from `--resume DIR`'s results, or new from the preset; its
/// directory (made only once the profile and agent flags are known to be good), the recorder
/// that writes there, and the receiver.
fn open_plan(a: &SweepArgs) -> anyhow::Result<(OutDir, Recorder, rows::SweepPlan, Receiver)> {
    if let Some(dir) = &a.resume {
        let path = dir.join("results.json");
        let results = rows::load(&path)
            .context("--resume needs a sweep directory holding its results.json")?;
        let plan = rows::resume(&results)
            .map_err(|e| invalid(Setting::Resume, e))
            .with_context(|| format!("cannot resume from {}", path.display()))?;
        let receiver = Receiver::of(a, &plan)?;
        let rec = Recorder::with_results(results, Some(path), Some(dir.join("results.csv")));
        return Ok((OutDir::existing(dir), rec, plan, receiver));
    }
    let overrides = Overrides {
        duration: a.duration,
        warmup: a.warmup,
        repeat: a.repeat,
        seed: a.seed,
        copy_batch: a.copy_batch.map(|n| n as usize),
    };
    let plan = rows::new_sweep(&a.preset, &overrides, fresh_seed()).map_err(anyhow::Error::msg)?;
    let receiver = Receiver::of(a, &plan)?;
    let dir = out_dir(a.out.as_deref(), plan.preset.name)?;
    let mut rec = Recorder::new(
        Some(dir.join("results.json")),
        Some(dir.join("results.csv")),
        plan.schedule,
    );
    rec.results.sweep = Some(plan.info());
    Ok((dir, rec, plan, receiver))
}

/// Gives every stream point the profile, the agent and the namespace the flags name, and
/// records them; a resumed sweep must keep the receiver it started with.
fn attach_receiver(
    a: &SweepArgs,
    rec: &mut Recorder,
    plan: &mut rows::SweepPlan,
    Receiver { profile, agent }: Receiver,
) -> anyhow::Result<()> {
    let agent_name = agent.as_ref().map(|t| t.addr.to_string());
    if agent.is_some() && plan.preset.count_copies {
        bail!(
            "the {} preset counts the copies of sendpath's own receiver threads (and maps pages with --recv zerocopy): run it without --agent",
            plan.preset.name
        );
    }
    let env = &rec.results.environment;
    if a.resume.is_some() && env.agent != agent_name {
        bail!(
            "this sweep's windows were received by {}: resume it with the same receiver ({})",
            env.agent.as_deref().unwrap_or("sendpath itself"),
            env.agent
                .as_deref()
                .map_or("no --agent".into(), |x| format!("--agent {x}"))
        );
    }
    let udp = plan.preset.proto == sendpath_lab::traffic::datagram::Protocol::Udp;
    check_resumed_congestion(a, rec)?;
    if !udp {
        // `check_congestion_flag` refused an unavailable name before the directory was made.
        crate::cli::note_paced(a.congestion.as_deref(), agent.is_none());
    }
    let netns = match (udp, a.topology.topology.as_str()) {
        // A UDP preset runs on the black-hole route unless another is asked for.
        (true, "loopback") => {
            let mut t = a.topology.clone();
            t.topology = "blackhole".into();
            t.create(agent.is_some(), true)?
        }
        _ => a.topology.create(agent.is_some(), udp)?,
    };
    let topology = netns.as_ref().map(|n| n.info().clone());
    if a.resume.is_some() && env.topology.is_some() != topology.is_some() {
        bail!("resume a sweep with the --topology it was started with");
    }
    for p in &mut plan.points {
        if let sendpath_lab::study::rows::Point::Stream(s) = p {
            s.opts.profile = profile.clone();
            s.congestion = a.congestion.clone();
            s.agent = agent.clone();
            s.netns = netns.clone();
        }
    }
    rec.results.environment.profile = profile.map(|p| (*p).clone());
    rec.results.environment.agent = agent_name;
    rec.results.environment.topology = topology;
    Ok(())
}

/// Refuses `--congestion` before any directory is made where it cannot apply: a preset that
/// sends UDP, or one that does not stream (http-server, transfer); `--copy-batch` where no
/// row sends by copy's system calls (http-server, transfer).
fn check_congestion_flag(a: &SweepArgs, study: Option<&Study>) -> anyhow::Result<()> {
    if a.copy_batch.is_some() && !matches!(study, Some(Study::Rows(_))) {
        bail!(
            "--copy-batch applies to the presets of rows (`sendpath sweep --list-presets`), not {}",
            a.preset
        );
    }
    let Some(cc) = &a.congestion else {
        return Ok(());
    };
    match study {
        Some(Study::Rows(p)) if p.proto == sendpath_lab::traffic::datagram::Protocol::Udp => {
            bail!("--congestion is TCP's: the {} preset sends UDP", p.name)
        }
        Some(Study::Http) => {
            bail!(
                "--congestion applies to the stream and file-transfer presets, not {}",
                a.preset
            )
        }
        _ => sendpath_lab::workload::congestion::check(cc),
    }
}

/// A resumed sweep's TCP rows must be measured under the congestion control its first rows
/// were.
fn check_resumed_congestion(a: &SweepArgs, rec: &Recorder) -> anyhow::Result<()> {
    if a.resume.is_none() {
        return Ok(());
    }
    let now = sendpath_lab::workload::congestion::in_effect(a.congestion.as_deref());
    let before = rec
        .results
        .results
        .iter()
        .find_map(|r| r.tcp_congestion.clone());
    match before {
        Some(b) if now.as_deref() != Some(b.as_str()) => bail!(
            "this sweep's connections used TCP congestion control {b}: resume it with \
             --congestion {b}"
        ),
        _ => Ok(()),
    }
}

/// Measures the windows left, with a progress bar on a terminal; after a failure, writes what
/// was measured and says how to resume.
fn run_windows(plan: &rows::SweepPlan, rec: &mut Recorder, dir: &Path) -> anyhow::Result<()> {
    let pb = indicatif::ProgressBar::new(plan.windows_left() as u64);
    pb.set_style(
        indicatif::ProgressStyle::with_template("{bar:30} {pos}/{len} windows, ETA {eta}")
            .expect("valid template"),
    );
    if std::io::IsTerminal::is_terminal(&std::io::stderr()) {
        rec.progress = Some(pb.clone());
    } else {
        pb.set_draw_target(indicatif::ProgressDrawTarget::hidden());
    }
    let file = if plan.needs_file() {
        Some(source_file(&plan.preset.sizes, None, false, false)?)
    } else {
        None
    };
    let mut meter = Meter::open(false);
    if plan.preset.count_copies {
        let states = meter.count_copies().map_err(|why| {
            anyhow::anyhow!(
                "the {} preset counts the kernel's copies and cannot here: {why}",
                plan.preset.name
            )
        })?;
        rec.results.environment.copy_counters = Some(states);
    }
    let ran = rec.run_rounds(&plan.points, file.as_ref(), &mut meter, &|| pb.inc(1));
    pb.finish_and_clear();
    rec.progress = None;
    if let Err(e) = ran {
        rows::write(dir, &rec.results)?;
        return Err(e).context(format!(
            "resume with: sendpath sweep --resume {}",
            dir.display()
        ));
    }
    Ok(())
}

/// The recommendation, as the summary gives it.
fn print_recommendation(a: &analysis::Analysis) {
    if let Some(n) = &a.copied_notice {
        println!("\nRead this first: {n}");
    }
    println!(
        "\nRecommendation ({}; data: {}):",
        analysis::RULE_SHORT,
        a.route
    );
    for x in &a.recommendations {
        println!(
            "  {} messages {} ({} connection(s)): {}",
            x.source,
            x.messages(),
            x.threads,
            x.path,
        );
        println!("      {}", x.why);
    }
}

/// The sweep's directory: `--out`, or a new timestamped one under `sendpath-results/` (with a
/// `latest` link). Refuses a directory that already holds results. A directory this made is
/// removed again when the sweep leaves it empty (a refusal after it was made), and with
/// `--dry-run` none is made.
pub(crate) fn out_dir(out: Option<&Path>, preset: &str) -> anyhow::Result<OutDir> {
    let (path, latest) = match out {
        Some(d) => (d.to_path_buf(), None),
        None => {
            let base = PathBuf::from("sendpath-results");
            let d = base.join(format!("{preset}-{}", timestamp()));
            (d, Some(base.join("latest")))
        }
    };
    if path.join("results.json").exists() {
        bail!(
            "{} already holds results; continue it with --resume {} or choose another --out",
            path.display(),
            path.display()
        );
    }
    let made = !path.exists() && !crate::cli::is_dry_run();
    if made {
        std::fs::create_dir_all(&path)
            .with_context(|| format!("cannot create {}", path.display()))?;
    }
    if let (Some(l), true) = (&latest, made) {
        let _ = std::fs::remove_file(l);
        let _ = std::os::unix::fs::symlink(path.file_name().expect("dir name"), l);
    }
    Ok(OutDir { path, made, latest })
}

/// A sweep's output directory (see [`out_dir`]).
pub(crate) struct OutDir {
    path: PathBuf,
    /// This run made it.
    made: bool,
    /// The `latest` link made to it.
    latest: Option<PathBuf>,
}

impl OutDir {
    /// A directory that is there already (a resumed sweep's), never removed.
    fn existing(path: &Path) -> OutDir {
        OutDir {
            path: path.to_path_buf(),
            made: false,
            latest: None,
        }
    }
}

impl std::ops::Deref for OutDir {
    type Target = Path;
    fn deref(&self) -> &Path {
        &self.path
    }
}

impl Drop for OutDir {
    /// Removes the directory this run made if nothing was written to it (and its `latest`).
    fn drop(&mut self) {
        if self.made && std::fs::remove_dir(&self.path).is_ok() {
            if let Some(l) = &self.latest {
                let _ = std::fs::remove_file(l);
            }
        }
    }
}

pub(crate) fn report_cmd(a: &ReportArgs) -> anyhow::Result<ExitCode> {
    use sendpath_lab::study::{load_any, transfer, StudyFile};
    let out: &Path = a
        .out
        .as_deref()
        .unwrap_or_else(|| a.results.parent().unwrap_or(Path::new(".")));
    let file = load_any(&a.results)?;
    if let Some(done) = crate::cli::dry_run(format!("report into {}", out.display())) {
        return Ok(done);
    }
    match &file {
        StudyFile::Rows(r) => drop(rows::write(out, r)?),
        StudyFile::Server(h) => drop(http_study::write_http(out, h)?),
        StudyFile::Transfer(t) => {
            sendpath_lab::files::write_text(&out.join("summary.md"), &transfer::summary(t))?;
            println!("wrote {}/summary.md", out.display());
            return Ok(ExitCode::SUCCESS);
        }
    }
    println!("wrote {}/summary.md and report.html", out.display());
    Ok(ExitCode::SUCCESS)
}
