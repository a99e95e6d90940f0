//! What the numbers say: crossovers against the baseline and a recommendation by size range.
//! Pure functions of [`Results`], so `sendpath report` can redo them from the JSON alone.

use crate::study::rows::{Results, Row, Workload};
use crate::traffic::mix::Alloc;
use crate::window::Spread;
use sendpath::{Source, Strategy};
use std::collections::BTreeSet;

/// From which size a path beats its baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossover {
    pub path: Strategy,
    pub baseline: Strategy,
    pub threads: usize,
    /// Smallest measured size from which the path beats the baseline (`RULE`), at that size
    /// and every larger measured size. `None`: never, in the measured range.
    pub from_size: Option<usize>,
    /// Largest and smallest measured sizes compared.
    pub sizes: (usize, usize),
}

/// One line of the recommendation table.
#[derive(Debug, Clone, PartialEq)]
pub struct Recommendation {
    pub source: &'static str,
    pub threads: usize,
    pub from_size: usize,
    pub to_size: usize,
    /// The size mix the line is about (`--size-mix`); the sizes are then its mean.
    pub mix: Option<String>,
    pub path: String,
    pub why: String,
}

impl Recommendation {
    /// The messages the line is about: `4 KiB .. 1 MiB`, or `mix 4K:90,64K:10`.
    pub fn messages(&self) -> String {
        match &self.mix {
            Some(m) => format!("mix {m}"),
            None => crate::units::size_range(self.from_size, self.to_size),
        }
    }
}

/// Everything the report says beyond the raw rows.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// Said first when the host copied the zero-copy sends.
    pub copied_notice: Option<String>,
    /// Where the data came from: the route between sender and receiver.
    pub route: String,
    pub crossovers: Vec<Crossover>,
    pub recommendations: Vec<Recommendation>,
}

/// The baseline a path is compared with: `copy` for memory paths (`serialize`, the two-copy
/// baseline, when `copy` was not measured); `read-send` (the traditional way to send a file)
/// for file paths when it was measured, else `copy`.
pub(crate) fn baseline_for(path: Strategy, measured: &BTreeSet<Strategy>) -> Strategy {
    if path.source() == Source::File && measured.contains(&Strategy::ReadSend) {
        Strategy::ReadSend
    } else if !measured.contains(&Strategy::Copy) && measured.contains(&Strategy::Serialize) {
        Strategy::Serialize
    } else {
        Strategy::Copy
    }
}

fn rows(r: &Results, path: Strategy, threads: usize) -> Vec<&Row> {
    let mut v: Vec<&Row> = r
        .results
        .iter()
        .filter(|x| {
            x.workload == Workload::Stream
                && x.is_plain()
                && x.strategy == path
                && x.threads == threads
        })
        .collect();
    v.sort_by_key(|x| x.size_bytes);
    v
}

/// The comparison rule, as the report states it.
pub(crate) const RULE: &str = "Rounds: every round measures each point once, in a shuffled order, and the paths compared with each other (same size and connections) run back to back, so the two windows of a pair were taken seconds apart. A path beats another when, pairing their windows round by round, it was faster in a clear majority of the rounds (so many that a coin toss would give as many wins with probability 5% or less: 5 of 5, 6 of 6, 7 of 8, 8 of 10...), and the median of its per-round throughput ratios exceeds 1 by more than the round-to-round noise (the median absolute deviation of those ratios, and never less than 3%). With fewer than 5 rounds nothing beats anything. A path other than the baseline is recommended only when some path beats the baseline; then the paths that beat it are named, together with every path that does not lose to the baseline, leaving out any path that one of the winners beats (the rounds cannot tell the named ones apart).";

/// The rule in a few words, for the terminal.
pub const RULE_SHORT: &str =
    "paired by round: faster in a clear majority of the rounds (sign test, 5%), by more than the round-to-round noise";

/// The fewest wins out of `n` rounds that a coin toss reaches with probability 5% or less
/// (one-sided sign test); `None` when no count is that unlikely (fewer than 5 rounds).
pub(crate) fn clear_majority(n: usize) -> Option<usize> {
    // P(X >= k) for X ~ Binomial(n, 1/2), from the top down.
    let mut tail = 0.0;
    let mut choose = 1.0; // C(n, k), starting at k = n
    let total = 2f64.powi(n as i32);
    let mut best = None;
    for k in (0..=n).rev() {
        if k < n {
            choose = choose * (k + 1) as f64 / (n - k) as f64;
        }
        tail += choose / total;
        if tail <= 0.05 {
            best = Some(k);
        } else {
            break;
        }
    }
    best
}

/// The smallest noise the rule allows: a ratio must exceed 1.03 to count.
const NOISE_FLOOR: f64 = 0.03;

/// Two rows compared round by round.
#[derive(Debug, Clone, Copy, PartialEq)]
pub(crate) struct Paired {
    /// Rounds both rows have.
    pub(crate) rounds: usize,
    /// Rounds in which the first was faster.
    pub(crate) wins: usize,
    /// Median of the per-round throughput ratios (first / second).
    pub(crate) median_ratio: f64,
    /// Round-to-round noise of the ratio: its median absolute deviation, at least 3%.
    pub(crate) noise: f64,
}

impl Paired {
    /// Whether the first row beats the second under [`RULE`].
    pub(crate) fn beats(&self) -> bool {
        clear_majority(self.rounds).is_some_and(|k| self.wins >= k)
            && self.median_ratio - 1.0 > self.noise
    }

    /// `faster in 3/3 rounds, median ratio 1.25 (noise 3%)`.
    pub(crate) fn describe(&self) -> String {
        format!(
            "faster in {}/{} rounds, median ratio {:.2} (noise {:.0}%)",
            self.wins,
            self.rounds,
            self.median_ratio,
            self.noise * 100.0
        )
    }
}

/// Pairs the windows of `a` and `b` by round; `None` when they share no round.
pub(crate) fn paired(a: &Row, b: &Row) -> Option<Paired> {
    let ratios: Vec<f64> = a
        .repeats
        .iter()
        .filter_map(|x| {
            let y = b.in_round(x.round)?;
            (y.throughput_gbps > 0.0).then(|| x.throughput_gbps / y.throughput_gbps)
        })
        .collect();
    if ratios.is_empty() {
        return None;
    }
    let median_ratio = Spread::of(&ratios).median;
    let dev: Vec<f64> = ratios.iter().map(|r| (r - median_ratio).abs()).collect();
    Some(Paired {
        rounds: ratios.len(),
        wins: ratios.iter().filter(|&&r| r > 1.0).count(),
        median_ratio,
        noise: Spread::of(&dev).median.max(NOISE_FLOOR),
    })
}

/// `a` beats `b` under [`RULE`].
fn beats(a: &Row, b: &Row) -> bool {
    paired(a, b).is_some_and(|p| p.beats())
}

/// The path to use at one size, and why. The baseline stays unless some path beats it
/// ([`RULE`]); then the paths that beat it, and every path that does not lose to it, are named,
/// less any that one of the winners beats; in name order, so a tie reads the same from one run
/// to the next. Without a baseline of this source
/// (file paths when `read-send` was not measured), the same is done against `copy` when it was
/// measured, else among the paths themselves.
fn recommend(here: &[&Row], base: Option<&Row>) -> (String, String) {
    let closest = |b: &Row| {
        here.iter()
            .filter(|x| x.strategy != b.strategy)
            .filter_map(|x| paired(x, b).map(|p| (x, p)))
            .max_by(|x, y| x.1.median_ratio.total_cmp(&y.1.median_ratio))
            .map_or(String::new(), |(x, p)| {
                format!(" (closest: {}, {})", x.strategy, p.describe())
            })
    };
    let base_here = base.filter(|b| here.iter().any(|x| x.strategy == b.strategy));
    let pool: Vec<&Row> = match base {
        Some(b) => here
            .iter()
            .copied()
            .filter(|x| x.strategy != b.strategy && beats(x, b))
            .collect(),
        None => here.to_vec(),
    };
    if pool.is_empty() {
        return match (base_here, base) {
            (Some(b), _) => (
                b.strategy.to_string(),
                format!("no path beat {}{}", b.strategy, closest(b)),
            ),
            // A file path is needed and none beat `copy`: name them all, none stood out.
            (None, Some(b)) => {
                let mut names: Vec<&str> = here.iter().map(|x| x.strategy.name()).collect();
                names.sort_unstable();
                (
                    names.join(" or "),
                    format!("none beat {}{}", b.strategy, closest(b)),
                )
            }
            (None, None) => unreachable!("the pool is every row when there is no baseline"),
        };
    }
    // The winners and every path that does not lose to the baseline, less any that a winner
    // beats: paths the rounds cannot tell apart from the best are named with it, so which of
    // two close paths edged ahead in this run does not change the recommendation.
    let mut top: Vec<&Row> = here
        .iter()
        .copied()
        .filter(|x| {
            let winner = pool.iter().any(|w| w.strategy == x.strategy);
            let close = base.is_none_or(|b| b.strategy != x.strategy && !beats(b, x));
            (winner || close) && !pool.iter().any(|w| beats(w, x))
        })
        .collect();
    if top.is_empty() {
        // The winners beat each other in a cycle (possible with noisy rounds): name them all.
        top = pool;
    }
    top.sort_by_key(|t| t.strategy);
    let why: Vec<String> = top
        .iter()
        .map(|t| match base.and_then(|b| paired(t, b).map(|p| (b, p))) {
            Some((b, p)) => format!(
                "{} vs {}: {}{}{}",
                t.strategy,
                b.strategy,
                p.describe(),
                batching(t, b),
                in_place(t)
            ),
            None => format!("{}: not beaten{}", t.strategy, in_place(t)),
        })
        .collect();
    let names: Vec<&str> = top.iter().map(|t| t.strategy.name()).collect();
    let mut text = why.join("; ");
    if top.len() > 1 {
        text.push_str("; the rounds cannot tell them apart");
    }
    (names.join(" or "), text)
}

/// How a path written in place sent, so a server author knows to send it that way too.
fn in_place(t: &Row) -> String {
    match t.in_place() {
        true => format!(
            " ({} wrote its messages in place, in an arena the ring registers: the library's `Options::uring_arena` and `UringDriver::reserve`)",
            t.strategy
        ),
        false => String::new(),
    }
}

/// What a comparison of `a` with `b` rests on when they put different numbers of messages in
/// one system call (io_uring's vectored requests against one `send` per message): their
/// messages per call, so a ratio that is mostly batching reads as such.
fn batching(a: &Row, b: &Row) -> String {
    let (Some(x), Some(y)) = (a.messages_per_call, b.messages_per_call) else {
        return String::new();
    };
    if x < 1.5 * y && y < 1.5 * x {
        return String::new();
    }
    let fix = if [a.strategy, b.strategy].contains(&Strategy::Copy) {
        "; `--copy-batch N` gives copy the same batching"
    } else {
        ""
    };
    format!(
        " ({} sent {x:.1} messages per system call or request, {} {y:.1}: the ratio includes batching{fix})",
        a.strategy, b.strategy
    )
}

/// Where the data of `r` came from, in words.
pub(crate) fn route(r: &Results) -> String {
    let env = &r.environment;
    if let Some(a) = &env.agent {
        return format!("received by `sendpath agent` at {a}");
    }
    if let Some(t) = env.topology.as_ref().filter(|t| t.kind == "blackhole") {
        return format!(
            "UDP into a black hole in network namespace {} (a veth whose peer is down, MTU {}): send side only, frames dropped at the device's queue (no carrier) before the driver, an upper bound of what a NIC with offloads allows",
            t.namespace,
            t.mtu.unwrap_or(65_535)
        );
    }
    if let Some(t) = &env.topology {
        return format!(
            "through a veth pair into network namespace {} on this host{}{}",
            t.namespace,
            t.rate_bits_per_s.map_or(String::new(), |b| format!(
                ", rate-limited to {:.3} Gbit/s",
                b as f64 / 1e9
            )),
            t.mtu.map_or(String::new(), |m| format!(", MTU {m}"))
        );
    }
    if r.results
        .iter()
        .any(|x| x.recv_mode == crate::window::Receiver::Remote)
    {
        return "to another program's receiver (--connect)".into();
    }
    "loopback, to receiver threads in this process".into()
}

/// Everything [`Analysis`] holds, from the rows alone.
pub(crate) fn analyse(r: &Results) -> Analysis {
    let measured: BTreeSet<Strategy> = r.results.iter().map(|x| x.strategy).collect();
    let threads: BTreeSet<usize> = r.results.iter().map(|x| x.threads).collect();
    let route = route(r);
    let mut a = Analysis {
        copied_notice: copied_notice(r, &route),
        route,
        ..Analysis::default()
    };
    for &t in &threads {
        for &path in &measured {
            a.crossovers.extend(crossover(r, path, t, &measured));
        }
    }
    for &t in &threads {
        for (source, label) in [(Source::Memory, "memory"), (Source::File, "file")] {
            a.recommendations
                .extend(recommend_by_size(r, t, source, label, &measured));
        }
    }
    a.recommendations.extend(recommend_mixes(r, &measured));
    a
}

/// The notice said first when more than half of some path's zero-copy completions were
/// copied: why, and what to run for a real NIC.
fn copied_notice(r: &Results, route: &str) -> Option<String> {
    let receiver_here = r.environment.agent.is_none()
        && !r
            .results
            .iter()
            .any(|x| x.recv_mode == crate::window::Receiver::Remote);
    let copied: Vec<(&str, f64)> = r
        .results
        .iter()
        .filter_map(|x| x.zerocopy.copied_fraction.map(|f| (x.strategy.name(), f)))
        .collect();
    let max = copied
        .iter()
        .map(|c| c.1)
        .reduce(f64::max)
        .filter(|m| *m > 0.5)?;
    let names: BTreeSet<&str> = copied.iter().map(|c| c.0).collect();
    let names = names.into_iter().collect::<Vec<_>>().join(" and ");
    Some(if receiver_here {
        format!(
            "This host copied the \"zero-copy\" sends: up to {} of {names} completions carried the kernel's COPIED flag. \
             The receiver was on the same host, and the kernel always copies pinned pages when they reach a local socket. \
             So the zero-copy numbers here measure the zero-copy bookkeeping (pinning, notifications) plus a copy, and \
             say nothing about the gain on a real NIC: run `sendpath agent` on a remote host and `sendpath sweep --agent HOST` \
             for that, or `sendpath sweep --preset udp-zerocopy` (root) for UDP zero-copy that this host does not copy. \
             sendfile, splice and vmsplice do avoid the send-side copy here.",
            crate::units::percent(max)
        )
    } else {
        format!(
            "The kernel copied the \"zero-copy\" sends: up to {} of {names} completions carried the COPIED flag, \
             with the receiver {route}. Either the route delivered them locally (a receiver on this host) or the device \
             cannot send from user pages; either way the zero-copy rows measure bookkeeping plus a copy.",
            crate::units::percent(max),
        )
    })
}

/// From which size `path` beats its baseline at `t` threads, over the sizes both measured;
/// `None` when the baseline is the path itself or was not measured.
fn crossover(
    r: &Results,
    path: Strategy,
    t: usize,
    measured: &BTreeSet<Strategy>,
) -> Option<Crossover> {
    let base = baseline_for(path, measured);
    if path == base || !measured.contains(&base) {
        return None;
    }
    let p = rows(r, path, t);
    let b = rows(r, base, t);
    let pairs: Vec<(&Row, &Row)> = p
        .iter()
        .filter_map(|x| {
            b.iter()
                .find(|y| y.size_bytes == x.size_bytes)
                .map(|y| (*x, *y))
        })
        .collect();
    let (first, last) = (pairs.first()?, pairs.last()?);
    let mut from = None;
    for (x, y) in pairs.iter().rev() {
        if beats(x, y) {
            from = Some(x.size_bytes);
        } else {
            break;
        }
    }
    Some(Crossover {
        path,
        baseline: base,
        threads: t,
        from_size: from,
        sizes: (first.0.size_bytes, last.0.size_bytes),
    })
}

/// The plain stream rows of `source` paths at `t` threads, of `size` when given.
fn plain_rows(r: &Results, t: usize, source: Source, size: Option<usize>) -> Vec<&Row> {
    r.results
        .iter()
        .filter(|x| {
            x.workload == Workload::Stream
                && x.is_plain()
                && x.threads == t
                && x.strategy.source() == source
                && size.is_none_or(|s| x.size_bytes == s)
        })
        .collect()
}

/// The recommendation lines of one source at `t` threads: a line per run of sizes with the
/// same recommended path, giving the reason at each of its sizes.
fn recommend_by_size(
    r: &Results,
    t: usize,
    source: Source,
    label: &'static str,
    measured: &BTreeSet<Strategy>,
) -> Vec<Recommendation> {
    let sizes: BTreeSet<usize> = plain_rows(r, t, source, None)
        .iter()
        .map(|x| x.size_bytes)
        .collect();
    let mut out = Vec::new();
    let mut line: Option<Recommendation> = None;
    for &size in &sizes {
        let here = plain_rows(r, t, source, Some(size));
        let Some(first) = here.first() else {
            continue;
        };
        let base_name = baseline_for(first.strategy, measured);
        // The baseline may be of the other source (file paths against `copy`).
        let base = r.results.iter().find(|x| {
            x.workload == Workload::Stream
                && x.is_plain()
                && x.threads == t
                && x.size_bytes == size
                && x.strategy == base_name
        });
        let (path, why) = recommend(&here, base);
        let why = format!("at {}: {why}", crate::units::fmt_size(size));
        match &mut line {
            // A line over several sizes gives each size's reason: the reader checks each
            // against its rows in the tables beside it.
            Some(l) if l.path == path => {
                l.to_size = size;
                l.why = format!("{}; {why}", l.why);
            }
            _ => {
                out.extend(line.take());
                line = Some(Recommendation {
                    source: label,
                    threads: t,
                    from_size: size,
                    to_size: size,
                    mix: None,
                    path,
                    why,
                });
            }
        }
    }
    out.extend(line);
    out
}

/// A line per size mix (pooled buffers): its paths under the same rule, against `copy`
/// sending the same sequence of sizes.
fn recommend_mixes(r: &Results, measured: &BTreeSet<Strategy>) -> Vec<Recommendation> {
    let mixed =
        |x: &&Row| x.workload == Workload::Stream && x.alloc == Alloc::Pool && x.size_mix.is_some();
    let mixes: BTreeSet<(usize, &str)> = r
        .results
        .iter()
        .filter(mixed)
        .filter_map(|x| Some((x.threads, x.size_mix.as_deref()?)))
        .collect();
    let mut out = Vec::new();
    for (t, mix) in mixes {
        let here: Vec<&Row> = r
            .results
            .iter()
            .filter(mixed)
            .filter(|x| x.threads == t && x.size_mix.as_deref() == Some(mix))
            .collect();
        let base_name = baseline_for(here[0].strategy, measured);
        let base = here.iter().copied().find(|x| x.strategy == base_name);
        let (path, why) = recommend(&here, base);
        out.push(Recommendation {
            source: "memory",
            threads: t,
            from_size: here[0].size_bytes,
            to_size: here[0].size_bytes,
            mix: Some(mix.to_string()),
            path,
            why: format!("for mix {mix}: {why}"),
        });
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::rows::Results;
    use crate::window::Repeat;

    fn row(path: &str, size: usize, gbps: &[f64]) -> Row {
        let mut r = Row {
            workload: Workload::Stream,
            strategy: Strategy::parse(path).unwrap(),
            size_bytes: size,
            threads: 1,
            repeats: gbps
                .iter()
                .enumerate()
                .map(|(round, &g)| Repeat {
                    round: round as u32,
                    throughput_gbps: g,
                    ..Default::default()
                })
                .collect(),
            ..Default::default()
        };
        r.summarise();
        r
    }

    fn results(rows: Vec<Row>) -> Results {
        let mut r: Results =
            serde_json::from_str(include_str!("../../../tests/data/empty-results.json")).unwrap();
        r.results = rows;
        r
    }

    #[test]
    fn crossover_is_where_the_path_stays_beyond_the_spread() {
        let r = results(vec![
            row("copy", 1024, &[10.0, 10.5, 11.0, 10.0, 10.5]),
            row("copy", 65536, &[20.0, 20.5, 21.0, 20.0, 20.5]),
            row("copy", 1 << 20, &[20.0, 20.5, 21.0, 20.0, 20.5]),
            row("gather", 1024, &[9.0, 9.5, 10.0, 9.0, 9.5]),
            row("gather", 65536, &[21.5, 22.0, 22.5, 21.5, 22.0]),
            row("gather", 1 << 20, &[23.0, 23.0, 23.5, 23.0, 23.0]),
            // Faster by median at 1 MiB but slower in round 2: does not beat copy there.
            row("uring", 1024, &[12.0, 12.0, 12.0, 12.0, 12.0]),
            row("uring", 65536, &[22.0, 22.0, 22.0, 22.0, 22.0]),
            row("uring", 1 << 20, &[21.5, 20.0, 22.0, 21.5, 22.0]),
        ]);
        let a = analyse(&r);
        let g = a
            .crossovers
            .iter()
            .find(|c| c.path == Strategy::Gather)
            .unwrap();
        assert_eq!(g.from_size, Some(65536));
        let u = a
            .crossovers
            .iter()
            .find(|c| c.path == Strategy::Uring)
            .unwrap();
        assert_eq!(
            u.from_size, None,
            "must stay faster through the largest size"
        );
        assert!(a.copied_notice.is_none());
    }

    #[test]
    fn pairing_by_round_sees_through_host_drift_and_ignores_tiny_gains() {
        // The host drifted 3x between rounds; the path was 10% faster in every round. Ranges
        // overlap completely, pairing shows the gain.
        let base = row("copy", 4096, &[10.0, 20.0, 30.0, 15.0, 25.0]);
        let fast = row("uring", 4096, &[11.0, 22.0, 33.0, 16.5, 27.5]);
        let p = paired(&fast, &base).unwrap();
        assert_eq!((p.rounds, p.wins), (5, 5));
        assert!((p.median_ratio - 1.1).abs() < 1e-9);
        assert!(p.beats());
        assert!(!paired(&base, &fast).unwrap().beats());
        // 2% faster in every round: below the noise floor.
        let tiny = row("gather", 4096, &[10.2, 20.4, 30.6, 15.3, 25.5]);
        assert!(!paired(&tiny, &base).unwrap().beats());
        // Four rounds are too few to say anything, however clear.
        assert_eq!(clear_majority(4), None);
        // 7 wins of 8 is a clear majority, 6 of 8 is not.
        let base8 = row(
            "copy",
            4096,
            &[10.0, 20.0, 30.0, 15.0, 10.0, 20.0, 30.0, 15.0],
        );
        let seven = row(
            "gather",
            4096,
            &[12.0, 24.0, 36.0, 18.0, 12.0, 24.0, 36.0, 14.0],
        );
        assert!(paired(&seven, &base8).unwrap().beats());
        let six = row(
            "serialize",
            4096,
            &[12.0, 24.0, 36.0, 18.0, 12.0, 24.0, 29.0, 14.0],
        );
        assert!(!paired(&six, &base8).unwrap().beats());
    }

    #[test]
    fn clear_majority_is_a_one_sided_sign_test_at_5_percent() {
        let k: Vec<Option<usize>> = (1..=10).map(clear_majority).collect();
        assert_eq!(
            k,
            vec![
                None,
                None,
                None,
                None,
                Some(5),
                Some(6),
                Some(7),
                Some(7),
                Some(8),
                Some(9)
            ]
        );
    }

    /// The one recommendation line for file messages.
    fn file_line(r: &Results) -> Recommendation {
        let a = analyse(r);
        let mut v: Vec<Recommendation> = a
            .recommendations
            .into_iter()
            .filter(|x| x.source == "file")
            .collect();
        assert_eq!(v.len(), 1, "{v:?}");
        v.remove(0)
    }

    #[test]
    fn a_win_that_rests_on_batching_says_so() {
        let per_call = |mut r: Row, m: f64| {
            for x in &mut r.repeats {
                x.messages_per_call = Some(m);
            }
            r.summarise();
            r
        };
        let memory = |copy_per_call: f64| {
            let r = results(vec![
                per_call(row("copy", 256, &[2.0, 2.0, 2.1, 2.0, 2.0]), copy_per_call),
                per_call(row("uring", 256, &[4.0, 4.1, 4.0, 4.2, 4.0]), 8.0),
            ]);
            let a = analyse(&r);
            let line = a.recommendations.into_iter().find(|x| x.source == "memory");
            line.expect("a memory line")
        };
        let l = memory(1.0);
        assert_eq!(l.path, "uring", "{}", l.why);
        assert!(
            l.why.contains(
                "(uring sent 8.0 messages per system call or request, copy 1.0: the ratio includes batching; `--copy-batch N`"
            ),
            "{}",
            l.why
        );
        // Batched alike: the ratio is the paths', and nothing is added.
        let l = memory(8.0);
        assert!(!l.why.contains("batching"), "{}", l.why);
    }

    #[test]
    fn a_winner_written_in_place_is_compared_and_says_how_it_sent() {
        let in_place = |mut r: Row| {
            r.uring_buffers = Some("arena".into());
            r
        };
        let r = results(vec![
            row("copy", 65536, &[2.0, 2.0, 2.1, 2.0, 2.0]),
            in_place(row("uring-zc", 65536, &[4.0, 4.1, 4.0, 4.2, 4.0])),
        ]);
        let line = analyse(&r)
            .recommendations
            .into_iter()
            .find(|x| x.source == "memory");
        let l = line.expect("a memory line");
        assert_eq!(l.path, "uring-zc", "{}", l.why);
        assert!(
            l.why.contains("in place") && l.why.contains("Options::uring_arena"),
            "{}",
            l.why
        );
        // An owned winner says nothing of an arena.
        let r = results(vec![
            row("copy", 65536, &[2.0, 2.0, 2.1, 2.0, 2.0]),
            row("uring-zc", 65536, &[4.0, 4.1, 4.0, 4.2, 4.0]),
        ]);
        let l = analyse(&r)
            .recommendations
            .into_iter()
            .find(|x| x.source == "memory");
        assert!(!l.expect("a memory line").why.contains("in place"));
    }

    #[test]
    fn a_path_the_rounds_cannot_tell_from_the_winner_is_named_with_it() {
        // splice beat read-send in 5/5 rounds; sendfile in only 4/5, but splice does not beat
        // sendfile either: both are named. uring-like "slow" loses to the winner and is not.
        let r = results(vec![
            row("read-send", 65536, &[10.0, 10.0, 10.0, 10.0, 10.0]),
            row("splice", 65536, &[13.0, 13.0, 13.0, 13.0, 13.0]),
            row("sendfile", 65536, &[13.0, 13.5, 9.0, 13.0, 12.5]),
            row("mmap-send", 65536, &[10.0, 10.1, 9.9, 10.0, 10.1]),
        ]);
        let f = file_line(&r);
        assert_eq!(f.path, "sendfile or splice", "{}", f.why);
    }

    #[test]
    fn a_line_over_several_sizes_gives_the_reason_at_each() {
        // At 64 KiB sendfile's median is far ahead but it won only 4 of 5 rounds; at 1 MiB it
        // lost every round. One line, read-send, must say why at both sizes: before, it gave
        // only the last size's reason, beside a table where sendfile led at 64 KiB.
        let r = results(vec![
            row("read-send", 65536, &[10.0, 10.0, 10.0, 10.0, 20.0]),
            row("sendfile", 65536, &[18.0, 18.0, 18.0, 18.0, 15.0]),
            row("read-send", 1 << 20, &[30.0, 30.0, 30.0, 30.0, 30.0]),
            row("sendfile", 1 << 20, &[20.0, 20.0, 20.0, 20.0, 20.0]),
        ]);
        let f = file_line(&r);
        assert_eq!(f.path, "read-send", "{}", f.why);
        assert_eq!((f.from_size, f.to_size), (65536, 1 << 20));
        assert!(
            f.why
                .contains("at 64KiB: no path beat read-send (closest: sendfile, faster in 4/5")
                && f.why.contains("at 1MiB: no path beat read-send"),
            "{}",
            f.why
        );
    }

    #[test]
    fn a_winner_that_another_winner_beats_is_left_out() {
        let r = results(vec![
            row("read-send", 4096, &[11.0, 11.0, 10.4, 10.9, 10.3]),
            row("sendfile", 4096, &[14.0, 14.1, 14.3, 14.6, 14.2]),
            row("splice", 4096, &[12.3, 12.2, 12.1, 11.9, 11.7]),
        ]);
        let f = file_line(&r);
        assert_eq!(f.path, "sendfile", "{}", f.why);
    }

    #[test]
    fn each_size_mix_gets_its_own_line_against_copy() {
        let mixed = |path: &str, mix: &str, gbps: &[f64]| {
            let mut r = row(path, 100_000, gbps);
            r.size_mix = Some(mix.to_string());
            r
        };
        let r = results(vec![
            row("copy", 65536, &[10.0, 10.0, 10.0, 10.0, 10.0]),
            row("adaptive", 65536, &[10.1, 9.9, 10.0, 10.2, 9.8]),
            mixed("copy", "64K:16,1M:1/256", &[20.0, 21.0, 20.0, 19.0, 20.0]),
            mixed(
                "adaptive",
                "64K:16,1M:1/256",
                &[22.0, 23.0, 22.5, 21.0, 22.0],
            ),
            mixed("uring", "64K:16,1M:1/256", &[19.0, 21.5, 20.0, 19.5, 20.0]),
            mixed("copy", "88:70,4K:20", &[8.0, 8.0, 8.0, 8.0, 8.0]),
            mixed("adaptive", "88:70,4K:20", &[8.1, 7.9, 8.0, 8.1, 7.9]),
        ]);
        let a = analyse(&r);
        let lines: Vec<(String, &str)> = a
            .recommendations
            .iter()
            .map(|x| (x.messages(), x.path.as_str()))
            .collect();
        assert_eq!(
            lines,
            [
                ("64KiB".to_string(), "copy"),
                ("mix 64K:16,1M:1/256".to_string(), "adaptive"),
                ("mix 88:70,4K:20".to_string(), "copy"),
            ]
        );
        let m = &a.recommendations[1];
        assert!(
            m.why
                .starts_with("for mix 64K:16,1M:1/256: adaptive vs copy: faster in 5/5"),
            "{}",
            m.why
        );
    }

    #[test]
    fn tied_winners_are_named_together() {
        let r = results(vec![
            row("read-send", 65536, &[10.0, 10.0, 10.0, 10.0, 10.0]),
            row("sendfile", 65536, &[20.0, 21.0, 20.0, 20.0, 21.0]),
            row("splice", 65536, &[21.0, 20.0, 20.5, 21.0, 20.0]),
        ]);
        let f = file_line(&r);
        assert_eq!(f.path, "sendfile or splice", "{}", f.why);
    }

    #[test]
    fn recommendation_keeps_copy_unless_clearly_beaten_and_merges_ranges() {
        let r = results(vec![
            row("copy", 1024, &[10.0, 10.5, 11.0, 10.0, 10.5]),
            row("copy", 4096, &[15.0, 15.5, 16.0, 15.0, 15.5]),
            row("copy", 65536, &[20.0, 20.5, 21.0, 20.0, 20.5]),
            row("copy", 1 << 20, &[20.0, 20.5, 21.0, 20.0, 20.5]),
            row("gather", 1024, &[10.6, 10.8, 11.2, 10.6, 10.8]),
            row("gather", 4096, &[15.0, 15.6, 16.0, 15.0, 15.6]),
            row("gather", 65536, &[22.0, 22.5, 23.0, 22.0, 22.5]),
            row("gather", 1 << 20, &[22.0, 22.5, 23.0, 22.0, 22.5]),
        ]);
        let a = analyse(&r);
        let rec: Vec<(usize, usize, &str)> = a
            .recommendations
            .iter()
            .map(|x| (x.from_size, x.to_size, x.path.as_str()))
            .collect();
        assert_eq!(rec, vec![(1024, 4096, "copy"), (65536, 1 << 20, "gather")]);
    }

    #[test]
    fn copied_zero_copy_is_said_first() {
        let mut z = row("msg-zerocopy", 65536, &[10.0]);
        z.zerocopy.copied_fraction = Some(1.0);
        let a = analyse(&results(vec![row("copy", 65536, &[20.0]), z]));
        let n = a.copied_notice.unwrap();
        assert!(n.contains("100%") && n.contains("msg-zerocopy"), "{n}");
    }
}
