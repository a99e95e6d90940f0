//! What the numbers say: crossovers against the baseline and a recommendation by size range.
//! Pure functions of [`Results`], so `sendpath report` can redo them from the JSON alone.

use crate::results::{Results, Row};
use sendpath::{Source, Strategy};
use std::collections::BTreeSet;

/// From which size a path beats its baseline.
#[derive(Debug, Clone, PartialEq)]
pub struct Crossover {
    pub path: String,
    pub baseline: String,
    pub threads: usize,
    /// Smallest measured size from which the path is faster than the baseline by more than the
    /// measured spread, at that size and every larger measured size. `None`: never, in the
    /// measured range.
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
    pub path: String,
    pub why: String,
}

/// Everything the report says beyond the raw rows.
#[derive(Debug, Clone, Default)]
pub struct Analysis {
    /// Said first when the host copied the zero-copy sends.
    pub copied_notice: Option<String>,
    pub crossovers: Vec<Crossover>,
    pub recommendations: Vec<Recommendation>,
}

fn source_of(name: &str) -> Source {
    Strategy::parse(name).map_or(Source::Memory, |s| s.source())
}

/// The baseline a path is compared with: `copy` for memory paths (`serialize`, the two-copy
/// baseline, when `copy` was not measured); `read-send` (the traditional way to send a file)
/// for file paths when it was measured, else `copy`.
pub fn baseline_for(path: &str, measured: &BTreeSet<String>) -> &'static str {
    if source_of(path) == Source::File && measured.contains("read-send") {
        "read-send"
    } else if !measured.contains("copy") && measured.contains("serialize") {
        "serialize"
    } else {
        "copy"
    }
}

fn rows<'a>(r: &'a Results, path: &str, threads: usize) -> Vec<&'a Row> {
    let mut v: Vec<&Row> = r
        .results
        .iter()
        .filter(|x| x.workload == "stream" && x.strategy == path && x.threads == threads)
        .collect();
    v.sort_by_key(|x| x.size_bytes);
    v
}

/// `a` is faster than `b` by more than the measured spread: their min..max ranges do not
/// overlap. With a single repeat of either there is no spread to go by, so nothing is.
fn clearly_faster(a: &Row, b: &Row) -> bool {
    a.repeats.len() > 1 && b.repeats.len() > 1 && a.throughput_gbps.min > b.throughput_gbps.max
}

/// The path to use at one size: the fastest of this source, unless it is not faster than the
/// baseline by more than the measured spread, in which case the baseline (when it is of the
/// same source: a file path cannot be replaced by sending from memory).
fn recommend(best: &Row, base: Option<&Row>, source: Source) -> (String, String) {
    let gbps = |r: &Row| r.throughput_gbps.median;
    let Some(b) = base.filter(|b| b.strategy != best.strategy) else {
        return (
            best.strategy.clone(),
            format!("fastest measured ({:.2} Gbit/s)", gbps(best)),
        );
    };
    let versus = format!(
        "{:.2} Gbit/s vs {:.2} for {} ({:+.0}%)",
        gbps(best),
        gbps(b),
        b.strategy,
        (gbps(best) / gbps(b) - 1.0) * 100.0
    );
    if clearly_faster(best, b) {
        return (
            best.strategy.clone(),
            format!("{versus}, beyond the spread"),
        );
    }
    let why_not = if best.repeats.len() < 2 || b.repeats.len() < 2 {
        "with a single repeat no spread is known (rerun with --repeat 3)".to_string()
    } else {
        format!("within the measured spread of {}", b.strategy)
    };
    if source_of(&b.strategy) == source {
        (
            b.strategy.clone(),
            format!(
                "{} was fastest ({versus}) but {why_not}: keep the simpler path",
                best.strategy
            ),
        )
    } else {
        (
            best.strategy.clone(),
            format!("fastest of its source ({versus}), but {why_not}"),
        )
    }
}

pub fn analyse(r: &Results) -> Analysis {
    let measured: BTreeSet<String> = r.results.iter().map(|x| x.strategy.clone()).collect();
    let threads: BTreeSet<usize> = r.results.iter().map(|x| x.threads).collect();
    let mut a = Analysis::default();

    let copied: Vec<(&str, f64)> = r
        .results
        .iter()
        .filter_map(|x| x.zerocopy.copied_fraction.map(|f| (x.strategy.as_str(), f)))
        .collect();
    if let Some(max) = copied
        .iter()
        .map(|c| c.1)
        .reduce(f64::max)
        .filter(|m| *m > 0.5)
    {
        let names: BTreeSet<&str> = copied.iter().map(|c| c.0).collect();
        a.copied_notice = Some(format!(
            "This host copied the \"zero-copy\" sends: up to {:.0}% of {} completions carried the kernel's COPIED flag. \
             The receiver was on the same host, and the kernel always copies pinned pages when they reach a local socket. \
             So the zero-copy numbers here measure the zero-copy bookkeeping (pinning, notifications) plus a copy, and \
             say nothing about the gain on a real NIC: run `sendpath sink` on a remote host and `sendpath stream --connect` \
             for that. sendfile, splice and vmsplice do avoid the send-side copy here.",
            max * 100.0,
            names.into_iter().collect::<Vec<_>>().join(" and ")
        ));
    }

    for &t in &threads {
        for path in &measured {
            let base = baseline_for(path, &measured);
            if path == base || !measured.contains(base) {
                continue;
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
            if pairs.is_empty() {
                continue;
            }
            let mut from = None;
            for (x, y) in pairs.iter().rev() {
                if clearly_faster(x, y) {
                    from = Some(x.size_bytes);
                } else {
                    break;
                }
            }
            a.crossovers.push(Crossover {
                path: path.clone(),
                baseline: base.into(),
                threads: t,
                from_size: from,
                sizes: (pairs[0].0.size_bytes, pairs[pairs.len() - 1].0.size_bytes),
            });
        }
    }

    for &t in &threads {
        for (source, label) in [(Source::Memory, "memory"), (Source::File, "file")] {
            let sizes: BTreeSet<usize> = r
                .results
                .iter()
                .filter(|x| {
                    x.workload == "stream" && x.threads == t && source_of(&x.strategy) == source
                })
                .map(|x| x.size_bytes)
                .collect();
            let mut line: Option<Recommendation> = None;
            for &size in &sizes {
                let here: Vec<&Row> = r
                    .results
                    .iter()
                    .filter(|x| {
                        x.workload == "stream"
                            && x.threads == t
                            && x.size_bytes == size
                            && source_of(&x.strategy) == source
                    })
                    .collect();
                let Some(best) = here.iter().max_by(|x, y| {
                    x.throughput_gbps
                        .median
                        .total_cmp(&y.throughput_gbps.median)
                }) else {
                    continue;
                };
                let base_name = baseline_for(&best.strategy, &measured);
                // The baseline may be of the other source (file paths against `copy`).
                let base = r.results.iter().find(|x| {
                    x.workload == "stream"
                        && x.threads == t
                        && x.size_bytes == size
                        && x.strategy == base_name
                });
                let (path, why) = recommend(best, base, source);
                let why = format!("at {}: {why}", crate::units::fmt_size(size));
                match &mut line {
                    Some(l) if l.path == path => {
                        l.to_size = size;
                        l.why = why;
                    }
                    _ => {
                        if let Some(l) = line.take() {
                            a.recommendations.push(l);
                        }
                        line = Some(Recommendation {
                            source: label,
                            threads: t,
                            from_size: size,
                            to_size: size,
                            path,
                            why,
                        });
                    }
                }
            }
            a.recommendations.extend(line);
        }
    }
    a
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::results::{Repeat, Results};

    fn row(path: &str, size: usize, gbps: &[f64]) -> Row {
        let mut r = Row {
            workload: "stream".into(),
            strategy: path.into(),
            size_bytes: size,
            threads: 1,
            repeats: gbps
                .iter()
                .map(|&g| Repeat {
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
            serde_json::from_str(include_str!("../../tests/data/empty-results.json")).unwrap();
        r.results = rows;
        r
    }

    #[test]
    fn crossover_is_where_the_path_stays_beyond_the_spread() {
        let r = results(vec![
            row("copy", 1024, &[10.0, 10.5, 11.0]),
            row("copy", 65536, &[20.0, 20.5, 21.0]),
            row("copy", 1 << 20, &[20.0, 20.5, 21.0]),
            row("gather", 1024, &[9.0, 9.5, 10.0]),
            row("gather", 65536, &[21.5, 22.0, 22.5]),
            row("gather", 1 << 20, &[23.0, 23.0, 23.5]),
            // Faster by median but inside the spread at 1 MiB: never clearly faster.
            row("uring", 1024, &[12.0, 12.0, 12.0]),
            row("uring", 65536, &[22.0, 22.0, 22.0]),
            row("uring", 1 << 20, &[20.8, 21.5, 22.0]),
        ]);
        let a = analyse(&r);
        let g = a.crossovers.iter().find(|c| c.path == "gather").unwrap();
        assert_eq!(g.from_size, Some(65536));
        let u = a.crossovers.iter().find(|c| c.path == "uring").unwrap();
        assert_eq!(
            u.from_size, None,
            "must stay faster through the largest size"
        );
        assert!(a.copied_notice.is_none());
    }

    #[test]
    fn recommendation_keeps_copy_unless_clearly_beaten_and_merges_ranges() {
        let r = results(vec![
            row("copy", 1024, &[10.0, 10.5, 11.0]),
            row("copy", 4096, &[15.0, 15.5, 16.0]),
            row("copy", 65536, &[20.0, 20.5, 21.0]),
            row("copy", 1 << 20, &[20.0, 20.5, 21.0]),
            row("gather", 1024, &[10.6, 10.8, 11.2]),
            row("gather", 4096, &[15.0, 15.6, 16.0]),
            row("gather", 65536, &[22.0, 22.5, 23.0]),
            row("gather", 1 << 20, &[22.0, 22.5, 23.0]),
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
