//! Helpers shared by the CLI tests.
#![allow(dead_code)]

use assert_cmd::Command;

/// The `sendpath` binary under test. The host profile is one no test writes (so `adaptive`
/// runs on the documented defaults, whatever the machine's own profile says), unless the test
/// sets `SENDPATH_PROFILE` itself.
pub(crate) fn sendpath() -> Command {
    let mut c = Command::cargo_bin("sendpath").unwrap();
    c.env(
        "SENDPATH_PROFILE",
        "/nonexistent/sendpath-test-profile.json",
    );
    c
}

/// What the command wrote to stderr.
pub(crate) fn stderr_of(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stderr).into_owned()
}

/// The JSON document a run wrote to stdout with `--json -` (from its first line that opens
/// one: the table may come before it).
pub(crate) fn stdout_json(a: &assert_cmd::assert::Assert) -> serde_json::Value {
    let text = String::from_utf8_lossy(&a.get_output().stdout).into_owned();
    let start = text.find("{\n").expect("a JSON document on stdout");
    serde_json::from_str(&text[start..]).expect("valid JSON")
}

/// Runs `sendpath ARGS`, expects a non-zero exit, and checks that stderr contains every needle.
pub(crate) fn fails_with(args: &[&str], needles: &[&str]) {
    let a = sendpath().args(args).assert().failure();
    let e = stderr_of(&a);
    for n in needles {
        assert!(
            e.contains(n),
            "`sendpath {}`: stderr lacks `{n}`:\n{e}",
            args.join(" ")
        );
    }
}

/// Skips a test that cannot run here: prints `skipped: REASON`, or fails when
/// `SENDPATH_REQUIRE=all` (which `.ci/run` sets), so a skip never passes silently in CI.
pub(crate) fn skip(reason: &str) {
    if std::env::var("SENDPATH_REQUIRE").as_deref() == Ok("all") {
        panic!("cannot run here and SENDPATH_REQUIRE=all forbids skipping: {reason}");
    }
    println!("skipped: {reason}");
}

/// A loopback address with a port that was free a moment ago, for a `sendpath sink` to listen on.
/// The port is below the kernel's ephemeral range (`ip_local_port_range`), so the thousands of
/// connections other tests open at the same time cannot take it before the sink binds it.
pub(crate) fn free_loopback_addr() -> String {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    let low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .filter(|&low| low > 12_000)
        .unwrap_or(32_768);
    let span = low - 10_000;
    let start = std::process::id() * 7919;
    for _ in 0..span {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = 10_000 + (start.wrapping_add(n.wrapping_mul(104_729))) % span;
        if std::net::TcpListener::bind(("127.0.0.1", port as u16)).is_ok() {
            return format!("127.0.0.1:{port}");
        }
    }
    panic!("no free loopback port below {low}");
}

/// The round numbers of a results row's repeats, in file order.
pub(crate) fn rounds_of(row: &serde_json::Value) -> Vec<u64> {
    row["repeats"]
        .as_array()
        .unwrap()
        .iter()
        .map(|x| x["round"].as_u64().unwrap())
        .collect()
}

/// The TCP congestion control new connections get here (`net.ipv4.tcp_congestion_control`).
pub(crate) fn default_congestion() -> String {
    std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control")
        .expect("Linux names its TCP congestion control")
        .trim()
        .to_owned()
}

/// Bytes written on `s` that its peer (a socket on this host, over IPv4) has not yet read:
/// those not yet acknowledged (the transmit queue of `s`) and those received and not read (the
/// receive queue at the other end), from `/proc/net/tcp`. `None` when either socket is not
/// listed.
pub(crate) fn unread_by_peer(s: &std::net::TcpStream) -> Option<u64> {
    let hex = |a: std::net::SocketAddr| match a {
        std::net::SocketAddr::V4(v4) => Some(format!(
            "{:08X}:{:04X}",
            u32::from_le_bytes(v4.ip().octets()),
            v4.port()
        )),
        std::net::SocketAddr::V6(_) => None,
    };
    let (theirs, ours) = (hex(s.peer_addr().ok()?)?, hex(s.local_addr().ok()?)?);
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    // `tx_queue:rx_queue` of the socket at `local` connected to `remote`, in hex.
    let queue = |local: &str, remote: &str, which: usize| {
        table.lines().skip(1).find_map(|l| {
            let f: Vec<&str> = l.split_whitespace().collect();
            let q = (f.get(1) == Some(&local) && f.get(2) == Some(&remote)).then(|| f.get(4))??;
            u64::from_str_radix(q.split(':').nth(which)?, 16).ok()
        })
    };
    Some(queue(&ours, &theirs, 0)? + queue(&theirs, &ours, 1)?)
}
