//! `sendpath compare A B`: run B against run A, point by point, for two results files of one
//! study (rows, server or transfer). The runs were not interleaved, so nothing is paired: each point's B/A ratio of
//! median throughputs gets a 95% percentile-bootstrap interval over the two runs' repeats,
//! resampled independently, and a verdict from it. What differs between the two environments
//! comes first. Pure: the caller loads the files and writes what this renders.

use crate::render::plot::{line_chart, Series, XAxis};
use crate::render::{esc, Table};
use crate::study::http::StudyResults;
use crate::study::rows::{Results, Row};
use crate::study::transfer::TransferResults;
use crate::window::Environment;
use std::fmt::Write;

/// Bootstrap resamples per point.
const RESAMPLES: usize = 4000;

/// What a point's interval says of B against A.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The whole interval is above 1.
    Faster,
    /// The whole interval is below 1.
    Slower,
    /// The interval holds 1 (or a run has a single repeat: no spread is known).
    WithinNoise,
}

impl Verdict {
    fn name(self) -> &'static str {
        match self {
            Verdict::Faster => "faster",
            Verdict::Slower => "slower",
            Verdict::WithinNoise => "within noise",
        }
    }
}

/// One point measured in both runs.
#[derive(Debug, Clone, PartialEq)]
pub struct PointComparison {
    /// The point: workload, path, size, threads, connections, variant.
    pub label: String,
    /// Median over A's and B's repeats, in the comparison's unit.
    pub a_median: f64,
    pub b_median: f64,
    /// Repeats behind each.
    pub a_repeats: usize,
    pub b_repeats: usize,
    /// B's median over A's.
    pub ratio: f64,
    /// Its 95% bootstrap interval; `None` with fewer than two repeats on a side.
    pub interval: Option<(f64, f64)>,
    pub verdict: Verdict,
    /// Where the HTML report charts it: (chart, line, x), for the rows study's points.
    pub chart: Option<(String, String, f64)>,
}

/// A point of one run: its label, its values over repeats, where it is charted.
struct Sample {
    label: String,
    values: Vec<f64>,
    chart: Option<(String, String, f64)>,
}

impl Sample {
    fn new(label: String, values: Vec<f64>) -> Sample {
        Sample {
            label,
            values,
            chart: None,
        }
    }
}

/// Run B against run A.
#[derive(Debug, Clone, PartialEq)]
pub struct Comparison {
    /// What is compared, higher is better: `Gbit/s` or `requests/s`.
    pub unit: &'static str,
    /// What differs between the runs' environments and settings: (what, A's, B's).
    pub differences: Vec<(String, String, String)>,
    /// The points both runs measured, in A's order.
    pub points: Vec<PointComparison>,
    /// Points only one run measured.
    pub only_a: Vec<String>,
    pub only_b: Vec<String>,
}

/// A row's point, as the sweep keys it, in words.
fn point_label(r: &Row) -> String {
    let mut l = format!(
        "{} {} {} x{}",
        r.workload.name(),
        r.strategy.name(),
        crate::units::fmt_size(r.size_bytes),
        r.threads
    );
    if r.connections_per_thread > 1 {
        let _ = write!(l, " c{}", r.connections_per_thread);
    }
    if let Some(m) = &r.size_mix {
        let _ = write!(l, " mix {m}");
    }
    if r.alloc != crate::traffic::mix::Alloc::Pool {
        let _ = write!(l, " {}", r.alloc.name());
    }
    let v = r.variant();
    if !v.is_empty() {
        let _ = write!(l, " {v}");
    }
    l
}

/// One run, as compare reads it: its environment, settings and route in words, and each
/// point's values over its repeats (higher is better).
struct Run<'a> {
    env: &'a Environment,
    settings: String,
    route: String,
    congestion: String,
    points: Vec<Sample>,
}

/// Compares run B of the rows study with run A; an error when they share no point.
pub fn compare(a: &Results, b: &Results) -> Result<Comparison, String> {
    compare_runs("Gbit/s", &rows_run(a), &rows_run(b))
}

/// Compares run B of the server study with run A (requests per second).
pub fn compare_http(a: &StudyResults, b: &StudyResults) -> Result<Comparison, String> {
    compare_runs("requests/s", &http_run(a), &http_run(b))
}

/// Compares run B of the transfer study with run A (Gbit/s of each whole-file transfer).
pub fn compare_transfer(a: &TransferResults, b: &TransferResults) -> Result<Comparison, String> {
    compare_runs("Gbit/s", &transfer_run(a), &transfer_run(b))
}

/// The congestion controls named, joined; "not recorded" for none.
fn named(mut v: Vec<String>) -> String {
    v.sort();
    v.dedup();
    if v.is_empty() {
        "not recorded".into()
    } else {
        v.join(", ")
    }
}

fn rows_run(r: &Results) -> Run<'_> {
    Run {
        env: &r.environment,
        settings: match &r.sweep {
            Some(s) => format!(
                "preset {}, {} s windows, {} s warmup, {} rounds",
                s.preset, s.duration_s, s.warmup_s, s.repeat
            ),
            None => format!("{} rounds", r.schedule.rounds),
        },
        route: crate::study::rows::analysis::route(r),
        congestion: named(
            r.results
                .iter()
                .filter_map(|x| x.tcp_congestion.clone())
                .collect(),
        ),
        points: r.results.iter().map(row_sample).collect(),
    }
}

/// A row's point, charted by path over size in its group (workload, threads, variant).
fn row_sample(row: &Row) -> Sample {
    let label = point_label(row);
    let size = crate::units::fmt_size(row.size_bytes);
    let group = label.replacen(&format!(" {} {size}", row.strategy.name()), "", 1);
    let values = row.repeats.iter().map(|x| x.throughput_gbps).collect();
    let mut p = Sample::new(label, values);
    p.chart = row.size_mix.is_none().then(|| {
        (
            group,
            row.strategy.name().to_string(),
            row.size_bytes as f64,
        )
    });
    p
}

fn http_run(r: &StudyResults) -> Run<'_> {
    let mut points: Vec<Sample> = Vec::new();
    for m in &r.measurements {
        let rate = m
            .rate_per_s
            .map_or(String::new(), |x| format!(" at {x:.0}/s"));
        let label = format!(
            "{} {} B {} conns {}{rate}",
            m.server, m.body_bytes, m.connections, m.load
        );
        match points.iter_mut().find(|p| p.label == label) {
            Some(p) => p.values.push(m.requests_per_s),
            None => points.push(Sample::new(label, vec![m.requests_per_s])),
        }
    }
    Run {
        env: &r.environment,
        settings: String::new(),
        route: r
            .environment
            .agent
            .clone()
            .unwrap_or_else(|| "loopback".into()),
        congestion: "not recorded".into(),
        points,
    }
}

fn transfer_run(r: &TransferResults) -> Run<'_> {
    let s = &r.settings;
    Run {
        env: &r.environment,
        settings: format!(
            "{} rounds, sink {}, filesystem {}",
            s.rounds, s.sink, s.filesystem
        ),
        route: r
            .environment
            .agent
            .clone()
            .unwrap_or_else(|| "loopback".into()),
        congestion: named(s.tcp_congestion.iter().cloned().collect()),
        points: r
            .rows
            .iter()
            .map(|row| {
                let label = format!(
                    "{} {} {}",
                    row.label,
                    crate::units::fmt_size(row.file_bytes as usize),
                    row.cache.name()
                );
                Sample::new(
                    label,
                    row.repeats.iter().map(|x| x.throughput_gbps).collect(),
                )
            })
            .collect(),
    }
}

/// Compares B with A point by point; an error when they share no point.
fn compare_runs(unit: &'static str, a: &Run<'_>, b: &Run<'_>) -> Result<Comparison, String> {
    let mut points = Vec::new();
    let mut only_a = Vec::new();
    for pa in &a.points {
        match b.points.iter().find(|p| p.label == pa.label) {
            Some(pb) => points.push(PointComparison {
                chart: pa.chart.clone(),
                ..point(&pa.label, &pa.values, &pb.values)
            }),
            None => only_a.push(pa.label.clone()),
        }
    }
    if points.is_empty() {
        let a0 = only_a.first().map_or("-", String::as_str);
        let b0 = b.points.first().map_or("-", |p| p.label.as_str());
        return Err(format!("the two runs have no point in common (A's first is `{a0}`, B's `{b0}`): compare runs of the same sweep, preset or study, with the same flags (a row's variant, such as `arena` or `udp`, is part of its point)"));
    }
    let only_b = b
        .points
        .iter()
        .filter(|p| !a.points.iter().any(|x| x.label == p.label))
        .map(|p| p.label.clone())
        .collect();
    Ok(Comparison {
        unit,
        differences: differences(a, b),
        points,
        only_a,
        only_b,
    })
}

/// One point's comparison from its values over the two runs' repeats.
fn point(label: &str, xa: &[f64], xb: &[f64]) -> PointComparison {
    let (ma, mb) = (median(xa), median(xb));
    let interval = (xa.len() >= 2 && xb.len() >= 2 && ma > 0.0)
        .then(|| bootstrap(xa, xb, seed_of(label)))
        .flatten();
    let verdict = match interval {
        Some((lo, _)) if lo > 1.0 => Verdict::Faster,
        Some((_, hi)) if hi < 1.0 => Verdict::Slower,
        _ => Verdict::WithinNoise,
    };
    PointComparison {
        label: label.to_string(),
        a_median: ma,
        b_median: mb,
        a_repeats: xa.len(),
        b_repeats: xb.len(),
        ratio: if ma > 0.0 { mb / ma } else { f64::NAN },
        interval,
        verdict,
        chart: None,
    }
}

/// The median of `x`; NaN (not measured) for none.
fn median(x: &[f64]) -> f64 {
    match x {
        [] => f64::NAN,
        _ => crate::window::Spread::of(x).median,
    }
}

/// A seed from the point's label: the same files give the same intervals.
fn seed_of(label: &str) -> u64 {
    label.bytes().fold(0xcbf2_9ce4_8422_2325, |h, c| {
        (h ^ u64::from(c)).wrapping_mul(0x100_0000_01b3)
    })
}

/// The 2.5th and 97.5th percentiles of median(B*)/median(A*) over resamples of each run's
/// repeats with replacement; `None` when a resampled median of A is 0.
fn bootstrap(a: &[f64], b: &[f64], seed: u64) -> Option<(f64, f64)> {
    let mut s = seed | 1;
    let mut next = |n: usize| {
        // xorshift64*
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        (s.wrapping_mul(0x2545_f491_4f6c_dd1d) >> 33) as usize % n
    };
    let mut ratios = Vec::with_capacity(RESAMPLES);
    let (mut ra, mut rb) = (vec![0.0; a.len()], vec![0.0; b.len()]);
    for _ in 0..RESAMPLES {
        ra.iter_mut().for_each(|x| *x = a[next(a.len())]);
        rb.iter_mut().for_each(|x| *x = b[next(b.len())]);
        let m = median(&ra);
        if m <= 0.0 {
            return None;
        }
        ratios.push(median(&rb) / m);
    }
    ratios.sort_by(f64::total_cmp);
    let at = |q: f64| ratios[((RESAMPLES - 1) as f64 * q).round() as usize];
    Some((at(0.025), at(0.975)))
}

/// What differs between the runs: host, kernel, sendpath, settings, congestion control.
fn differences(a: &Run<'_>, b: &Run<'_>) -> Vec<(String, String, String)> {
    let (ea, eb) = (a.env, b.env);
    let fields = [
        ("kernel", ea.kernel.clone(), eb.kernel.clone()),
        ("CPU", ea.cpu.clone(), eb.cpu.clone()),
        (
            "sendpath",
            ea.sendpath_version.clone(),
            eb.sendpath_version.clone(),
        ),
        (
            "TCP congestion control",
            a.congestion.clone(),
            b.congestion.clone(),
        ),
        ("settings", a.settings.clone(), b.settings.clone()),
        ("route", a.route.clone(), b.route.clone()),
        (
            "command",
            command(&ea.command_line),
            command(&eb.command_line),
        ),
    ];
    fields
        .into_iter()
        .filter(|(_, x, y)| x != y)
        .map(|(k, x, y)| (k.to_string(), x, y))
        .collect()
}

/// A command line without where it wrote (`--out DIR`, `--json FILE`, `--csv FILE`), which
/// differs between any two runs.
fn command(args: &[String]) -> String {
    let mut out = Vec::new();
    let mut skip = false;
    for a in args {
        if std::mem::take(&mut skip) {
            continue;
        }
        match a.as_str() {
            "--out" | "--json" | "--csv" => skip = true,
            _ if ["--out=", "--json=", "--csv="]
                .iter()
                .any(|p| a.starts_with(p)) => {}
            _ => out.push(a.as_str()),
        }
    }
    out.join(" ")
}

impl Comparison {
    /// Points slower by more than `threshold` (0.05: 5%): slower with confidence, and B's
    /// median below 1 - threshold of A's.
    pub fn regressions(&self, threshold: f64) -> Vec<&PointComparison> {
        self.points
            .iter()
            .filter(|p| p.verdict == Verdict::Slower && p.ratio < 1.0 - threshold)
            .collect()
    }

    /// What the B/A figures are, in words.
    const METHOD: &'static str = "B/A is the ratio of the medians over each run's repeats. The runs were not interleaved, so nothing is paired: the interval is a 95% bootstrap over the repeats of each run, resampled independently. Faster or slower when the whole interval is above or below 1; a host that drifts between runs moves every point alike.";

    /// Every shared point, as a table both renderings share.
    fn table(&self) -> Table {
        let (a, b) = (format!("A {}", self.unit), format!("B {}", self.unit));
        let headers = [
            "point",
            &a,
            &b,
            "B/A",
            "95% interval",
            "repeats A/B",
            "verdict",
        ];
        let mut t = Table::new(&format!("{}, B against A", self.unit), &headers);
        for p in &self.points {
            let iv = p
                .interval
                .map_or("-".into(), |(lo, hi)| format!("{lo:.3}..{hi:.3}"));
            t.rows.push(vec![
                p.label.clone(),
                format!("{:.3}", p.a_median),
                format!("{:.3}", p.b_median),
                format!("{:.3}", p.ratio),
                iv,
                format!("{}/{}", p.a_repeats, p.b_repeats),
                p.verdict.name().into(),
            ]);
        }
        t
    }

    /// How many points went which way, and those only one run has.
    fn tally(&self) -> Vec<String> {
        let count = |v: Verdict| self.points.iter().filter(|p| p.verdict == v).count();
        let mut out = vec![format!(
            "{} point(s): {} faster, {} slower, {} within noise.",
            self.points.len(),
            count(Verdict::Faster),
            count(Verdict::Slower),
            count(Verdict::WithinNoise)
        )];
        for (who, v) in [("A", &self.only_a), ("B", &self.only_b)] {
            if !v.is_empty() {
                out.push(format!("Only in {who} (not compared): {}.", v.join("; ")));
            }
        }
        out
    }

    /// The differences between the runs, as lines.
    fn differing(&self) -> Vec<String> {
        if self.differences.is_empty() {
            return vec!["Nothing recorded differs (host, kernel, sendpath, settings, congestion control, route).".into()];
        }
        self.differences
            .iter()
            .map(|(k, x, y)| format!("{k}: A `{x}`, B `{y}`"))
            .collect()
    }

    /// The comparison as Markdown: differences first, then a table of every shared point.
    pub fn markdown(&self, a_name: &str, b_name: &str) -> String {
        let mut s = format!("# sendpath compare\n\nA: `{a_name}`  \nB: `{b_name}`\n\n");
        s.push_str("## What differs between the runs\n\n");
        for d in self.differing() {
            let _ = writeln!(s, "- {d}");
        }
        let _ = write!(s, "\n{}\n\n{}", Self::METHOD, self.table().md());
        s.push_str(&self.tally().join("\n"));
        s.push('\n');
        s
    }

    /// The comparison as a self-contained HTML page: differences, then per group of the rows
    /// study a chart of each path's B/A over size with its interval and one of both runs'
    /// medians, then the table.
    pub fn html(&self, a_name: &str, b_name: &str) -> anyhow::Result<String> {
        let mut s = crate::render::html_head(
            "sendpath compare",
            "body{font-family:sans-serif;margin:2em;max-width:1500px;color:#222}\
             table{border-collapse:collapse;margin:1em 0;font-size:14px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
             th{background:#f0f0f0}td:first-child,td:last-child{text-align:left}\
             .plots{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0}figcaption{font-size:13px;color:#555}",
        );
        let _ = writeln!(
            s,
            "<p>A: <code>{}</code><br>B: <code>{}</code></p>",
            esc(a_name),
            esc(b_name)
        );
        s.push_str("<h2>What differs between the runs</h2>\n<ul>\n");
        for (k, x, y) in &self.differences {
            let (k, x, y) = (esc(k), esc(x), esc(y));
            let _ = writeln!(s, "<li>{k}: A <code>{x}</code>, B <code>{y}</code></li>");
        }
        if self.differences.is_empty() {
            let _ = writeln!(s, "<li>{}</li>", esc(&self.differing()[0]));
        }
        let _ = writeln!(
            s,
            "</ul>\n<p>{}</p>\n<div class=\"plots\">",
            esc(Self::METHOD)
        );
        let runs = self.charts(both_runs);
        for ((group, series), (_, both)) in self.charts(ratio_line).into_iter().zip(runs) {
            let svg = line_chart(
                &format!("{group}: B/A {}", self.unit),
                "message size (bytes, log scale)",
                "B / A (bars: 95% interval)",
                XAxis::LogBytes,
                false,
                &series,
            )?;
            let _ = writeln!(s, "<figure>{svg}<figcaption>Above 1: B faster; a bar across 1: within noise.</figcaption></figure>");
            let svg = line_chart(
                &format!("{group}: {} in A and in B", self.unit),
                "message size (bytes, log scale)",
                &format!("{} (median over repeats)", self.unit),
                XAxis::LogBytes,
                true,
                &both,
            )?;
            let _ = writeln!(s, "<figure>{svg}<figcaption>Both runs on one chart: each path's median in A and in B; higher is faster.</figcaption></figure>");
        }
        s.push_str("</div>\n");
        s.push_str(&self.table().html());
        for line in self.tally() {
            let _ = writeln!(s, "<p>{}</p>", esc(&line));
        }
        s.push_str("</body></html>\n");
        Ok(crate::render::with_contents(&s))
    }

    /// The rows study's points charted per group: the lines `lines` draws for each point
    /// (a name, a value and its interval, at the point's size).
    fn charts(&self, lines: Lines) -> Vec<(String, Vec<Series>)> {
        let mut groups: Vec<(String, Vec<Series>)> = Vec::new();
        for p in &self.points {
            let Some((group, line, x)) = &p.chart else {
                continue;
            };
            let at = match groups.iter().position(|(g, _)| g == group) {
                Some(i) => i,
                None => {
                    groups.push((group.clone(), Vec::new()));
                    groups.len() - 1
                }
            };
            let series = &mut groups[at].1;
            for (name, y, spread) in lines(p, line) {
                let i = match series.iter().position(|l| l.name == name) {
                    Some(i) => i,
                    None => {
                        series.push(Series {
                            name,
                            points: Vec::new(),
                            spread: Vec::new(),
                        });
                        series.len() - 1
                    }
                };
                series[i].points.push((*x, y));
                series[i].spread.push(spread);
            }
        }
        groups
    }
}

/// What a chart draws of one point: (line, value, interval) for each of its lines.
type Lines = fn(&PointComparison, &str) -> Vec<(String, f64, (f64, f64))>;

/// A path's B/A and its interval.
fn ratio_line(p: &PointComparison, line: &str) -> Vec<(String, f64, (f64, f64))> {
    let bar = p.interval.unwrap_or((p.ratio, p.ratio));
    vec![(line.to_string(), p.ratio, bar)]
}

/// A path's median in each run: both runs on one chart.
fn both_runs(p: &PointComparison, line: &str) -> Vec<(String, f64, (f64, f64))> {
    vec![
        (format!("{line} (A)"), p.a_median, (p.a_median, p.a_median)),
        (format!("{line} (B)"), p.b_median, (p.b_median, p.b_median)),
    ]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::window::Repeat;

    fn row(strategy: sendpath::Strategy, gbps: &[f64]) -> Row {
        Row {
            strategy,
            size_bytes: 4096,
            threads: 1,
            connections_per_thread: 1,
            repeats: gbps
                .iter()
                .map(|&g| Repeat {
                    throughput_gbps: g,
                    ..Repeat::default()
                })
                .collect(),
            ..Row::default()
        }
    }

    fn run(rows: Vec<Row>, kernel: &str) -> Results {
        let mut r: Results =
            serde_json::from_str(include_str!("../tests/data/empty-results.json")).unwrap();
        r.environment.kernel = kernel.into();
        r.results = rows;
        r
    }

    #[test]
    fn points_are_matched_and_judged_by_their_intervals() {
        use sendpath::Strategy::*;
        let a = run(
            vec![
                row(Copy, &[10.0, 10.2, 9.9, 10.1, 10.0]),
                row(Uring, &[8.0, 8.1, 7.9, 8.0, 8.2]),
                row(Sendfile, &[5.0, 5.5, 4.5, 5.2, 4.8]),
                row(Splice, &[3.0, 3.0, 3.0]),
            ],
            "6.18.0",
        );
        let b = run(
            vec![
                row(Copy, &[12.0, 12.1, 11.9, 12.2, 12.0]),
                row(Uring, &[6.0, 6.1, 5.9, 6.0, 6.2]),
                row(Sendfile, &[5.1, 4.6, 5.4, 4.9, 5.0]),
                row(Gather, &[1.0, 1.0]),
            ],
            "6.18.1",
        );
        let c = compare(&a, &b).unwrap();
        let v: Vec<Verdict> = c.points.iter().map(|p| p.verdict).collect();
        assert_eq!(v, [Verdict::Faster, Verdict::Slower, Verdict::WithinNoise]);
        let (lo, hi) = c.points[0].interval.unwrap();
        assert!(lo < 1.2 && 1.2 < hi && lo > 1.0, "{lo}..{hi}");
        assert_eq!(c.only_a, ["stream splice 4KiB x1"]);
        assert_eq!(c.only_b, ["stream gather 4KiB x1"]);
        assert_eq!(
            c.differences[0],
            ("kernel".into(), "6.18.0".into(), "6.18.1".into())
        );
        // Uring lost 25%: a regression past 5% and past 20%, not past 30%.
        assert_eq!(c.regressions(0.05).len(), 1);
        assert_eq!(c.regressions(0.2).len(), 1);
        assert!(c.regressions(0.3).is_empty());
        let md = c.markdown("a.json", "b.json");
        assert!(md.contains("- kernel: A `6.18.0`, B `6.18.1`"), "{md}");
        // The HTML page charts B/A per path over size, with the same table.
        let html = c.html("a.json", "b.json").unwrap();
        assert!(
            html.contains("<svg") && html.contains("stream x1: B/A Gbit/s"),
            "charts"
        );
        // Both runs on one chart: each path's median in A and in B.
        assert!(
            html.contains("stream x1: Gbit/s in A and in B")
                && html.contains("uring (A)")
                && html.contains("uring (B)"),
            "both runs"
        );
        assert!(
            html.contains(
                "<td>stream uring 4KiB x1</td><td>8.000</td><td>6.000</td><td>0.750</td>"
            ),
            "{html}"
        );
        assert!(
            md.contains("| stream uring 4KiB x1 | 8.000 | 6.000 | 0.750 |"),
            "{md}"
        );
        assert!(
            md.contains("3 point(s): 1 faster, 1 slower, 1 within noise."),
            "{md}"
        );
        // The same files give the same intervals.
        assert_eq!(compare(&a, &b).unwrap(), c);
    }

    #[test]
    fn where_a_run_wrote_is_no_difference() {
        let args = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        assert_eq!(
            command(&args(&[
                "sendpath", "sweep", "--out", "a", "-n", "5", "--json=x"
            ])),
            "sendpath sweep -n 5"
        );
    }

    #[test]
    fn a_single_repeat_is_within_noise_and_no_common_point_is_an_error() {
        use sendpath::Strategy::*;
        let a = run(vec![row(Copy, &[10.0])], "k");
        let b = run(vec![row(Copy, &[20.0])], "k");
        let c = compare(&a, &b).unwrap();
        assert_eq!(
            (c.points[0].interval, c.points[0].verdict),
            (None, Verdict::WithinNoise)
        );
        assert!(c.differences.is_empty());
        let other = run(vec![row(Uring, &[1.0, 2.0])], "k");
        let e = compare(&a, &other).unwrap_err();
        assert!(e.contains("no point in common"), "{e}");
        assert!(
            e.contains("copy") && e.contains("uring"),
            "a point of each: {e}"
        );
    }
}
