//! The servers under test, each its own process: `sendpath serve` in a send mode, or nginx
//! with the configuration written here; started, their CPU read from `/proc`, stopped.

use super::{Server, StudyConfig};
use crate::http::serve::ServeReport;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// Whether `prog` is on PATH and runs (`prog -v`).
pub(crate) fn installed(prog: &str) -> bool {
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
pub(crate) fn nginx_config(
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
    let user = if sendpath_host::thread::euid() == 0 {
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
pub(super) fn hard_nofile() -> u64 {
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
pub(super) struct Running {
    child: Child,
    server: Server,
    report: Option<PathBuf>,
    /// Kills the server if the process exits before it is stopped.
    _at_exit: crate::cancel::Cleanup,
}

impl Running {
    /// CPU seconds of the server: its process and, for nginx, every child (the workers).
    pub(super) fn cpu_seconds(&self) -> Option<f64> {
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
    pub(super) fn stop(mut self) -> Option<ServeReport> {
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
        let r =
            crate::files::read_bounded(&path, crate::files::MAX_RESULTS, "serve report").ok()?;
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

/// Starts `server` for one window on a free port: its process, and the address it listens
/// on once it accepts connections (10 s at most).
pub(super) fn start(
    cfg: &StudyConfig,
    server: Server,
    body: usize,
    conns: usize,
    tag: &str,
) -> anyhow::Result<(Running, SocketAddr)> {
    let port = free_port(cfg.listen_ip)?;
    let addr = SocketAddr::new(cfg.listen_ip, port);
    let (child, report) = match server {
        Server::Sendpath(mode) => {
            let report = cfg.dir.join(format!("serve-{tag}.json"));
            let child = spawn_serve(cfg, mode, addr, body, conns, &report)?;
            (child, Some(report))
        }
        Server::Nginx => (spawn_nginx(cfg, addr, body, conns)?, None),
    };
    let pid = child.id();
    let running = Running {
        _at_exit: crate::cancel::Cleanup::register(move || {
            if let Some(p) = rustix::process::Pid::from_raw(pid as i32) {
                let _ = rustix::process::kill_process(p, rustix::process::Signal::TERM);
            }
        }),
        child,
        server,
        report,
    };
    wait_listening(cfg, running, addr)
}

/// `sendpath serve` with the study's workers, batched wait and CPUs, writing its report to
/// `report`; it stops by itself a minute after the window would end.
fn spawn_serve(
    cfg: &StudyConfig,
    mode: crate::http::serve::SendMode,
    addr: SocketAddr,
    body: usize,
    conns: usize,
    report: &Path,
) -> anyhow::Result<Child> {
    use anyhow::Context;
    let secs = (cfg.warmup + cfg.duration).as_secs() + 60;
    let workers = cfg.serve_workers.unwrap_or(cfg.workers).to_string();
    Command::new(&cfg.exe)
        .args([
            "serve",
            "--listen",
            &addr.to_string(),
            "--send",
            mode.name(),
        ])
        .args(["--body", &body.to_string(), "--workers", &workers])
        .args(["--min-wait", &format!("{}us", cfg.min_wait.as_micros())])
        .args(["--max-connections", &(conns + 1000).to_string()])
        .args(cpu_arg(&cfg.server_cpus))
        .args(["--duration", &format!("{secs}s")])
        .arg("--json")
        .arg(report)
        .stdout(Stdio::null())
        .stderr(log(&cfg.dir, "serve.stderr")?)
        .spawn()
        .with_context(|| format!("starting {}", cfg.exe.display()))
}

/// nginx serving a `body`-byte file with [`nginx_config`], under the study's directory.
fn spawn_nginx(
    cfg: &StudyConfig,
    addr: SocketAddr,
    body: usize,
    conns: usize,
) -> anyhow::Result<Child> {
    use anyhow::Context;
    let conf = cfg.dir.join("nginx.conf");
    std::fs::create_dir_all(cfg.dir.join("tmp"))?;
    std::fs::create_dir_all(cfg.dir.join("www"))?;
    std::fs::write(cfg.dir.join("www/body"), crate::http::body_bytes(body, 1))?;
    let text = nginx_config(
        &cfg.dir,
        addr,
        cfg.workers,
        conns,
        body,
        hard_nofile(),
        &cfg.server_cpus,
    );
    std::fs::write(&conf, text)?;
    Command::new("nginx")
        .arg("-c")
        .arg(&conf)
        .arg("-p")
        .arg(&cfg.dir)
        .stdout(Stdio::null())
        .stderr(log(&cfg.dir, "nginx.stderr")?)
        .spawn()
        .context("starting nginx")
}

/// Waits until `running` accepts connections on `addr`; an error (its log named) when it
/// exits first or takes over 10 s.
fn wait_listening(
    cfg: &StudyConfig,
    mut running: Running,
    addr: SocketAddr,
) -> anyhow::Result<(Running, SocketAddr)> {
    let server = running.server;
    let end = Instant::now() + Duration::from_secs(10);
    loop {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok((running, addr));
        }
        if let Ok(Some(st)) = running.child.try_wait() {
            let log = if server == Server::Nginx {
                "nginx.stderr"
            } else {
                "serve.stderr"
            };
            anyhow::bail!(
                "{} exited at start ({st}); its messages are in {}",
                server.name(),
                cfg.dir.join(log).display()
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
