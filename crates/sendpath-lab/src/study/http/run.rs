//! The server study (`sendpath sweep --preset http-server`): `serve` in each send mode, and
//! nginx when it is installed, at each connection count and body size, in rounds that
//! alternate the servers (ABBA) and shuffle the points. Each server runs as its own process,
//! so its CPU is read from `/proc` the same way for sendpath and for nginx (master and
//! workers), over the measured window only. Closed-loop load comes from wrk when installed (as
//! the published study used) or from `http-load`; open-loop points at fractions of the peak
//! rate use `http-load`, which counts latency from each request's intended send time.

use super::load::{http_load_window, wrk};
use super::plan::order;
use super::servers::{hard_nofile, installed, nginx_config, start};
use super::summary::median;
use super::{LoadTool, Measurement, Server, StudyConfig, StudyResults};
use crate::cancel::Cancel;
use std::net::SocketAddr;

/// Where one window sits in the study: the server, the point, the round, and the load.
#[derive(Debug, Clone, Copy)]
struct At {
    server: Server,
    body: usize,
    conns: usize,
    round: u32,
    /// Open-loop rate, requests/s; `None` for closed loop.
    rate: Option<f64>,
    tool: LoadTool,
}

/// Runs one point: server up, a warm-up (wrk: a run of its own; http-load: the start of the
/// measured run), the measured window with the server's CPU read at its edges, server down.
fn point(cfg: &StudyConfig, at: At, cancel: &Cancel) -> anyhow::Result<Measurement> {
    let At {
        server,
        body,
        conns,
        round,
        rate,
        tool,
    } = at;
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
        latency_mean_us: w.latency_mean_us,
        errors: w.errors,
        server_cpu_s: cpu,
        server_cpu_us_per_request: cpu
            .filter(|_| w.requests > 0.0)
            .map(|c| c * 1e6 / w.requests),
        serve,
    })
}

/// A study being run: its configuration, the results so far, and the order of its points.
struct Study<'a, P: FnMut(&Measurement)> {
    cfg: &'a StudyConfig,
    cancel: &'a Cancel,
    progress: P,
    out: StudyResults,
    rng: fastrand::Rng,
    /// (body, connections), shuffled each round.
    points: Vec<(usize, usize)>,
}

/// Runs the whole study; `progress` is told each finished window. Stops early on `cancel`,
/// keeping what was measured.
pub fn run(
    cfg: &StudyConfig,
    cancel: &Cancel,
    progress: impl FnMut(&Measurement),
) -> anyhow::Result<StudyResults> {
    std::fs::create_dir_all(&cfg.dir)?;
    let mut environment = crate::study::rows::environment();
    environment.agent = cfg.agent.as_ref().map(|t| t.addr.to_string());
    let out = StudyResults {
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
        interrupted: false,
    };
    let mut study = Study {
        cfg,
        cancel,
        progress,
        out,
        rng: fastrand::Rng::with_seed(cfg.seed),
        points: cfg
            .bodies
            .iter()
            .flat_map(|&b| cfg.connections.iter().map(move |&c| (b, c)))
            .collect(),
    };
    let _finished = study.closed_loop()? && study.open_loop()? && study.wrk_check()?;
    study.out.interrupted = cancel.is_cancelled();
    Ok(study.out)
}

impl<P: FnMut(&Measurement)> Study<'_, P> {
    /// Measures `at` and keeps it; `false` (and nothing measured) once cancelled.
    fn measure(&mut self, cfg: &StudyConfig, at: At) -> anyhow::Result<Option<Measurement>> {
        if self.cancel.is_cancelled() {
            return Ok(None);
        }
        let m = point(cfg, at, self.cancel)?;
        (self.progress)(&m);
        Ok(Some(m))
    }

    /// The server open-loop rates are fractions of: nginx when measured, else the first.
    fn reference(&self) -> Server {
        if self.cfg.servers.contains(&Server::Nginx) {
            Server::Nginx
        } else {
            self.cfg.servers[0]
        }
    }

    /// Closed loop: every point each round, servers in alternating order. `false` when
    /// cancelled.
    fn closed_loop(&mut self) -> anyhow::Result<bool> {
        let cfg = self.cfg;
        for round in 1..=cfg.rounds {
            self.rng.shuffle(&mut self.points);
            for (body, conns) in self.points.clone() {
                for server in order(&cfg.servers, round) {
                    let at = At {
                        server,
                        body,
                        conns,
                        round,
                        rate: None,
                        tool: cfg.load,
                    };
                    let Some(m) = self.measure(cfg, at)? else {
                        return Ok(false);
                    };
                    self.out.measurements.push(m);
                }
            }
        }
        Ok(true)
    }

    /// Open loop at fractions of the reference server's median peak. `false` when cancelled.
    fn open_loop(&mut self) -> anyhow::Result<bool> {
        let cfg = self.cfg;
        let reference = self.reference().name();
        for round in 1..=cfg.rounds {
            self.rng.shuffle(&mut self.points);
            for (body, conns) in self.points.clone() {
                let peak = median(
                    self.out
                        .measurements
                        .iter()
                        .filter(|m| {
                            m.server == reference
                                && m.body_bytes == body
                                && m.connections == conns
                                && m.rate_per_s.is_none()
                        })
                        .map(|m| m.requests_per_s),
                );
                let Some(peak) = peak else { continue };
                for &f in &cfg.open_loop {
                    for server in order(&cfg.servers, round) {
                        let at = At {
                            server,
                            body,
                            conns,
                            round,
                            rate: Some(peak * f),
                            tool: LoadTool::HttpLoad,
                        };
                        let Some(m) = self.measure(cfg, at)? else {
                            return Ok(false);
                        };
                        self.out.measurements.push(m);
                    }
                }
            }
        }
        Ok(true)
    }

    /// http-load against wrk on the reference server, alternating which goes first. With two
    /// CPUs or more and nothing pinned, the server gets one worker on the first CPU and each
    /// tool one thread on the second, so the tools compete for neither the server's CPU nor
    /// each other's and the server sets the pace, as a load generator check wants.
    fn wrk_check(&mut self) -> anyhow::Result<bool> {
        if !self.cfg.wrk_check || !installed("wrk") {
            return Ok(true);
        }
        let allowed = sendpath_host::thread::allowed_cpus().unwrap_or_default();
        let check = if self.cfg.server_cpus.is_empty() && allowed.len() >= 2 {
            StudyConfig {
                workers: 1,
                serve_workers: None,
                load_threads: 1,
                server_cpus: vec![allowed[0]],
                load_cpus: vec![allowed[1]],
                ..self.cfg.clone()
            }
        } else {
            self.cfg.clone()
        };
        let server = self.reference();
        for round in 1..=check.rounds {
            let tools = if round % 2 == 1 {
                [LoadTool::Wrk, LoadTool::HttpLoad]
            } else {
                [LoadTool::HttpLoad, LoadTool::Wrk]
            };
            let mut rps = [0.0; 2];
            for tool in tools {
                let at = At {
                    server,
                    body: check.bodies[0],
                    conns: 100,
                    round,
                    rate: None,
                    tool,
                };
                let Some(m) = self.measure(&check, at)? else {
                    return Ok(false);
                };
                rps[usize::from(tool == LoadTool::HttpLoad)] = m.requests_per_s;
                self.out.measurements.push(Measurement {
                    load: format!("{}-check", m.load),
                    ..m
                });
            }
            if rps[0] > 0.0 {
                self.out.wrk_check_ratios.push(rps[1] / rps[0]);
            }
        }
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::super::load::parse_wrk;
    use super::super::{LoadTool, StudyConfig};
    use super::*;
    use crate::http::load::LatencyUs;
    use crate::http::serve::SendMode;
    use crate::http::serve::ServeReport;
    use crate::study::http::{closed_windows, median_of, summary};
    use std::collections::BTreeMap;
    use std::path::{Path, PathBuf};
    use std::time::{Duration, Instant};

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
            latency_mean_us: None,
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
    fn send_against_send_zc_shows_mean_latency_beside_the_published_table() {
        let with_latency = |srv: &str, round: u32, rps: f64, mean: f64, p99: f64| Measurement {
            latency_mean_us: Some(mean),
            latency_us: Some(LatencyUs {
                p50: mean,
                p90: p99,
                p99,
                p999: f64::NAN,
                max: f64::NAN,
            }),
            ..m(srv, round, rps, 8.0)
        };
        let r = StudyResults {
            environment: crate::study::rows::environment(),
            nginx_config: None,
            measurements: vec![
                with_latency("sendpath-uring", 1, 100_000.0, 900.0, 2000.0),
                with_latency("sendpath-uring-zc", 1, 110_000.0, 990.0, 3000.0),
            ],
            wrk_check_ratios: vec![],
            interrupted: false,
        };
        let s = summary(&r);
        assert!(
            s.contains("| 100 | 100K req/s, 0.90ms | 110K req/s, 0.99ms | +10.0% | +10% | 2.00ms / 3.00ms (p99 +50%) | unknown | 112K, 0.90ms / 120K, 0.98ms |"),
            "{s}"
        );
    }

    #[test]
    fn the_summary_pairs_rounds_against_nginx() {
        let r = StudyResults {
            environment: crate::study::rows::environment(),
            nginx_config: None,
            measurements: vec![
                m("sendpath-uring", 1, 110.0, 8.0),
                m("nginx", 1, 100.0, 10.0),
                m("nginx", 2, 100.0, 10.0),
                m("sendpath-uring", 2, 120.0, 6.0),
            ],
            wrk_check_ratios: vec![1.05],
            interrupted: false,
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
            environment: crate::study::rows::environment(),
            nginx_config: Some("user root;\nworker_processes 2;\n".into()),
            measurements: vec![serve, m("nginx", 1, 100.0, 10.0)],
            wrk_check_ratios: vec![],
            interrupted: false,
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
            environment: crate::study::rows::environment(),
            nginx_config: None,
            measurements: ms,
            wrk_check_ratios: vec![],
            interrupted: false,
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
            h.contains("<h2 id=\"s1\">Body 88B</h2>")
                && h.contains("<h2 id=\"s2\">Body 64KiB</h2>")
                && h.contains("<a href=\"#s2\">Body 64KiB</a>"),
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
        assert_eq!(w.latency_mean_us, Some(677.52), "wrk's Latency Avg");
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
