//! The server study's `summary.md` and `report.html`, rendered from its results alone.

use super::{axes, closed_windows, median_of, summary, Measurement, StudyResults};
use crate::export::write_text;
use crate::render::plot::{line_chart, Series, XAxis};
use crate::render::{environment_line_of, esc};
use crate::units::fmt_size;
use anyhow::Context;
use std::fmt::Write as _;
use std::path::Path;

/// `report.html` of the HTTP server study: per body size, requests/s, p50 and p99 latency
/// and server CPU per request against connections (closed loop, medians over rounds, one
/// line per server), then `summary` (the study's [`summary`](summary))
/// as text. Self-contained, plots as inline SVG.
pub fn http_html(r: &StudyResults, summary: &str) -> anyhow::Result<String> {
    type Value = fn(&Measurement) -> Option<f64>;
    let (servers, bodies, conns) = axes(r);
    let charts: [(&str, &str, Value); 4] = [
        ("Requests/s", "requests/s", |m| Some(m.requests_per_s)),
        ("p50 latency", "p50 (ms)", |m| {
            m.latency_us.map(|l| l.p50 / 1e3)
        }),
        ("p99 latency", "p99 (ms)", |m| {
            m.latency_us.map(|l| l.p99 / 1e3)
        }),
        ("Server CPU per request", "CPU (us per request)", |m| {
            m.server_cpu_us_per_request
        }),
    ];
    let mut s = String::from(
        "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\"><title>sendpath HTTP server study</title>\n<style>\
         body{font-family:sans-serif;margin:2em;max-width:1500px;color:#222}\
         .plots{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0}figcaption{font-size:13px;color:#555}\
         pre{font-size:13px;background:#f7f7f7;padding:1em;overflow-x:auto}\
         </style></head><body>\n<h1>sendpath HTTP server study</h1>\n",
    );
    let _ = writeln!(
        s,
        "<p>{}</p><p>Closed loop; each point is the median over rounds; server CPU is the server's own, from /proc over the measured window.</p>",
        esc(&environment_line_of(&r.environment))
    );
    for &body in &bodies {
        let _ = writeln!(
            s,
            "<h2>Body {}</h2>\n<div class=\"plots\">",
            esc(&fmt_size(body))
        );
        for (what, y_desc, f) in charts {
            let series: Vec<Series> = servers
                .iter()
                .map(|srv| Series {
                    name: srv.clone(),
                    points: conns
                        .iter()
                        .filter_map(|&c| {
                            median_of(&closed_windows(r, srv, body, c), f).map(|y| (c as f64, y))
                        })
                        .collect(),
                })
                .filter(|x| !x.points.is_empty())
                .collect();
            if series.is_empty() {
                continue;
            }
            let title = format!("{what}, body {}", fmt_size(body));
            let svg = line_chart(
                &title,
                "connections (log scale)",
                y_desc,
                XAxis::LogCount,
                &series,
            )?;
            let _ = writeln!(
                s,
                "<figure>{svg}<figcaption>{} vs connections</figcaption></figure>",
                esc(&title)
            );
        }
        s.push_str("</div>\n");
    }
    let _ = writeln!(
        s,
        "<h2>Tables</h2>\n<pre>{}</pre>\n</body></html>",
        esc(summary)
    );
    Ok(s)
}

/// Writes `summary.md` and `report.html` into `dir`. Both are rendered before anything is
/// written, and each is written beside and renamed, so a failure leaves earlier files intact.
/// Returns the analysis the files were written with.
/// Writes `summary.md` and `report.html` of an HTTP server study into `dir`; returns the
/// summary.
pub fn write_http(dir: &Path, r: &StudyResults) -> anyhow::Result<String> {
    let md = summary(r);
    let page = http_html(r, &md)?;
    std::fs::create_dir_all(dir).with_context(|| format!("cannot create {}", dir.display()))?;
    write_text(&dir.join("summary.md"), &md)?;
    write_text(&dir.join("report.html"), &page)?;
    Ok(md)
}
