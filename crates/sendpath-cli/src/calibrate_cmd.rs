//! `sendpath calibrate`: measure this host's crossover and write the host profile.

use crate::cli::CalibrateArgs;
use anyhow::{bail, Context};
use sendpath::{Calibration, Profile};
use sendpath_lab::cancel::Cancel;
use sendpath_lab::measure::Meter;
use sendpath_lab::study::calibrate;
use sendpath_lab::study::rows::Schedule;
use sendpath_lab::study::rows::{fresh_seed, Recorder};
use sendpath_lab::units::fmt_size;
use std::process::ExitCode;

/// Where the profile goes, its directory made as saving it would (~/.config/sendpath, say;
/// not under --dry-run).
fn profile_path(a: &CalibrateArgs) -> anyhow::Result<std::path::PathBuf> {
    let out = match a.out.clone().or_else(Profile::active_path) {
        Some(p) => p,
        None => bail!("no place for the profile: give --out FILE, or set SENDPATH_PROFILE or HOME"),
    };
    let parent = out.parent().filter(|d| !d.as_os_str().is_empty());
    if let Some(dir) = parent.filter(|d| !crate::cli::is_dry_run() || d.exists()) {
        std::fs::create_dir_all(dir).with_context(|| {
            format!(
                "{} {}: cannot create {}",
                out_flag_name(a),
                out.display(),
                dir.display()
            )
        })?;
    }
    Ok(out)
}

/// Says what the calibration will measure, and how long it should take.
fn announce(a: &CalibrateArgs, seed: u64) {
    let windows = sizes(a).len() as u32 * Profile::TIER_PATHS.len() as u32 * a.repeat;
    eprintln!(
        "calibrate: {} at {} sizes, {} rounds in a shuffled order (seed {}): {} windows of {:.1} s, about {:.0} s",
        Profile::TIER_PATHS.map(|s| s.name()).join(", "),
        sizes(a).len(),
        a.repeat,
        seed,
        windows,
        a.duration.as_secs_f64(),
        f64::from(windows) * (a.duration + a.warmup).as_secs_f64() + f64::from(windows) * 0.05
    );
    if a.repeat < 5 {
        eprintln!("note: fewer than 5 rounds: the tiers rest on very few paired windows");
    }
}

pub(crate) fn run(a: &CalibrateArgs, cancel: &Cancel) -> anyhow::Result<ExitCode> {
    let out = profile_path(a)?;
    let out_flag = out_flag_name(a);
    crate::cli::check_outputs([
        (out_flag, Some(out.as_path())),
        ("--json", a.json.as_deref()),
    ])?;
    check_sizes(a)?;
    let what = format!(
        "calibrate: {} size(s), {} round(s), the profile to {}",
        sizes(a).len(),
        a.repeat,
        out.display()
    );
    if let Some(done) = crate::cli::dry_run(what) {
        return Ok(done);
    }
    let route = route(a)?;
    let seed = a.seed.unwrap_or_else(fresh_seed);
    let cal = Calibration {
        sizes: sizes(a),
        rounds: a.repeat,
        tiebreak_rounds: a.tiebreak_rounds,
        seed,
        route: route.describe(&sizes(a)),
        options: sendpath::Options {
            uring_fixed_buffers: route.fixed_buffers,
            ..Default::default()
        },
        command_line: std::env::args().collect(),
    };
    announce(a, seed);
    // The windows are recorded as a run of rounds: the planned ones, then tie-break ones.
    let schedule = Schedule {
        rounds: a.repeat + a.tiebreak_rounds,
        seed,
    };
    let mut rec = Recorder::new(a.json.clone(), None, schedule);
    rec.cancel = cancel.clone();
    let mut meter = Meter::open(true);
    let measured = calibrate::run(&cal, &route, (a.duration, a.warmup), &mut rec, &mut meter);
    let profile = match measured {
        Ok(Some(p)) => p,
        Ok(None) => {
            rec.write(true)?;
            bail!("interrupted: no profile written (a profile needs every round)");
        }
        Err(e) => return Err(e),
    };
    print_profile(&profile);
    profile
        .save(&out)
        .with_context(|| format!("writing the profile to {}", out.display()))?;
    println!();
    println!("wrote {}", out.display());
    println!("tiers: {}", profile.describe_tiers().join(", "));
    if profile.zerocopy_measured_copied() {
        println!("the kernel copied the zero-copy sends here (a local receiver), and zero-copy won anyway where its tier says: adaptive keeps it there and does not back off on copied completions");
    }
    rec.write(true)?;
    Ok(ExitCode::SUCCESS)
}

/// The profile's measurements, one line per size, and which path took each contested tier.
fn print_profile(profile: &Profile) {
    println!();
    println!(
        "{:>8}  {:<42}  {:<42}  {:<42}  tier",
        "size", "msg-zerocopy / copy per round (wins)", "uring / copy", "uring-zc / copy"
    );
    for m in profile.measurements() {
        let cell = |s: sendpath::Strategy| {
            m.paths
                .iter()
                .find(|p| p.path == s)
                .map_or("-".into(), |p| {
                    format!(
                        "{:.3} [{:.3}..{:.3}] ({}/{}){}",
                        p.ratio_median,
                        p.ratio_min,
                        p.ratio_max,
                        p.wins,
                        m.rounds,
                        p.copied_fraction.map_or(String::new(), |f| format!(
                            " copied {}",
                            sendpath_lab::units::percent(f)
                        ))
                    )
                })
        };
        let copy = m.paths.iter().find(|p| p.path == sendpath::Strategy::Copy);
        println!(
            "{:>8}  {:<42}  {:<42}  {:<42}  {} (copy {:.2} Gbit/s)",
            fmt_size(m.size_bytes),
            cell(sendpath::Strategy::MsgZerocopy),
            cell(sendpath::Strategy::Uring),
            cell(sendpath::Strategy::UringZc),
            profile.tier(m.size_bytes),
            copy.map_or(0.0, |c| c.gbps)
        );
    }
    for m in profile.measurements() {
        let c = m.candidates(calibrate::MARGIN);
        let [a, b, ..] = c.as_slice() else {
            continue;
        };
        if let Some((n, w, ratio)) = m.pair(a.path, b.path) {
            println!(
                "{:>8}  {} / {} per round {:.3} ({}/{}): {} takes the tier",
                fmt_size(m.size_bytes),
                a.path,
                b.path,
                ratio,
                w,
                n,
                profile.tier(m.size_bytes)
            );
        }
    }
}

/// The route the flags name (`--proto`, `--topology`, `--fixed-buffers`, `--arena`), its
/// namespace made.
fn route(a: &CalibrateArgs) -> anyhow::Result<calibrate::Route> {
    let udp = a.proto == sendpath_lab::traffic::datagram::Protocol::Udp;
    Ok(calibrate::Route {
        proto: a.proto,
        netns: a.topology.create(false, udp)?,
        fixed_buffers: a.fixed_buffers,
        arena: a.arena,
    })
}

/// Refuses a size a UDP datagram cannot carry.
fn check_sizes(a: &CalibrateArgs) -> anyhow::Result<()> {
    use sendpath_lab::traffic::datagram::{Protocol, HEADER, MAX_PAYLOAD};
    let fits = HEADER..=MAX_PAYLOAD;
    match sizes(a).into_iter().find(|s| !fits.contains(s)) {
        Some(s) if a.proto == Protocol::Udp => {
            bail!("--sizes {s}: a UDP datagram here carries {HEADER}..{MAX_PAYLOAD} bytes")
        }
        _ => Ok(()),
    }
}

/// The sizes to calibrate: `--sizes`, or the defaults of the protocol (a UDP datagram
/// carries at most 65507 bytes, so 64000 stands for 64 KiB there).
fn sizes(a: &CalibrateArgs) -> Vec<usize> {
    use sendpath_lab::traffic::datagram::Protocol;
    match (&a.sizes, a.proto) {
        (Some(s), _) => s.clone(),
        (None, Protocol::Udp) => vec![256, 1 << 10, 4 << 10, 16 << 10, 64_000],
        // The library's own defaults.
        (None, _) => sendpath::Calibration::new("").sizes,
    }
}

/// What the profile's path is called in errors: the flag that gave it, or what it is.
fn out_flag_name(a: &CalibrateArgs) -> &'static str {
    if a.out.is_some() {
        "--out"
    } else {
        "the profile"
    }
}
