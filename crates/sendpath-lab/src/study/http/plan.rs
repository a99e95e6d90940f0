//! What the server study runs: the servers, the load tools and the points.

use crate::http::serve::SendMode;
use serde::{Deserialize, Serialize};
use std::path::PathBuf;
use std::time::Duration;

/// A server under test.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum Server {
    /// `sendpath serve --send MODE`.
    Sendpath(SendMode),
    /// nginx with the configuration `nginx_config` writes.
    Nginx,
}

impl Server {
    /// The name in tables and results.
    pub fn name(self) -> String {
        match self {
            Server::Sendpath(m) => format!("sendpath-{}", m.name()),
            Server::Nginx => "nginx".into(),
        }
    }
}

/// Which tool makes the closed-loop load.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum LoadTool {
    /// `wrk -t THREADS -c CONNS -d SECS --latency`.
    Wrk,
    /// `sendpath http-load`, in this process.
    HttpLoad,
}

/// What the study runs.
#[derive(Debug, Clone)]
pub struct StudyConfig {
    /// The `sendpath` binary that runs `serve`.
    pub exe: PathBuf,
    /// Servers, compared in alternating order.
    pub servers: Vec<Server>,
    /// Connection counts.
    pub connections: Vec<usize>,
    /// Body sizes.
    pub bodies: Vec<usize>,
    /// Rounds over every point.
    pub rounds: u32,
    /// Measured time per point.
    pub duration: Duration,
    /// Load before each measured window, not counted: wrk's is a run of its own, http-load's
    /// the start of the run it measures.
    pub warmup: Duration,
    /// nginx's workers (`worker_processes`), and serve's unless `serve_workers` says.
    pub workers: usize,
    /// `serve --workers`, when it differs from nginx's.
    pub serve_workers: Option<usize>,
    /// `serve --min-wait`: zero wakes serve at each completion (its default).
    pub min_wait: Duration,
    /// Load threads (wrk `-t`, http-load `--threads`).
    pub load_threads: usize,
    /// CPUs for the server (nginx `worker_cpu_affinity`, `serve --cpu`); empty: unpinned.
    pub server_cpus: Vec<usize>,
    /// CPUs for the load (`taskset` for wrk, http-load's threads); empty: unpinned.
    pub load_cpus: Vec<usize>,
    /// The closed-loop load tool.
    pub load: LoadTool,
    /// Open-loop points, as fractions of the reference server's median peak rate.
    pub open_loop: Vec<f64>,
    /// One cross-check of http-load against wrk on the reference server (100 connections,
    /// first body), alternating; server and load on separate CPUs where there are two.
    pub wrk_check: bool,
    /// Where configurations, server reports and results go.
    pub dir: PathBuf,
    /// Seed of the point order in each round.
    pub seed: u64,
    /// Servers listen on this address (127.0.0.1, or the one an agent reaches this host at).
    pub listen_ip: std::net::IpAddr,
    /// Generate the load on `sendpath agent` there (http-load; no wrk, no cross-check).
    pub agent: Option<crate::remote::AgentTarget>,
}

/// The servers in the order of `round`: as given in odd rounds, reversed in even ones (ABBA).
pub(crate) fn order(servers: &[Server], round: u32) -> Vec<Server> {
    let mut v = servers.to_vec();
    if round.is_multiple_of(2) {
        v.reverse();
    }
    v
}

/// What the flags ask of the server study, before the host is looked at. `None` takes the
/// study's default.
#[derive(Debug, Clone)]
pub struct StudyRequest {
    /// The `sendpath` binary that runs `serve`.
    pub exe: PathBuf,
    /// Servers asked for (nginx is dropped when it is not installed).
    pub servers: Vec<Server>,
    /// Connection counts.
    pub connections: Vec<usize>,
    /// Body sizes.
    pub bodies: Vec<usize>,
    /// Rounds (default 3).
    pub rounds: Option<u32>,
    /// Measured time per point (default 10 s).
    pub duration: Option<Duration>,
    /// Unmeasured load first (default 2 s).
    pub warmup: Option<Duration>,
    /// serve's workers when they differ from nginx's.
    pub serve_workers: Option<usize>,
    /// serve's batched wait.
    pub min_wait: Duration,
    /// Open-loop points as fractions of the reference server's peak.
    pub open_loop: Vec<f64>,
    /// The closed loop by wrk (when installed) rather than http-load.
    pub wrk: bool,
    /// Where everything is written.
    pub dir: PathBuf,
    /// Seed of the point order.
    pub seed: u64,
    /// The load on an agent.
    pub agent: Option<crate::remote::AgentTarget>,
}

/// What the host offers the study: the programs installed, the CPUs allowed, the address the
/// servers listen on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Host {
    /// nginx runs here.
    pub nginx: bool,
    /// wrk runs here.
    pub wrk: bool,
    /// CPUs this process may run on.
    pub cpus: Vec<usize>,
    /// 127.0.0.1, or the address an agent reaches this host at.
    pub listen_ip: std::net::IpAddr,
}

impl Host {
    /// Looks: nginx and wrk on PATH, the allowed CPUs, and with an agent the address it
    /// reaches this host at (one hello over its control connection).
    pub fn detect(agent: Option<&crate::remote::AgentTarget>) -> anyhow::Result<Host> {
        let listen_ip = match agent {
            Some(t) => crate::remote::AgentClient::connect(t)?.local_ip(),
            None => std::net::IpAddr::from([127, 0, 0, 1]),
        };
        Ok(Host {
            nginx: super::installed("nginx"),
            wrk: super::installed("wrk"),
            cpus: sendpath_host::thread::allowed_cpus().unwrap_or_default(),
            listen_ip,
        })
    }
}

/// Why a study cannot be planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PlanError {
    /// No server is left to measure (none asked for, or only nginx and it is missing).
    NoServer,
}

impl std::fmt::Display for PlanError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PlanError::NoServer => write!(f, "no server to measure"),
        }
    }
}

impl std::error::Error for PlanError {}

/// A planned study: its configuration and what the plan changed from the request, to tell the
/// user.
#[derive(Debug, Clone)]
pub struct Plan {
    /// What runs.
    pub config: StudyConfig,
    /// Notes on what the host changed (a server or tool missing, no cross-check).
    pub notes: Vec<String>,
}

/// Plans the study on `host`: drops nginx when missing, picks the load tool, and gives the
/// server and the load half the CPUs each where there are 4 or more (they share fewer).
pub fn plan(req: StudyRequest, host: &Host) -> Result<Plan, PlanError> {
    let mut notes = Vec::new();
    let mut servers = req.servers;
    if servers.contains(&Server::Nginx) && !host.nginx {
        notes.push(
            "nginx is not installed (apt-get install nginx-light): sendpath's modes only".into(),
        );
        servers.retain(|s| *s != Server::Nginx);
    }
    if servers.is_empty() {
        return Err(PlanError::NoServer);
    }
    let load = match (&req.agent, req.wrk, host.wrk) {
        (Some(_), wrk, _) => {
            if wrk {
                notes.push("with the load on an agent it is http-load (wrk cannot run there): no wrk cross-check".into());
            }
            LoadTool::HttpLoad
        }
        (None, true, true) => LoadTool::Wrk,
        (None, wrk, _) => {
            if wrk {
                notes.push(
                    "wrk is not installed (apt-get install wrk): closed loop with http-load".into(),
                );
            }
            LoadTool::HttpLoad
        }
    };
    let (server_cpus, load_cpus) = if host.cpus.len() >= 4 && req.agent.is_none() {
        let (a, b) = host.cpus.split_at(host.cpus.len() / 2);
        (a.to_vec(), b.to_vec())
    } else {
        (Vec::new(), Vec::new())
    };
    let cpus = host.cpus.len().max(1);
    let or_all = |v: &[usize]| if v.is_empty() { cpus } else { v.len() };
    let config = StudyConfig {
        exe: req.exe,
        servers,
        connections: req.connections,
        bodies: req.bodies,
        rounds: req.rounds.unwrap_or(3),
        duration: req.duration.unwrap_or(Duration::from_secs(10)),
        warmup: req.warmup.unwrap_or(Duration::from_secs(2)),
        workers: or_all(&server_cpus),
        serve_workers: req.serve_workers,
        min_wait: req.min_wait,
        load_threads: or_all(&load_cpus),
        server_cpus,
        load_cpus,
        load,
        open_loop: req.open_loop,
        wrk_check: req.agent.is_none(),
        dir: req.dir,
        seed: req.seed,
        listen_ip: host.listen_ip,
        agent: req.agent,
    };
    Ok(Plan { config, notes })
}

impl StudyConfig {
    /// Windows the study measures: every server at every point in every round, closed loop
    /// and each open-loop rate.
    pub fn windows(&self) -> usize {
        self.rounds as usize
            * self.bodies.len()
            * self.connections.len()
            * self.servers.len()
            * (1 + self.open_loop.len())
    }

    /// Open files the study needs: both ends of the largest connection count, and room.
    pub fn open_files(&self) -> usize {
        2 * self.connections.iter().copied().max().unwrap_or(100) + 1024
    }
}

/// The preset name of the server study.
pub(crate) const PRESET: &str = "http-server";

/// What `sweep --list-presets` says of it.
pub(crate) const ABOUT: &str = "the io_uring SEND vs SEND_ZC server study, against nginx: serve's send modes x 100/1000/4000 connections x 88 B..1 MiB bodies, wrk and open loop (--http-* flags)";

/// The servers the study measures unless told (`--http-servers`).
pub const DEFAULT_SERVERS: &str = "uring,uring-zc,epoll,nginx";

/// The connection counts unless told (`--http-connections`).
pub const DEFAULT_CONNECTIONS: &str = "100,1000,4000";

/// The body sizes unless told (`--http-bodies`).
pub const DEFAULT_BODIES: &str = "88,4K,64K,1M";

impl std::str::FromStr for Server {
    type Err = String;
    /// `nginx`, or one of serve's send modes.
    fn from_str(s: &str) -> Result<Server, String> {
        match s.trim() {
            "nginx" => Ok(Server::Nginx),
            m => m
                .parse()
                .map(Server::Sendpath)
                .map_err(|e| format!("{e}, or nginx")),
        }
    }
}

/// The preset's points with its defaults: servers x connection counts x bodies.
pub(crate) fn preset_points() -> usize {
    let n = |list: &str| list.split(',').count();
    DEFAULT_SERVERS
        .split(',')
        .filter(|s| s.parse::<Server>().is_ok())
        .count()
        * n(DEFAULT_CONNECTIONS)
        * n(DEFAULT_BODIES)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request() -> StudyRequest {
        StudyRequest {
            exe: "sendpath".into(),
            servers: vec![Server::Sendpath(SendMode::Uring), Server::Nginx],
            connections: vec![100, 1000],
            bodies: vec![88],
            rounds: None,
            duration: None,
            warmup: None,
            serve_workers: None,
            min_wait: Duration::ZERO,
            open_loop: vec![0.5],
            wrk: true,
            dir: "out".into(),
            seed: 1,
            agent: None,
        }
    }

    fn host(cpus: usize, installed: bool) -> Host {
        Host {
            nginx: installed,
            wrk: installed,
            cpus: (0..cpus).collect(),
            listen_ip: std::net::IpAddr::from([127, 0, 0, 1]),
        }
    }

    #[test]
    fn two_cpus_are_shared_and_four_are_split() {
        let p = plan(request(), &host(2, true)).unwrap();
        assert!(p.notes.is_empty());
        let c = p.config;
        assert_eq!((c.workers, c.load_threads, c.server_cpus.len()), (2, 2, 0));
        assert_eq!((c.rounds, c.load), (3, LoadTool::Wrk));
        assert_eq!(c.windows(), 3 * 2 * 2 * 2);
        let c = plan(request(), &host(4, true)).unwrap().config;
        assert_eq!((c.server_cpus, c.load_cpus), (vec![0, 1], vec![2, 3]));
    }

    #[test]
    fn missing_programs_are_noted_and_a_study_of_nothing_refused() {
        let p = plan(request(), &host(2, false)).unwrap();
        assert_eq!(p.config.servers, [Server::Sendpath(SendMode::Uring)]);
        assert_eq!(p.config.load, LoadTool::HttpLoad);
        assert_eq!(p.notes.len(), 2, "{:?}", p.notes);
        let only_nginx = StudyRequest {
            servers: vec![Server::Nginx],
            ..request()
        };
        assert_eq!(
            plan(only_nginx, &host(2, false)).unwrap_err(),
            PlanError::NoServer
        );
    }
}
