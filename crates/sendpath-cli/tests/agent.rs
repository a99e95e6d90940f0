//! `sendpath agent` with `stream --agent` and `sweep --agent`, and clients that misbehave.

mod common;

use common::{fails_with, free_loopback_addr, sendpath};
use serde_json::Value;
use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// An agent child process, killed on drop; its log (stderr) is read by `log`.
struct Agent {
    child: Child,
    log: std::path::PathBuf,
    _dir: tempfile::TempDir,
}

impl Agent {
    fn start(prefix: &[&str], listen: &str, extra: &[&str]) -> Agent {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("agent.log");
        let exe = assert_cmd::cargo::cargo_bin("sendpath");
        let mut cmd = match prefix {
            [] => Command::new(&exe),
            [first, rest @ ..] => {
                let mut c = Command::new(first);
                c.args(rest).arg(&exe);
                c
            }
        };
        let child = cmd
            .args(["agent", "--listen", listen, "-t", "120s"])
            .args(extra)
            .stderr(Stdio::from(std::fs::File::create(&log).unwrap()))
            .spawn()
            .unwrap();
        let a = Agent {
            child,
            log,
            _dir: dir,
        };
        a.wait_for("listening on");
        a
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn wait_for(&self, needle: &str) {
        let t0 = Instant::now();
        while !self.log().contains(needle) {
            assert!(
                t0.elapsed() < Duration::from_secs(10),
                "the agent never logged `{needle}`:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Agent {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sends `line` on a fresh control connection and returns the agent's first reply.
fn one_line(addr: &str, line: &[u8]) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(line).unwrap();
    let mut r = BufReader::new(s);
    let mut reply = String::new();
    r.read_line(&mut reply).unwrap();
    reply
}

#[test]
fn stream_and_sweep_receive_through_the_agent_with_remote_cpu() {
    let addr = free_loopback_addr();
    let agent = Agent::start(&[], &addr, &[]);
    let out = sendpath()
        .args([
            "stream",
            "-s",
            "copy,msg-zerocopy",
            "-l",
            "64K",
            "-t",
            "300ms",
        ])
        .args([
            "--warmup", "100ms", "-n", "2", "--recv", "verify", "--agent", &addr,
        ])
        .args(["--json", "-"])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["environment"]["agent"], addr.as_str(), "{v}");
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["recv_mode"], "verify");
        let i = &r["integrity"];
        assert!(i["bytes_verified"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(i["bytes_verified"], i["bytes_sent"]);
        assert_eq!(i["mismatches"], 0);
        assert!(
            r["cpu_ns_per_byte"]["remote"].as_f64().unwrap() > 0.0,
            "{r}"
        );
        assert!(r["cpu_ns_per_byte"]["receiver"].is_null());
        for x in r["repeats"].as_array().unwrap() {
            let c = &x["cpu"]["remote"];
            assert!(c["user_ns"].as_u64().unwrap() + c["system_ns"].as_u64().unwrap() > 0);
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("quick");
    let out = sendpath()
        .args([
            "sweep", "--preset", "quick", "-n", "1", "-t", "100ms", "--warmup", "0",
        ])
        .args(["--agent", &addr, "--out"])
        .arg(&res)
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        text.contains("data: received by `sendpath agent` at"),
        "{text}"
    );
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(res.join("results.json")).unwrap()).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 32, "the quick preset's 8 paths x 4 sizes");
    for r in rows {
        // The agent's CPU is in every window (per byte only where the window moved bytes:
        // a fresh connection sending 256 B zero-copy can stall for its first 100 ms or so).
        assert!(r["repeats"][0]["cpu"]["remote"].is_object(), "{r}");
    }
    let md = std::fs::read_to_string(res.join("summary.md")).unwrap();
    assert!(
        md.contains("Recommendation (data: received by `sendpath agent`"),
        "{md}"
    );
    assert!(agent.log().contains("received"), "{}", agent.log());
}

/// The agent's receiver maps pages too (`--recv zerocopy`), and says how many it mapped.
#[test]
fn the_agent_maps_received_pages_and_says_how_many() {
    if !sendpath::probe().msg_zerocopy.supported {
        return common::skip("MSG_ZEROCOPY unavailable: no sender whose pages map");
    }
    let addr = free_loopback_addr();
    let _agent = Agent::start(&[], &addr, &[]);
    let out = sendpath()
        .args([
            "stream",
            "-s",
            "msg-zerocopy,copy",
            "-l",
            "64K",
            "-t",
            "300ms",
        ])
        .args(["--warmup", "100ms", "-n", "1", "--recv", "zerocopy"])
        .args(["--agent", &addr, "--json", "-"])
        .assert()
        .success();
    let v = common::stdout_json(&out);
    let rows = v["results"].as_array().unwrap();
    let mapped = |path: &str| {
        let r = rows.iter().find(|r| r["strategy"] == path).unwrap();
        let i = &r["integrity"];
        assert_eq!(i["bytes_received"], i["bytes_sent"], "{path}: {i}");
        r["recv_mapped_fraction"].as_f64().unwrap()
    };
    assert!(mapped("msg-zerocopy") > 0.1, "{}", mapped("msg-zerocopy"));
    assert_eq!(mapped("copy"), 0.0);
}

#[test]
fn rr_clients_run_on_the_agent_and_their_latency_comes_back() {
    let addr = free_loopback_addr();
    let agent = Agent::start(&[], &addr, &[]);
    let out = sendpath()
        .args([
            "rr",
            "-s",
            "copy,uring",
            "--request",
            "100",
            "--response",
            "3000",
        ])
        .args([
            "--concurrency",
            "1,3",
            "-t",
            "300ms",
            "--warmup",
            "100ms",
            "-n",
            "2",
        ])
        .args(["--recv", "verify", "--agent", &addr, "--json", "-"])
        .args(["--congestion", "reno"])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    assert_eq!(v["environment"]["agent"], addr.as_str());
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        // Set on our end of each connection, which sends the responses.
        assert_eq!(r["tcp_congestion"], "reno", "{r}");
        assert!(r["latency_us"]["p50"].as_f64().unwrap() > 0.0, "{r}");
        assert!(r["messages_per_s"]["median"].as_f64().unwrap() > 0.0, "{r}");
        let i = &r["integrity"];
        assert_eq!(i["bytes_received"], i["bytes_sent"], "{r}");
        assert_eq!(i["bytes_verified"], i["bytes_sent"], "{r}");
        assert_eq!(i["mismatches"], 0);
        assert!(r["repeats"][0]["cpu"]["remote"].is_object(), "{r}");
    }
    assert!(
        agent.log().contains("rr clients, 3 connection(s)"),
        "{}",
        agent.log()
    );
    // Misuse of the protocol by a client: refused with the reason.
    let mut s = TcpStream::connect(&addr).unwrap();
    s.write_all(b"{\"v\":1,\"op\":\"hello\"}\n{\"v\":1,\"op\":\"rr-client\",\"connections\":1,\"port\":1,\"request\":1,\"response\":1,\"recv\":\"discard\",\"duration_ms\":1}\n").unwrap();
    let mut r = BufReader::new(s);
    let (mut hello, mut reply) = (String::new(), String::new());
    r.read_line(&mut hello).unwrap();
    r.read_line(&mut reply).unwrap();
    assert!(reply.contains("recv must be copy or verify"), "{reply}");
}

#[test]
fn http_load_runs_on_the_agent_against_a_server_here() {
    let addr = free_loopback_addr();
    let agent = Agent::start(&[], &addr, &[]);
    let server = free_loopback_addr();
    let mut serve = Command::new(assert_cmd::cargo::cargo_bin("sendpath"))
        .args(["serve", "--listen", &server, "-t", "60s", "--workers", "1"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let t0 = Instant::now();
    while TcpStream::connect(&server).is_err() {
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "serve did not start"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("load.json");
    let ran = sendpath()
        .args([
            "http-load",
            &server,
            "-c",
            "20",
            "-d",
            "500ms",
            "--warmup",
            "100ms",
        ])
        .args(["--agent", &addr, "--json"])
        .arg(&json)
        .assert();
    let _ = serve.kill();
    let _ = serve.wait();
    ran.success();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(v["requests"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["body_bytes"], 88);
    assert!(
        agent.log().contains("http-load, 20 connection(s)"),
        "{}",
        agent.log()
    );
}

#[test]
fn the_http_server_preset_loads_from_the_agent() {
    let addr = free_loopback_addr();
    let agent = Agent::start(&[], &addr, &[]);
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("study");
    sendpath()
        .args([
            "sweep",
            "--preset",
            "http-server",
            "--http-servers",
            "uring,epoll",
        ])
        .args(["--http-connections", "10", "--http-bodies", "88", "-n", "1"])
        .args(["-t", "300ms", "--warmup", "100ms", "--http-open-loop", ""])
        .args(["--agent", &addr, "--out"])
        .arg(&out)
        .assert()
        .success();
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("http-results.json")).unwrap())
            .unwrap();
    assert_eq!(v["environment"]["agent"], addr.as_str());
    let m = v["measurements"].as_array().unwrap();
    assert_eq!(m.len(), 2, "{v}");
    for x in m {
        assert_eq!(x["load"], "http-load", "{x}");
        assert!(x["requests_per_s"].as_f64().unwrap() > 0.0, "{x}");
    }
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(md.contains("The load ran on `sendpath agent`"), "{md}");
    assert!(
        agent.log().contains("http-load, 10 connection(s)"),
        "{}",
        agent.log()
    );
}

#[test]
fn transfer_through_the_agent_is_acknowledged_by_it() {
    let addr = free_loopback_addr();
    let _agent = Agent::start(&[], &addr, &[]);
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("t.json");
    sendpath()
        .args([
            "transfer",
            "-l",
            "5M",
            "-s",
            "read-send,sendfile",
            "--chunk",
            "64K",
        ])
        .args(["--cache", "warm", "-n", "2", "--agent", &addr, "--json"])
        .arg(&json)
        .assert()
        .success();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["environment"]["agent"], addr.as_str());
    let rows = v["rows"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        for x in r["repeats"].as_array().unwrap() {
            assert_eq!(x["bytes_received"], 5u64 << 20, "{r}");
            assert!(x["cpu_receiver_ms"].as_f64().unwrap() > 0.0, "{r}");
        }
    }
    fails_with(
        &[
            "transfer",
            "-l",
            "5M",
            "--agent",
            &addr,
            "--sink-file",
            "/tmp/x",
        ],
        &["--sink-file writes on this host"],
    );
}

#[test]
fn the_agent_refuses_bad_clients_with_a_logged_reason_and_keeps_serving() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "correct horse battery\n").unwrap();
    let wrong = dir.path().join("wrong");
    std::fs::write(&wrong, "battery staple horse\n").unwrap();
    let addr = free_loopback_addr();
    let agent = Agent::start(&[], &addr, &["--token-file", token.to_str().unwrap()]);

    // A wrong token, a missing one: refused before anything runs.
    fails_with(
        &[
            "stream",
            "-l",
            "64K",
            "-t",
            "100ms",
            "--agent",
            &addr,
            "--token-file",
            wrong.to_str().unwrap(),
        ],
        &["the agent refused: wrong or missing token"],
    );
    fails_with(
        &["stream", "-l", "64K", "-t", "100ms", "--agent", &addr],
        &["the agent refused: wrong or missing token"],
    );
    // A malformed line, an oversized one, an unknown operation, work before hello.
    assert!(one_line(&addr, b"{\"v\":1,\"op\":\n").contains("malformed request"));
    let mut big = vec![b'x'; 10_000];
    big.push(b'\n');
    assert!(one_line(&addr, &big).contains("longer than 4096 bytes"));
    assert!(one_line(&addr, b"{\"v\":1,\"op\":\"exec\"}\n").contains("unknown operation"));
    assert!(one_line(
        &addr,
        b"{\"v\":1,\"op\":\"receive\",\"connections\":1,\"recv\":\"copy\",\"recv_size\":1,\"max_seconds\":1}\n"
    )
    .contains("say hello first"));
    let log = agent.log();
    for reason in [
        "wrong or missing token",
        "malformed request",
        "longer than 4096 bytes",
        "unknown operation",
        "no hello",
    ] {
        assert!(log.contains(reason), "the log lacks `{reason}`:\n{log}");
    }
    assert!(
        !log.contains("receiving"),
        "nothing may run for refused clients:\n{log}"
    );
    // Still serving.
    sendpath()
        .args([
            "stream", "-l", "64K", "-t", "200ms", "--warmup", "0", "--agent", &addr,
        ])
        .arg("--token-file")
        .arg(&token)
        .assert()
        .success();
    assert!(agent.log().contains("receiving 1 connection(s)"));
}

#[test]
fn sessions_beyond_the_limit_are_refused_as_busy() {
    let addr = free_loopback_addr();
    let agent = Agent::start(&[], &addr, &["--max-sessions", "1"]);
    let mut held = TcpStream::connect(&addr).unwrap();
    held.write_all(b"{\"v\":1,\"op\":\"hello\"}\n").unwrap();
    let mut r = BufReader::new(held.try_clone().unwrap());
    let mut hello = String::new();
    r.read_line(&mut hello).unwrap();
    assert!(hello.contains("\"ok\":true"), "{hello}");
    fails_with(
        &["stream", "-l", "64K", "-t", "100ms", "--agent", &addr],
        &["busy"],
    );
    assert!(agent.log().contains("busy"), "{}", agent.log());
    drop((held, r));
    agent.wait_for("ended");
    sendpath()
        .args([
            "stream", "-l", "64K", "-t", "100ms", "--warmup", "0", "--agent", &addr,
        ])
        .assert()
        .success();
}

#[test]
fn a_reachable_agent_needs_a_token() {
    fails_with(
        &["agent", "--listen", "0.0.0.0:0", "-t", "1s"],
        &["--token-file"],
    );
    fails_with(&["stream", "--agent", "no such host!"], &["HOST[:PORT]"]);
    fails_with(
        &["stream", "--agent", "127.0.0.1:1", "-t", "100ms"],
        &["cannot connect (is `sendpath agent` running there?)"],
    );
}

/// The agent in a namespace this test creates, and `sweep --preset quick --agent` against it
/// across the veth pair.
#[test]
fn sweep_against_an_agent_in_a_namespace() {
    if sendpath_host::thread::euid() != 0 {
        common::skip("needs root to create a network namespace");
        return;
    }
    if Command::new("ip").arg("-V").output().is_err() {
        common::skip("no `ip` (apt-get install iproute2)");
        return;
    }
    let pid = std::process::id();
    let ns = format!("sendpath-agent-test-{pid}");
    let (h, p) = (format!("spa{pid}h"), format!("spa{pid}n"));
    let ip = |args: &[&str]| {
        let st = Command::new("ip").args(args).status().unwrap();
        assert!(st.success(), "ip {}", args.join(" "));
    };
    struct Cleanup(String);
    impl Drop for Cleanup {
        fn drop(&mut self) {
            let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
        }
    }
    ip(&["netns", "add", &ns]);
    let _cleanup = Cleanup(ns.clone());
    let o = (pid % 250) as u8;
    let (ha, pa) = (format!("10.212.{o}.1"), format!("10.212.{o}.2"));
    ip(&[
        "link", "add", &h, "type", "veth", "peer", "name", &p, "netns", &ns,
    ]);
    ip(&["addr", "add", &format!("{ha}/30"), "dev", &h]);
    ip(&["-n", &ns, "addr", "add", &format!("{pa}/30"), "dev", &p]);
    ip(&["link", "set", &h, "up"]);
    ip(&["-n", &ns, "link", "set", &p, "up"]);
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "namespace secret\n").unwrap();
    let listen = format!("{pa}:5300");
    let agent = Agent::start(
        &["ip", "netns", "exec", &ns],
        &listen,
        &["--token-file", token.to_str().unwrap()],
    );
    let res = dir.path().join("quick");
    sendpath()
        .args([
            "sweep", "--preset", "quick", "-n", "1", "-t", "100ms", "--warmup", "0",
        ])
        .args(["--agent", &pa, "--token-file"])
        .arg(&token)
        .arg("--out")
        .arg(&res)
        .assert()
        .success();
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(res.join("results.json")).unwrap()).unwrap();
    assert_eq!(v["environment"]["agent"], listen.as_str());
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 32);
    for r in rows {
        // The agent's CPU is in every window (per byte only where the window moved bytes:
        // a fresh connection sending 256 B zero-copy can stall for its first 100 ms or so).
        assert!(r["repeats"][0]["cpu"]["remote"].is_object(), "{r}");
        assert_eq!(
            r["integrity"]["bytes_received"],
            r["integrity"]["bytes_sent"]
        );
    }
    assert!(agent.log().contains("received"), "{}", agent.log());
}

/// A hello and one request on a fresh control connection: the replies to both.
fn hello_then(addr: &str, request: &str) -> (String, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    s.write_all(b"{\"v\":1,\"op\":\"hello\"}\n").unwrap();
    let mut r = BufReader::new(s.try_clone().unwrap());
    let (mut hello, mut reply) = (String::new(), String::new());
    r.read_line(&mut hello).unwrap();
    s.write_all(request.as_bytes()).unwrap();
    r.read_line(&mut reply).unwrap();
    (hello, reply)
}

#[test]
fn silent_connections_hold_no_session_slot_and_are_dropped_at_the_hello_deadline() {
    let addr = free_loopback_addr();
    let agent = Agent::start(
        &[],
        &addr,
        &["--max-sessions", "4", "--hello-timeout", "1s"],
    );
    // Four connections that never say anything: before, each took a session slot until the
    // idle timeout (10.5 min), and a real client was refused as busy.
    let silent: Vec<TcpStream> = (0..4).map(|_| TcpStream::connect(&addr).unwrap()).collect();
    let t0 = Instant::now();
    sendpath()
        .args([
            "stream", "-l", "64K", "-t", "100ms", "--warmup", "0", "--agent", &addr,
        ])
        .assert()
        .success();
    assert!(t0.elapsed() < Duration::from_secs(10), "{:?}", t0.elapsed());
    // Each silent connection is told why it is dropped, at the hello deadline.
    for s in silent {
        s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).unwrap();
        assert!(line.contains("no complete line within 1s"), "{line}");
    }
    agent.wait_for("no complete line within 1s");
}

#[test]
fn no_request_outlasts_its_session_and_low_rates_are_refused() {
    let addr = free_loopback_addr();
    let _agent = Agent::start(&[], &addr, &["--max-session", "3s"]);
    let rr = |rate: &str, duration_ms: u32| {
        format!(
            "{{\"v\":1,\"op\":\"rr-client\",\"connections\":1,\"port\":1,\"request\":64,\"response\":64,\"recv\":\"copy\",{rate}\"warmup_ms\":0,\"duration_ms\":{duration_ms}}}\n"
        )
    };
    let (hello, reply) = hello_then(&addr, &rr("", 10_000));
    assert!(hello.contains("\"ok\":true"), "{hello}");
    assert!(reply.contains("less than this window"), "{reply}");
    let (_, reply) = hello_then(&addr, &rr("\"rate\":1e-6,", 100));
    assert!(reply.contains("rate must be 1 to 1e8"), "{reply}");
}

#[test]
fn a_short_token_is_refused_with_how_to_make_one() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "x\n").unwrap();
    let t = token.to_str().unwrap();
    fails_with(
        &["agent", "--token-file", t, "-t", "1s"],
        &[
            "--token-file",
            "at least 16 bytes",
            "head -c 32 /dev/urandom",
        ],
    );
    fails_with(
        &["stream", "--agent", "127.0.0.1:1", "--token-file", t],
        &["at least 16 bytes"],
    );
}

/// An "agent" that accepts the control connection and never answers cannot hold a run: the
/// client gives up after its answer deadline and says so.
#[test]
fn an_agent_that_never_answers_is_given_up_on() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    let held = std::thread::spawn(move || {
        let c = l.accept();
        std::thread::sleep(std::time::Duration::from_secs(20));
        drop(c);
    });
    let t0 = std::time::Instant::now();
    let a = sendpath()
        .args(["stream", "--agent", &addr, "-t", "1s", "-n", "1"])
        .timeout(std::time::Duration::from_secs(40))
        .assert()
        .failure();
    let e = common::stderr_of(&a);
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(15),
        "{:?}",
        t0.elapsed()
    );
    assert!(e.contains("did not answer `hello` within 10s"), "{e}");
    drop(held);
}

/// Connections that trickle their hello a byte at a time, from `n` threads until `stop`,
/// reconnecting when ended; each thread returns the longest any of its connections lasted.
fn trickle(
    addr: &str,
    n: usize,
    stop: &std::sync::Arc<std::sync::atomic::AtomicBool>,
) -> Vec<std::thread::JoinHandle<Duration>> {
    use std::sync::atomic::Ordering::Relaxed;
    (0..n)
        .map(|_| {
            let (addr, stop) = (addr.to_string(), stop.clone());
            std::thread::spawn(move || {
                let mut longest = Duration::ZERO;
                while !stop.load(Relaxed) {
                    let Ok(mut s) = TcpStream::connect(&addr) else {
                        continue;
                    };
                    let t0 = Instant::now();
                    for b in b"{\"v\":1,\"op\":\"hello\"}".iter().cycle() {
                        if stop.load(Relaxed) || s.write_all(&[*b]).is_err() {
                            break;
                        }
                        std::thread::sleep(Duration::from_millis(300));
                    }
                    longest = longest.max(t0.elapsed());
                }
                longest
            })
        })
        .collect()
}

/// A hello trickled a byte every 300 ms is ended by the one deadline for the whole hello,
/// told why (before, the deadline applied to each read, and such a connection stayed open for
/// good); and 64 such connections keep no client out (before, 16 filled the slots for
/// connections yet to say hello, and the client was told "busy: too many sessions").
#[test]
fn trickling_hellos_end_at_the_deadline_and_lock_no_one_out() {
    let addr = free_loopback_addr();
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "correct horse battery\n").unwrap();
    let t = token.to_str().unwrap();
    let agent = Agent::start(&[], &addr, &["--hello-timeout", "2s", "--token-file", t]);
    let mut s = TcpStream::connect(&addr).unwrap();
    let t0 = Instant::now();
    let mut said = String::new();
    for b in b"{\"v\":1,\"op\":\"hello\"}".iter().cycle() {
        if s.write_all(&[*b]).is_err() || t0.elapsed() > Duration::from_secs(8) {
            break;
        }
        std::thread::sleep(Duration::from_millis(300));
        s.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 512];
        if let Ok(n) = std::io::Read::read(&mut s, &mut buf) {
            said.push_str(&String::from_utf8_lossy(&buf[..n]));
            if n == 0 || said.contains('\n') {
                break;
            }
        }
        s.set_nonblocking(false).unwrap();
    }
    assert!(
        said.contains("no complete line within 2s"),
        "{said:?} after {:?}",
        t0.elapsed()
    );
    assert!(t0.elapsed() < Duration::from_secs(4), "{:?}", t0.elapsed());
    agent.wait_for("no complete line within 2s");

    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let threads = trickle(&addr, 64, &stop);
    std::thread::sleep(Duration::from_millis(1000));
    for _ in 0..3 {
        let t0 = Instant::now();
        let hello = "{\"v\":1,\"op\":\"hello\",\"token\":\"correct horse battery\"}\n";
        let reply = one_line(&addr, hello.as_bytes());
        assert!(reply.contains("\"ok\":true"), "{reply}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{:?}", t0.elapsed());
        std::thread::sleep(Duration::from_millis(700));
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for t in threads {
        let longest = t.join().unwrap();
        assert!(
            longest < Duration::from_secs(4),
            "a trickling hello held {longest:?}"
        );
    }
}
