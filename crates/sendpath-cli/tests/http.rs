//! `serve`, `http-load` and the `http-server` preset, run as a user would.

mod common;

use common::{fails_with, free_loopback_addr, sendpath, skip};
use serde_json::Value;
use std::time::Duration;

#[test]
fn bad_http_flags_fail_clearly() {
    fails_with(&["serve", "--send", "zc"], &["--send", "uring-zc"]);
    fails_with(&["serve", "--body", "2G"], &["--body", "between"]);
    fails_with(&["serve", "--workers", "0"], &["--workers"]);
    fails_with(
        &["serve", "--min-wait", "20ms"],
        &["--min-wait", "at most 10ms"],
    );
    fails_with(&["serve", "--wait-nr", "0"], &["--wait-nr"]);
    fails_with(
        &["serve", "--file", "/nonexistent/body", "--send", "epoll"],
        &["--file", "/nonexistent/body"],
    );
    fails_with(
        &["serve", "--file", "/tmp", "--send", "epoll"],
        &["not a regular file"],
    );
    fails_with(
        &["serve", "--file", "Cargo.toml", "--body", "4K"],
        &["--body", "--file"],
    );
    fails_with(
        &["http-load", "127.0.0.1:1", "--rate", "0"],
        &["--rate", "above 0"],
    );
    fails_with(&["http-load", "not-an-address"], &["ADDR"]);
    // Nothing listens there: a clear run-time error, exit 1.
    let a = sendpath()
        .args(["http-load", "127.0.0.1:1", "-d", "1s"])
        .assert()
        .failure()
        .code(1);
    let e = common::stderr_of(&a);
    assert!(e.contains("is a server listening there?"), "{e}");
    fails_with(
        &[
            "sweep",
            "--preset",
            "http-server",
            "--http-servers",
            "apache",
        ],
        &["--http-servers", "nginx"],
    );
    fails_with(
        &["sweep", "--preset", "http-server", "--http-min-wait", "1s"],
        &["--http-min-wait", "at most 10ms"],
    );
    fails_with(
        &[
            "sweep",
            "--preset",
            "http-server",
            "--http-serve-workers",
            "0",
        ],
        &["--http-serve-workers"],
    );
}

/// `serve` under `http-load`, stopped with SIGTERM: it exits 0 and writes its report.
#[test]
fn serve_reports_on_sigterm() {
    let addr = free_loopback_addr();
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("serve.json");
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("sendpath"))
        .args([
            "serve", "--listen", &addr, "--send", "uring", "-t", "60s", "--json",
        ])
        .arg(&json)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(&addr).is_err() {
        assert!(std::time::Instant::now() < deadline, "serve did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    let out = sendpath()
        .args([
            "http-load",
            &addr,
            "-c",
            "20",
            "-d",
            "1s",
            "--warmup",
            "0.2s",
        ])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        text.contains("requests/s") && text.contains("errors: none"),
        "{text}"
    );
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::TERM).unwrap();
    let status = child.wait().unwrap();
    // Stopped by a signal, as every command: 130, after its report.
    assert_eq!(status.code(), Some(130), "{status}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert!(v["requests"].as_u64().unwrap() > 100, "{v}");
    assert!(v["cpu_us_per_request"].as_f64().unwrap() > 0.0);
    assert_eq!(v["send"], "uring");
    assert_eq!(v["send_stats"]["attempts"], 0);
}

/// The preset end to end, small: sendpath's SEND and SEND_ZC and nginx, two bodies, wrk and
/// an open-loop point; the summary has the study's tables and every window its server CPU.
#[test]
fn the_http_server_preset_compares_with_nginx_and_wrk() {
    for tool in ["nginx", "wrk"] {
        if std::process::Command::new(tool).arg("-v").output().is_err() {
            skip(&format!(
                "{tool} is not installed (apt-get install nginx-light wrk)"
            ));
            return;
        }
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("study");
    sendpath()
        .args([
            "sweep",
            "--preset",
            "http-server",
            "--http-servers",
            "uring,uring-zc,nginx",
        ])
        .args([
            "--http-connections",
            "20",
            "--http-bodies",
            "88,64K",
            "-n",
            "1",
        ])
        .args([
            "-t",
            "1s",
            "--warmup",
            "0.2s",
            "--http-open-loop",
            "0.5",
            "--http-serve-workers",
            "1",
            "--out",
        ])
        .arg(&out)
        .timeout(Duration::from_secs(300))
        .assert()
        .success();
    let md = std::fs::read_to_string(out.join("summary.md")).unwrap();
    for want in [
        "## Body 88 B",
        "## Body 65536 B",
        "Against nginx",
        "SEND against SEND_ZC",
        "Open loop",
        "http-load / wrk",
    ] {
        assert!(md.contains(want), "missing {want:?} in\n{md}");
    }
    let v: Value =
        serde_json::from_str(&std::fs::read_to_string(out.join("http-results.json")).unwrap())
            .unwrap();
    let ms = v["measurements"].as_array().unwrap();
    assert!(ms.len() >= 12, "{}", ms.len());
    for m in ms {
        assert!(m["requests_per_s"].as_f64().unwrap() > 0.0, "{m}");
        assert!(m["server_cpu_us_per_request"].as_f64().is_some(), "{m}");
        if m["serve"].is_object() {
            assert_eq!(m["serve"]["workers"], 1, "{m}");
        }
        if m["server"] == "sendpath-uring-zc" {
            assert!(
                m["serve"]["send_stats"]["attempts"].as_u64().unwrap() > 0,
                "{m}"
            );
        }
    }
    assert!(v["nginx_config"]
        .as_str()
        .unwrap()
        .contains("reuseport backlog=4096"));
    assert!(!v["wrk_check_ratios"].as_array().unwrap().is_empty());
}
