//! The server study's `summary.md` and `report.html`, rendered from its results alone.

use super::{Measurement, StudyResults};
use crate::files::write_text;
use crate::render::plot::{line_chart, Series, XAxis};
use crate::render::{environment_line_of, esc};
use crate::units::fmt_size;
use crate::window::Spread;
use anyhow::Context;
use std::fmt::Write as _;
use std::path::Path;

/// `report.html` of the HTTP server study: per body size, requests/s, p50 and p99 latency
/// and server CPU per request against connections (closed loop, medians over rounds, one
/// line per server), then `summary` (the study's [`summary`](summary))
/// as text. Self-contained, plots as inline SVG.
pub(crate) fn http_html(r: &StudyResults, summary: &str) -> anyhow::Result<String> {
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
    let mut s = crate::render::html_head(
        "sendpath HTTP server study",
        "body{font-family:sans-serif;margin:2em;max-width:1500px;color:#222}\
         .plots{display:flex;flex-wrap:wrap;gap:12px}figure{margin:0}figcaption{font-size:13px;color:#555}\
         pre{font-size:13px;background:#f7f7f7;padding:1em;overflow-x:auto}",
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
                    spread: Vec::new(),
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
                false,
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
    Ok(crate::render::with_contents(&s))
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

/// The median of the finite values of `it`; `None` when there are none.
pub(crate) fn median(it: impl Iterator<Item = f64>) -> Option<f64> {
    let v: Vec<f64> = it.filter(|x| x.is_finite()).collect();
    (!v.is_empty()).then(|| Spread::of(&v).median)
}

/// Zero-copy fallbacks by reason summed over `ms` (`-` for servers that do not report them).
fn fallbacks_of(ms: &[&Measurement]) -> String {
    let mut f = sendpath::Fallbacks::default();
    let mut any = false;
    for m in ms {
        if let Some(s) = m.serve.as_ref().and_then(|r| r.send_stats.as_ref()) {
            f.add(&s.zerocopy.fallbacks);
            any = true;
        }
    }
    if !any {
        return "-".into();
    }
    let parts: Vec<String> = [
        ("inflight_cap", f.inflight_cap),
        ("enomem", f.enomem),
        ("enobufs", f.enobufs),
        ("unsupported", f.unsupported),
    ]
    .iter()
    .filter(|(_, n)| *n > 0)
    .map(|(k, n)| format!("{k} {n}"))
    .collect();
    if parts.is_empty() {
        "none".into()
    } else {
        parts.join(", ")
    }
}

/// "median (min..max)", or the one value, or "null".
fn spread(v: &[f64]) -> String {
    let v: Vec<f64> = v.iter().copied().filter(|x| x.is_finite()).collect();
    let s = Spread::of(&v);
    match v.len() {
        0 => "null".into(),
        1 => fmt_n(s.median),
        _ => format!("{} ({}..{})", fmt_n(s.median), fmt_n(s.min), fmt_n(s.max)),
    }
}

fn fmt_n(x: f64) -> String {
    if x.abs() >= 1000.0 {
        format!("{:.0}", x)
    } else if x.abs() >= 10.0 {
        format!("{:.1}", x)
    } else {
        format!("{:.3}", x)
    }
}

/// The servers (in the order first measured), body sizes and connection counts of a study.
pub(crate) fn axes(r: &StudyResults) -> (Vec<String>, Vec<usize>, Vec<usize>) {
    let mut servers: Vec<String> = Vec::new();
    for m in &r.measurements {
        if !servers.contains(&m.server) && !m.load.ends_with("-check") {
            servers.push(m.server.clone());
        }
    }
    let mut bodies: Vec<usize> = r.measurements.iter().map(|m| m.body_bytes).collect();
    bodies.sort_unstable();
    bodies.dedup();
    let mut conns: Vec<usize> = r.measurements.iter().map(|m| m.connections).collect();
    conns.sort_unstable();
    conns.dedup();
    (servers, bodies, conns)
}

/// The closed-loop windows (every round) of one server, body size and connection count; the
/// cross-check windows are left out.
pub(crate) fn closed_windows<'a>(
    r: &'a StudyResults,
    server: &str,
    body: usize,
    conns: usize,
) -> Vec<&'a Measurement> {
    r.measurements
        .iter()
        .filter(|m| m.rate_per_s.is_none() && !m.load.ends_with("-check"))
        .filter(|m| m.server == server && m.body_bytes == body && m.connections == conns)
        .collect()
}

/// The median over `ms` of a value, where measured.
pub(crate) fn median_of(
    ms: &[&Measurement],
    f: impl Fn(&Measurement) -> Option<f64>,
) -> Option<f64> {
    median(ms.iter().filter_map(|m| f(m)))
}

/// How the servers ran: serve's workers and batched waits, from its reports, and nginx's
/// workers, from its configuration.
fn configurations(r: &StudyResults) -> String {
    let mut serve = std::collections::BTreeSet::new();
    for m in &r.measurements {
        if let Some(x) = &m.serve {
            serve.insert(match x.min_wait_us {
                Some(us) => format!("`--workers {} --min-wait {us}us`", x.workers),
                None => format!("`--workers {}` (a wake per completion)", x.workers),
            });
        }
    }
    let mut out = Vec::new();
    if !serve.is_empty() {
        out.push(format!(
            "`sendpath serve` with {}",
            serve.into_iter().collect::<Vec<_>>().join(", ")
        ));
    }
    let nginx = r.nginx_config.as_deref().and_then(|c| {
        c.lines()
            .find_map(|l| l.trim().strip_prefix("worker_processes "))
            .map(|w| w.trim_end_matches(';').to_string())
    });
    if let Some(w) = nginx {
        out.push(format!(
            "nginx with {w} workers (its whole configuration is `nginx_config` in http-results.json)"
        ));
    }
    if out.is_empty() {
        return String::new();
    }
    format!("How the servers ran: {}.", out.join("; "))
}

/// Markdown tables of the results: per body size, each server's requests/s, p99 and CPU per
/// request against connections; the ratios of the first server to the reference per paired
/// round; the study's SEND vs SEND_ZC layout; the open-loop latencies; the wrk cross-check.
pub fn summary(r: &StudyResults) -> String {
    let mut s = String::new();
    if let Some(a) = &r.environment.agent {
        let _ = writeln!(
            s,
            "The load ran on `sendpath agent` at {a} (http-load), the servers on this host.\n"
        );
    }
    let (servers, bodies, conns) = axes(r);
    let _ = writeln!(s, "# HTTP server study\n");
    if r.interrupted {
        let _ = writeln!(
            s,
            "> **Interrupted.** The run stopped after a signal: {} windows were measured, and the tables below hold only those.\n",
            r.measurements.len()
        );
    }
    let _ = writeln!(s, "Medians over rounds, (min..max) across rounds. Closed loop; CPU is the server's own (all its processes), read from /proc over the measured window.\n");
    let conf = configurations(r);
    if !conf.is_empty() {
        let _ = writeln!(s, "{conf}\n");
    }
    for &body in &bodies {
        let _ = writeln!(s, "## Body {body} B\n");
        for table in [closed_table, against_nginx, send_vs_send_zc, open_loop] {
            s += &table(r, body, &servers, &conns);
        }
        let _ = writeln!(s);
    }
    if !r.wrk_check_ratios.is_empty() {
        let _ = writeln!(
            s,
            "http-load / wrk requests/s, same server, 100 connections, alternating (server and load on CPUs of their own where there are two): {}\n",
            spread(&r.wrk_check_ratios)
        );
    }
    s
}

/// Each server's closed-loop windows at each connection count.
fn closed_table(r: &StudyResults, body: usize, servers: &[String], conns: &[usize]) -> String {
    let mut s = String::new();
    let pick = |srv: &str, body: usize, c: usize| closed_windows(r, srv, body, c);
    let _ = writeln!(s, "| server | connections | requests/s | p50 us | p99 us | server CPU us/request | copied | fallbacks | errors |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|---|");
    for srv in servers {
        for &c in conns {
            let ms = pick(srv, body, c);
            if ms.is_empty() {
                continue;
            }
            let col = |f: &dyn Fn(&Measurement) -> Option<f64>| -> Vec<f64> {
                ms.iter().filter_map(|m| f(m)).collect()
            };
            let copied = col(&|m| m.serve.as_ref().and_then(|x| x.copied_fraction));
            let errors: u64 = ms.iter().map(|m| m.errors.values().sum::<u64>()).sum();
            let fallbacks = fallbacks_of(&ms);
            let _ = writeln!(
                s,
                "| {srv} | {c} | {} | {} | {} | {} | {} | {fallbacks} | {errors} |",
                spread(&col(&|m| Some(m.requests_per_s))),
                spread(&col(&|m| m.latency_us.map(|l| l.p50))),
                spread(&col(&|m| m.latency_us.map(|l| l.p99))),
                spread(&col(&|m| m.server_cpu_us_per_request)),
                if copied.is_empty() {
                    "-".into()
                } else {
                    crate::units::percent(median(copied.into_iter()).unwrap_or(0.0))
                },
            );
        }
    }
    s
}

/// Each server against nginx, paired by round.
fn against_nginx(r: &StudyResults, body: usize, servers: &[String], conns: &[usize]) -> String {
    let mut s = String::new();
    let pick = |srv: &str, body: usize, c: usize| closed_windows(r, srv, body, c);
    if servers.iter().any(|x| x == "nginx") {
        let _ = writeln!(
            s,
            "\nAgainst nginx, paired by round (median (min..max) of the per-round ratio):\n"
        );
        let _ = writeln!(
            s,
            "| server | connections | requests/s ratio | CPU/request ratio | rounds faster |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|");
        for srv in servers.iter().filter(|x| *x != "nginx") {
            for &c in conns {
                let a = pick(srv, body, c);
                let b = pick("nginx", body, c);
                let mut rps = Vec::new();
                let mut cpu = Vec::new();
                for m in &a {
                    if let Some(n) = b.iter().find(|n| n.round == m.round) {
                        if n.requests_per_s > 0.0 {
                            rps.push(m.requests_per_s / n.requests_per_s);
                        }
                        if let (Some(x), Some(y)) =
                            (m.server_cpu_us_per_request, n.server_cpu_us_per_request)
                        {
                            if y > 0.0 {
                                cpu.push(x / y);
                            }
                        }
                    }
                }
                if rps.is_empty() {
                    continue;
                }
                let faster = rps.iter().filter(|x| **x > 1.0).count();
                let _ = writeln!(
                    s,
                    "| {srv} | {c} | {} | {} | {faster}/{} |",
                    spread(&rps),
                    spread(&cpu),
                    rps.len()
                );
            }
        }
    }
    s
}

/// The published study's table (wrk over 1GbE, 4 workers on isolated cores, 88-byte
/// responses): connections, then requests/s and mean latency (ms) with SEND and SEND_ZC.
const PUBLISHED: [(usize, f64, f64, f64, f64); 3] = [
    (100, 112.0, 0.90, 120.0, 0.98),
    (1000, 245.0, 4.01, 244.0, 4.05),
    (4000, 241.0, 7.86, 236.0, 10.74),
];

/// SEND against SEND_ZC, laid out like the published study (requests/s and mean latency, as
/// its wrk reported them), with p99 and the copied fraction, and the published row beside.
fn send_vs_send_zc(r: &StudyResults, body: usize, servers: &[String], conns: &[usize]) -> String {
    let mut s = String::new();
    let (u, z) = ("sendpath-uring", "sendpath-uring-zc");
    if !(servers.iter().any(|x| x == u) && servers.iter().any(|x| x == z)) {
        return s;
    }
    let _ = writeln!(
        s,
        "\nSEND against SEND_ZC, laid out like the published study (req/s, mean latency; its figures: wrk over 1GbE, 4 workers, 88-byte responses):\n"
    );
    let _ = writeln!(s, "| Conns | Regular Send | ZC Send | Throughput Delta | Latency Delta (mean) | p99 SEND / ZC | ZC copied | published: Send / ZC Send |");
    let _ = writeln!(s, "|---|---|---|---|---|---|---|---|");
    for &c in conns {
        let a = closed_windows(r, u, body, c);
        let b = closed_windows(r, z, body, c);
        let med = |ms: &[&Measurement], f: &dyn Fn(&Measurement) -> Option<f64>| {
            median(ms.iter().filter_map(|m| f(m)))
        };
        let (Some(ra), Some(rb)) = (
            med(&a, &|m| Some(m.requests_per_s)),
            med(&b, &|m| Some(m.requests_per_s)),
        ) else {
            continue;
        };
        let ms = |l: Option<f64>| l.map_or("null".into(), |l| format!("{:.2}ms", l / 1e3));
        let delta = |x: Option<f64>, y: Option<f64>| {
            x.zip(y).map_or("null".into(), |(x, y)| {
                format!("{:+.0}%", 100.0 * (y / x - 1.0))
            })
        };
        let (ma, mb) = (
            med(&a, &|m| m.latency_mean_us),
            med(&b, &|m| m.latency_mean_us),
        );
        let (pa, pb) = (
            med(&a, &|m| m.latency_us.map(|l| l.p99)),
            med(&b, &|m| m.latency_us.map(|l| l.p99)),
        );
        let copied = med(&b, &|m| m.serve.as_ref().and_then(|x| x.copied_fraction));
        let published = PUBLISHED.iter().find(|p| p.0 == c).map_or("-".into(), |p| {
            format!("{:.0}K, {:.2}ms / {:.0}K, {:.2}ms", p.1, p.2, p.3, p.4)
        });
        let _ = writeln!(
            s,
            "| {c} | {:.0}K req/s, {} | {:.0}K req/s, {} | {:+.1}% | {} | {} / {} (p99 {}) | {} | {published} |",
            ra / 1e3,
            ms(ma),
            rb / 1e3,
            ms(mb),
            100.0 * (rb / ra - 1.0),
            delta(ma, mb),
            ms(pa),
            ms(pb),
            delta(pa, pb),
            copied.map_or("unknown".into(), crate::units::percent),
        );
    }
    s
}

/// The open-loop windows: latency from each request's intended send time.
fn open_loop(r: &StudyResults, body: usize, _: &[String], _: &[usize]) -> String {
    let mut s = String::new();
    let open: Vec<&Measurement> = r
        .measurements
        .iter()
        .filter(|m| m.rate_per_s.is_some() && m.body_bytes == body)
        .collect();
    if !open.is_empty() {
        let _ = writeln!(
            s,
            "\nOpen loop (http-load, latency from each request's intended send time):\n"
        );
        let _ = writeln!(
            s,
            "| server | connections | rate req/s | achieved req/s | p50 us | p99 us | p99.9 us |"
        );
        let _ = writeln!(s, "|---|---|---|---|---|---|---|");
        let mut keys: Vec<(String, usize, u64)> = open
            .iter()
            .map(|m| {
                (
                    m.server.clone(),
                    m.connections,
                    m.rate_per_s.unwrap_or(0.0) as u64,
                )
            })
            .collect();
        keys.sort();
        keys.dedup();
        for (srv, c, rate) in keys {
            let ms: Vec<&&Measurement> = open
                .iter()
                .filter(|m| {
                    m.server == srv
                        && m.connections == c
                        && m.rate_per_s.unwrap_or(0.0) as u64 == rate
                })
                .collect();
            let col = |f: &dyn Fn(&Measurement) -> Option<f64>| -> Vec<f64> {
                ms.iter().filter_map(|m| f(m)).collect()
            };
            let _ = writeln!(
                s,
                "| {srv} | {c} | {rate} | {} | {} | {} | {} |",
                spread(&col(&|m| Some(m.requests_per_s))),
                spread(&col(&|m| m.latency_us.map(|l| l.p50))),
                spread(&col(&|m| m.latency_us.map(|l| l.p99))),
                spread(&col(&|m| m.latency_us.map(|l| l.p999))),
            );
        }
    }
    s
}
