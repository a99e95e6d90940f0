//! `sendpath calibrate`: the memory paths the `adaptive` path runs (`copy`, `msg-zerocopy`,
//! `uring`, `uring-zc`) at each size, in interleaved rounds, turned into a host profile
//! ([`sendpath::profile::Profile`]) that `adaptive` decides from.
//!
//! The points are stream points (one connection on loopback, the receiver copying, one
//! buffer per message). Each round measures every point once, in a shuffled order with the
//! paths of a size back to back; each path is paired with `copy` by round, and a size takes
//! the path that beat `copy` in more than half of its rounds by the largest median ratio above
//! 1.03 ([`Measurement::winner`]), else `copy`. Sizes where the rounds leave that in doubt get
//! extra rounds first ([`contested`]).

use crate::results::Results;
use crate::study::sweep::Point;
use crate::traffic::mix::Alloc;
use crate::workload::stream::StreamPoint;
use crate::workload::{default_recv_size, RecvMode};
use sendpath::profile::{
    HeadToHead, Measurement, PathMeasurement, Profile, ProfileEnvironment, TIER_PATHS,
};
use sendpath::Strategy;
use std::time::Duration;

/// The margin by which zero-copy must win to get a tier: 3%.
pub const MARGIN: f64 = 0.03;

/// Where and how a calibration sends: TCP on loopback by default; UDP (`--proto udp`) on the
/// black-hole route measures zero-copy that the kernel does not copy.
#[derive(Debug, Clone, Default)]
pub struct Route {
    /// The transport.
    pub proto: crate::traffic::datagram::Protocol,
    /// The namespace (`--topology netns` or `blackhole`); loopback when `None`.
    pub netns: Option<std::sync::Arc<crate::topology::Netns>>,
    /// SEND_ZC from registered buffers (`--fixed-buffers`).
    pub fixed_buffers: bool,
}

impl Route {
    /// In words, as the profile records it: `loopback`, `udp blackhole fixed-buffers`.
    pub fn describe(&self) -> String {
        let mut v = Vec::new();
        if self.proto == crate::traffic::datagram::Protocol::Udp {
            v.push("udp");
        }
        v.push(
            self.netns
                .as_ref()
                .map_or("loopback", |n| n.info().kind.as_str()),
        );
        if self.fixed_buffers {
            v.push("fixed-buffers");
        }
        v.join(" ")
    }
}

/// The points of a calibration: every tier path at every size, on `route`.
pub fn points(sizes: &[usize], duration: Duration, warmup: Duration, route: &Route) -> Vec<Point> {
    let mut v = Vec::new();
    for &size in sizes {
        for strategy in TIER_PATHS {
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
                opts: sendpath::Options {
                    uring_fixed_buffers: route.fixed_buffers,
                    ..Default::default()
                },
                mix: None,
                alloc: Alloc::Pool,
                netns: route.netns.clone(),
                agent: None,
                proto: route.proto,
                gso: None,
                msg_latency: false,
                burst: None,
                congestion: None,
            }));
        }
    }
    v
}

/// Every path against copy at each size of `r`, paired by round.
pub fn measurements(r: &Results) -> Vec<Measurement> {
    let row = |s: Strategy, size: usize| {
        r.results
            .iter()
            .find(|x| x.strategy == s && x.size_bytes == size && one_size(x) && x.threads == 1)
    };
    let mut sizes: Vec<usize> = r.results.iter().map(|x| x.size_bytes).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut out = Vec::new();
    for size in sizes {
        let Some(c) = row(Strategy::Copy, size) else {
            continue;
        };
        let mut paths = Vec::new();
        let mut rounds = 0;
        for s in TIER_PATHS {
            let Some(x) = row(s, size) else {
                continue;
            };
            let ratios: Vec<f64> = x
                .repeats
                .iter()
                .filter_map(|xr| {
                    let cr = c.repeats.iter().find(|cr| cr.round == xr.round)?;
                    (cr.throughput_gbps > 0.0).then(|| xr.throughput_gbps / cr.throughput_gbps)
                })
                .collect();
            if ratios.is_empty() {
                continue;
            }
            rounds = rounds.max(ratios.len() as u32);
            let spread = crate::results::Spread::of(&ratios);
            paths.push(PathMeasurement {
                path: s,
                gbps: x.throughput_gbps.median,
                ratio_median: spread.median,
                ratio_min: spread.min,
                ratio_max: spread.max,
                wins: ratios.iter().filter(|&&v| v > 1.0).count() as u32,
                copied_fraction: x.zerocopy.copied_fraction,
            });
        }
        if paths.len() > 1 {
            out.push(Measurement {
                size_bytes: size,
                rounds,
                paths,
                head_to_head: head_to_head(r, size),
            });
        }
    }
    out
}

/// The paths other than copy at `size` paired with each other by round, each pair both ways
/// (the median of the ratios b / a is not exactly the reciprocal of that of a / b).
fn head_to_head(r: &Results, size: usize) -> Vec<HeadToHead> {
    let rows: Vec<&crate::results::Row> = TIER_PATHS
        .iter()
        .filter(|&&s| s != Strategy::Copy)
        .filter_map(|&s| {
            r.results
                .iter()
                .find(|x| x.strategy == s && x.size_bytes == size && one_size(x) && x.threads == 1)
        })
        .collect();
    let mut out = Vec::new();
    for a in &rows {
        for b in rows.iter().filter(|b| b.strategy != a.strategy) {
            if let Some(p) = crate::analysis::paired(a, b) {
                out.push(HeadToHead {
                    path: a.strategy,
                    over: b.strategy,
                    rounds: p.rounds as u32,
                    wins: p.wins as u32,
                    ratio_median: p.median_ratio,
                });
            }
        }
    }
    out
}

/// A row of one message size, one datagram per send (registered buffers or not: a
/// calibration uses them for every zero-copy send or for none).
fn one_size(x: &crate::results::Row) -> bool {
    x.size_mix.is_none() && x.alloc == Alloc::Pool && x.gso_segment_bytes.is_none()
}

/// The sizes whose winner is in doubt, which `sendpath calibrate` gives extra rounds:
/// - a path took the size from copy (faster in more than half of the rounds, by a median
///   above 1.03) but not in a clear majority of them (the sign test at 5%: 6 of 6, 7 of 8,
///   10 of 12...), so the rounds do not yet say it beats copy; or
/// - two or more paths beat copy, and the two with the largest ratios to copy were not told
///   apart when paired with each other (neither was faster in a clear majority).
pub fn contested(measurements: &[Measurement]) -> Vec<usize> {
    let clear = |n: u32, wins: u32| {
        crate::analysis::clear_majority(n as usize).is_some_and(|k| wins as usize >= k)
    };
    measurements
        .iter()
        .filter(|m| {
            let winner = m.winner(MARGIN);
            let over_copy = winner != Strategy::Copy
                && m.paths
                    .iter()
                    .find(|p| p.path == winner)
                    .is_some_and(|p| !clear(m.rounds, p.wins));
            let c = m.candidates(MARGIN);
            let between = match c.as_slice() {
                [a, b, ..] => m
                    .pair(a.path, b.path)
                    .is_none_or(|(n, w, _)| !clear(n, w) && !clear(n, n - w)),
                _ => false,
            };
            over_copy || between
        })
        .map(|m| m.size_bytes)
        .collect()
}

/// The profile of a finished calibration.
pub fn profile(r: &Results, route: &Route) -> Profile {
    let env = &r.environment;
    Profile::from_measurements(
        measurements(r),
        MARGIN,
        ProfileEnvironment {
            kernel: env.kernel.clone(),
            cpu: env.cpu.clone(),
            cpus: env.probe.cpus,
            route: route.describe(),
            paths: TIER_PATHS
                .iter()
                .map(|s| s.name())
                .collect::<Vec<_>>()
                .join(", "),
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

    /// copy's throughput in six rounds, the base the tests scale.
    const COPY: [f64; 6] = [10.0, 12.0, 8.0, 11.0, 9.0, 10.0];

    fn empty_results() -> Results {
        serde_json::from_str(include_str!("../tests/data/empty-results.json")).unwrap()
    }

    #[test]
    fn rounds_are_paired_and_the_tiers_follow_them() {
        let mut r = empty_results();
        let copy = COPY;
        let times = |k: f64| -> Vec<f64> { copy.iter().map(|c| c * k).collect() };
        r.results = vec![
            row(Strategy::Copy, 4096, &copy, None),
            row(Strategy::MsgZerocopy, 4096, &times(0.8), Some(1.0)),
            row(Strategy::Uring, 4096, &times(0.9), None),
            // 64 KiB: both zero-copy paths faster in every round, though the kernel copied
            // everything; uring-zc by more.
            row(Strategy::Copy, 65536, &copy, None),
            row(Strategy::MsgZerocopy, 65536, &times(1.125), Some(1.0)),
            row(Strategy::UringZc, 65536, &times(1.25), Some(1.0)),
            row(Strategy::Copy, 1 << 20, &copy, None), // alone: left out
        ];
        let m = measurements(&r);
        assert_eq!(m.len(), 2);
        assert_eq!(
            (m[1].size_bytes, m[1].rounds, m[1].paths.len()),
            (65536, 6, 3)
        );
        let zc = m[1]
            .paths
            .iter()
            .find(|p| p.path == Strategy::UringZc)
            .unwrap();
        assert_eq!(zc.wins, 6);
        assert!(
            (zc.ratio_min - 1.25).abs() < 1e-9,
            "paired: every round 1.25"
        );
        assert_eq!(
            m[1].pair(Strategy::UringZc, Strategy::MsgZerocopy),
            Some((6, 6, 1.25 / 1.125)),
            "the two zero-copy paths paired with each other"
        );
        assert!(contested(&m).is_empty(), "6 of 6 tells them apart");
        let p = profile(&r, &Route::default());
        assert_eq!(p.tier(4096), Strategy::Copy);
        assert_eq!(p.tier(65536), Strategy::UringZc);
        assert_eq!(p.crossover_bytes, Some(16384), "between 4 and 64 KiB");
        assert!(p.zerocopy_measured_copied);
    }

    #[test]
    fn sizes_whose_two_best_paths_were_not_told_apart_are_contested() {
        let mut r = empty_results();
        let copy = COPY;
        // Both beat copy in every round; msg-zerocopy has the larger median ratio, but
        // uring-zc was faster than it in 4 of 6 rounds: not a clear majority.
        let mzc = [12.4, 14.3, 9.9, 13.1, 11.2, 12.3];
        let uzc = [12.6, 14.5, 9.7, 13.3, 11.4, 12.1];
        r.results = vec![
            row(Strategy::Copy, 65536, &copy, None),
            row(Strategy::MsgZerocopy, 65536, &mzc, Some(1.0)),
            row(Strategy::UringZc, 65536, &uzc, Some(1.0)),
        ];
        let m = measurements(&r);
        assert_eq!(
            m[0].pair(Strategy::UringZc, Strategy::MsgZerocopy)
                .map(|p| (p.0, p.1)),
            Some((6, 4))
        );
        assert_eq!(contested(&m), [65536]);
        assert_eq!(
            m[0].winner(MARGIN),
            Strategy::UringZc,
            "4 of 6 is more than half"
        );
    }

    #[test]
    fn a_size_taken_from_copy_in_a_bare_majority_of_rounds_is_contested() {
        let mut r = empty_results();
        let copy = COPY;
        // uring: 1.05x copy in 4 rounds, 0.98x in 2: it takes the size, on 4 of 6.
        let uring = [10.5, 12.6, 8.4, 11.55, 8.82, 9.8];
        // At 4 KiB the same path won every round: that is clear.
        let clear: Vec<f64> = copy.iter().map(|c| c * 1.05).collect();
        r.results = vec![
            row(Strategy::Copy, 1 << 20, &copy, None),
            row(Strategy::Uring, 1 << 20, &uring, None),
            row(Strategy::Copy, 4096, &copy, None),
            row(Strategy::Uring, 4096, &clear, None),
        ];
        let m = measurements(&r);
        assert_eq!(m[1].winner(MARGIN), Strategy::Uring);
        let wins = |m: &Measurement| {
            m.paths
                .iter()
                .find(|p| p.path == Strategy::Uring)
                .unwrap()
                .wins
        };
        assert_eq!(wins(&m[1]), 4);
        assert_eq!(contested(&m), [1 << 20], "4 of 6 is short of 6 of 6");
        assert_eq!(m[0].winner(MARGIN), Strategy::Uring);
        r.results[1] = row(Strategy::Uring, 1 << 20, &copy, None);
        assert!(
            contested(&measurements(&r)).is_empty(),
            "a copy size is not in doubt"
        );
    }
}
