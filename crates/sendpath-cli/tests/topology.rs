//! `stream --topology netns` (with `--rate` and `--mtu`), run as a user would.

mod common;

use common::{fails_with, sendpath};
use serde_json::Value;
use std::process::Command;

/// Whether this test can create namespaces (root and iproute2), else why not.
fn can_create_netns() -> Result<(), String> {
    if sendpath::host::euid() != 0 {
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
        &["--connect"],
    );
}
