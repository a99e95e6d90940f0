//! `sendpath serve` and `sendpath http-load`: flags in, a report printed and written out.

use crate::cli::{HttpLoadArgs, ServeArgs, SweepArgs};
use anyhow::Context;
use sendpath_lab::cancel::Cancel;
use sendpath_lab::http::load::{self, LoadConfig, LoadReport};
use sendpath_lab::http::serve::{self, SendMode, ServeConfig, ServeReport};
use sendpath_lab::limits::{raise_nofile, raise_nofile_upto};
use serde::Serialize;
use std::process::ExitCode;

/// `println!` that ignores a closed stdout (`sendpath serve | head`), so a reader that went
/// away neither panics the command nor stops it writing its files.
macro_rules! say {
    ($($t:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout().lock(), $($t)*);
    }};
}

pub(crate) fn serve_cmd(a: &ServeArgs, cancel: &Cancel) -> anyhow::Result<ExitCode> {
    let workers = a.workers.map_or_else(
        || {
            sendpath_host::thread::allowed_cpus()
                .map(|c| c.len())
                .unwrap_or(1)
                .max(1)
        },
        usize::from,
    );
    let body_len = match &a.file {
        None => a.body,
        Some(p) => {
            let m = std::fs::metadata(p).with_context(|| format!("--file {}", p.display()))?;
            anyhow::ensure!(m.is_file(), "--file {}: not a regular file", p.display());
            m.len() as usize
        }
    };
    let asked = a.max_connections.map_or(10_000, |n| n as usize);
    let limit = raise_nofile_upto(workers * asked + 256);
    let fits = (limit.saturating_sub(256) / workers as u64).max(1) as usize;
    let max_connections = asked.min(fits);
    if a.max_connections.is_some() && max_connections < asked {
        eprintln!(
            "note: the open-files limit is {limit} (ulimit -Hn caps it): at most {max_connections} connections per worker"
        );
    }
    let cfg = ServeConfig {
        listen: a.listen,
        workers,
        cpus: a.cpu.clone().unwrap_or_default(),
        send: a.send,
        body_len,
        file: a.file.clone(),
        seed: a.seed,
        zc_inflight: a.zc_inflight as usize,
        idle_timeout: a.idle_timeout,
        max_connections,
        depth: a.uring_depth as usize,
        wait_nr: a.wait_nr as usize,
        min_wait: a.min_wait,
        duration: a.duration,
        profile: match a.send {
            SendMode::Adaptive => {
                crate::cli::load_profile(a.profile.as_deref(), &[sendpath::Strategy::Adaptive])?
            }
            _ => None,
        },
    };
    crate::cli::check_outputs([("--json", a.json.as_deref())])?;
    let what = format!("serve on {} with {workers} worker(s)", a.listen);
    if let Some(done) = crate::cli::dry_run(what) {
        return Ok(done);
    }
    let listeners = serve::bind_listeners(a.listen, workers)
        .with_context(|| format!("listening on {}", a.listen))?;
    let at = listeners
        .first()
        .map(serve::local_addr)
        .transpose()?
        .unwrap_or(a.listen);
    say!(
        "serving http://{at}/ ({} workers, send {}, body {} B); stops on Ctrl-C, SIGTERM or after {:?}",
        workers,
        a.send.name(),
        body_len,
        a.duration
    );
    let report = serve::serve(&cfg, listeners, cancel);
    // The summary first: a --json that cannot be written then loses nothing.
    print_serve(&report);
    if let Some(path) = &a.json {
        write_json(path, &report)?;
    }
    Ok(if report.worker_errors.is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_serve(r: &ServeReport) {
    say!(
        "{} requests in {:.1} s, {} response bytes; {} connections accepted, peak {}",
        r.requests,
        r.seconds,
        r.response_bytes,
        r.accepted,
        r.peak_connections
    );
    match r.cpu_us_per_request {
        Some(us) => say!("CPU {:.2} s, {:.2} us per request", r.cpu_seconds, us),
        None => say!("CPU {:.2} s", r.cpu_seconds),
    }
    if let Some(m) = r.memory_per_connection_bytes {
        say!("memory per connection: {m} B (resident, at the peak)");
    }
    if let Some(s) = &r.send_stats {
        let copied = r
            .copied_fraction
            .map_or_else(|| "unknown".to_string(), sendpath_lab::units::percent);
        say!(
            "sends: zero-copy attempts {}, copied {}; fallbacks: {}; CQ overflows {}{}",
            s.zerocopy.attempts,
            copied,
            fallbacks_line(&s.zerocopy.fallbacks),
            r.cq_overflows,
            r.ring_setup
                .as_deref()
                .map_or_else(String::new, |x| format!("; ring {x}"))
        );
    }
    let refused: u64 = r.refused.values().sum();
    say!(
        "refused {refused} {:?}, idle timeouts {}, resets {}, receive errors {}, rejected {}, accept errors {:?}",
        r.refused, r.idle_timeouts, r.resets, r.receive_errors, r.rejected, r.accept_errors
    );
    for e in &r.worker_errors {
        eprintln!("error: a worker stopped: {e}");
    }
}

fn fallbacks_line(f: &sendpath::Fallbacks) -> String {
    format!(
        "inflight_cap {}, enomem {}, enobufs {}, unsupported {}",
        f.inflight_cap, f.enomem, f.enobufs, f.unsupported
    )
}

pub(crate) fn http_load_cmd(a: &HttpLoadArgs, cancel: &Cancel) -> anyhow::Result<ExitCode> {
    // With --agent the load starts on the agent, against this host; the address gives the port.
    if a.remote.agent.is_none() {
        crate::cli::check_target("http-load", a.target, a.allow_remote)?;
    }
    crate::cli::check_outputs([("--json", a.json.as_deref()), ("--csv", a.csv.as_deref())])?;
    raise_nofile(a.connections as usize + 256)?;
    let cfg = LoadConfig {
        target: a.target,
        connections: a.connections as usize,
        threads: a.threads as usize,
        cpus: a.cpu.clone().unwrap_or_default(),
        duration: a.duration,
        warmup: a.warmup,
        rate: a.rate,
        path: a.path.clone(),
        timeout: a.timeout,
    };
    let agent = a.remote.target()?;
    let what = format!("http-load against {}", a.target);
    if let Some(done) = crate::cli::dry_run(what) {
        return Ok(done);
    }
    if agent.is_none() {
        // Fail early and clearly when nothing listens there.
        std::net::TcpStream::connect_timeout(&a.target, a.timeout)
            .with_context(|| format!("connecting to {}: is a server listening there?", a.target))?;
    }
    let mode = a.rate.map_or_else(
        || "closed loop".to_string(),
        |r| format!("open loop at {r} req/s"),
    );
    say!(
        "http-load {} for {:?} ({:?} warmup): {} connections on {} threads, {mode}",
        a.target,
        a.duration,
        a.warmup,
        a.connections,
        a.threads
    );
    let report = match &agent {
        Some(t) => {
            let mut c = sendpath_lab::remote::AgentClient::connect(t)?;
            say!(
                "(the load runs on the agent at {}, against port {} of {})",
                t.addr,
                a.target.port(),
                c.local_ip()
            );
            c.http_load(&cfg)?
        }
        None => load::run(&cfg, cancel),
    };
    if let Some(path) = &a.json {
        write_json(path, &report)?;
    }
    if let Some(path) = &a.csv {
        sendpath_lab::files::write_text(path, &report.to_csv()?)?;
        say!("wrote {}", path.display());
    }
    print_load(&report);
    Ok(if report.requests > 0 {
        ExitCode::SUCCESS
    } else {
        eprintln!("error: no response completed in the measured window");
        ExitCode::from(1)
    })
}

fn print_load(r: &LoadReport) {
    say!(
        "{} requests in {:.2} s: {:.0} requests/s, {:.2} MB/s{}",
        r.requests,
        r.seconds,
        r.requests_per_s,
        r.bytes_per_s / 1e6,
        r.body_bytes
            .map_or_else(String::new, |b| format!(", body {b} B"))
    );
    match &r.latency_us {
        Some(l) => say!(
            "latency us: p50 {:.1}  p90 {:.1}  p99 {:.1}  p99.9 {:.1}  max {:.1}  (mean {:.1})",
            l.p50,
            l.p90,
            l.p99,
            l.p999,
            l.max,
            r.latency_mean_us.unwrap_or(f64::NAN)
        ),
        None => say!("latency: not measured (no response in the window)"),
    }
    if r.rate_per_s.is_some() {
        say!(
            "late sends (previous response not in when due): {}",
            r.late_sends
        );
    }
    if r.errors.is_empty() {
        say!("errors: none");
    } else {
        let e: Vec<String> = r.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
        say!("errors: {}", e.join(", "));
    }
}

pub(crate) fn write_json(path: &std::path::Path, v: &impl Serialize) -> anyhow::Result<()> {
    let s = serde_json::to_string_pretty(v)?;
    sendpath_lab::files::write_text(path, &(s + "\n"))?;
    say!("wrote {}", path.display());
    Ok(())
}

/// Says what the server study will measure, and where its results go.
fn announce_study(cfg: &sendpath_lab::study::http::StudyConfig, dir: &std::path::Path) {
    use sendpath_lab::study::http::LoadTool;
    eprintln!(
        "sweep http-server: {} servers x {} connection counts x {} bodies x {} rounds, closed loop with {} and {} open-loop rates: about {} windows of {:?} + {:?} warmup; results in {}",
        cfg.servers.len(),
        cfg.connections.len(),
        cfg.bodies.len(),
        cfg.rounds,
        if cfg.load == LoadTool::Wrk { "wrk" } else { "http-load" },
        cfg.open_loop.len(),
        cfg.windows(),
        cfg.duration,
        cfg.warmup,
        dir.display()
    );
}

/// `sweep --preset http-server`: the server study, written to `dir` as http-results.json and
/// summary.md (with the nginx configuration used).
pub(crate) fn study(
    a: &SweepArgs,
    dir: &std::path::Path,
    cancel: &Cancel,
) -> anyhow::Result<ExitCode> {
    use sendpath_lab::study::http::{self as study, Host, PlanError, StudyRequest};
    crate::cli::check_outputs([("--out", Some(dir.join("http-results.json").as_path()))])?;
    let agent = a.remote.target()?;
    let host = Host::detect(agent.as_ref())?;
    let req = StudyRequest {
        exe: std::env::current_exe().context("finding the sendpath binary")?,
        servers: a.http_servers.clone(),
        connections: a.http_connections.clone(),
        bodies: a.http_bodies.clone(),
        rounds: a.repeat,
        duration: a.duration,
        warmup: a.warmup,
        serve_workers: a.http_serve_workers.map(usize::from),
        min_wait: a.http_min_wait,
        open_loop: a.http_open_loop.clone(),
        wrk: a.http_load == "wrk",
        dir: dir.to_path_buf(),
        seed: a.seed.unwrap_or_else(sendpath_lab::study::rows::fresh_seed),
        agent,
    };
    let plan = study::plan(req, &host).map_err(|e| match e {
        PlanError::NoServer => anyhow::anyhow!("{e}: give --http-servers"),
    })?;
    for n in &plan.notes {
        eprintln!("note: {n}");
    }
    let cfg = plan.config;
    let what = format!("sweep http-server: about {} windows", cfg.windows());
    if let Some(done) = crate::cli::dry_run(what) {
        return Ok(done);
    }
    raise_nofile(cfg.open_files())?;
    let windows = cfg.windows();
    announce_study(&cfg, dir);
    let done = std::cell::Cell::new(0usize);
    let r = study::run(&cfg, cancel, |m| {
        done.set(done.get() + 1);
        eprintln!(
            "[{}/~{windows}] {} {} B {} conns{} round {}: {:.0} req/s, p99 {} us, server CPU {} us/req",
            done.get(),
            m.server,
            m.body_bytes,
            m.connections,
            m.rate_per_s.map_or_else(String::new, |r| format!(" at {r:.0}/s")),
            m.round,
            m.requests_per_s,
            m.latency_us.map_or("null".into(), |l| format!("{:.0}", l.p99)),
            m.server_cpu_us_per_request.map_or("null".into(), |c| format!("{c:.2}")),
        );
    })?;
    write_json(&dir.join("http-results.json"), &r)?;
    let md = sendpath_lab::study::http::write_http(dir, &r)?;
    say!("{md}");
    say!(
        "wrote {}/http-results.json, summary.md, report.html",
        dir.display()
    );
    if r.interrupted {
        eprintln!(
            "interrupted: {} window(s) measured and written",
            r.measurements.len()
        );
        return Ok(ExitCode::from(130));
    }
    Ok(ExitCode::SUCCESS)
}
