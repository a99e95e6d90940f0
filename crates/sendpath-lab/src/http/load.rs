//! `sendpath http-load`: a keep-alive HTTP/1.1 load generator. Each thread multiplexes its
//! share of the connections on one epoll instance.
//!
//! Closed loop (no `rate`): every connection sends its next request as soon as the previous
//! response is whole, like wrk. Open loop (`rate` requests/s over all connections): each
//! connection has a schedule of intended send times; a request goes at its intended time, or as
//! soon as the previous response is in when that is later, and its latency is counted from the
//! intended time, so a server that stalls is charged for the requests it delayed (no
//! coordinated omission, as in wrk2).

use crate::cancel::Cancel;
pub(crate) use crate::window::LatencyUs;
use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};
use std::net::{SocketAddr, TcpStream};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// What `http-load` runs with.
#[derive(Debug, Clone)]
pub struct LoadConfig {
    /// The server.
    pub target: SocketAddr,
    /// Connections in total.
    pub connections: usize,
    /// Threads; connections are spread over them.
    pub threads: usize,
    /// CPUs to pin threads to, in turn; empty to leave them unpinned.
    pub cpus: Vec<usize>,
    /// Measured time.
    pub duration: Duration,
    /// Time before the measured window (connections are open and loaded, nothing counted).
    pub warmup: Duration,
    /// Requests per second over all connections (open loop); `None` for closed loop.
    pub rate: Option<f64>,
    /// The request target.
    pub path: String,
    /// A response slower than this counts as a timeout and its connection is opened again.
    pub timeout: Duration,
}

/// What a run of `http-load` measured.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct LoadReport {
    /// The server.
    pub target: String,
    /// Connections.
    pub connections: usize,
    /// Threads.
    pub threads: usize,
    /// Intended rate (open loop), requests/s; null for closed loop.
    pub rate_per_s: Option<f64>,
    /// Length of the measured window, seconds.
    pub seconds: f64,
    /// Responses completed in the window.
    pub requests: u64,
    /// `requests / seconds`.
    pub requests_per_s: f64,
    /// Response bytes (heads and bodies) received in the window, per second.
    pub bytes_per_s: f64,
    /// Body bytes of the last response (what the server serves).
    pub body_bytes: Option<u64>,
    /// Latency percentiles over the window; null when no response completed.
    pub latency_us: Option<LatencyUs>,
    /// Mean latency over the window, microseconds; null when no response completed.
    pub latency_mean_us: Option<f64>,
    /// Errors by kind (`connect`, `read`, `write`, `timeout`, `closed`, `parse`,
    /// `status_NNN`), over the window and the warmup.
    pub errors: BTreeMap<String, u64>,
    /// Open loop: requests that went later than intended because the previous response was
    /// not in, in the window.
    pub late_sends: u64,
}

impl LoadReport {
    /// The report as one CSV record under a header (empty fields where not measured), with
    /// the same column names as the JSON keys, flattened.
    pub fn to_csv(&self) -> anyhow::Result<String> {
        let mut w = csv::Writer::from_writer(Vec::new());
        let l = self.latency_us;
        let opt = |v: Option<f64>| v.map_or_else(String::new, |x| format!("{x:.3}"));
        w.write_record([
            "target",
            "connections",
            "threads",
            "rate_per_s",
            "seconds",
            "requests",
            "requests_per_s",
            "bytes_per_s",
            "body_bytes",
            "latency_us_mean",
            "latency_us_p50",
            "latency_us_p90",
            "latency_us_p99",
            "latency_us_p999",
            "latency_us_max",
            "errors",
            "late_sends",
        ])?;
        let errors: Vec<String> = self
            .errors
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        w.write_record([
            self.target.clone(),
            self.connections.to_string(),
            self.threads.to_string(),
            opt(self.rate_per_s),
            format!("{:.3}", self.seconds),
            self.requests.to_string(),
            format!("{:.1}", self.requests_per_s),
            format!("{:.1}", self.bytes_per_s),
            self.body_bytes.map_or_else(String::new, |b| b.to_string()),
            opt(self.latency_mean_us),
            opt(l.map(|l| l.p50)),
            opt(l.map(|l| l.p90)),
            opt(l.map(|l| l.p99)),
            opt(l.map(|l| l.p999)),
            opt(l.map(|l| l.max)),
            errors.join(";"),
            self.late_sends.to_string(),
        ])?;
        Ok(String::from_utf8(w.into_inner()?)?)
    }
}

/// Runs the load; stops at the end of the window or when `cancel` is set (reporting what was
/// measured so far).
pub fn run(cfg: &LoadConfig, cancel: &Cancel) -> LoadReport {
    let threads = cfg.threads.clamp(1, cfg.connections.max(1));
    let start = Instant::now();
    let window_start = start + cfg.warmup;
    let end = window_start + cfg.duration;
    let request = format!("GET {} HTTP/1.1\r\nHost: {}\r\n\r\n", cfg.path, cfg.target).into_bytes();
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            let n = cfg.connections / threads + usize::from(t < cfg.connections % threads);
            let cfg = cfg.clone();
            let cancel = cancel.clone();
            let request = request.clone();
            // Connection k of all of them starts its schedule at k/connections of an interval.
            let first = (0..t)
                .map(|u| cfg.connections / threads + usize::from(u < cfg.connections % threads))
                .sum::<usize>();
            std::thread::spawn(move || {
                if !cfg.cpus.is_empty() {
                    let _ = sendpath_host::thread::pin_current_thread(cfg.cpus[t % cfg.cpus.len()]);
                }
                Worker::new(cfg, n, first, request, window_start, end).run(&cancel)
            })
        })
        .collect();
    let mut hist = crate::units::new_histogram();
    let mut report = LoadReport {
        target: cfg.target.to_string(),
        connections: cfg.connections,
        threads,
        rate_per_s: cfg.rate,
        ..LoadReport::default()
    };
    let mut bytes = 0u64;
    for h in handles {
        if let Ok(w) = h.join() {
            let _ = hist.add(&w.hist);
            report.requests += w.requests;
            bytes += w.bytes;
            report.late_sends += w.late;
            report.body_bytes = report.body_bytes.or(w.body_len);
            for (k, v) in w.errors {
                *report.errors.entry(k).or_default() += v;
            }
        }
    }
    let stopped = Instant::now().min(end);
    report.seconds = stopped
        .saturating_duration_since(window_start)
        .as_secs_f64();
    if report.seconds > 0.0 {
        report.requests_per_s = report.requests as f64 / report.seconds;
        report.bytes_per_s = bytes as f64 / report.seconds;
    }
    if !hist.is_empty() {
        report.latency_us = Some(LatencyUs::of(&hist));
        report.latency_mean_us = Some(hist.mean() / 1e3);
    }
    report
}

struct Conn {
    fd: Option<OwnedFd>,
    /// When the request in flight was meant to go (open loop) or went (closed loop).
    sent_for: Option<Instant>,
    /// Response head bytes so far.
    head: Vec<u8>,
    /// Body bytes still to come of the response being read.
    body_left: u64,
    in_body: bool,
    /// Open loop: the next intended send time.
    due: Instant,
    /// Head bytes of the response being read.
    head_len: u64,
}

struct Worker {
    cfg: LoadConfig,
    ep: OwnedFd,
    conns: Vec<Conn>,
    request: Vec<u8>,
    window_start: Instant,
    end: Instant,
    interval: Option<Duration>,
    /// Open loop: idle connections by intended send time.
    idle: BinaryHeap<Reverse<(Instant, usize)>>,
    hist: Histogram<u64>,
    requests: u64,
    bytes: u64,
    late: u64,
    body_len: Option<u64>,
    errors: BTreeMap<String, u64>,
    scratch: Vec<u8>,
}

impl Worker {
    fn new(
        cfg: LoadConfig,
        n: usize,
        first: usize,
        request: Vec<u8>,
        window_start: Instant,
        end: Instant,
    ) -> Worker {
        let ep = rustix::event::epoll::create(rustix::event::epoll::CreateFlags::CLOEXEC)
            .expect("epoll_create1 takes no resources beyond a descriptor");
        let interval = cfg
            .rate
            .as_ref()
            .copied()
            .filter(|r| *r > 0.0)
            .map(|r| Duration::from_secs_f64(cfg.connections as f64 / r));
        let now = Instant::now();
        let conns = (0..n)
            .map(|k| Conn {
                fd: None,
                sent_for: None,
                head: Vec::new(),
                body_left: 0,
                in_body: false,
                due: now
                    + interval.map_or(Duration::ZERO, |i| {
                        i.mul_f64((first + k) as f64 / cfg.connections.max(1) as f64)
                    }),
                head_len: 0,
            })
            .collect();
        Worker {
            cfg,
            ep,
            conns,
            request,
            window_start,
            end,
            interval,
            idle: BinaryHeap::new(),
            hist: crate::units::new_histogram(),
            requests: 0,
            bytes: 0,
            late: 0,
            body_len: None,
            errors: BTreeMap::new(),
            scratch: vec![0u8; 64 * 1024],
        }
    }

    fn error(&mut self, kind: &str) {
        *self.errors.entry(kind.to_string()).or_default() += 1;
    }

    fn run(mut self, cancel: &Cancel) -> Worker {
        for i in 0..self.conns.len() {
            self.connect(i);
        }
        let mut events = Vec::with_capacity(1024);
        let mut last_sweep = Instant::now();
        while Instant::now() < self.end && !cancel.is_cancelled() {
            let now = Instant::now();
            // Open loop: send what is due on idle connections.
            while let Some(&Reverse((due, i))) = self.idle.peek() {
                if due > now {
                    break;
                }
                self.idle.pop();
                self.send(i, due);
            }
            let wake = self
                .idle
                .peek()
                .map(|Reverse((d, _))| d.saturating_duration_since(now))
                .unwrap_or(Duration::from_millis(50))
                .min(Duration::from_millis(50));
            if let Err(e) = super::epoll_wait(&self.ep, &mut events, wake) {
                if e != rustix::io::Errno::INTR {
                    self.error("epoll");
                    break;
                }
            }
            for ev in events.iter() {
                self.readable(ev.data.u64() as usize);
            }
            if now.duration_since(last_sweep) > Duration::from_millis(100) {
                last_sweep = now;
                self.sweep_timeouts(now);
            }
        }
        self
    }

    /// Opens connection `i` (again), then sends or schedules its first request.
    fn connect(&mut self, i: usize) {
        use rustix::event::epoll;
        if let Some(fd) = self.conns[i].fd.take() {
            let _ = epoll::delete(&self.ep, &fd);
        }
        let c = &mut self.conns[i];
        c.head.clear();
        c.in_body = false;
        c.sent_for = None;
        let s = match TcpStream::connect_timeout(&self.cfg.target, self.cfg.timeout) {
            Ok(s) => s,
            Err(_) => {
                self.error("connect");
                return;
            }
        };
        let _ = s.set_nodelay(true);
        let _ = s.set_nonblocking(true);
        let fd: OwnedFd = s.into();
        if epoll::add(
            &self.ep,
            &fd,
            epoll::EventData::new_u64(i as u64),
            epoll::EventFlags::IN,
        )
        .is_err()
        {
            self.error("connect");
            return;
        }
        c.fd = Some(fd);
        self.next(i, Instant::now());
    }

    /// Connection `i` is free: send now (closed loop) or at its next intended time.
    fn next(&mut self, i: usize, now: Instant) {
        match self.interval {
            None => self.send(i, now),
            Some(_) => {
                let due = self.conns[i].due;
                if due < now {
                    // Behind schedule: the next request goes now, counted from when it was due.
                    self.send(i, due);
                } else {
                    self.idle.push(Reverse((due, i)));
                }
            }
        }
    }

    /// Sends the request of connection `i`, intended at `due`.
    fn send(&mut self, i: usize, due: Instant) {
        let now = Instant::now();
        if let Some(iv) = self.interval {
            if now.saturating_duration_since(due) > Duration::from_millis(1)
                && now >= self.window_start
            {
                self.late += 1;
            }
            self.conns[i].due = due + iv;
        }
        let Some(fd) = self.conns[i].fd.as_ref() else {
            return;
        };
        match rustix::net::send(fd, &self.request, rustix::net::SendFlags::NOSIGNAL) {
            Ok(n) if n == self.request.len() => {
                self.conns[i].sent_for = Some(if self.interval.is_some() { due } else { now });
            }
            _ => {
                self.error("write");
                self.connect(i);
            }
        }
    }

    /// Reads what connection `i` has; completes responses.
    fn readable(&mut self, i: usize) {
        let Some(fd) = self.conns[i].fd.as_ref() else {
            return;
        };
        let n = match rustix::io::read(fd, &mut self.scratch) {
            Ok(0) => {
                self.error("closed");
                return self.connect(i);
            }
            Ok(n) => n,
            Err(rustix::io::Errno::AGAIN) | Err(rustix::io::Errno::INTR) => return,
            Err(_) => {
                self.error("read");
                return self.connect(i);
            }
        };
        let mut at = 0;
        while at < n {
            let c = &mut self.conns[i];
            if c.sent_for.is_none() {
                self.error("parse");
                return self.connect(i);
            }
            if c.in_body {
                let take = (c.body_left).min((n - at) as u64);
                c.body_left -= take;
                at += take as usize;
                if c.body_left == 0 {
                    self.complete(i);
                }
                continue;
            }
            let room = 16 * 1024 - c.head.len();
            let take = room.min(n - at);
            c.head.extend_from_slice(&self.scratch[at..at + take]);
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&c.head) {
                Ok(httparse::Status::Complete(hl)) => {
                    let status = resp.code.unwrap_or(0);
                    let len = resp
                        .headers
                        .iter()
                        .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                        .and_then(|h| std::str::from_utf8(h.value).ok())
                        .and_then(|v| v.trim().parse::<u64>().ok());
                    let Some(len) = len else {
                        self.error("parse");
                        return self.connect(i);
                    };
                    // Bytes of this read past the head belong to the body.
                    let past = c.head.len() - hl;
                    at += take - past;
                    c.head.clear();
                    c.in_body = true;
                    c.body_left = len;
                    c.head_len = hl as u64;
                    self.body_len = Some(len);
                    if !(200..300).contains(&status) {
                        self.error(&format!("status_{status}"));
                    }
                    if len == 0 {
                        self.complete(i);
                    }
                }
                Ok(httparse::Status::Partial) if c.head.len() < 16 * 1024 => at += take,
                _ => {
                    self.error("parse");
                    return self.connect(i);
                }
            }
        }
    }

    /// The response on connection `i` is whole.
    fn complete(&mut self, i: usize) {
        let now = Instant::now();
        let c = &mut self.conns[i];
        c.in_body = false;
        if let Some(t) = c.sent_for.take() {
            if now >= self.window_start && now <= self.end {
                self.requests += 1;
                self.bytes += c.head_len + self.body_len.unwrap_or(0);
                self.hist
                    .saturating_record(now.duration_since(t).as_nanos().max(1) as u64);
            }
        }
        self.next(i, now);
    }

    /// Requests outstanding past the timeout: counted, and their connection opened again.
    fn sweep_timeouts(&mut self, now: Instant) {
        for i in 0..self.conns.len() {
            let late = self.conns[i]
                .sent_for
                .is_some_and(|t| now.saturating_duration_since(t) > self.cfg.timeout);
            if late {
                self.error("timeout");
                self.connect(i);
            }
        }
    }
}
