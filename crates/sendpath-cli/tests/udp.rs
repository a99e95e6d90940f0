//! `stream --proto udp` (with and without GSO), the black-hole route, the `udp-zerocopy`
//! preset and a calibration there, run as a user would, on the real kernel.

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
        Ok(o) if o.status.success() => Ok(()),
        _ => Err("no `ip` (apt-get install iproute2)".into()),
    }
}

fn namespace_exists(name: &str) -> bool {
    let out = Command::new("ip").args(["netns", "list"]).output().unwrap();
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .any(|l| l.split_whitespace().next() == Some(name))
}

/// `sendpath stream ARGS --json -`, which must succeed: its results.
fn stream_json(args: &[&str]) -> Value {
    let out = sendpath()
        .arg("stream")
        .args(args)
        .args(["--json", "-"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "sendpath stream {args:?} failed:\n{e}"
    );
    serde_json::from_slice(&out.stdout).unwrap_or_else(|err| panic!("{err}\n{e}"))
}

/// A UDP row's checks that hold on any route with our receiver: every datagram that arrived
/// verified, none out of order, sent = received + lost.
fn check_received(r: &Value) {
    let what = format!(
        "{} {} {}",
        r["strategy"], r["size_bytes"], r["gso_segment_bytes"]
    );
    assert_eq!(r["protocol"], "udp", "{what}");
    let i = &r["integrity"];
    let received = i["bytes_received"].as_u64().unwrap();
    assert!(received > 0, "{what}: nothing arrived");
    assert_eq!(i["bytes_verified"].as_u64(), Some(received), "{what}");
    assert_eq!(i["mismatches"], 0, "{what}");
    for rep in r["repeats"].as_array().unwrap() {
        let d = &rep["datagrams"];
        let (sent, got) = (d["sent"].as_u64().unwrap(), d["received"].as_u64().unwrap());
        assert_eq!(sent, got + d["lost"].as_u64().unwrap(), "{what}: {d}");
        assert_eq!(
            d["reordered"], 0,
            "{what}: one socket on loopback keeps order"
        );
        assert!(d["receiver_drops"].is_u64(), "{what}: {d}");
    }
}

#[test]
fn every_datagram_that_arrives_over_loopback_verifies_for_each_path() {
    let paths = "copy,serialize,gather,msg-zerocopy,uring,uring-zc,adaptive";
    let common = [
        "-t", "300ms", "--warmup", "50ms", "-n", "1", "--recv", "verify",
    ];
    let one = stream_json(
        &[
            &["--proto", "udp", "-s", paths, "-l", "1400,64000"][..],
            &common[..],
        ]
        .concat(),
    );
    // 64000 in segments of 1400: 45 full ones and a last one of 1000 bytes.
    let gso = stream_json(
        &[
            &[
                "--proto", "udp", "-s", paths, "-l", "64000", "--gso", "1400",
            ][..],
            &common[..],
        ]
        .concat(),
    );
    let fixed = stream_json(
        &[
            &[
                "--proto",
                "udp",
                "-s",
                "uring-zc",
                "-l",
                "16K",
                "--fixed-buffers",
            ][..],
            &common[..],
        ]
        .concat(),
    );
    let rows: Vec<&Value> = [&one, &gso, &fixed]
        .iter()
        .flat_map(|d| d["results"].as_array().unwrap())
        .collect();
    assert_eq!(rows.len(), 7 * 2 + 7 + 1);
    for r in &rows {
        check_received(r);
        assert_eq!(r["send_side_only"], false);
    }
    for r in gso["results"].as_array().unwrap() {
        assert_eq!(r["gso_segment_bytes"], 1400);
        let d = &r["repeats"][0]["datagrams"];
        let sends = r["integrity"]["bytes_sent"].as_u64().unwrap() / 64000;
        assert_eq!(
            d["sent"].as_u64(),
            Some(sends * 46),
            "each send is 46 datagrams"
        );
    }
    let f = &fixed["results"][0];
    assert_eq!(f["fixed_buffers"], true);
    assert!(
        f["zerocopy"]["registered"].as_u64().unwrap() > 0,
        "{}",
        f["zerocopy"]
    );
}

#[test]
fn zero_copy_on_the_black_hole_route_is_not_copied_and_the_route_is_removed() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    let d = stream_json(&[
        "--proto",
        "udp",
        "--topology",
        "blackhole",
        "-s",
        "msg-zerocopy,uring-zc",
        "-l",
        "16K",
        "-t",
        "300ms",
        "--warmup",
        "50ms",
        "-n",
        "1",
    ]);
    let topo = &d["environment"]["topology"];
    assert_eq!(topo["kind"], "blackhole");
    assert_eq!(topo["mtu"], 65535);
    for r in d["results"].as_array().unwrap() {
        let z = &r["zerocopy"];
        println!("{} on the black hole: {z}", r["strategy"]);
        assert!(z["completions"].as_u64().unwrap() > 0, "{z}");
        assert_eq!(z["copied_fraction"], 0.0, "{z}");
        // The kernel coalesces MSG_ZEROCOPY completions into ranges; SEND_ZC has one each.
        let per = z["completions_per_notification"].as_f64().unwrap();
        if r["strategy"] == "uring-zc" {
            assert_eq!(per, 1.0, "{z}");
        } else {
            assert!(per >= 1.0, "{z}");
        }
        let (p50, p99, max) = (
            z["completion_p50_us"].as_f64().unwrap(),
            z["completion_p99_us"].as_f64().unwrap(),
            z["completion_max_us"].as_f64().unwrap(),
        );
        assert!(0.0 < p50 && p50 <= p99 && p99 <= max, "{z}");
        assert_eq!(r["send_side_only"], true);
        assert!(r["integrity"]["bytes_received"].is_null());
        let rep = &r["repeats"][0];
        assert!(rep["datagrams"]["received"].is_null(), "{rep}");
        assert!(rep["throughput_gbps"].as_f64().unwrap() > 0.0);
        let w: Vec<&str> = r["warnings"]
            .as_array()
            .unwrap()
            .iter()
            .filter_map(Value::as_str)
            .collect();
        assert!(w.iter().any(|w| w.starts_with("send side only")), "{w:?}");
    }
    let ns = topo["namespace"].as_str().unwrap();
    assert!(!namespace_exists(ns), "{ns} was left behind");
}

#[test]
fn a_datagram_over_the_mtu_fails_with_emsgsize_named_and_leaves_nothing() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    let a = sendpath()
        .args([
            "stream",
            "--proto",
            "udp",
            "--topology",
            "blackhole",
            "--mtu",
            "1500",
        ])
        .args(["-l", "4000", "-t", "200ms", "--warmup", "0", "-n", "1"])
        .assert()
        .failure();
    let e = common::stderr_of(&a);
    assert!(
        e.contains("EMSGSIZE") && e.contains("--gso") && e.contains("1500"),
        "{e}"
    );
    let ns = e
        .split("namespace ")
        .nth(1)
        .and_then(|s| s.split(':').next())
        .unwrap_or_else(|| panic!("no namespace named in:\n{e}"));
    assert!(!namespace_exists(ns), "{ns} was left behind");
    // The same send in segments below the MTU goes.
    let d = stream_json(&[
        "--proto",
        "udp",
        "--topology",
        "blackhole",
        "--mtu",
        "1500",
        "-l",
        "4000",
        "--gso",
        "1400",
        "-t",
        "200ms",
        "--warmup",
        "0",
        "-n",
        "1",
    ]);
    assert_eq!(
        d["results"][0]["repeats"][0]["datagrams"]["sent"]
            .as_u64()
            .unwrap()
            % 3,
        0
    );
}

#[test]
fn udp_flags_are_checked() {
    fails_with(&["stream", "--gso", "1400"], &["--gso", "--proto udp"]);
    fails_with(&["stream", "--proto", "udp", "--gso", "0"], &["--gso"]);
    fails_with(
        &["stream", "--proto", "udp", "--gso", "65508"],
        &["--gso", "65507"],
    );
    fails_with(&["stream", "--proto", "quic"], &["--proto", "tcp or udp"]);
    fails_with(
        &["stream", "--proto", "udp", "-s", "sendfile"],
        &["--proto udp", "sendfile"],
    );
    fails_with(&["stream", "--proto", "udp", "-l", "70000"], &["65507"]);
    fails_with(
        &["stream", "--proto", "udp", "-l", "1405", "--gso", "1400"],
        &["5 bytes", "sequence number"],
    );
    fails_with(
        &[
            "stream",
            "--proto",
            "udp",
            "-s",
            "uring",
            "--connections",
            "2",
        ],
        &["--connections"],
    );
    fails_with(
        &["stream", "--proto", "udp", "--fields", "2"],
        &["--fields"],
    );
    fails_with(
        &["stream", "--topology", "blackhole"],
        &["--topology", "TCP", "--proto udp"],
    );
    fails_with(
        &[
            "stream",
            "--proto",
            "udp",
            "--topology",
            "blackhole",
            "--rate",
            "1gbit",
        ],
        &["--rate"],
    );
    fails_with(
        &[
            "calibrate",
            "--proto",
            "udp",
            "-l",
            "100000",
            "--out",
            "/tmp/sendpath-never.json",
        ],
        &["65507"],
    );
}

#[test]
fn the_black_hole_needs_root_and_says_so() {
    if sendpath_host::thread::euid() != 0 {
        fails_with(
            &["stream", "--proto", "udp", "--topology", "blackhole"],
            &["root"],
        );
        return;
    }
    if Command::new("setpriv").arg("--version").output().is_err() {
        common::skip("no setpriv (util-linux)");
        return;
    }
    let out = Command::new("setpriv")
        .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
        .arg(assert_cmd::cargo::cargo_bin("sendpath"))
        .args([
            "stream",
            "--proto",
            "udp",
            "--topology",
            "blackhole",
            "-t",
            "100ms",
        ])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success());
    assert!(e.contains("--topology") && e.contains("root"), "{e}");
}

/// The `copies-udp` preset counts the sender's copies on the black-hole route: no receiver, so
/// nothing received is counted (null, not 0), and the send side is counted exactly where its
/// counters attached.
#[test]
fn the_copies_udp_preset_counts_the_send_side_only() {
    if let Err(reason) = can_create_netns() {
        return common::skip(&reason);
    }
    let dir = tempfile::tempdir().unwrap();
    let a = sendpath()
        .args([
            "sweep",
            "-p",
            "copies-udp",
            "-t",
            "100ms",
            "--warmup",
            "0",
            "-n",
            "1",
        ])
        .arg("--out")
        .arg(dir.path())
        .assert();
    if !a.get_output().status.success() {
        let e = common::stderr_of(&a);
        assert!(
            e.contains("counts the kernel's copies and cannot here"),
            "{e}"
        );
        return common::skip(&e);
    }
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    let counters = r["environment"]["copy_counters"].as_array().unwrap();
    let sends = counters.iter().find(|c| c["counts"] == "send").unwrap();
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 8, "4 paths x 2 sizes");
    for x in rows {
        let k = &x["kernel_copies"];
        assert!(
            k["receive_per_byte"].is_null(),
            "no receiver, nothing received: {k}"
        );
        assert_eq!(
            k["send_per_byte"].is_null(),
            sends["unavailable"].is_string(),
            "{k}"
        );
    }
    let md = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    assert!(md.contains("the send side only"), "{md}");
}

#[test]
fn the_udp_zerocopy_preset_puts_the_published_figures_beside_its_own() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    sendpath()
        .args([
            "sweep",
            "--preset",
            "udp-zerocopy",
            "--duration",
            "100ms",
            "--warmup",
            "30ms",
        ])
        .args(["--repeat", "1", "--out"])
        .arg(dir.path())
        .assert()
        .success();
    let r: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("results.json")).unwrap())
            .unwrap();
    let rows = r["results"].as_array().unwrap();
    assert_eq!(rows.len(), 25);
    assert!(rows
        .iter()
        .all(|x| x["send_side_only"] == true && x["protocol"] == "udp"));
    let zero_copy: Vec<&Value> = rows
        .iter()
        .filter(|x| x["zerocopy"]["attempts"].as_u64() > Some(0))
        .collect();
    // msg-zerocopy and uring-zc (plain and fixed) at every size: a loop over none would pass.
    assert!(zero_copy.len() >= 15, "{} zero-copy rows", zero_copy.len());
    for x in zero_copy {
        assert_eq!(x["zerocopy"]["copied_fraction"], 0.0, "{}", x["zerocopy"]);
    }
    let s = std::fs::read_to_string(dir.path().join("summary.md")).unwrap();
    for needle in [
        "UDP, one datagram per send on the black-hole route",
        "2.44x best, 1.88x worst",
        "876 MB/s",
        "uring-zc fixed / msg-zerocopy",
        "black hole",
    ] {
        assert!(s.contains(needle), "summary lacks `{needle}`:\n{s}");
    }
}

#[test]
fn a_calibration_on_the_black_hole_records_non_copied_zero_copy() {
    if let Err(reason) = can_create_netns() {
        common::skip(&reason);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let out = dir.path().join("profile.json");
    sendpath()
        .args([
            "calibrate",
            "--proto",
            "udp",
            "--topology",
            "blackhole",
            "--fixed-buffers",
        ])
        .args([
            "-l",
            "1400,64000",
            "-n",
            "2",
            "-t",
            "100ms",
            "--warmup",
            "30ms",
            "--tiebreak-rounds",
            "0",
            "--out",
        ])
        .arg(&out)
        .assert()
        .success();
    let p: Value = serde_json::from_str(&std::fs::read_to_string(&out).unwrap()).unwrap();
    assert_eq!(p["environment"]["route"], "udp blackhole fixed-buffers");
    assert_eq!(p["zerocopy_measured_copied"], false);
    let mut zero_copy = 0;
    for m in p["measurements"].as_array().unwrap() {
        for path in m["paths"].as_array().unwrap() {
            if !path["copied_fraction"].is_null() {
                assert_eq!(path["copied_fraction"], 0.0, "{path}");
                zero_copy += 1;
            }
        }
    }
    // msg-zerocopy and uring-zc at both sizes measured what the kernel did.
    assert!(
        zero_copy >= 4,
        "{zero_copy} paths with a copied fraction: {p}"
    );
}

#[test]
fn probe_shows_which_routes_copy_zero_copy_sends() {
    let out = sendpath().args(["probe", "--json"]).output().unwrap();
    assert!(out.status.success());
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    // Every interface's offloads; loopback's are read on any host.
    let lo = v["offloads"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["interface"] == "lo")
        .unwrap_or_else(|| panic!("no lo in {}", v["offloads"]));
    assert!(
        lo["error"].is_null() && lo["scatter_gather"] == true,
        "{lo}"
    );
    let routes = v["zero_copy_by_route"].as_array().unwrap();
    assert_eq!(routes.len(), 6, "3 routes x 2 paths");
    let copied = |route: &str| -> Vec<Value> {
        routes
            .iter()
            .filter(|r| r["route"] == route)
            .map(|r| r["copied_fraction"].clone())
            .collect()
    };
    // A local socket always gets a copy.
    assert_eq!(
        copied("loopback"),
        vec![Value::from(1.0), Value::from(1.0)],
        "{routes:?}"
    );
    if let Err(reason) = can_create_netns() {
        assert!(routes
            .iter()
            .any(|r| r["route"] == "blackhole" && r["error"].is_string()));
        common::skip(&reason);
        return;
    }
    assert_eq!(
        copied("netns"),
        vec![Value::from(1.0), Value::from(1.0)],
        "{routes:?}"
    );
    assert_eq!(
        copied("blackhole"),
        vec![Value::from(0.0), Value::from(0.0)],
        "{routes:?}"
    );
}

/// A `--gso` send cut into more datagrams than the kernel takes in one send is refused before
/// anything runs, with the smallest segment that fits (before: passed, then the first send
/// failed with a bare "Invalid argument (os error 22)").
#[test]
fn too_many_gso_segments_are_refused_up_front() {
    common::fails_with(
        &[
            "stream", "--proto", "udp", "--gso", "8", "-l", "64000", "-t", "200ms",
        ],
        &[
            "--gso 8 with --size 64000: 8000 datagrams per send",
            "UDP_MAX_SEGMENTS",
            "give --gso",
        ],
    );
}
