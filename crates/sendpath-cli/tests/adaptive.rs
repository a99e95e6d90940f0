//! `calibrate`, the host profile, `adaptive`, `--size-mix` and `--alloc`, run as a user would.

mod common;

use common::{fails_with, sendpath};
use serde_json::Value;

fn json_of(args: &[&str], envs: &[(&str, &str)]) -> Value {
    let mut c = sendpath();
    c.args(args);
    if args[0] == "probe" {
        c.arg("--json");
    } else {
        c.args(["--json", "-"]);
    }
    for (k, v) in envs {
        c.env(k, v);
    }
    let out = c.assert().success();
    serde_json::from_slice(&out.get_output().stdout).unwrap()
}

#[test]
fn calibrate_writes_a_profile_that_probe_shows_and_adaptive_uses() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("conf/profile.json");
    let p = profile.to_str().unwrap();
    let out = sendpath()
        .env("SENDPATH_PROFILE", p)
        .args(["calibrate", "-l", "4K,64K", "-n", "2", "-t", "100ms"])
        // Two rounds never make a clear majority: without this, a size won by anything but
        // copy would get the extra rounds.
        .args(["--warmup", "0", "--seed", "3", "--tiebreak-rounds", "0"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        text.contains("wrote ") && text.contains("tiers: 0 B.. "),
        "{text}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&profile).unwrap()).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["origin"], "calibrated");
    let m = v["measurements"].as_array().unwrap();
    assert_eq!(m.len(), 2, "{v}");
    for x in m {
        assert_eq!(x["rounds"], 2);
        let paths: Vec<&str> = x["paths"]
            .as_array()
            .unwrap()
            .iter()
            .map(|p| p["path"].as_str().unwrap())
            .collect();
        assert_eq!(paths, ["copy", "msg-zerocopy", "uring", "uring-zc"], "{x}");
        for p in x["paths"].as_array().unwrap() {
            assert!(p["gbps"].as_f64().unwrap() > 0.0, "{p}");
        }
    }
    assert_eq!(v["environment"]["route"], "loopback uring-zc-in-place");

    // probe shows it, in the table and the JSON.
    let out = sendpath()
        .env("SENDPATH_PROFILE", p)
        .arg("probe")
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(text.contains(&format!("host profile: {p}")), "{text}");
    let j = json_of(&["probe"], &[("SENDPATH_PROFILE", p)]);
    assert_eq!(j["active_profile"]["state"], "calibrated");
    assert_eq!(j["active_profile"]["profile"], v);

    // adaptive decides from it, and the results record it and every decision.
    let r = json_of(
        &[
            "stream", "-s", "adaptive", "-l", "64K", "-t", "200ms", "-n", "1",
        ],
        &[("SENDPATH_PROFILE", p)],
    );
    assert_eq!(r["environment"]["profile"], v);
    let d = &r["results"][0]["zerocopy"]["decisions"];
    let sends: u64 = [
        "copy_sends",
        "zerocopy_sends",
        "backoff_copies",
        "cap_copies",
    ]
    .iter()
    .map(|k| d[k].as_u64().unwrap())
    .sum();
    assert!(sends > 0, "{d}");

    // Without a file: the defaults, said so.
    let j = json_of(&["probe"], &[("SENDPATH_PROFILE", "/nonexistent/p.json")]);
    assert_eq!(j["active_profile"]["state"], "defaults");
    assert_eq!(j["active_profile"]["profile"]["origin"], "defaults");
}

#[test]
fn a_broken_profile_is_refused_with_what_to_do() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("p.json");
    std::fs::write(&bad, "{\"schema_version\": 1, \"tiers\": 3").unwrap();
    let b = bad.to_str().unwrap();
    fails_with(
        &["stream", "-s", "adaptive", "--profile", b, "-t", "0.1"],
        &["--profile", "invalid JSON"],
    );
    std::fs::write(&bad, "{\"schema_version\": 2}").unwrap();
    let out = sendpath()
        .env("SENDPATH_PROFILE", b)
        .args(["stream", "-s", "adaptive", "-t", "0.1"])
        .assert()
        .failure();
    let e = String::from_utf8_lossy(&out.get_output().stderr).into_owned();
    assert!(e.contains("re-run `sendpath calibrate`"), "{e}");
    // A run without adaptive does not read the profile at all.
    sendpath()
        .env("SENDPATH_PROFILE", b)
        .args(["stream", "-s", "copy", "-t", "0.1", "-n", "1"])
        .assert()
        .success();
}

#[test]
fn size_mixes_and_fresh_buffers_are_points_of_their_own() {
    let r = json_of(
        &[
            "stream",
            "-s",
            "copy,adaptive",
            "--size-mix",
            "88:70,4K:20,256K:10",
            "-t",
            "150ms",
            "-n",
            "1",
            "--recv",
            "verify",
            "--alloc",
            "pool,fresh",
        ],
        &[],
    );
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "2 paths x 2 allocations");
    for row in rows {
        assert_eq!(row["size_mix"], "88:70,4K:20,256K:10");
        let i = &row["integrity"];
        assert_eq!(i["mismatches"], 0);
        assert!(i["bytes_verified"].as_u64().unwrap() > 0);
        assert_eq!(i["bytes_verified"], i["bytes_sent"]);
    }
    let allocs: Vec<&str> = rows.iter().map(|x| x["alloc"].as_str().unwrap()).collect();
    assert_eq!(allocs.iter().filter(|a| **a == "fresh").count(), 2);

    let r = json_of(
        &[
            "rr",
            "-s",
            "copy,adaptive",
            "--size-mix",
            "64:80,64K:20",
            "-t",
            "150ms",
            "-n",
            "1",
            "--recv",
            "verify",
        ],
        &[],
    );
    for row in r["results"].as_array().unwrap() {
        assert_eq!(row["size_mix"], "64:80,64K:20");
        assert!(row["integrity"]["bytes_verified"].as_u64().unwrap() > 0);
        assert_eq!(row["integrity"]["mismatches"], 0);
    }
}

#[test]
fn bad_mixes_allocations_and_calibrations_fail_clearly() {
    fails_with(
        &["stream", "--size-mix", "4K"],
        &["--size-mix", "SIZE:WEIGHT"],
    );
    fails_with(&["stream", "--size-mix", "4K:0"], &["--size-mix", "weight"]);
    fails_with(&["stream", "--size-mix", "4K:1", "-l", "4K"], &["--size"]);
    fails_with(
        &["stream", "--alloc", "heap"],
        &["--alloc", "pool, fresh or shared"],
    );
    fails_with(
        &[
            "stream",
            "-s",
            "uring",
            "--connections",
            "4",
            "--alloc",
            "fresh",
            "-t",
            "0.1",
        ],
        &["drop --connections"],
    );
    fails_with(&["calibrate", "-n", "0"], &["--repeat"]);
    fails_with(&["calibrate", "--sizes", "0"], &["--sizes"]);
}
