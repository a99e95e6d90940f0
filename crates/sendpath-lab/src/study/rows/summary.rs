//! The sweep's `summary.md` and `report.html`, rendered from its results alone.

use crate::files::write_text;
use crate::render::{environment_line_of, esc, Table};
use crate::study::rows::analysis::{self, Analysis};
use crate::study::rows::export::{Document, Exporter};
use crate::study::rows::{Results, Row, Workload};
use crate::units::fmt_size;
use anyhow::Context;
use sendpath::Strategy;
use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

/// The summary's tables: recommendation, crossovers, the MSG_ZEROCOPY paper's layout, and
/// every row.
fn tables(r: &Results, a: &Analysis) -> Vec<Table> {
    let mut out = Vec::new();
    let title = format!("Recommendation (data: {})", a.route);
    let mut rec = Table::new(
        &title,
        &["source", "connections", "message sizes", "use", "why"],
    );
    for x in &a.recommendations {
        rec.rows.push(vec![
            x.source.into(),
            x.threads.to_string(),
            x.messages(),
            x.path.clone(),
            x.why.clone(),
        ]);
    }
    out.push(rec);
    let mut cx = Table::new(
        "Crossover sizes (beats the baseline, paired by round, from this size up)",
        &[
            "path",
            "baseline",
            "connections",
            "faster from",
            "measured range",
        ],
    );
    for c in &a.crossovers {
        cx.rows.push(vec![
            c.path.to_string(),
            c.baseline.to_string(),
            c.threads.to_string(),
            c.from_size
                .map_or("never, in the measured range".into(), fmt_size),
            format!("{} .. {}", fmt_size(c.sizes.0), fmt_size(c.sizes.1)),
        ]);
    }
    out.push(cx.noted(CROSSOVER_NOTE));
    if let Some(t) = zerocopy_paper_table(r) {
        out.push(t);
    }
    out.extend(super::copies::table(r));
    out.extend(super::udp::tables(r));
    out.push(results_table(r));
    out
}

/// Every row: median over rounds and its spread.
fn results_table(r: &Results) -> Table {
    let mut res = Table::new(
        "Results (median over rounds, [min..max])",
        &[
            "workload",
            "path",
            "size",
            "conns",
            "Gbit/s",
            "msg/s",
            "us/msg",
            "CPU ns/B sender",
            "CPU ns/B receiver",
            "CPU ns/B softirq",
            "CPU ns/B system-wide",
            "copied",
            "fallbacks",
            "latency p50/p99 us",
            "context switches per MiB, sender/receiver",
            "zero-copy completions per notification",
            "send to completion read p50/p99/max us",
            "repeats",
        ],
    );
    for x in &r.results {
        let t = x.throughput_gbps;
        res.rows.push(vec![
            x.workload.to_string(),
            x.strategy.to_string(),
            x.size_label(),
            x.threads.to_string(),
            format!("{:.3} [{:.3}..{:.3}]", t.median, t.min, t.max),
            format!("{:.0}", x.messages_per_s.median),
            format!("{:.2}", x.median_of(|r| Some(r.msg_time_us)).unwrap_or(0.0)),
            cpu_cell(x, |c| Some(c.sender)),
            cpu_cell(x, |c| c.receiver),
            cpu_cell(x, |c| Some(c.system_softirq)),
            cpu_cell(x, |c| Some(c.system)),
            x.zerocopy
                .copied_fraction
                .map_or("-".into(), crate::units::percent),
            x.zerocopy.counts.fallbacks.total().to_string(),
            x.latency_us
                .map_or("-".into(), |l| format!("{:.1}/{:.1}", l.p50, l.p99)),
            switches_cell(x),
            x.zerocopy
                .completions_per_notification
                .map_or("-".into(), |c| format!("{c:.1}")),
            completion_cell(&x.zerocopy),
            x.repeats.len().to_string(),
        ]);
    }
    res
}

/// `0.02/12.6`: context switches per MiB of the sender and receiver threads; `-` for one
/// not measured.
fn switches_cell(x: &Row) -> String {
    let p = x.per_mib.unwrap_or_default();
    let f = |v: Option<f64>| v.map_or("-".into(), |v| format!("{v:.2}"));
    match (p.switches_sender, p.switches_receiver) {
        (None, None) => "-".into(),
        (s, r) => format!("{}/{}", f(s), f(r)),
    }
}

/// `40.4/120.0/900.1`: a zero-copy row's send-to-completion latency; `-` without completions.
fn completion_cell(z: &crate::study::rows::Zerocopy) -> String {
    match (
        z.completion_p50_us,
        z.completion_p99_us,
        z.completion_max_us,
    ) {
        (Some(a), Some(b), Some(c)) => format!("{a:.1}/{b:.1}/{c:.1}"),
        (Some(a), _, _) => format!("{a:.1}/-/-"),
        _ => "-".into(),
    }
}

/// A CPU-per-byte cell; "not measured" when the row has no CPU figures.
fn cpu_cell(x: &Row, f: impl Fn(&crate::window::CpuNsPerByte) -> Option<f64>) -> String {
    match x.cpu_ns_per_byte.as_ref() {
        None => "not measured".into(),
        Some(c) => f(c).map_or("-".into(), |v| format!("{v:.3}")),
    }
}

/// The MSG_ZEROCOPY paper's Figure 3 (netperf TCP_STREAM at 10 Gbit/s): per send size,
/// zero-copy's process and system cycles as a percentage of copy's.
const PAPER: [(usize, u32, u32); 5] = [
    (4 << 10, 41, 79),
    (16 << 10, 18, 67),
    (64 << 10, 11, 64),
    (256 << 10, 10, 63),
    (1 << 20, 8, 61),
];

/// What the CPU table's columns are.
pub(crate) const CPU_NOTE: &str = "\"process\" = the paper's process column: sender threads; \"system\" = the paper's system column: all CPUs, /proc/stat busy; \"paper %\" = zero-copy's cycles as a percentage of copy's in the MSG_ZEROCOPY paper's Figure 3, netperf TCP over a 10 Gbit/s NIC, where nothing was copied; \"per notification\" = sends completed per error-queue notification, which the paper's kernel coalesces into one range while TCP acknowledges in order (it saw 75 sends share one ubuf_info, then capped one at 512 KB); \"send to read\" = from the send to the reading of its completion, p50/p99 us, the notification latency that bounds the working set.";

/// What a crossover is, and what "never" does not say.
pub(crate) const CROSSOVER_NOTE: &str = "A path's crossover is the smallest measured size from which it beats the baseline at every larger measured size. \"never\" means no such size: the path may still beat the baseline at some sizes, as the recommendation above says where it does.";

/// copy vs msg-zerocopy CPU per byte, as the MSG_ZEROCOPY paper laid out its table (the paper
/// gives Mcycles of a fixed transfer; here it is ns per byte, same ratio). The paper's
/// "process" column is the sending process: here the sender threads. Its "system" column is
/// all CPUs: here `/proc/stat` busy time.
fn zerocopy_paper_table(r: &Results) -> Option<Table> {
    let find = |p: Strategy, s: usize| {
        r.results.iter().find(|x| {
            x.workload == Workload::Stream
                && x.is_plain()
                && x.strategy == p
                && x.size_bytes == s
                && x.threads == 1
        })
    };
    let sizes: BTreeSet<usize> = r
        .results
        .iter()
        .filter(|x| x.strategy == Strategy::MsgZerocopy && x.threads == 1 && x.is_plain())
        .map(|x| x.size_bytes)
        .collect();
    let mut t = Table::new(
        "copy vs msg-zerocopy CPU ns per byte, 1 connection",
        &[
            "size",
            "process copy",
            "process zerocopy",
            "%",
            "paper %",
            "system copy",
            "system zerocopy",
            "%",
            "paper %",
            "softirq copy",
            "softirq zerocopy",
            "zerocopy copied",
            "per notification",
            "send to read",
        ],
    )
    .noted(CPU_NOTE);
    for s in sizes {
        let (Some(c), Some(z)) = (find(Strategy::Copy, s), find(Strategy::MsgZerocopy, s)) else {
            continue;
        };
        let (Some(cc), Some(zc)) = (c.cpu_ns_per_byte, z.cpu_ns_per_byte) else {
            continue;
        };
        let pct = |a: f64, b: f64| {
            if a > 0.0 {
                format!("{:.0}", b / a * 100.0)
            } else {
                "-".into()
            }
        };
        let paper = PAPER.iter().find(|p| p.0 == s);
        let paper_pct =
            |f: fn(&(usize, u32, u32)) -> u32| paper.map_or("-".into(), |p| f(p).to_string());
        t.rows.push(vec![
            fmt_size(s),
            format!("{:.3}", cc.sender),
            format!("{:.3}", zc.sender),
            pct(cc.sender, zc.sender),
            paper_pct(|p| p.1),
            format!("{:.3}", cc.system),
            format!("{:.3}", zc.system),
            pct(cc.system, zc.system),
            paper_pct(|p| p.2),
            format!("{:.3}", cc.system_softirq),
            format!("{:.3}", zc.system_softirq),
            z.zerocopy
                .copied_fraction
                .map_or("-".into(), crate::units::percent),
            z.zerocopy
                .completions_per_notification
                .map_or("-".into(), |c| format!("{c:.1}")),
            match (z.zerocopy.completion_p50_us, z.zerocopy.completion_p99_us) {
                (Some(a), Some(b)) => format!("{a:.0}/{b:.0}"),
                _ => "-".into(),
            },
        ]);
    }
    (!t.rows.is_empty()).then_some(t)
}

/// The stream rows plotted against size: single sizes from pooled buffers (mixes and fresh
/// buffers are in the table).
fn environment_line(r: &Results) -> String {
    format!(
        "{}{}",
        environment_line_of(&r.environment),
        r.sweep.as_ref().map_or(String::new(), |s| format!(
            ", preset {}: {} s windows after {} s warmup",
            s.preset, s.duration_s, s.warmup_s
        )) + &format!(
            ", {} rounds in shuffled order (seed {})",
            r.schedule.rounds, r.schedule.seed
        )
    )
}

fn hw_line(r: &Results) -> String {
    let h = &r.environment.probe.hw_counters;
    if h.available {
        "Hardware counters: available (cycles, instructions, LLC misses per byte are measured)."
            .into()
    } else {
        format!(
            "Hardware counters: unavailable ({}); cycles per byte in the data are estimates from CPU time x nominal clock.",
            h.reason.as_deref().unwrap_or("unknown")
        )
    }
}

/// `summary.md`.
/// What an interrupted run holds, for the top of the summary.
fn interrupted_notice(r: &Results) -> Option<String> {
    if !r.interrupted {
        return None;
    }
    let made: usize = r.results.iter().map(|x| x.repeats.len()).sum();
    let points = r.sweep.as_ref().map_or(r.results.len(), |s| s.points_total);
    Some(format!(
        "The run stopped after a signal: {made} of {} windows were measured; each row's `repeats` column says how many rounds it holds.",
        points * r.schedule.rounds as usize
    ))
}

pub(crate) fn markdown(r: &Results, a: &Analysis) -> String {
    let mut s = String::from("# sendpath results\n\n");
    if let Some(n) = interrupted_notice(r) {
        let _ = writeln!(s, "> **Interrupted.** {n}\n");
    }
    if let Some(n) = &a.copied_notice {
        let _ = writeln!(s, "> **Read this first.** {n}\n");
    }
    let _ = writeln!(
        s,
        "{}\n\n{}\n\n**How paths are compared.** {}\n",
        environment_line(r),
        hw_line(r),
        analysis::RULE
    );
    for t in tables(r, a) {
        s.push_str(&t.md());
    }
    let warnings: Vec<String> = r
        .results
        .iter()
        .flat_map(|x| {
            x.warnings
                .iter()
                .map(move |w| format!("- {} {}: {w}", x.strategy, x.size_label()))
        })
        .collect();
    if !warnings.is_empty() {
        let _ = writeln!(s, "## Warnings\n\n{}\n", warnings.join("\n"));
    }
    s
}

/// `report.html`: self-contained, plots as inline SVG.
pub(crate) fn html(r: &Results, a: &Analysis) -> anyhow::Result<String> {
    let mut s = crate::render::html_head(
        "sendpath report",
        "body{font-family:sans-serif;margin:2em;max-width:1500px;color:#222}\
         table{border-collapse:collapse;margin:1em 0;font-size:14px}td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}\
         th{background:#f0f0f0}td:nth-child(-n+2),td:last-child{text-align:left}\
         .notice{background:#fff4d6;border-left:6px solid #e0a800;padding:.8em 1em;font-size:15px}\
         .plots{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0}figcaption{font-size:13px;color:#555}",
    );
    if let Some(n) = interrupted_notice(r) {
        let _ = writeln!(s, "<p class=\"notice\"><b>Interrupted.</b> {}</p>", esc(&n));
    }
    if let Some(n) = &a.copied_notice {
        let _ = writeln!(
            s,
            "<p class=\"notice\"><b>Read this first.</b> {}</p>",
            esc(n)
        );
    }
    let _ = writeln!(
        s,
        "<p>{}</p><p>{}</p><p><b>How paths are compared.</b> {}</p>",
        esc(&environment_line(r)),
        esc(&hw_line(r)),
        esc(analysis::RULE)
    );
    let ts = tables(r, a);
    let (results_table, rest) = ts
        .split_last()
        .expect("tables always has the results table");
    for t in rest {
        s.push_str(&t.html());
    }
    s.push_str("<h2>Plots</h2>\n<div class=\"plots\">\n");
    for (cap, svg) in super::charts::plots(r)? {
        let _ = writeln!(
            s,
            "<figure class=\"plot\">{svg}<figcaption>{}</figcaption></figure>",
            esc(&cap)
        );
    }
    s.push_str("</div>\n");
    s.push_str(&results_table.html());
    // Marks the page once every plot has laid out with content, for headless checks.
    s.push_str(
        "<script>\nconst figs=[...document.querySelectorAll('figure.plot svg')];\n\
         const drawn=figs.filter(f=>f.getBBox().width>0&&f.querySelectorAll('polyline,path,line').length>0);\n\
         document.body.dataset.plots=String(drawn.length);\n</script>\n</body></html>\n",
    );
    Ok(crate::render::with_contents(&s))
}

pub fn write(dir: &Path, r: &Results) -> anyhow::Result<Analysis> {
    let doc = Document::new(r);
    let md = Markdown.render(&doc)?;
    let page = Html.render(&doc)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_text(&dir.join(Markdown.file_name()), &md)?;
    write_text(&dir.join(Html.file_name()), &page)?;
    Ok(doc.analysis().clone())
}

/// `summary.md`: the analysis and the tables.
pub(crate) struct Markdown;

/// `report.html`: the analysis, tables and plots in one self-contained page.
pub(crate) struct Html;

impl Exporter for Markdown {
    fn name(&self) -> &'static str {
        "markdown"
    }
    fn file_name(&self) -> &'static str {
        "summary.md"
    }
    fn render(&self, doc: &Document<'_>) -> anyhow::Result<String> {
        Ok(markdown(doc.results(), doc.analysis()))
    }
}

impl Exporter for Html {
    fn name(&self) -> &'static str {
        "html"
    }
    fn file_name(&self) -> &'static str {
        "report.html"
    }
    fn render(&self, doc: &Document<'_>) -> anyhow::Result<String> {
        html(doc.results(), doc.analysis())
    }
}
