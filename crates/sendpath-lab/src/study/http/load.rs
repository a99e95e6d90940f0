//! The load tools: http-load in this process (with its warm-up in the run it measures) and
//! wrk as a program, each a measured window.

use super::StudyConfig;
use crate::cancel::Cancel;
use crate::http::load::{self, LatencyUs, LoadConfig};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::process::Command;
use std::time::{Duration, Instant};

/// What one load window measured.
#[derive(Debug)]
pub(super) struct Window {
    pub(super) requests_per_s: f64,
    pub(super) requests: f64,
    pub(super) latency: Option<LatencyUs>,
    /// Mean latency, microseconds (wrk's `Latency Avg`, what the published study quotes).
    pub(super) latency_mean_us: Option<f64>,
    pub(super) errors: BTreeMap<String, u64>,
}

/// How close to a window's edge the load may end and its CPU reading still count: the load
/// stops by its own clock, and on a busy host the reading thread can wake after it.
const EDGE_SLACK: Duration = Duration::from_millis(50);

/// One http-load window with its warm-up in the same run, so the connections it opened carry
/// into the window: a run of its own would open every connection again inside the window, and
/// an open loop would charge the server for the requests that fell due while they were
/// opening. `cpu` (the server's CPU seconds) is read at the window's edges, by a thread that
/// sleeps until them; neither reading is taken if the load ends more than [`EDGE_SLACK`]
/// before an edge.
pub(super) fn http_load_window(
    cfg: &StudyConfig,
    cpu: &(dyn Fn() -> Option<f64> + Sync),
    addr: SocketAddr,
    conns: usize,
    rate: Option<f64>,
    cancel: &Cancel,
) -> anyhow::Result<(Window, Option<f64>, Option<f64>)> {
    use std::sync::mpsc::{channel, RecvTimeoutError};
    let start = Instant::now();
    let edges = [start + cfg.warmup, start + cfg.warmup + cfg.duration];
    let (done, stopped) = channel::<()>();
    std::thread::scope(|s| {
        let reader = s.spawn(move || {
            edges.map(|t| {
                match stopped.recv_timeout(t.saturating_duration_since(Instant::now())) {
                    Err(RecvTimeoutError::Timeout) => cpu(),
                    // The load's own clock ended it at the edge, and this thread woke late.
                    _ if Instant::now() + EDGE_SLACK >= t => cpu(),
                    _ => None,
                }
            })
        });
        let w = http_load(cfg, addr, conns, cfg.warmup, cfg.duration, rate, cancel);
        drop(done);
        let [cpu0, cpu1] = reader.join().unwrap_or([None, None]);
        w.map(|w| (w, cpu0, cpu1))
    })
}

fn http_load(
    cfg: &StudyConfig,
    addr: SocketAddr,
    conns: usize,
    warmup: Duration,
    d: Duration,
    rate: Option<f64>,
    cancel: &Cancel,
) -> anyhow::Result<Window> {
    let lc = LoadConfig {
        target: addr,
        connections: conns,
        threads: cfg.load_threads,
        cpus: cfg.load_cpus.clone(),
        duration: d,
        warmup,
        rate,
        path: "/".into(),
        timeout: Duration::from_secs(5),
    };
    let r = match &cfg.agent {
        Some(t) => crate::remote::AgentClient::connect(t)?.http_load(&lc)?,
        None => load::run(&lc, cancel),
    };
    Ok(Window {
        requests_per_s: r.requests_per_s,
        requests: r.requests as f64,
        latency: r.latency_us,
        latency_mean_us: r.latency_mean_us,
        errors: r.errors,
    })
}

pub(super) fn wrk(
    cfg: &StudyConfig,
    addr: SocketAddr,
    conns: usize,
    d: Duration,
) -> anyhow::Result<Window> {
    use anyhow::Context;
    let secs = d.as_secs().max(1);
    let mut cmd = if cfg.load_cpus.is_empty() {
        Command::new("wrk")
    } else {
        let l: Vec<String> = cfg.load_cpus.iter().map(|c| c.to_string()).collect();
        let mut c = Command::new("taskset");
        c.args(["-c", &l.join(","), "wrk"]);
        c
    };
    let out = cmd
        .args(["-t", &cfg.load_threads.min(conns).to_string()])
        .args([
            "-c",
            &conns.to_string(),
            "-d",
            &format!("{secs}s"),
            "--latency",
            "--timeout",
            "5s",
        ])
        .arg(format!("http://{addr}/"))
        .output()
        .context("running wrk")?;
    let text = String::from_utf8_lossy(&out.stdout).to_string();
    parse_wrk(&text, secs as f64).with_context(|| format!("reading wrk's output:\n{text}"))
}

/// Requests/s, latency percentiles and errors from `wrk --latency` output.
pub(super) fn parse_wrk(text: &str, secs: f64) -> anyhow::Result<Window> {
    let field = |prefix: &str| -> Option<&str> {
        text.lines()
            .find_map(|l| l.trim().strip_prefix(prefix))
            .map(str::trim)
    };
    let rps: f64 = field("Requests/sec:")
        .and_then(|v| v.parse().ok())
        .ok_or_else(|| anyhow::anyhow!("no Requests/sec line"))?;
    let us = |v: &str| -> Option<f64> {
        let (num, unit) = v.split_at(v.find(|c: char| c.is_alphabetic())?);
        let n: f64 = num.parse().ok()?;
        Some(match unit {
            "us" => n,
            "ms" => n * 1e3,
            "s" => n * 1e6,
            _ => return None,
        })
    };
    let pct = |p: &str| field(p).and_then(us);
    // `Latency   Avg   Stdev   Max   +/- Stdev`, the thread statistics' first line.
    let avg_max: Vec<&str> = field("Latency")
        .map(|l| l.split_whitespace().collect())
        .unwrap_or_default();
    let latency_mean_us = avg_max.first().and_then(|v| us(v));
    let latency = match (pct("50%"), pct("90%"), pct("99%")) {
        (Some(p50), Some(p90), Some(p99)) => Some(LatencyUs {
            p50,
            p90,
            p99,
            p999: f64::NAN,
            max: avg_max.get(2).and_then(|v| us(v)).unwrap_or(f64::NAN),
        }),
        _ => None,
    };
    let mut errors = BTreeMap::new();
    if let Some(l) = field("Socket errors:") {
        for part in l.split(',') {
            let mut it = part.split_whitespace();
            if let (Some(k), Some(v)) = (it.next(), it.next().and_then(|v| v.parse::<u64>().ok())) {
                if v > 0 {
                    errors.insert(k.to_string(), v);
                }
            }
        }
    }
    if let Some(v) = field("Non-2xx or 3xx responses:").and_then(|v| v.parse::<u64>().ok()) {
        errors.insert("status".into(), v);
    }
    Ok(Window {
        requests_per_s: rps,
        requests: rps * secs,
        latency,
        latency_mean_us,
        errors,
    })
}
