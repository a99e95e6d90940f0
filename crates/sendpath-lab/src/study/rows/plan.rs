//! What a sweep will run, decided without any I/O: the preset with the user's overrides (or,
//! when resuming, the settings the results file was made with), its points, the round schedule,
//! and how many windows are left. The runner (`sendpath sweep`) creates directories, measures
//! and writes; this module only decides.

use crate::study::presets::{self, Preset};
use crate::study::rows::{stream_matrix, Point};
use crate::study::rows::{Results, Schedule, SweepInfo};
use crate::traffic::mix::{Alloc, Burst, SizeMix};
use crate::workload::stream::StreamPoint;
use crate::workload::{default_recv_size, RecvMode};
use std::time::Duration;

/// The flags that change a preset.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct Overrides {
    /// `--duration`.
    pub duration: Option<Duration>,
    /// `--warmup`.
    pub warmup: Option<Duration>,
    /// `--repeat` (rounds).
    pub repeat: Option<u32>,
    /// `--seed`.
    pub seed: Option<u64>,
    /// `--copy-batch`: messages per system call for `copy` ([`sendpath::Options::copy_batch`]).
    pub copy_batch: Option<usize>,
}

/// A sweep, planned.
#[derive(Debug, Clone)]
pub struct SweepPlan {
    /// The preset, with overrides applied (or restored from the results file).
    pub preset: Preset,
    /// Rounds and seed.
    pub schedule: Schedule,
    /// The points, in preset order (each round shuffles them).
    pub points: Vec<Point>,
    /// Windows the whole sweep measures (points x rounds).
    pub windows_total: usize,
    /// Windows already in the results (resume).
    pub windows_done: usize,
    /// Messages per system call of `copy` (`--copy-batch`; 1: one `send` each).
    pub copy_batch: usize,
}

impl SweepPlan {
    /// Windows still to measure.
    pub fn windows_left(&self) -> usize {
        self.windows_total.saturating_sub(self.windows_done)
    }

    /// What the results file records about this sweep, so that `--resume` can restore it.
    pub fn info(&self) -> SweepInfo {
        SweepInfo {
            preset: self.preset.name.into(),
            duration_s: self.preset.duration.as_secs_f64(),
            warmup_s: self.preset.warmup.as_secs_f64(),
            repeat: self.preset.repeat,
            points_total: self.points.len(),
            copy_batch: self.copy_batch,
        }
    }

    /// Sends `copy`'s messages `n` to a system call in every stream point.
    fn batch_copy(mut self, n: usize) -> SweepPlan {
        self.copy_batch = n;
        for p in &mut self.points {
            if let Point::Stream(s) = p {
                s.opts.copy_batch = n;
            }
        }
        self
    }

    /// Whether the preset has file paths (the runner then creates the source file).
    pub fn needs_file(&self) -> bool {
        self.preset
            .strategies
            .iter()
            .any(|s| s.source() == sendpath::Source::File)
    }
}

/// A new sweep of preset `name` with `o` applied; `fresh_seed` is used when `o.seed` is absent.
pub fn new_sweep(name: &str, o: &Overrides, fresh_seed: u64) -> Result<SweepPlan, String> {
    let mut preset = presets::find(name)?;
    if let Some(d) = o.duration {
        preset.duration = d;
    }
    if let Some(w) = o.warmup {
        preset.warmup = w;
    }
    if let Some(n) = o.repeat {
        preset.repeat = n;
    }
    let schedule = Schedule {
        rounds: preset.repeat,
        seed: o.seed.unwrap_or(fresh_seed),
    };
    Ok(plan(preset, schedule, 0).batch_copy(o.copy_batch.unwrap_or(1)))
}

/// The rest of the sweep that wrote `results`: same preset, timing, rounds and seed.
pub fn resume(results: &Results) -> Result<SweepPlan, String> {
    let Some(info) = &results.sweep else {
        return Err(
            "this results file was not written by `sendpath sweep`: only a sweep can be continued"
                .into(),
        );
    };
    let mut preset = presets::find(&info.preset)?;
    let secs = |s: f64, what: &str| {
        Duration::try_from_secs_f64(s)
            .map_err(|_| format!("the results file's sweep {what} ({s} s) is not a duration"))
    };
    preset.duration = secs(info.duration_s, "duration")?;
    preset.warmup = secs(info.warmup_s, "warmup")?;
    preset.repeat = info.repeat;
    let done = results.results.iter().map(|r| r.repeats.len()).sum();
    let p = plan(preset, results.schedule, done).batch_copy(info.copy_batch);
    if p.points.len() != info.points_total {
        return Err(format!(
            "the results file's sweep had {} points and preset `{}` now has {}: it was made by another version; start a new sweep",
            info.points_total,
            info.preset,
            p.points.len()
        ));
    }
    Ok(p)
}

fn plan(preset: Preset, schedule: Schedule, windows_done: usize) -> SweepPlan {
    let points = points(&preset);
    SweepPlan {
        windows_total: points.len() * schedule.rounds as usize,
        windows_done,
        points,
        schedule,
        preset,
        copy_batch: 1,
    }
}

/// A preset's point with default send options (the runner sets the host profile for
/// `adaptive`).
fn base_point(
    preset: &Preset,
    strategy: sendpath::Strategy,
    size: usize,
    threads: usize,
    mix: Option<&SizeMix>,
    alloc: Alloc,
) -> StreamPoint {
    StreamPoint {
        strategy,
        size,
        threads,
        connections: 1,
        fields: preset.fields,
        recv: RecvMode::Copy,
        recv_size: default_recv_size(mix.map_or(size, SizeMix::max)),
        duration: preset.duration,
        warmup: preset.warmup,
        connect: None,
        cpus: None,
        cold: false,
        opts: sendpath::Options::default(),
        mix: mix.cloned(),
        alloc,
        netns: None,
        agent: None,
        proto: preset.proto,
        gso: None,
        msg_latency: preset.msg_latency,
        burst: None,
        congestion: None,
        runtime: crate::traffic::Runtime::Thread,
    }
}

/// The points of a preset, in preset order: every size with every allocation mode and
/// receiver, then every mix, the burst points, the paths again from registered buffers, and the GSO points.
pub fn points(preset: &Preset) -> Vec<Point> {
    let point =
        |s, size, t, mix: Option<&SizeMix>, alloc| base_point(preset, s, size, t, mix, alloc);
    let mut v = Vec::new();
    let recvs = match preset.recvs.as_slice() {
        [] => &[RecvMode::Copy][..],
        r => r,
    };
    for &alloc in &preset.allocs {
        for &recv in recvs {
            v.extend(stream_matrix(
                &preset.strategies,
                &preset.sizes,
                &preset.threads,
                |s, size, t| StreamPoint {
                    recv,
                    ..point(s, size, t, None, alloc)
                },
            ));
        }
    }
    for m in &preset.mixes {
        let mix = SizeMix::parse(m, 1 << 30).expect("presets' mixes parse (tested)");
        let mean = mix.mean().round() as usize;
        v.extend(stream_matrix(
            &preset.strategies,
            &[mean],
            &preset.threads,
            |s, size, t| point(s, size, t, Some(&mix), Alloc::Pool),
        ));
    }
    // Burst load: every path at the burst's sizes, with every allocation mode.
    if let Some((b, sizes)) = &preset.burst {
        let burst = Burst::parse(b).expect("presets' bursts parse (tested)");
        for &alloc in &preset.allocs {
            v.extend(stream_matrix(
                &preset.strategies,
                sizes,
                &[1],
                |s, size, t| StreamPoint {
                    burst: Some(burst),
                    ..point(s, size, t, None, alloc)
                },
            ));
        }
    }
    v.extend(registered_and_gso(preset));
    v
}

/// The paths measured again from registered buffers, then the GSO points of every path.
fn registered_and_gso(preset: &Preset) -> Vec<Point> {
    let point = |s, size| base_point(preset, s, size, 1, None, Alloc::Pool);
    let fixed = |mut p: StreamPoint| {
        p.opts.uring_fixed_buffers = true;
        p
    };
    let mut v = Vec::new();
    for &size in &preset.sizes {
        for &s in &preset.fixed_also {
            v.push(Point::Stream(fixed(point(s, size))));
        }
    }
    for &(size, seg) in &preset.gso {
        let plain = preset.strategies.iter().map(|&s| point(s, size));
        let registered = preset.fixed_also.iter().map(|&s| fixed(point(s, size)));
        v.extend(plain.chain(registered).map(|mut p| {
            p.gso = Some(seg);
            Point::Stream(p)
        }));
    }
    v
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::rows::Row;
    use crate::window::Repeat;

    #[test]
    fn a_receiver_elsewhere_has_no_threads_counted_here() {
        let quick = presets::find("quick").unwrap();
        let mut pt = base_point(
            &quick,
            sendpath::Strategy::Copy,
            4096,
            40,
            None,
            Alloc::Pool,
        );
        assert_eq!(Point::Stream(pt.clone()).counted_threads(), 80);
        pt.connect = Some("127.0.0.1:9".parse().unwrap());
        assert_eq!(Point::Stream(pt).counted_threads(), 40);
    }

    #[test]
    fn every_preset_plans_its_whole_matrix() {
        for p in presets::all() {
            let plan = new_sweep(p.name, &Overrides::default(), 9).unwrap();
            let n = p.strategies.len()
                * (p.sizes.len() * p.allocs.len() * p.recvs.len().max(1) + p.mixes.len())
                * p.threads.len()
                + p.fixed_also.len() * p.sizes.len()
                + p.gso.len() * (p.strategies.len() + p.fixed_also.len())
                + p.burst.as_ref().map_or(0, |(_, sizes)| {
                    p.strategies.len() * sizes.len() * p.allocs.len()
                });
            assert_eq!(plan.points.len(), n, "{}", p.name);
            // Every point has a row of its own (a resumed sweep finds each by its key).
            let rows: std::collections::BTreeSet<String> = plan
                .points
                .iter()
                .map(|pt| format!("{:?}", pt.row_key()))
                .collect();
            assert_eq!(rows.len(), n, "{}: two points share a row", p.name);
            assert_eq!(plan.windows_total, n * p.repeat as usize);
            assert_eq!(plan.windows_left(), plan.windows_total);
            assert_eq!(plan.schedule.seed, 9, "the fresh seed when none is given");
            assert_eq!(plan.info().points_total, n);
        }
    }

    #[test]
    fn overrides_win_and_unknown_presets_say_which_exist() {
        let o = Overrides {
            duration: Some(Duration::from_millis(250)),
            warmup: Some(Duration::ZERO),
            repeat: Some(2),
            seed: Some(77),
            copy_batch: Some(8),
        };
        let p = new_sweep("quick", &o, 1).unwrap();
        // `--copy-batch` reaches every stream point and the file `--resume` restores from.
        assert_eq!(p.info().copy_batch, 8);
        assert!(p.points.iter().all(|x| match x {
            Point::Stream(s) => s.opts.copy_batch == 8,
            Point::Rr(_) => false,
        }));
        assert_eq!(p.preset.duration, Duration::from_millis(250));
        assert_eq!(p.preset.warmup, Duration::ZERO);
        assert_eq!(
            p.schedule,
            Schedule {
                rounds: 2,
                seed: 77
            }
        );
        assert!(p.points.iter().all(|x| match x {
            Point::Stream(s) => s.duration == Duration::from_millis(250),
            Point::Rr(_) => false,
        }));
        let e = new_sweep("nope", &o, 1).unwrap_err();
        assert!(
            e.contains("unknown preset `nope`") && e.contains("quick"),
            "{e}"
        );
    }

    fn results_of(plan: &SweepPlan, windows: usize) -> Results {
        let mut r: Results =
            serde_json::from_str(include_str!("../../../tests/data/empty-results.json")).unwrap();
        r.sweep = Some(plan.info());
        r.schedule = plan.schedule;
        r.results = (0..windows)
            .map(|_| Row {
                repeats: vec![Repeat::default()],
                ..Row::default()
            })
            .collect();
        r
    }

    #[test]
    fn resume_restores_the_sweep_and_counts_what_is_done() {
        let o = Overrides {
            duration: Some(Duration::from_millis(300)),
            repeat: Some(3),
            seed: Some(5),
            copy_batch: Some(4),
            ..Overrides::default()
        };
        let first = new_sweep("quick", &o, 1).unwrap();
        let r = results_of(&first, 4);
        let again = resume(&r).unwrap();
        assert_eq!(again.preset.duration, Duration::from_millis(300));
        assert_eq!(
            again.copy_batch, 4,
            "a resumed sweep batches copy as it began"
        );
        assert_eq!(again.schedule, first.schedule);
        assert_eq!(again.windows_done, 4);
        assert_eq!(again.windows_left(), first.windows_total - 4);

        let mut other = r.clone();
        other.sweep = None;
        assert!(resume(&other)
            .unwrap_err()
            .contains("only a sweep can be continued"));
        let mut changed = r;
        changed.sweep.as_mut().unwrap().points_total += 1;
        assert!(resume(&changed).unwrap_err().contains("another version"));
    }
}
