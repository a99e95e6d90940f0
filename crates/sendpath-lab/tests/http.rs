//! `serve` and `http-load` on the real kernel: every send mode answers pipelined requests in
//! order with the body it wrote; hostile clients (a malformed request, an oversized head, a
//! reset in the middle of a response, an idle half-sent request) are refused or dropped while
//! another client keeps being served; the load generator measures the server without errors.

use sendpath_lab::cancel::Cancel;
use sendpath_lab::http::load::{self, LoadConfig};
use sendpath_lab::http::serve::{self, SendMode, ServeConfig, ServeReport};
use sendpath_lab::http::{body_bytes, MAX_HEAD};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

fn skip(reason: &str) {
    if std::env::var("SENDPATH_REQUIRE").as_deref() == Ok("all") {
        panic!("cannot run here and SENDPATH_REQUIRE=all forbids skipping: {reason}");
    }
    println!("skipped: {reason}");
}

struct Running {
    addr: SocketAddr,
    cancel: Cancel,
    handle: std::thread::JoinHandle<ServeReport>,
}

impl Running {
    fn stop(self) -> ServeReport {
        self.cancel.cancel();
        self.handle
            .join()
            .expect("the server thread does not panic")
    }
}

fn config(send: SendMode, body_len: usize, idle: Duration) -> ServeConfig {
    ServeConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        workers: 1,
        cpus: Vec::new(),
        send,
        body_len,
        file: None,
        seed: 5,
        zc_inflight: 256,
        idle_timeout: idle,
        max_connections: 1000,
        depth: 8,
        // Batched waits on, so every test below runs them on the kernel.
        wait_nr: 32,
        min_wait: Duration::from_micros(50),
        duration: Duration::from_secs(60),
        profile: None,
    }
}

fn start(send: SendMode, body_len: usize, idle: Duration) -> Running {
    start_with(config(send, body_len, idle))
}

fn start_with(cfg: ServeConfig) -> Running {
    let listeners = serve::bind_listeners(cfg.listen, 1).unwrap();
    let addr = serve::local_addr(&listeners[0]).unwrap();
    let cancel = Cancel::new();
    let c = cancel.clone();
    let handle = std::thread::spawn(move || serve::serve(&cfg, listeners, &c));
    Running {
        addr,
        cancel,
        handle,
    }
}

/// Reads one response; returns its status and body.
fn read_response(s: &mut TcpStream) -> std::io::Result<(u16, Vec<u8>)> {
    read_response_to(s, false)
}

/// Reads one response to a GET, or to a HEAD (`head_only`: no body follows).
fn read_response_to(s: &mut TcpStream, head_only: bool) -> std::io::Result<(u16, Vec<u8>)> {
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        if s.read(&mut b)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.push(b[0]);
    }
    let text = String::from_utf8_lossy(&head).to_string();
    let status: u16 = text[9..12].parse().unwrap();
    let len: usize = text
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .map(|v| v.trim().parse().unwrap())
        .unwrap_or(0);
    let mut body = vec![0u8; if head_only { 0 } else { len }];
    s.read_exact(&mut body)?;
    Ok((status, body))
}

fn ring_available() -> bool {
    // On its own thread: dropping a ring leaves task work for the thread that made it, and the
    // next blocking socket read there with a timeout returns EINTR.
    let made = std::thread::spawn(|| {
        sendpath::UringDriver::new(sendpath::DriverConfig::default())
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .join()
    .expect("probing io_uring does not panic");
    match made {
        Ok(()) => true,
        Err(e) => {
            skip(&format!("io_uring unavailable: {e}"));
            false
        }
    }
}

#[test]
fn every_mode_answers_pipelined_requests_in_order_with_its_body() {
    if !ring_available() {
        return;
    }
    for mode in SendMode::ALL {
        for body_len in [88usize, 64 * 1024] {
            let srv = start(mode, body_len, Duration::from_secs(30));
            let mut s = TcpStream::connect(srv.addr).unwrap();
            s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            // Three GETs and a HEAD in one write, then one more GET.
            let get = "GET / HTTP/1.1\r\nHost: t\r\n\r\n";
            let head = "HEAD / HTTP/1.1\r\nHost: t\r\n\r\n";
            s.write_all(format!("{get}{get}{head}{get}").as_bytes())
                .unwrap();
            let want = body_bytes(body_len, 5);
            for (i, head_only) in [false, false, true, false].into_iter().enumerate() {
                let (status, body) = read_response_to(&mut s, head_only).unwrap();
                assert_eq!(status, 200, "{mode:?} {body_len} response {i}");
                let want: &[u8] = if head_only { &[] } else { &want };
                assert!(body == want, "{mode:?} {body_len} response {i}: wrong body");
            }
            drop(s);
            let r = srv.stop();
            assert_eq!(r.requests, 4, "{mode:?} {body_len}: {r:?}");
            assert!(r.worker_errors.is_empty(), "{:?}", r.worker_errors);
            if mode == SendMode::UringZc {
                let s = r.send_stats.as_ref().expect("ring modes report sends");
                assert!(s.zerocopy.attempts > 0, "{s:?}");
            }
            if mode == SendMode::Adaptive {
                // The defaults: heads and 88-byte bodies in the copy tier; 64 KiB bodies in the
                // zero-copy tier, but each follows a head, so no run forms and they go by SEND.
                let s = r.send_stats.as_ref().expect("ring modes report sends");
                let d = s.decisions.expect("adaptive counts its decisions");
                assert!(d.copy_sends > 0, "{d:?}");
                assert_eq!(d.run_copies > 0, body_len >= 64 * 1024, "{d:?}");
                assert_eq!(s.zerocopy.attempts, d.zerocopy_sends, "{s:?}");
            }
        }
    }
}

/// 10000 GETs pipelined in one stream, read by the client as they come: every mode answers
/// all of them in order (before, the io_uring modes answered 1820, then a 431 counted nowhere
/// and a close); a client that pipelines past what the server holds without reading is
/// refused with a 503 that the report counts.
#[test]
fn every_mode_answers_ten_thousand_pipelined_requests() {
    if !ring_available() {
        return;
    }
    const N: usize = 10_000;
    for mode in SendMode::ALL {
        let srv = start(mode, 88, Duration::from_secs(30));
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut w = s.try_clone().unwrap();
        let writer = std::thread::spawn(move || {
            let all = "GET / HTTP/1.1\r\nHost: t\r\n\r\n".repeat(N);
            w.write_all(all.as_bytes()).unwrap();
        });
        let want = body_bytes(88, 5);
        for i in 0..N {
            let (status, body) = read_response(&mut s)
                .unwrap_or_else(|e| panic!("{mode:?}: response {i} of {N}: {e}"));
            assert_eq!(status, 200, "{mode:?}: response {i} of {N}");
            assert!(body == want, "{mode:?}: response {i}: wrong body");
        }
        writer.join().unwrap();
        drop(s);
        let r = srv.stop();
        assert_eq!(r.requests, N as u64, "{mode:?}: {r:?}");
        assert!(r.refused.is_empty(), "{mode:?}: {:?}", r.refused);
    }
    // A client that sends 8 MiB of requests and reads nothing: refused by the ring modes,
    // which hold 4 MiB unparsed for it, and counted. (The epoll mode gathers each read's
    // responses into one buffer, and queues all of these.)
    for mode in [SendMode::Uring, SendMode::UringZc] {
        let srv = start(mode, 88, Duration::from_secs(30));
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.set_write_timeout(Some(Duration::from_secs(5))).unwrap();
        let all = "GET / HTTP/1.1\r\nHost: t\r\n\r\n".repeat((8 << 20) / 27);
        let _ = s.write_all(all.as_bytes());
        std::thread::sleep(Duration::from_millis(300));
        drop(s);
        let r = srv.stop();
        assert_eq!(
            r.refused.get("pipeline_overflow"),
            Some(&1),
            "{mode:?}: {r:?}"
        );
        assert_eq!(r.pipeline_overflows, 1, "{mode:?}");
    }
}

#[test]
fn hostile_clients_are_refused_or_dropped_and_others_still_served() {
    if !ring_available() {
        return;
    }
    for mode in [SendMode::Uring, SendMode::Epoll] {
        let srv = start(mode, 1 << 20, Duration::from_secs(1));
        let get = b"GET / HTTP/1.1\r\nHost: t\r\n\r\n";
        // A well-behaved client that stays connected throughout.
        let mut good = TcpStream::connect(srv.addr).unwrap();
        good.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();

        // Malformed: 400, then the server closes.
        let mut bad = TcpStream::connect(srv.addr).unwrap();
        bad.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        bad.write_all(b"NONSENSE\r\n\r\n").unwrap();
        assert_eq!(read_response(&mut bad).unwrap().0, 400, "{mode:?}");
        assert_eq!(
            bad.read(&mut [0u8; 16]).unwrap_or(0),
            0,
            "{mode:?}: closed after 400"
        );

        // An oversized head: 431, then closed.
        let mut big = TcpStream::connect(srv.addr).unwrap();
        big.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut req = b"GET / HTTP/1.1\r\nX-Big: ".to_vec();
        req.resize(MAX_HEAD + 100, b'a');
        let _ = big.write_all(&req);
        assert_eq!(read_response(&mut big).unwrap().0, 431, "{mode:?}");

        // A client that asks for 1 MiB, reads a little and resets.
        for _ in 0..5 {
            let mut rst = TcpStream::connect(srv.addr).unwrap();
            rst.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
            rst.write_all(get).unwrap();
            rst.read_exact(&mut [0u8; 1000])
                .unwrap_or_else(|e| panic!("{mode:?}: no response to a GET: {e}"));
            rustix::net::sockopt::set_socket_linger(&rst, Some(Duration::ZERO)).unwrap();
            drop(rst);
        }

        // A half-sent request left idle: closed after the idle timeout.
        let mut idle = TcpStream::connect(srv.addr).unwrap();
        idle.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        idle.write_all(b"GET / HT").unwrap();
        // A request trickled a byte at a time never completes: closed all the same.
        let trickle = TcpStream::connect(srv.addr).unwrap();
        let trickler = std::thread::spawn(move || {
            let mut t = trickle;
            let start = std::time::Instant::now();
            for b in b"GET / HTTP/1.1\r\nX-Slow: "
                .iter()
                .chain(std::iter::repeat(&b'a'))
            {
                if t.write_all(&[*b]).is_err() {
                    return Some(start.elapsed());
                }
                std::thread::sleep(Duration::from_millis(200));
                if start.elapsed() > Duration::from_secs(8) {
                    return None;
                }
            }
            None
        });

        // Meanwhile the good client is served, byte for byte.
        let want = body_bytes(1 << 20, 5);
        for _ in 0..3 {
            good.write_all(get).unwrap();
            let (status, body) = read_response(&mut good).unwrap();
            assert_eq!((status, body == want), (200, true), "{mode:?}");
        }
        let t = std::time::Instant::now();
        assert_eq!(
            idle.read(&mut [0u8; 16]).unwrap_or(0),
            0,
            "{mode:?}: idle closed"
        );
        assert!(
            t.elapsed() < Duration::from_secs(8),
            "{mode:?}: closed by the timeout"
        );
        let cut = trickler.join().unwrap();
        assert!(
            cut.is_some(),
            "{mode:?}: a trickled request was never cut off"
        );
        // `good` has idled past the timeout too by now; a new client is served.
        drop(good);
        let mut after = TcpStream::connect(srv.addr).unwrap();
        after
            .set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        after.write_all(get).unwrap();
        assert_eq!(
            read_response(&mut after).unwrap().0,
            200,
            "{mode:?} after all that"
        );
        drop(after);
        let r = srv.stop();
        assert_eq!(r.refused.get("malformed"), Some(&1), "{mode:?} {r:?}");
        assert_eq!(r.refused.get("too_large"), Some(&1), "{mode:?} {r:?}");
        assert!(r.idle_timeouts >= 2, "{mode:?} {r:?}");
        assert!(r.resets >= 1, "{mode:?}: resets counted {r:?}");
        assert!(r.peak_connections >= 2, "{mode:?}: peak counted {r:?}");
        assert!(r.worker_errors.is_empty(), "{:?}", r.worker_errors);
    }
}

#[test]
fn http_load_measures_closed_and_open_loop_without_errors() {
    if !ring_available() {
        return;
    }
    let srv = start(SendMode::Uring, 88, Duration::from_secs(30));
    let mut cfg = LoadConfig {
        target: srv.addr,
        connections: 50,
        threads: 2,
        cpus: Vec::new(),
        duration: Duration::from_millis(700),
        warmup: Duration::from_millis(200),
        rate: None,
        path: "/".into(),
        timeout: Duration::from_secs(2),
    };
    let closed = load::run(&cfg, &Cancel::new());
    assert!(closed.requests > 100, "{closed:?}");
    assert!(closed.errors.is_empty(), "{:?}", closed.errors);
    assert_eq!(closed.body_bytes, Some(88));
    let l = closed.latency_us.expect("latency measured");
    assert!(l.p50 > 0.0 && l.p50 <= l.p99 && l.p99 <= l.max, "{l:?}");
    // Open loop at a rate well below what the server did: about that many requests.
    let rate = 2000.0;
    cfg.rate = Some(rate);
    cfg.duration = Duration::from_secs(1);
    let open = load::run(&cfg, &Cancel::new());
    assert!(open.errors.is_empty(), "{:?}", open.errors);
    let got = open.requests_per_s;
    assert!(
        (rate * 0.8..=rate * 1.2).contains(&got),
        "open loop at {rate}/s served {got}/s"
    );
    let r = srv.stop();
    assert!(r.requests >= closed.requests + open.requests);
    // The configuration's batched waits, recorded when the kernel takes them.
    if sendpath_lab::probe::run().io_uring.min_wait {
        assert_eq!((r.wait_nr, r.min_wait_us), (Some(32), Some(50)), "{r:?}");
    } else {
        skip("no IORING_FEAT_MIN_TIMEOUT (Linux 6.12): serve wakes at each completion");
        assert_eq!((r.wait_nr, r.min_wait_us), (None, None), "{r:?}");
    }
}

/// `--file`: the body is the file's bytes, spliced through a pipe on the ring or sent with
/// sendfile(2) by epoll, in pipelined order with a HEAD between; a file larger than the pipe
/// goes through it in several rounds.
#[test]
fn every_mode_serves_a_file() {
    if !ring_available() {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("body");
    let bytes: Vec<u8> = (0..3_000_000u32).map(|i| (i * 7 % 251) as u8).collect();
    std::fs::write(&path, &bytes).unwrap();
    for mode in SendMode::ALL {
        let srv = start_with(ServeConfig {
            file: Some(path.clone()),
            ..config(mode, bytes.len(), Duration::from_secs(30))
        });
        let mut s = TcpStream::connect(srv.addr).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        s.write_all(b"GET / HTTP/1.1\r\n\r\nHEAD / HTTP/1.1\r\n\r\nGET / HTTP/1.1\r\n\r\n")
            .unwrap();
        for head_only in [false, true, false] {
            let (status, body) = read_response_to(&mut s, head_only).unwrap();
            assert_eq!(status, 200, "{mode:?}");
            assert!(
                body == if head_only { &[][..] } else { &bytes[..] },
                "{mode:?}: wrong body"
            );
        }
        drop(s);
        let r = srv.stop();
        assert_eq!(r.requests, 3, "{mode:?}");
        assert!(r.worker_errors.is_empty(), "{:?}", r.worker_errors);
    }
}
