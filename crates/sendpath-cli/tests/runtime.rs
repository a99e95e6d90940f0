//! `stream --runtime`: the senders as tokio tasks through sendpath's async sender, and tokio's
//! own writes as the baseline, every byte verified over TCP and UDP, each row recording what
//! ran it; what the tokio runtimes do not run is refused naming the flag.

mod common;

use common::{fails_with, sendpath};
use serde_json::Value;
use std::time::Duration;

/// Runs `stream` with `args` (plus a short window and a JSON file); the rows.
fn rows(args: &[&str]) -> Vec<Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    sendpath()
        .arg("stream")
        .args(args)
        .args([
            "-t", "0.3", "--warmup", "0.05", "-n", "1", "--recv", "verify",
        ])
        .arg("--json")
        .arg(&json)
        .timeout(Duration::from_secs(120))
        .assert()
        .success();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    v["results"].as_array().unwrap().clone()
}

/// Each row verified what it sent (every byte over TCP; UDP may drop a datagram, never
/// corrupt one); its (strategy, runtime) pairs.
fn verified(rows: &[Value]) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for r in rows {
        let name = format!("{} {}", r["strategy"], r["runtime"]);
        assert_eq!(r["integrity"]["mismatches"], 0, "{name}");
        let sent = r["integrity"]["bytes_sent"].as_u64().unwrap();
        let checked = r["integrity"]["bytes_verified"].as_u64().unwrap();
        let whole = r["protocol"] == "tcp";
        assert!(
            checked > 0 && (checked == sent || !whole),
            "{name}: {checked} of {sent}"
        );
        let s = |k: &str| r[k].as_str().unwrap().to_string();
        out.push((s("strategy"), s("runtime")));
    }
    out
}

#[test]
fn tokio_senders_and_tokio_writes_verify_every_byte_and_rows_say_which_ran() {
    let r = rows(&[
        "--runtime",
        "thread,tokio,tokio-write",
        "-s",
        "copy,msg-zerocopy,uring-zc,adaptive",
        "-l",
        "64K",
    ]);
    let got = verified(&r);
    for want in [
        ("copy", "thread"),
        ("adaptive", "thread"),
        ("copy", "tokio"),
        ("msg-zerocopy", "tokio"),
        ("uring-zc", "tokio"),
        ("adaptive", "tokio"),
        ("copy", "tokio-write"),
    ] {
        let want = (want.0.to_string(), want.1.to_string());
        assert!(got.contains(&want), "{want:?} in {got:?}");
    }
    assert_eq!(got.len(), 9, "tokio-write once per size: {got:?}");
}

#[test]
fn tokio_senders_send_datagrams_and_files_too() {
    let r = rows(&[
        "--runtime",
        "tokio,tokio-write",
        "--proto",
        "udp",
        "-s",
        "copy,msg-zerocopy,uring-zc",
        "-l",
        "1400",
    ]);
    assert_eq!(verified(&r).len(), 4);
    for row in &r {
        let d = &row["repeats"][0]["datagrams"];
        assert!(d["sent"].as_u64().unwrap() > 0, "{row}");
    }
    let r = rows(&["--runtime", "tokio", "-s", "sendfile", "-l", "64K"]);
    assert_eq!(
        verified(&r),
        [("sendfile".to_string(), "tokio".to_string())]
    );
}

#[test]
fn what_the_tokio_runtimes_do_not_run_is_refused() {
    fails_with(
        &["stream", "--runtime", "tokio", "-s", "vmsplice"],
        &["--runtime tokio", "drop vmsplice"],
    );
    fails_with(
        &[
            "stream",
            "--runtime",
            "tokio",
            "--connections",
            "2",
            "-s",
            "uring",
        ],
        &["--connections", "runs on the thread sender"],
    );
    fails_with(
        &["stream", "--runtime", "tokio-write", "--fields", "4"],
        &["--fields"],
    );
    fails_with(
        &["stream", "--runtime", "fibers"],
        &["`fibers` is not a runtime"],
    );
}
