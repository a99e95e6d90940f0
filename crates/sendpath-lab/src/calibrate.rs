//! `sendpath calibrate`: copy against zero-copy at each size, in interleaved rounds, turned
//! into a host profile ([`sendpath::profile::Profile`]) that `adaptive` decides from.
//!
//! The points are stream points (one connection on loopback, the receiver copying, one
//! buffer per message) of `copy` and `msg-zerocopy`: the two paths the `adaptive` path chooses
//! between. Each round measures every point once, in a shuffled order with the two paths of a
//! size back to back; a size goes zero-copy when `msg-zerocopy` was faster in more than half of
//! its paired rounds and by more than 3% in the median ratio
//! ([`Profile::from_measurements`](sendpath::profile::Profile::from_measurements)).

use crate::results::Results;
use crate::runner::Point;
use crate::workload::mix::Alloc;
use crate::workload::stream::StreamPoint;
use crate::workload::{default_recv_size, RecvMode};
use sendpath::profile::{Measurement, Profile, ProfileEnvironment};
use sendpath::Strategy;
use std::time::Duration;

/// The sizes calibrated by default: 256 B to 1 MiB in steps of 4x.
pub const DEFAULT_SIZES: [usize; 7] = [
    256,
    1 << 10,
    4 << 10,
    16 << 10,
    64 << 10,
    256 << 10,
    1 << 20,
];

/// The margin by which zero-copy must win to get a tier: 3%.
pub const MARGIN: f64 = 0.03;

/// The copy path and the zero-copy path calibrated.
pub const PATHS: (Strategy, Strategy) = (Strategy::Copy, Strategy::MsgZerocopy);

/// The points of a calibration: both paths at every size.
pub fn points(sizes: &[usize], duration: Duration, warmup: Duration) -> Vec<Point> {
    let mut v = Vec::new();
    for &size in sizes {
        for strategy in [PATHS.0, PATHS.1] {
            v.push(Point::Stream(StreamPoint {
                strategy,
                size,
                threads: 1,
                connections: 1,
                fields: 1,
                recv: RecvMode::Copy,
                recv_size: default_recv_size(size),
                duration,
                warmup,
                connect: None,
                cpus: None,
                cold: false,
                opts: sendpath::Options::default(),
                mix: None,
                alloc: Alloc::Pool,
            }));
        }
    }
    v
}

/// Copy against zero-copy at each size of `r`, paired by round.
pub fn measurements(r: &Results) -> Vec<Measurement> {
    let row = |s: Strategy, size: usize| {
        r.results
            .iter()
            .find(|x| x.strategy == s && x.size_bytes == size && x.is_plain() && x.threads == 1)
    };
    let mut sizes: Vec<usize> = r.results.iter().map(|x| x.size_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut out = Vec::new();
    for size in sizes {
        let (Some(c), Some(z)) = (row(PATHS.0, size), row(PATHS.1, size)) else {
            continue;
        };
        let ratios: Vec<f64> = z
            .repeats
            .iter()
            .filter_map(|zr| {
                let cr = c.repeats.iter().find(|cr| cr.round == zr.round)?;
                (cr.throughput_gbps > 0.0).then(|| zr.throughput_gbps / cr.throughput_gbps)
            })
            .collect();
        if ratios.is_empty() {
            continue;
        }
        let spread = crate::results::Spread::of(&ratios);
        out.push(Measurement {
            size_bytes: size,
            rounds: ratios.len() as u32,
            copy_gbps: c.throughput_gbps.median,
            zerocopy_gbps: z.throughput_gbps.median,
            ratio_median: spread.median,
            ratio_min: spread.min,
            ratio_max: spread.max,
            zerocopy_wins: ratios.iter().filter(|&&x| x > 1.0).count() as u32,
            zerocopy_copied_fraction: z.zerocopy.copied_fraction,
        });
    }
    out
}

/// The profile of a finished calibration.
pub fn profile(r: &Results) -> Profile {
    let env = &r.environment;
    Profile::from_measurements(
        measurements(r),
        MARGIN,
        ProfileEnvironment {
            kernel: env.kernel.clone(),
            cpu: env.cpu.clone(),
            cpus: env.probe.cpus,
            route: "loopback".into(),
            paths: format!("{} against {}", PATHS.1, PATHS.0),
            created_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            sendpath_version: env.sendpath_version.clone(),
            command_line: env.command_line.clone(),
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Repeat, Row, Zerocopy};
    use sendpath::profile::TierPath;

    fn row(s: Strategy, size: usize, gbps: &[f64], copied: Option<f64>) -> Row {
        let mut r = Row {
            strategy: s,
            size_bytes: size,
            threads: 1,
            zerocopy: Zerocopy {
                copied_fraction: copied,
                ..Zerocopy::default()
            },
            ..Row::default()
        };
        r.repeats = gbps
            .iter()
            .enumerate()
            .map(|(i, &g)| Repeat {
                round: i as u32,
                throughput_gbps: g,
                ..Repeat::default()
            })
            .collect();
        r.throughput_gbps = crate::results::Spread::of(gbps);
        r
    }

    #[test]
    fn rounds_are_paired_and_the_tiers_follow_them() {
        let mut r: Results =
            serde_json::from_str(include_str!("../tests/data/empty-results.json")).unwrap();
        let copy = [10.0, 12.0, 8.0, 11.0, 9.0, 10.0];
        // 64 KiB: zero-copy faster in every round, by 20%, though the kernel copied it all.
        let zc64: Vec<f64> = copy.iter().map(|c| c * 1.2).collect();
        // 4 KiB: slower in every round.
        let zc4: Vec<f64> = copy.iter().map(|c| c * 0.8).collect();
        r.results = vec![
            row(Strategy::Copy, 4096, &copy, None),
            row(Strategy::MsgZerocopy, 4096, &zc4, Some(1.0)),
            row(Strategy::Copy, 65536, &copy, None),
            row(Strategy::MsgZerocopy, 65536, &zc64, Some(1.0)),
            row(Strategy::Copy, 1 << 20, &copy, None), // no zero-copy row: left out
        ];
        let m = measurements(&r);
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[1].size_bytes, m[1].rounds, m[1].zerocopy_wins),
            (65536, 6, 6)
        );
        assert!((m[1].ratio_median - 1.2).abs() < 1e-9);
        assert!(
            (m[1].ratio_min - 1.2).abs() < 1e-9,
            "paired: every round 1.2"
        );
        let p = profile(&r);
        assert_eq!(p.tier(4096), TierPath::Copy);
        assert_eq!(p.tier(65536), TierPath::ZeroCopy);
        assert_eq!(p.crossover_bytes, Some(16384), "between 4 and 64 KiB");
        assert!(p.zerocopy_measured_copied);
    }
}
