//! `stream --topology netns` (with `--rate` and `--mtu`), run as a user would.

mod common;

use common::{fails_with, sendpath};
use serde_json::Value;
use std::process::Command;

/// Whether this test can create namespaces (root and iproute2), else why not.
fn can_create_netns() -> Result<(), String> {
    if sendpath_host::thread::euid() != 0 {
        return Err("needs root to create a network namespace".into());
    }
    match Command::new("ip").arg("-V").output() {
        Ok(o) if o.status.success() => {}
        _ => return Err("no `ip` (apt-get install iproute2)".into()),
    }
    match Command::new("tc").arg("-V").output() {
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("no `tc` (apt-get install iproute2)".into()),
    }
}

fn namespaces() -> String {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout).into_owned()
}

#[test]
fn stream_crosses_a_rate_limited_veth_into_a_namespace_and_cleans_up() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    // A namespace a killed run left behind (its process id is not a live process).
    let stale = "sendpath-t-999999999-0";
    let made = Command::new("ip")
        .args(["netns", "add", stale])
        .status()
        .unwrap();
    assert!(made.success());
    let out = sendpath()
        .args([
            "stream",
            "-s",
            "copy,msg-zerocopy",
            "-l",
            "64K",
            "-t",
            "500ms",
            "-n",
            "2",
        ])
        .args([
            "--warmup",
            "100ms",
            "--recv",
            "verify",
            "--topology",
            "netns",
        ])
        .args(["--rate", "1gbit", "--mtu", "9000", "--json", "-"])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let t = &v["environment"]["topology"];
    assert_eq!(t["kind"], "netns", "{v}");
    assert_eq!(t["rate_bits_per_s"], 1_000_000_000u64);
    assert_eq!(t["burst_bytes"], 625_000u64, "5 ms of bytes at 1 Gbit/s");
    assert_eq!(t["mtu"], 9000);
    let ns = t["namespace"].as_str().unwrap();
    assert!(ns.starts_with("sendpath-t-"), "{t}");
    for r in v["results"].as_array().unwrap() {
        let i = &r["integrity"];
        assert!(i["bytes_verified"].as_u64().unwrap() > 0, "{r}");
        assert_eq!(i["mismatches"], 0);
        assert_eq!(i["bytes_received"], i["bytes_sent"]);
    }
    let left = namespaces();
    assert!(
        !left.contains(ns),
        "the run's namespace is still there: {left}"
    );
    assert!(
        !left.contains(stale),
        "the stale namespace was not removed: {left}"
    );
}

#[test]
fn sweep_and_transfer_receive_in_a_namespace() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let res = dir.path().join("quick");
    sendpath()
        .args([
            "sweep", "--preset", "quick", "-n", "1", "-t", "100ms", "--warmup", "0",
        ])
        .args(["--topology", "netns", "--out"])
        .arg(&res)
        .assert()
        .success();
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(res.join("results.json")).unwrap()).unwrap();
    assert_eq!(v["environment"]["topology"]["kind"], "netns");
    assert_eq!(v["results"].as_array().unwrap().len(), 32);
    let md = std::fs::read_to_string(res.join("summary.md")).unwrap();
    assert!(
        md.contains("data: through a veth pair into network namespace"),
        "{md}"
    );

    let json = dir.path().join("t.json");
    sendpath()
        .args([
            "transfer", "-l", "5M", "-s", "sendfile", "--cache", "warm", "-n", "1",
        ])
        .args(["--topology", "netns", "--json"])
        .arg(&json)
        .assert()
        .success();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["environment"]["topology"]["kind"], "netns");
    assert_eq!(v["rows"][0]["repeats"][0]["bytes_received"], 5u64 << 20);
}

#[test]
fn topology_flags_are_checked() {
    fails_with(
        &["stream", "--rate", "1gbit", "-t", "100ms"],
        &["--rate and --mtu shape the veth pair of --topology netns"],
    );
    fails_with(
        &["stream", "--topology", "netns", "--rate", "1g"],
        &["give a rate like 10gbit"],
    );
    fails_with(
        &["stream", "--topology", "netns", "--mtu", "100"],
        &["--mtu"],
    );
    fails_with(
        &["stream", "--topology", "netns", "--connect", "127.0.0.1:9"],
        &["cannot go with --connect or --agent"],
    );
    fails_with(
        &["sweep", "--preset", "http-server", "--topology", "netns"],
        &["--topology applies to the other presets"],
    );
}

/// A sender waiting for room on a slow socket waits in the kernel: through a 100 Mbit/s
/// veth, the io_uring paths' sender threads stay far from a busy CPU (a sender that polled
/// instead spent about 8 ns of CPU per byte at 1 Gbit/s, a whole CPU; waiting, about 0.2).
#[test]
fn a_sender_held_back_by_a_slow_link_sleeps() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    let out = sendpath()
        .args([
            "stream",
            "-s",
            "uring,uring-zc",
            "-l",
            "64K",
            "-t",
            "1s",
            "-n",
            "1",
        ])
        .args([
            "--warmup",
            "200ms",
            "--topology",
            "netns",
            "--rate",
            "100mbit",
        ])
        .args(["--json", "-"])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    for r in v["results"].as_array().unwrap() {
        let gbps = r["throughput_gbps"]["median"].as_f64().unwrap();
        assert!(gbps < 0.11, "the rate limit did not hold: {r}");
        let cpu = r["cpu_ns_per_byte"]["sender"].as_f64().unwrap();
        // A busy sender at 0.1 Gbit/s would spend 80 ns per byte.
        assert!(
            cpu < 8.0,
            "{}: {cpu} ns of sender CPU per byte",
            r["strategy"]
        );
    }
}

/// Load goes only where the user aimed: an address off this host is refused unless
/// `--allow-remote` is given. Run inside an empty namespace this test creates (nothing but a
/// loopback device that is down), so that no packet could leave even if the check failed.
#[test]
fn load_to_an_address_off_this_host_is_refused_without_allow_remote() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    let ns = format!("sendpath-empty-{}", std::process::id());
    assert!(Command::new("ip")
        .args(["netns", "add", &ns])
        .status()
        .unwrap()
        .success());
    let exe = assert_cmd::cargo::cargo_bin("sendpath");
    let run = |args: &[&str]| {
        Command::new("ip")
            .args(["netns", "exec", &ns])
            .arg(&exe)
            .args(args)
            .output()
            .unwrap()
    };
    // 192.0.2.1 is TEST-NET-1 (documentation only), and the namespace has no route anyway.
    let load = run(&["http-load", "192.0.2.1:80", "-c", "2", "-d", "1s"]);
    let stream = run(&[
        "stream",
        "--connect",
        "192.0.2.1:5201",
        "-t",
        "200ms",
        "-n",
        "1",
    ]);
    let allowed = run(&[
        "stream",
        "--connect",
        "192.0.2.1:5201",
        "--allow-remote",
        "-t",
        "200ms",
        "-n",
        "1",
    ]);
    let _ = Command::new("ip").args(["netns", "del", &ns]).status();
    for (what, out) in [("http-load", &load), ("stream --connect", &stream)] {
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{what} ran: {e}");
        assert!(
            e.contains("is not on this host") && e.contains("--allow-remote"),
            "{what}: {e}"
        );
    }
    // With --allow-remote the check lets it try; in the empty namespace it cannot connect.
    let e = String::from_utf8_lossy(&allowed.stderr);
    assert!(
        !allowed.status.success() && !e.contains("is not on this host"),
        "{e}"
    );
    assert!(e.contains("cannot connect"), "{e}");
}

/// A link far slower than one message per window: the run stops by itself, says why, and
/// removes its namespace (before, it had to be killed and left the namespace behind).
#[test]
fn a_link_too_slow_for_the_window_ends_the_repeat_cut_short_with_the_reason() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    let t0 = std::time::Instant::now();
    let child = Command::new(assert_cmd::cargo::cargo_bin("sendpath"))
        .args([
            "stream",
            "--topology",
            "netns",
            "--rate",
            "8kbit",
            "-l",
            "64K",
        ])
        .args(["-t", "1s", "-n", "1", "--warmup", "0"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Its namespace is named after its process id (other tests run their own meanwhile).
    let ours = format!("sendpath-t-{}-", child.id());
    let out = child.wait_with_output().unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    // The window, then the stall limit or the senders' grace (whichever ends the stalled
    // send first) and the receivers' grace: well under 30 s.
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        t0.elapsed()
    );
    // The window was measured: it is recorded as cut short, with the reason, and the run
    // ends normally.
    let o = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{o}\n{e}");
    let all = format!("{o}{e}");
    // Told as what TCP saw: a receiver whose window stayed open behind a slow link (before:
    // "the receiver stopped taking bytes", as for a receiver that stopped reading).
    assert!(
        all.contains("cut short: no progress for ")
            && all.contains(": the link carries less than one message in the window (the senders had bytes to send and the receiver's TCP window was open)"),
        "{all}"
    );
    assert!(!namespaces().contains(&ours), "{}", namespaces());
}

/// UDP over a link far slower than the sender: the datagrams the link's queue dropped are told
/// as lost on the way, since the receiving socket dropped none (before: "the receiver did not
/// keep up", with 0 socket drops).
#[test]
fn datagrams_a_slow_link_drops_are_not_blamed_on_the_receiver() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    let out = Command::new("timeout")
        .args(["-s", "KILL", "60"])
        .arg(assert_cmd::cargo::cargo_bin("sendpath"))
        .args([
            "stream",
            "--proto",
            "udp",
            "-l",
            "1400",
            "--topology",
            "netns",
        ])
        .args(["--rate", "8kbit", "-t", "1s", "-n", "1", "--warmup", "0"])
        .output()
        .unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success(), "{all}");
    assert!(
        all.contains(
            "datagrams were lost (none dropped by the receiving socket: they were lost on the way"
        ),
        "{all}"
    );
    assert!(!all.contains("keep up"), "{all}");
}

/// With more connections than the open-files limit leaves room to duplicate (so the run has
/// no duplicates of them), a link too slow to drain still cannot hold the run: the receivers'
/// sockets are shared with the run, which ends their reads.
#[test]
fn a_slow_link_with_no_room_for_duplicates_ends_the_repeat_cut_short() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    if Command::new("prlimit").arg("--version").output().is_err() {
        common::skip("no prlimit (util-linux)");
        return;
    }
    let t0 = std::time::Instant::now();
    // 200 connections need about 464 descriptors (both ends, the ring, a margin), and
    // duplicates of the senders' ends 664: 600 allows the run and no duplicates.
    let out = Command::new("timeout")
        .args(["-s", "KILL", "60", "prlimit", "--nofile=600:600"])
        .arg(assert_cmd::cargo::cargo_bin("sendpath"))
        .args(["stream", "-s", "uring", "--connections", "200", "-l", "16K"])
        .args([
            "--topology",
            "netns",
            "--rate",
            "1mbit",
            "-t",
            "1s",
            "-n",
            "1",
        ])
        .args(["--warmup", "0", "--json", "-"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{e}");
    assert!(
        t0.elapsed() < std::time::Duration::from_secs(30),
        "{:?}",
        t0.elapsed()
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    let rep = &v["results"][0]["repeats"][0];
    assert!(
        rep["tcp"].is_null(),
        "no duplicates, so no TCP counters: {rep}"
    );
    let why = rep["cut_short"]
        .as_str()
        .unwrap_or_else(|| panic!("not cut short: {rep}"));
    assert!(why.contains("still reading"), "{why}");
}

/// Two runs at once whose process ids point at the same /30 (forced here with
/// SENDPATH_TOPOLOGY_SUBNET): each gets a subnet of its own and both verify every byte
/// (before, the second took the first's addresses and connected into its namespace).
#[test]
fn concurrent_runs_whose_subnets_collide_both_succeed() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    let run = || {
        let mut c = Command::new(assert_cmd::cargo::cargo_bin("sendpath"));
        c.args([
            "stream", "-l", "64K", "-t", "1500ms", "--warmup", "0", "--recv", "verify",
        ])
        .args(["--topology", "netns", "--json", "-"])
        .env("SENDPATH_TOPOLOGY_SUBNET", "4242")
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped());
        c.spawn().unwrap()
    };
    let first = run();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let second = run();
    let mut addrs = Vec::new();
    for child in [first, second] {
        let out = child.wait_with_output().unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{err}");
        let v: Value = serde_json::from_slice(&out.stdout).unwrap();
        let t = &v["environment"]["topology"];
        addrs.push(t["receiver_addr"].as_str().unwrap_or_default().to_string());
        let i = &v["results"][0]["integrity"];
        assert_eq!(i["mismatches"], 0, "{i}");
        assert!(i["bytes_verified"].as_u64() > Some(0), "{i}");
    }
    assert_ne!(addrs[0], addrs[1], "{addrs:?}");
}
