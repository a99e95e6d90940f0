//! `sendpath calibrate`: measure this host's crossover and write the host profile.

use crate::cli::CalibrateArgs;
use anyhow::{bail, Context};
use sendpath::profile::{Profile, TierPath};
use sendpath_lab::calibrate;
use sendpath_lab::cancel::Cancel;
use sendpath_lab::measure::Meter;
use sendpath_lab::results::Schedule;
use sendpath_lab::runner::{fresh_seed, Recorder};
use sendpath_lab::units::fmt_size;
use std::process::ExitCode;

pub(crate) fn run(a: &CalibrateArgs, cancel: &Cancel) -> anyhow::Result<ExitCode> {
    let out = match a.out.clone().or_else(Profile::active_path) {
        Some(p) => p,
        None => bail!("no place for the profile: give --out FILE, or set SENDPATH_PROFILE or HOME"),
    };
    let points = calibrate::points(&a.sizes, a.duration, a.warmup);
    let schedule = Schedule {
        rounds: a.repeat,
        seed: a.seed.unwrap_or_else(fresh_seed),
    };
    let windows = points.len() as u32 * a.repeat;
    eprintln!(
        "calibrate: {} against {} at {} sizes, {} rounds in a shuffled order (seed {}): {} windows of {:.1} s, about {:.0} s",
        calibrate::PATHS.1,
        calibrate::PATHS.0,
        a.sizes.len(),
        a.repeat,
        schedule.seed,
        windows,
        a.duration.as_secs_f64(),
        f64::from(windows) * (a.duration + a.warmup).as_secs_f64() + f64::from(windows) * 0.05
    );
    if a.repeat < 5 {
        eprintln!("note: fewer than 5 rounds: the tiers rest on very few paired windows");
    }
    let mut rec = Recorder::new(a.json.clone(), None, schedule);
    rec.cancel = cancel.clone();
    let mut meter = Meter::open(true);
    rec.run_rounds(&points, None, &mut meter, &|| {})?;
    if cancel.is_cancelled() {
        rec.write(true)?;
        bail!("interrupted: no profile written (a profile needs every round)");
    }
    let profile = calibrate::profile(&rec.results);
    println!();
    println!(
        "{:>8}  {:>11}  {:>15}  {:>26}  {:>5}  {:>6}  tier",
        "size", "copy Gbit/s", "zerocopy Gbit/s", "zerocopy/copy per round", "wins", "copied"
    );
    for m in &profile.measurements {
        println!(
            "{:>8}  {:>11.3}  {:>15.3}  {:>26}  {:>5}  {:>6}  {}",
            fmt_size(m.size_bytes),
            m.copy_gbps,
            m.zerocopy_gbps,
            format!(
                "{:.3} [{:.3}..{:.3}]",
                m.ratio_median, m.ratio_min, m.ratio_max
            ),
            format!("{}/{}", m.zerocopy_wins, m.rounds),
            m.zerocopy_copied_fraction
                .map_or("-".into(), |f| format!("{:.0}%", f * 100.0)),
            match profile.tier(m.size_bytes) {
                TierPath::Copy => "copy",
                TierPath::ZeroCopy => "zero-copy",
            }
        );
    }
    profile
        .save(&out)
        .with_context(|| format!("writing the profile to {}", out.display()))?;
    println!();
    println!("wrote {}", out.display());
    println!("tiers: {}", profile.describe_tiers().join(", "));
    if profile.zerocopy_measured_copied {
        println!("the kernel copied the zero-copy sends here (a local receiver), and zero-copy won anyway where its tier says: adaptive keeps it there and does not back off on copied completions");
    }
    rec.write(true)?;
    Ok(ExitCode::SUCCESS)
}
