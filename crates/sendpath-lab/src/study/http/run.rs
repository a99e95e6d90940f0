//! The server study (`sendpath sweep --preset http-server`): `serve` in each send mode, and
//! nginx when it is installed, at each connection count and body size, in rounds that
//! alternate the servers (ABBA) and shuffle the points. Each server runs as its own process,
//! so its CPU is read from `/proc` the same way for sendpath and for nginx (master and
//! workers), over the measured window only. Closed-loop load comes from wrk when installed (as
//! the published study used) or from `http-load`; open-loop points at fractions of the peak
//! rate use `http-load`, which counts latency from each request's intended send time.

use super::plan::order;
use super::summary::median;
use super::{LoadTool, Measurement, Server, StudyConfig, StudyResults};
use crate::cancel::Cancel;
use crate::http::load::{self, LatencyUs, LoadConfig};
use crate::http::serve::ServeReport;
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `prog` is on PATH and runs (`prog -v`).
pub fn installed(prog: &str) -> bool {
    Command::new(prog)
        .arg("-v")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok()
}

/// The nginx configuration the study uses: workers = `workers`, `worker_connections` and
/// `worker_rlimit_nofile` well above `connections` (Debian's default of 768 per worker would
/// cap nginx below 4000 connections), no access log, keep-alive requests effectively
/// unlimited, `listen ... reuseport backlog=4096`, TCP_NODELAY like `serve`. A body of up to
/// 2 KiB is answered from memory (`return 200`, as `serve` does); a larger one is a file sent
/// with `sendfile` and `tcp_nopush`, which is how nginx serves large bodies.
/// `worker_rlimit_nofile` stays within `max_nofile` (the hard limit, which nginx cannot pass);
/// with `cpus`, workers are pinned to them in turn (`worker_cpu_affinity`).
pub fn nginx_config(
    dir: &Path,
    listen: SocketAddr,
    workers: usize,
    connections: usize,
    body_len: usize,
    max_nofile: u64,
    cpus: &[usize],
) -> String {
    let d = dir.display();
    let per_worker = connections + 1024;
    // One worker per listed CPU, in turn: a bitmask per worker, lowest CPU rightmost.
    let affinity = if cpus.is_empty() {
        String::new()
    } else {
        let top = cpus.iter().copied().max().unwrap_or(0);
        let masks: Vec<String> = (0..workers)
            .map(|w| {
                let c = cpus[w % cpus.len()];
                (0..=top)
                    .rev()
                    .map(|b| if b == c { '1' } else { '0' })
                    .collect()
            })
            .collect();
        format!("worker_cpu_affinity {};\n", masks.join(" "))
    };
    let user = if sendpath::host::euid() == 0 {
        "user root;\n"
    } else {
        ""
    };
    let location = if body_len <= 2048 {
        let body = String::from_utf8(crate::http::body_bytes(body_len, 1)).expect("ASCII");
        format!("        location / {{ return 200 \"{body}\"; }}\n")
    } else {
        format!("        root {d}/www;\n        location / {{ try_files /body =404; }}\n")
    };
    format!(
        "# Written by sendpath for the http-server study.\n{user}worker_processes {workers};\n{affinity}worker_rlimit_nofile {};\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\ndaemon off;\nevents {{\n    worker_connections {per_worker};\n}}\nhttp {{\n    access_log off;\n    keepalive_requests 1000000000;\n    keepalive_timeout 65;\n    default_type application/octet-stream;\n    tcp_nodelay on;\n    sendfile on;\n    tcp_nopush on;\n    open_file_cache max=16 inactive=60s;\n    client_body_temp_path {d}/tmp;\n    proxy_temp_path {d}/tmp;\n    fastcgi_temp_path {d}/tmp;\n    uwsgi_temp_path {d}/tmp;\n    scgi_temp_path {d}/tmp;\n    server {{\n        listen {listen} reuseport backlog=4096;\n{location}    }}\n}}\n",
        ((2 * per_worker * workers) as u64).min(max_nofile)
    )
}

/// The hard open-files limit (`ulimit -Hn`).
fn hard_nofile() -> u64 {
    rustix::process::getrlimit(rustix::process::Resource::Nofile)
        .maximum
        .unwrap_or(u64::MAX)
}

/// `--cpu LIST` when `cpus` is not empty.
fn cpu_arg(cpus: &[usize]) -> Vec<String> {
    if cpus.is_empty() {
        return Vec::new();
    }
    let l: Vec<String> = cpus.iter().map(|c| c.to_string()).collect();
    vec!["--cpu".into(), l.join(",")]
}

/// A log file in `dir` that a server's stderr is appended to.
fn log(dir: &Path, name: &str) -> std::io::Result<std::fs::File> {
    std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(name))
}

/// A free port on `ip` (bound and released; the server binds it right after).
fn free_port(ip: std::net::IpAddr) -> std::io::Result<u16> {
    Ok(std::net::TcpListener::bind((ip, 0))?.local_addr()?.port())
}

/// A server process and the pids whose CPU counts for it.
struct Running {
    child: Child,
    server: Server,
    report: Option<PathBuf>,
}

impl Running {
    /// CPU seconds of the server: its process and, for nginx, every child (the workers).
    fn cpu_seconds(&self) -> Option<f64> {
        let pid = self.child.id();
        let mut ticks = proc_ticks(pid)?;
        if self.server == Server::Nginx {
            for p in children(pid) {
                ticks += proc_ticks(p).unwrap_or(0);
            }
        }
        Some(ticks as f64 / rustix::param::clock_ticks_per_second() as f64)
    }

    /// SIGTERM, then SIGKILL after 5 s; returns what `serve` wrote.
    fn stop(mut self) -> Option<ServeReport> {
        if let Some(pid) = rustix::process::Pid::from_raw(self.child.id() as i32) {
            let _ = rustix::process::kill_process(pid, rustix::process::Signal::TERM);
        }
        let end = Instant::now() + Duration::from_secs(5);
        while Instant::now() < end {
            if let Ok(Some(_)) = self.child.try_wait() {
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        if !matches!(self.child.try_wait(), Ok(Some(_))) {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
        let path = self.report?;
        let r = std::fs::read_to_string(&path).ok()?;
        serde_json::from_str(&r).ok()
    }
}

/// utime + stime of `pid` (`/proc/PID/stat` fields 14 and 15), clock ticks.
fn proc_ticks(pid: u32) -> Option<u64> {
    let s = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &s[s.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    Some(f.get(11)?.parse::<u64>().ok()? + f.get(12)?.parse::<u64>().ok()?)
}

/// Pids whose parent is `pid`.
fn children(pid: u32) -> Vec<u32> {
    let Ok(rd) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    rd.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|&p| {
            std::fs::read_to_string(format!("/proc/{p}/stat"))
                .ok()
                .and_then(|s| {
                    let rest = &s[s.rfind(')')? + 2..];
                    rest.split_whitespace().nth(1)?.parse::<u32>().ok()
                })
                == Some(pid)
        })
        .collect()
}

fn start(
    cfg: &StudyConfig,
    server: Server,
    body: usize,
    conns: usize,
    tag: &str,
) -> anyhow::Result<(Running, SocketAddr)> {
    use anyhow::Context;
    let port = free_port(cfg.listen_ip)?;
    let addr = SocketAddr::new(cfg.listen_ip, port);
    let (child, report) = match server {
        Server::Sendpath(mode) => {
            let report = cfg.dir.join(format!("serve-{tag}.json"));
            let secs = (cfg.warmup + cfg.duration).as_secs() + 60;
            let child = Command::new(&cfg.exe)
                .args([
                    "serve",
                    "--listen",
                    &addr.to_string(),
                    "--send",
                    mode.name(),
                ])
                .args([
                    "--body",
                    &body.to_string(),
                    "--workers",
                    &cfg.serve_workers.unwrap_or(cfg.workers).to_string(),
                ])
                .args(["--min-wait", &format!("{}us", cfg.min_wait.as_micros())])
                .args(["--max-connections", &(conns + 1000).to_string()])
                .args(cpu_arg(&cfg.server_cpus))
                .args(["--duration", &format!("{secs}s")])
                .arg("--json")
                .arg(&report)
                .stdout(Stdio::null())
                .stderr(log(&cfg.dir, "serve.stderr")?)
                .spawn()
                .with_context(|| format!("starting {}", cfg.exe.display()))?;
            (child, Some(report))
        }
        Server::Nginx => {
            let conf = cfg.dir.join("nginx.conf");
            std::fs::create_dir_all(cfg.dir.join("tmp"))?;
            std::fs::create_dir_all(cfg.dir.join("www"))?;
            std::fs::write(cfg.dir.join("www/body"), crate::http::body_bytes(body, 1))?;
            std::fs::write(
                &conf,
                nginx_config(
                    &cfg.dir,
                    addr,
                    cfg.workers,
                    conns,
                    body,
                    hard_nofile(),
                    &cfg.server_cpus,
                ),
            )?;
            let child = Command::new("nginx")
                .arg("-c")
                .arg(&conf)
                .arg("-p")
                .arg(&cfg.dir)
                .stdout(Stdio::null())
                .stderr(log(&cfg.dir, "nginx.stderr")?)
                .spawn()
                .context("starting nginx")?;
            (child, None)
        }
    };
    let mut running = Running {
        child,
        server,
        report,
    };
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok((running, addr));
        }
        if let Ok(Some(st)) = running.child.try_wait() {
            anyhow::bail!(
                "{} exited at start ({st}); its messages are in {}",
                server.name(),
                cfg.dir
                    .join(if server == Server::Nginx {
                        "nginx.stderr"
                    } else {
                        "serve.stderr"
                    })
                    .display()
            );
        }
        if Instant::now() > end {
            let _ = running.stop();
            anyhow::bail!(
                "{} did not start listening on {addr} within 10 s",
                server.name()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// What one load window measured.
#[derive(Debug)]
struct Window {
    requests_per_s: f64,
    requests: f64,
    latency: Option<LatencyUs>,
    errors: BTreeMap<String, u64>,
}

/// One http-load window with its warm-up in the same run, so the connections it opened carry
/// into the window: a run of its own would open every connection again inside the window, and
/// an open loop would charge the server for the requests that fell due while they were
/// opening. `cpu` (the server's CPU seconds) is read at the window's edges, by a thread that
/// sleeps until them; neither reading is taken if the load ends early.
fn http_load_window(
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
            edges.map(
                |t| match stopped.recv_timeout(t.saturating_duration_since(Instant::now())) {
                    Err(RecvTimeoutError::Timeout) => cpu(),
                    _ => None,
                },
            )
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
        errors: r.errors,
    })
}

fn wrk(cfg: &StudyConfig, addr: SocketAddr, conns: usize, d: Duration) -> anyhow::Result<Window> {
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
fn parse_wrk(text: &str, secs: f64) -> anyhow::Result<Window> {
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
    let latency = match (pct("50%"), pct("90%"), pct("99%")) {
        (Some(p50), Some(p90), Some(p99)) => {
            let avg_max: Vec<&str> = field("Latency")
                .map(|l| l.split_whitespace().collect())
                .unwrap_or_default();
            Some(LatencyUs {
                p50,
                p90,
                p99,
                p999: f64::NAN,
                max: avg_max.get(2).and_then(|v| us(v)).unwrap_or(f64::NAN),
            })
        }
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
        errors,
    })
}

/// Runs one point: server up, a warm-up (wrk: a run of its own; http-load: the start of the
/// measured run), the measured window with the server's CPU read at its edges, server down.
#[allow(clippy::too_many_arguments)]
fn point(
    cfg: &StudyConfig,
    server: Server,
    body: usize,
    conns: usize,
    round: u32,
    rate: Option<f64>,
    tool: LoadTool,
    cancel: &Cancel,
) -> anyhow::Result<Measurement> {
    let tag = format!(
        "{}-{body}-{conns}-r{round}-{}",
        server.name(),
        rate.map_or(0, |r| r as u64)
    );
    let (srv, addr) = start(cfg, server, body, conns, &tag)?;
    let result = match (tool, rate) {
        // wrk cannot leave its warm-up out of a run: a run of its own, then the window.
        (LoadTool::Wrk, None) => (|| {
            if !cfg.warmup.is_zero() {
                wrk(cfg, addr, conns, cfg.warmup)?;
            }
            let cpu0 = srv.cpu_seconds();
            let w = wrk(cfg, addr, conns, cfg.duration)?;
            let cpu1 = srv.cpu_seconds();
            Ok::<_, anyhow::Error>((w, cpu0, cpu1))
        })(),
        _ => http_load_window(cfg, &|| srv.cpu_seconds(), addr, conns, rate, cancel),
    };
    let serve = srv.stop();
    let (w, cpu0, cpu1) = result?;
    let cpu = cpu0.zip(cpu1).map(|(a, b)| b - a);
    Ok(Measurement {
        server: server.name(),
        body_bytes: body,
        connections: conns,
        round,
        load: match (tool, rate) {
            (LoadTool::Wrk, None) => "wrk".into(),
            _ => "http-load".into(),
        },
        rate_per_s: rate,
        requests_per_s: w.requests_per_s,
        latency_us: w.latency,
        errors: w.errors,
        server_cpu_s: cpu,
        server_cpu_us_per_request: cpu
            .filter(|_| w.requests > 0.0)
            .map(|c| c * 1e6 / w.requests),
        serve,
    })
}

/// Runs the whole study; `progress` is told each finished window. Stops early on `cancel`,
/// keeping what was measured.
pub fn run(
    cfg: &StudyConfig,
    cancel: &Cancel,
    mut progress: impl FnMut(&Measurement),
) -> anyhow::Result<StudyResults> {
    std::fs::create_dir_all(&cfg.dir)?;
    let mut environment = crate::study::sweep::environment();
    environment.agent = cfg.agent.as_ref().map(|t| t.addr.to_string());
    let mut out = StudyResults {
        environment,
        nginx_config: cfg.servers.contains(&Server::Nginx).then(|| {
            nginx_config(
                &cfg.dir,
                SocketAddr::new(cfg.listen_ip, 8080),
                cfg.workers,
                cfg.connections.iter().copied().max().unwrap_or(100),
                cfg.bodies.first().copied().unwrap_or(88),
                hard_nofile(),
                &cfg.server_cpus,
            )
        }),
        measurements: Vec::new(),
        wrk_check_ratios: Vec::new(),
    };
    let mut rng = fastrand::Rng::with_seed(cfg.seed);
    let mut points: Vec<(usize, usize)> = cfg
        .bodies
        .iter()
        .flat_map(|&b| cfg.connections.iter().map(move |&c| (b, c)))
        .collect();
    // Closed loop: every point each round, servers in alternating order.
    for round in 1..=cfg.rounds {
        rng.shuffle(&mut points);
        for &(body, conns) in &points {
            for server in order(&cfg.servers, round) {
                if cancel.is_cancelled() {
                    return Ok(out);
                }
                let m = point(cfg, server, body, conns, round, None, cfg.load, cancel)?;
                progress(&m);
                out.measurements.push(m);
            }
        }
    }
    // Open loop at fractions of the reference server's median peak.
    let reference = if cfg.servers.contains(&Server::Nginx) {
        Server::Nginx
    } else {
        cfg.servers[0]
    };
    for round in 1..=cfg.rounds {
        rng.shuffle(&mut points);
        for &(body, conns) in &points {
            let peak = median(
                out.measurements
                    .iter()
                    .filter(|m| {
                        m.server == reference.name()
                            && m.body_bytes == body
                            && m.connections == conns
                            && m.rate_per_s.is_none()
                    })
                    .map(|m| m.requests_per_s),
            );
            let Some(peak) = peak else { continue };
            for &f in &cfg.open_loop {
                for server in order(&cfg.servers, round) {
                    if cancel.is_cancelled() {
                        return Ok(out);
                    }
                    let m = point(
                        cfg,
                        server,
                        body,
                        conns,
                        round,
                        Some(peak * f),
                        LoadTool::HttpLoad,
                        cancel,
                    )?;
                    progress(&m);
                    out.measurements.push(m);
                }
            }
        }
    }
    // http-load against wrk on the reference server, alternating which goes first. With two
    // CPUs or more and nothing pinned, the server gets one worker on the first CPU and each
    // tool one thread on the second, so the tools compete for neither the server's CPU nor
    // each other's and the server sets the pace, as a load generator check wants.
    if cfg.wrk_check && installed("wrk") {
        let allowed = sendpath::host::allowed_cpus().unwrap_or_default();
        let check = if cfg.server_cpus.is_empty() && allowed.len() >= 2 {
            StudyConfig {
                workers: 1,
                serve_workers: None,
                load_threads: 1,
                server_cpus: vec![allowed[0]],
                load_cpus: vec![allowed[1]],
                ..cfg.clone()
            }
        } else {
            cfg.clone()
        };
        let cfg = &check;
        let body = cfg.bodies[0];
        for round in 1..=cfg.rounds {
            let tools = if round % 2 == 1 {
                [LoadTool::Wrk, LoadTool::HttpLoad]
            } else {
                [LoadTool::HttpLoad, LoadTool::Wrk]
            };
            let mut rps = [0.0; 2];
            for t in tools {
                if cancel.is_cancelled() {
                    return Ok(out);
                }
                let m = point(cfg, reference, body, 100, round, None, t, cancel)?;
                rps[usize::from(t == LoadTool::HttpLoad)] = m.requests_per_s;
                progress(&m);
                out.measurements.push(Measurement {
                    load: format!("{}-check", m.load),
                    ..m
                });
            }
            if rps[0] > 0.0 {
                out.wrk_check_ratios.push(rps[1] / rps[0]);
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::http::serve::SendMode;
    use crate::study::http::{closed_windows, median_of, summary};

    fn m(server: &str, round: u32, rps: f64, cpu_us: f64) -> Measurement {
        Measurement {
            server: server.into(),
            body_bytes: 88,
            connections: 100,
            round,
            load: "wrk".into(),
            rate_per_s: None,
            requests_per_s: rps,
            latency_us: None,
            errors: BTreeMap::new(),
            server_cpu_s: Some(1.0),
            server_cpu_us_per_request: Some(cpu_us),
            serve: None,
        }
    }

    /// A server that answers a connection's first request only `first` after accepting it,
    /// then at once; keep-alive, a 2-byte body. Stops accepting when `stop` is set.
    fn slow_to_start_server(
        first: Duration,
        stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    ) -> (SocketAddr, std::thread::JoinHandle<()>) {
        use std::io::{Read, Write};
        use std::sync::atomic::Ordering;
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.set_nonblocking(true).unwrap();
        let addr = l.local_addr().unwrap();
        let h = std::thread::spawn(move || {
            while !stop.load(Ordering::Relaxed) {
                let Ok((mut c, _)) = l.accept() else {
                    std::thread::sleep(Duration::from_millis(1));
                    continue;
                };
                c.set_nonblocking(false).unwrap();
                c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
                std::thread::spawn(move || {
                    std::thread::sleep(first);
                    let mut buf = [0u8; 4096];
                    let mut head = Vec::new();
                    while let Ok(n @ 1..) = c.read(&mut buf) {
                        head.extend_from_slice(&buf[..n]);
                        while let Some(end) = head.windows(4).position(|w| w == b"\r\n\r\n") {
                            head.drain(..end + 4);
                            let ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok";
                            if c.write_all(ok).is_err() {
                                return;
                            }
                        }
                    }
                });
            }
        });
        (addr, h)
    }

    /// The open-loop window is measured on connections its warm-up opened: a server slow to
    /// answer a new connection is not charged inside the window (a window run on its own
    /// would open its connections again and charge their first requests), and the server's
    /// CPU is read at the window's edges.
    #[test]
    fn an_open_loop_window_does_not_open_its_connections_again() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::{Arc, Mutex};
        let stop = Arc::new(AtomicBool::new(false));
        let slow = Duration::from_millis(300);
        let (addr, server) = slow_to_start_server(slow, stop.clone());
        let cfg = StudyConfig {
            exe: PathBuf::new(),
            servers: vec![],
            connections: vec![4],
            bodies: vec![2],
            rounds: 1,
            duration: Duration::from_millis(600),
            warmup: Duration::from_millis(500),
            workers: 1,
            serve_workers: None,
            min_wait: Duration::ZERO,
            load_threads: 1,
            server_cpus: vec![],
            load_cpus: vec![],
            load: LoadTool::HttpLoad,
            open_loop: vec![],
            wrk_check: false,
            dir: PathBuf::new(),
            seed: 1,
            listen_ip: addr.ip(),
            agent: None,
        };
        let start = Instant::now();
        let read_at = Mutex::new(Vec::new());
        let cpu = || {
            let mut at = read_at.lock().unwrap();
            at.push(start.elapsed());
            Some(at.len() as f64)
        };
        let (w, cpu0, cpu1) =
            http_load_window(&cfg, &cpu, addr, 4, Some(200.0), &Cancel::new()).unwrap();
        stop.store(true, Ordering::Relaxed);
        server.join().unwrap();
        assert!(w.requests > 0.0, "{w:?}");
        let p99 = w.latency.as_ref().expect("latency measured").p99;
        assert!(
            p99 < slow.as_secs_f64() * 1e6 / 2.0,
            "p99 {p99} us: the window paid for opening connections"
        );
        assert_eq!((cpu0, cpu1), (Some(1.0), Some(2.0)));
        let at = read_at.lock().unwrap().clone();
        for (got, want) in at.iter().zip([cfg.warmup, cfg.warmup + cfg.duration]) {
            assert!(
                got.abs_diff(want) < Duration::from_millis(100),
                "read at {got:?}, the edge is at {want:?}"
            );
        }
    }

    #[test]
    fn the_summary_pairs_rounds_against_nginx() {
        let r = StudyResults {
            environment: crate::study::sweep::environment(),
            nginx_config: None,
            measurements: vec![
                m("sendpath-uring", 1, 110.0, 8.0),
                m("nginx", 1, 100.0, 10.0),
                m("nginx", 2, 100.0, 10.0),
                m("sendpath-uring", 2, 120.0, 6.0),
            ],
            wrk_check_ratios: vec![1.05],
        };
        let s = summary(&r);
        assert!(
            s.contains(
                "| sendpath-uring | 100 | 1.150 (1.100..1.200) | 0.700 (0.600..0.800) | 2/2 |"
            ),
            "{s}"
        );
        assert!(s.contains("| nginx | 100 | 100.0 (100.0..100.0) |"), "{s}");
        assert!(
            s.contains("http-load / wrk requests/s, same server") && s.contains("two): 1.050"),
            "{s}"
        );
        assert!(!s.contains("SEND against SEND_ZC"), "no SEND_ZC server ran");
        assert!(
            !s.contains("ran with"),
            "no configuration known: none claimed\n{s}"
        );
    }

    #[test]
    fn the_summary_says_how_each_server_ran() {
        let mut serve = m("sendpath-uring", 1, 110.0, 8.0);
        serve.serve = Some(ServeReport {
            workers: 1,
            min_wait_us: Some(50),
            ..ServeReport::default()
        });
        let r = StudyResults {
            environment: crate::study::sweep::environment(),
            nginx_config: Some("user root;\nworker_processes 2;\n".into()),
            measurements: vec![serve, m("nginx", 1, 100.0, 10.0)],
            wrk_check_ratios: vec![],
        };
        let s = summary(&r);
        assert!(
            s.contains("How the servers ran: `sendpath serve` with `--workers 1 --min-wait 50us`; nginx with 2 workers"),
            "{s}"
        );
    }

    #[test]
    fn the_report_plots_each_body_against_connections() {
        let mut ms = Vec::new();
        for (body, conns) in [(88, 100), (88, 1000), (65536, 100), (65536, 1000)] {
            for (srv, rps) in [("sendpath-uring", 120.0), ("nginx", 100.0)] {
                for round in 1..=2 {
                    ms.push(Measurement {
                        body_bytes: body,
                        connections: conns,
                        latency_us: (srv == "nginx").then_some(LatencyUs {
                            p50: 500.0,
                            p90: 900.0,
                            p99: 2000.0,
                            p999: 3000.0,
                            max: 4000.0,
                        }),
                        ..m(srv, round, rps * f64::from(round), 8.0)
                    });
                }
            }
        }
        // An open-loop window is not a closed-loop point.
        ms.push(Measurement {
            rate_per_s: Some(50.0),
            requests_per_s: 1e9,
            ..m("nginx", 1, 0.0, 8.0)
        });
        let r = StudyResults {
            environment: crate::study::sweep::environment(),
            nginx_config: None,
            measurements: ms,
            wrk_check_ratios: vec![],
        };
        assert_eq!(
            median_of(&closed_windows(&r, "nginx", 88, 100), |m| Some(
                m.requests_per_s
            )),
            Some(150.0),
            "rounds 1 and 2, the open-loop window left out"
        );
        let h = crate::study::http::http_html(&r, &summary(&r)).unwrap();
        assert!(
            h.contains("<h2>Body 88B</h2>") && h.contains("<h2>Body 64KiB</h2>"),
            "{h}"
        );
        // Requests/s, p50, p99, CPU for each body; latency only where measured (nginx).
        assert_eq!(h.matches("<svg").count(), 8, "{h}");
        assert!(h.contains("Requests/s, body 64KiB vs connections"), "{h}");
        assert!(h.contains("sendpath-uring") && h.contains("nginx"), "{h}");
        assert!(h.contains("| nginx | 1000 |"), "the tables follow: {h}");
    }

    #[test]
    fn wrk_output_is_read() {
        let out = "Running 10s test @ http://127.0.0.1:8080/\n  2 threads and 100 connections\n  Thread Stats   Avg      Stdev     Max   +/- Stdev\n    Latency   677.52us  767.03us   9.09ms   90.33%\n    Req/Sec    60.52k     3.07k   63.97k    84.00%\n  Latency Distribution\n     50%  519.00us\n     75%  700.00us\n     90%    1.10ms\n     99%    4.14ms\n  602386 requests in 5.01s, 127.53MB read\n  Socket errors: connect 0, read 3, write 0, timeout 2\nRequests/sec: 120341.38\nTransfer/sec:     25.45MB\n";
        let w = parse_wrk(out, 5.0).unwrap();
        assert_eq!(w.requests_per_s, 120341.38);
        let l = w.latency.unwrap();
        assert_eq!(
            (l.p50, l.p90, l.p99, l.max),
            (519.0, 1100.0, 4140.0, 9090.0)
        );
        assert_eq!(w.errors.get("read"), Some(&3));
        assert_eq!(w.errors.get("timeout"), Some(&2));
        assert!(!w.errors.contains_key("connect"));
        assert!(parse_wrk("garbage", 1.0).is_err());
    }

    #[test]
    fn the_nginx_configuration_is_fair_and_complete() {
        let c = nginx_config(
            Path::new("/tmp/x"),
            ([127, 0, 0, 1], 8099).into(),
            2,
            4000,
            88,
            1 << 20,
            &[],
        );
        for want in [
            "worker_processes 2;",
            "worker_connections 5024;",
            "access_log off;",
            "keepalive_requests 1000000000;",
            "listen 127.0.0.1:8099 reuseport backlog=4096;",
            "return 200 \"",
            "tcp_nodelay on;",
            "worker_rlimit_nofile 20096;",
        ] {
            assert!(c.contains(want), "missing {want:?} in\n{c}");
        }
        let f = nginx_config(
            Path::new("/tmp/x"),
            ([127, 0, 0, 1], 8099).into(),
            2,
            100,
            1 << 20,
            3000,
            &[2, 3],
        );
        assert!(f.contains("worker_cpu_affinity 0100 1000;"), "{f}");
        assert!(!c.contains("worker_cpu_affinity"));
        assert!(
            f.contains("worker_rlimit_nofile 3000;"),
            "capped by the hard limit"
        );
        assert!(f.contains("sendfile on;") && f.contains("try_files /body"));
        assert_eq!(
            order(&[Server::Nginx, Server::Sendpath(SendMode::Uring)], 2)[0],
            Server::Sendpath(SendMode::Uring)
        );
    }
}
