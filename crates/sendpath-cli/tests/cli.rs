//! The real binary, run as a user would.

mod common;

use common::{fails_with, sendpath, stderr_of, stdout_json};
use serde_json::Value;
use std::io::{Read, Write};
use std::time::Duration;

#[test]
fn probe_json_has_the_documented_keys() {
    let out = sendpath().args(["probe", "--json"]).assert().success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    for k in [
        "/kernel_release",
        "/cpu_model",
        "/cpus",
        "/io_uring/enabled",
        "/io_uring/send_zc",
        "/io_uring/sendmsg",
        "/io_uring/send_zc_report_usage",
        "/io_uring/min_wait",
        "/msg_zerocopy/supported",
        "/optmem_max_bytes",
        "/memlock/soft_bytes",
        "/memlock/hard_bytes",
        "/memlock/exempt",
        "/hw_counters/available",
        "/hw_counters/reason",
        "/predictions",
    ] {
        assert!(v.pointer(k).is_some(), "missing {k}");
    }
    assert!(v["predictions"].as_array().unwrap().len() >= 3);
    if v["hw_counters"]["available"] == false {
        let why = v["hw_counters"]["reason"].as_str().unwrap();
        assert!(why.contains("perf_event_open"), "{why}");
    }
}

#[test]
fn probe_iface_shows_one_interface_and_names_a_wrong_one() {
    let out = sendpath()
        .args(["probe", "--json", "--iface", "lo"])
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let names: Vec<&str> = v["offloads"]
        .as_array()
        .unwrap()
        .iter()
        .map(|o| o["interface"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["lo"]);
    fails_with(
        &["probe", "--iface", "no-such-if0"],
        &["--iface no-such-if0", "no interface of that name", "lo"],
    );
}

#[test]
fn probe_table_prints_predictions() {
    let out = sendpath().arg("probe").assert().success();
    let s = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        s.contains("SEND_ZC") && s.contains("What to expect here"),
        "{s}"
    );
}

#[test]
fn bad_flags_and_subcommands_fail_clearly() {
    fails_with(&["probe", "--bogus"], &["--bogus"]);
    fails_with(&["frobnicate"], &["frobnicate"]);
    fails_with(
        &["stream", "--size", "4Q"],
        &["--size", "unknown size unit"],
    );
    fails_with(
        &["stream", "--duration", "0"],
        &["--duration", "longer than zero"],
    );
    fails_with(
        &["stream", "--strategy", "zerocopy"],
        &["--strategy", "msg-zerocopy"],
    );
    fails_with(
        &["rr", "--recv", "discard", "-t", "0.1"],
        &["--recv discard"],
    );
}

#[test]
fn unreachable_connect_address_names_the_flag() {
    // A port nobody listens on: bind one, note it, close it.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let a = sendpath()
        .args([
            "stream",
            "--connect",
            &format!("127.0.0.1:{port}"),
            "-t",
            "0.2",
            "-n",
            "1",
        ])
        .assert()
        .failure();
    let e = stderr_of(&a);
    assert!(
        e.contains("--connect") && e.contains("cannot connect"),
        "{e}"
    );
}

#[test]
fn stream_all_paths_verify_and_write_json_and_csv() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let csv = dir.path().join("r.csv");
    sendpath()
        .args([
            "stream",
            "--strategy",
            "all",
            "--size",
            "64K",
            "--recv",
            "verify",
        ])
        .args(["-t", "0.2", "--warmup", "0.05", "-n", "1"])
        .arg("--json")
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .timeout(Duration::from_secs(120))
        .assert()
        .success();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["schema_version"], 2);
    assert!(v["environment"]["command_line"].is_array());
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), sendpath::Strategy::ALL.len());
    for r in rows {
        let name = r["strategy"].as_str().unwrap();
        assert_eq!(r["integrity"]["mismatches"], 0, "{name}");
        assert!(
            r["integrity"]["bytes_verified"].as_u64().unwrap() > 0,
            "{name}"
        );
        assert!(
            r["throughput_gbps"]["median"].as_f64().unwrap() > 0.0,
            "{name}"
        );
        assert_eq!(r["repeats"].as_array().unwrap().len(), 1);
        for k in [
            "workload",
            "size_bytes",
            "threads",
            "recv_mode",
            "cpu_ns_per_byte",
            "zerocopy",
        ] {
            assert!(r.get(k).is_some(), "{name}: {k}");
        }
        // TCP read from the connection's own sockets: the sender had data queued for at
        // least one 4 ms jiffy of the window (not more: uring-splice leaves its socket empty
        // for most of a window, 40-176 ms of 200 were busy in six runs, 16 in one CI run),
        // and the receiver is ours.
        let t = &r["repeats"][0]["tcp"];
        assert!(t["busy_us"].as_u64().unwrap() >= 4_000, "{name}: {t}");
        assert!(t["receiver_drops"].is_u64(), "{name}: {t}");
        // Both present (comparing Options held when a field was missing).
        let count = |k: &str| {
            t[k].as_u64()
                .unwrap_or_else(|| panic!("{name}: no {k}: {t}"))
        };
        assert!(
            count("connection_retrans_segs") >= count("retrans_segs"),
            "{name}: {t}"
        );
        let s = sendpath::Strategy::parse(name).unwrap();
        if s.has_zc_completions() {
            let f = r["zerocopy"]["copied_fraction"].as_f64();
            println!("{name}: copied_fraction {f:?}");
            assert!(f.is_some(), "{name} must show its copied fraction");
        }
    }
    let mut rd = csv::Reader::from_path(&csv).unwrap();
    assert_eq!(rd.records().count(), rows.len());
}

#[test]
fn congestion_is_set_on_the_connections_and_recorded_or_refused() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let a = sendpath()
        .args([
            "stream",
            "-s",
            "copy,uring",
            "-l",
            "4K",
            "--congestion",
            "reno",
        ])
        .args([
            "-t", "0.2", "--warmup", "0.05", "-n", "1", "--recv", "discard",
        ])
        .arg("--json")
        .arg(&json)
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    assert!(!stderr_of(&a).contains("paces"), "reno is not paced");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["tcp_congestion"], "reno", "{}", r["strategy"]);
    }
    // Without the flag a row records the host's default, whatever it is.
    let default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    let a = sendpath()
        .args([
            "stream", "-s", "copy", "-l", "4K", "-t", "0.1", "--warmup", "0",
        ])
        .args(["-n", "1", "--recv", "discard", "--json", "-"])
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    let v: Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    assert_eq!(v["results"][0]["tcp_congestion"], default.trim());
    assert_eq!(
        stderr_of(&a).contains("bbr, which paces"),
        default.trim() == "bbr",
        "the note says when bbr paces the run"
    );
    fails_with(
        &[
            "stream",
            "-l",
            "4K",
            "-t",
            "0.1",
            "--congestion",
            "no-such-cc",
        ],
        &["--congestion: no-such-cc", "available here", "reno"],
    );
    fails_with(
        &["stream", "--proto", "udp", "--congestion", "cubic"],
        &["--congestion is TCP's"],
    );
}

#[test]
fn rr_sets_and_records_its_congestion_control_or_refuses_it() {
    let a = sendpath()
        .args([
            "rr",
            "-s",
            "copy,uring",
            "-l",
            "64,16K",
            "--congestion",
            "reno",
        ])
        .args(["-t", "0.2", "--warmup", "0.05", "-n", "1", "--json", "-"])
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    assert!(!stderr_of(&a).contains("paces"), "reno is not paced");
    let v: Value = serde_json::from_slice(&a.get_output().stdout).unwrap();
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        assert_eq!(r["workload"], "rr");
        assert_eq!(
            r["tcp_congestion"], "reno",
            "{} {}",
            r["strategy"], r["size_bytes"]
        );
    }
    fails_with(
        &["rr", "-t", "0.1", "--congestion", "no-such-cc"],
        &["--congestion: no-such-cc", "available here"],
    );
}

/// `--copy-batch` puts several of copy's messages in one `sendmsg`; every row says how many
/// messages each system call or ring request carried, and the CSV has the column.
#[test]
fn copy_batch_is_recorded_as_messages_per_call() {
    let per_call = |batch: &str| {
        let dir = tempfile::tempdir().unwrap();
        let csv = dir.path().join("r.csv");
        let out = sendpath()
            .args([
                "stream",
                "-s",
                "copy,uring,mmap-send",
                "-l",
                "4K",
                "--copy-batch",
                batch,
            ])
            .args([
                "-t", "0.2", "--warmup", "0.05", "-n", "1", "--recv", "discard",
            ])
            .args(["--json", "-", "--csv"])
            .arg(&csv)
            .timeout(Duration::from_secs(60))
            .assert()
            .success();
        let v = stdout_json(&out);
        let of = |path: &str| {
            let rows = v["results"].as_array().unwrap();
            let r = rows.iter().find(|r| r["strategy"] == path).unwrap();
            r["messages_per_call"].as_f64()
        };
        let header = std::fs::read_to_string(&csv).unwrap();
        let columns = header.lines().next().unwrap();
        assert!(
            columns.split(',').any(|c| c == "messages_per_call"),
            "{columns}"
        );
        (of("copy"), of("uring"), of("mmap-send"))
    };
    let (copy, uring, mmap) = per_call("1");
    assert!(copy.is_some_and(|m| m > 0.9 && m <= 1.0), "copy: {copy:?}");
    assert!(
        uring.is_some_and(|m| m > 1.5),
        "uring's vectored requests: {uring:?}"
    );
    assert_eq!(
        mmap, None,
        "mmap-send does not count its calls: null, not 0"
    );
    let (copy, _, _) = per_call("8");
    assert!(
        copy.is_some_and(|m| m > 4.0 && m <= 8.0),
        "copy batched by 8: {copy:?}"
    );
    fails_with(
        &["stream", "--copy-batch", "65"],
        &["--copy-batch", "1..=64"],
    );
    // Over UDP a batch is one sendmmsg: each datagram its own, 8 to a call.
    let out = sendpath()
        .args([
            "stream",
            "--proto",
            "udp",
            "-s",
            "copy",
            "-l",
            "1400",
            "--copy-batch",
            "8",
        ])
        .args(["-t", "0.2", "--warmup", "0", "-n", "1", "--json", "-"])
        .timeout(Duration::from_secs(30))
        .assert()
        .success();
    let v = stdout_json(&out);
    let m = v["results"][0]["messages_per_call"].as_f64();
    assert!(
        m.is_some_and(|m| m > 7.9 && m <= 8.0),
        "UDP copy batched by 8: {m:?}"
    );
    // Messages of several fields are sent one by one, not batched: the window still ends on
    // time with every byte counted (before a fix, the harness's batch loop never ended).
    let out = sendpath()
        .args([
            "stream",
            "-s",
            "copy",
            "-l",
            "4K",
            "--fields",
            "4",
            "--copy-batch",
            "8",
        ])
        .args(["-t", "0.2", "--warmup", "0", "-n", "1", "--json", "-"])
        .timeout(Duration::from_secs(30))
        .assert()
        .success();
    let v = stdout_json(&out);
    let r = &v["results"][0];
    assert!(
        r["throughput_gbps"]["median"].as_f64().unwrap() > 0.0,
        "{r}"
    );
    assert_eq!(r["integrity"]["mismatches"], 0, "{r}");
    assert!(
        r["integrity"]["bytes_received"].as_u64().unwrap() > 0,
        "{r}"
    );
}

/// `--recv zerocopy` maps received pages: on loopback only what the kernel copied into whole
/// pages at delivery maps (a MSG_ZEROCOPY sender's, KERNEL_FACTS.md), nothing of a plain
/// `send`'s; every byte is counted either way. What it cannot map is refused up front.
#[test]
fn recv_zerocopy_maps_what_the_kernel_can_and_counts_every_byte() {
    if !sendpath::probe().msg_zerocopy.supported {
        return common::skip("MSG_ZEROCOPY unavailable: no sender whose pages map");
    }
    let out = sendpath()
        .args([
            "stream",
            "-s",
            "msg-zerocopy,copy",
            "-l",
            "64K",
            "--recv",
            "zerocopy",
        ])
        .args(["-t", "0.3", "--warmup", "0.1", "-n", "1", "--json", "-"])
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    let v = stdout_json(&out);
    let rows = v["results"].as_array().unwrap();
    let row = |path: &str| rows.iter().find(|r| r["strategy"] == path).unwrap();
    for path in ["msg-zerocopy", "copy"] {
        let i = &row(path)["integrity"];
        assert_eq!(i["bytes_received"], i["bytes_sent"], "{path}: {i}");
        assert!(i["bytes_mapped"].as_u64().unwrap() <= i["bytes_received"].as_u64().unwrap());
        assert_eq!(row(path)["recv_mode"], "zerocopy");
    }
    // The table says it too, beside the copied share of the zero-copy sends.
    assert!(stderr_of(&out).contains("% mapped"), "{}", stderr_of(&out));
    let mapped = |path: &str| row(path)["recv_mapped_fraction"].as_f64().unwrap();
    println!(
        "mapped: msg-zerocopy {:.3}, copy {:.3}",
        mapped("msg-zerocopy"),
        mapped("copy")
    );
    assert!(mapped("msg-zerocopy") > 0.1, "{}", mapped("msg-zerocopy"));
    assert_eq!(mapped("copy"), 0.0);
    for (args, says) in [
        (
            &[
                "stream",
                "-s",
                "uring",
                "--recv",
                "zerocopy",
                "--connections",
                "2",
            ][..],
            "drop --connections",
        ),
        (
            &["stream", "--recv", "zerocopy", "--proto", "udp"][..],
            "drop --proto udp",
        ),
        (
            &["rr", "--recv", "zerocopy"][..],
            "--recv zerocopy does not apply to rr",
        ),
    ] {
        fails_with(args, &[says]);
    }
}

/// An rr point written in place is an `arena` row: the runner finds its row again and runs
/// every point of every round (before, the first such point ended the run: one row of four).
#[test]
fn rr_written_in_place_runs_every_point_of_every_round() {
    let out = sendpath()
        .args(["rr", "-s", "uring-zc,copy", "-l", "64,16K"])
        .args(["-t", "0.2", "--warmup", "0.05", "-n", "2", "--json", "-"])
        .timeout(Duration::from_secs(60))
        .assert()
        .success();
    let v = stdout_json(&out);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4, "{rows:?}");
    for r in rows {
        let name = format!("{} {}", r["strategy"], r["size_bytes"]);
        assert_eq!(r["repeats"].as_array().unwrap().len(), 2, "{name}");
        let in_place = r["strategy"] == "uring-zc";
        assert_eq!(
            r["uring_buffers"] == "arena",
            in_place,
            "{name}: {}",
            r["uring_buffers"]
        );
    }
}

#[test]
fn rr_reports_latency_percentiles() {
    let out = sendpath()
        .args(["rr", "--request", "64", "--response", "64", "-C", "1,2"])
        .args(["-t", "0.3", "--warmup", "0.1", "-n", "2", "--json", "-"])
        .assert()
        .success();
    let v = stdout_json(&out);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        let l = &r["latency_us"];
        let p50 = l["p50"].as_f64().unwrap();
        assert!(p50 > 0.0 && p50 <= l["p99"].as_f64().unwrap());
        assert!(l["p99"].as_f64().unwrap() <= l["max"].as_f64().unwrap());
        assert!(r["messages_per_s"]["median"].as_f64().unwrap() > 0.0);
    }
}

#[test]
fn rr_open_loop_with_verify() {
    sendpath()
        .args([
            "rr",
            "--strategy",
            "gather,uring",
            "--response",
            "4K",
            "--rate",
            "2000",
        ])
        .args([
            "--recv", "verify", "-t", "0.3", "--warmup", "0.1", "-n", "1",
        ])
        .assert()
        .success();
}

/// A `sendpath sink` on a free loopback address with `args`, its output piped, given 300 ms to
/// start listening: the address and the process.
fn start_sink(args: &[&str]) -> (String, std::process::Child) {
    let addr = common::free_loopback_addr();
    let sink = std::process::Command::new(assert_cmd::cargo::cargo_bin("sendpath"))
        .args(["sink", "--listen", &addr])
        .args(args)
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    (addr, sink)
}

#[test]
fn sink_receives_from_stream_connect() {
    let (addr, sink) = start_sink(&["--recv", "verify", "--timeout", "30s"]);
    sendpath()
        .args(["stream", "--connect", &addr, "--strategy", "msg-zerocopy"])
        .args([
            "--recv", "verify", "-t", "0.3", "--warmup", "0.05", "-n", "1",
        ])
        .assert()
        .success();
    let out = sink.wait_with_output().unwrap();
    let s = String::from_utf8_lossy(&out.stdout);
    println!("{s}");
    assert!(out.status.success(), "sink failed: {s}");
    assert!(s.contains(" 0 mismatches"), "{s}");
}

/// The verifier's failure path end to end: a stream to `sink --recv verify` through a relay
/// that changes one byte fails the sink, naming that byte's offset (before, every verify test
/// only ever saw success, and the sink named no offset).
#[test]
fn a_byte_changed_on_the_way_fails_the_sink_naming_its_offset() {
    const AT: u64 = 1_000_003;
    let sink_addr = common::free_loopback_addr();
    let sink = std::process::Command::new(assert_cmd::cargo::cargo_bin("sendpath"))
        .args(["sink", "--listen", &sink_addr, "--recv", "verify"])
        .args(["--timeout", "30s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let relay = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let relay_addr = relay.local_addr().unwrap().to_string();
    let relayed = std::thread::spawn(move || {
        let (mut from, _) = relay.accept().unwrap();
        let mut to = std::net::TcpStream::connect(&sink_addr).unwrap();
        let (mut buf, mut off) = (vec![0u8; 64 << 10], 0u64);
        loop {
            let n = from.read(&mut buf).unwrap();
            if n == 0 {
                break;
            }
            if (off..off + n as u64).contains(&AT) {
                buf[(AT - off) as usize] ^= 0x01;
            }
            to.write_all(&buf[..n]).unwrap();
            off += n as u64;
        }
        to.shutdown(std::net::Shutdown::Write).unwrap();
        off
    });
    sendpath()
        .args(["stream", "--connect", &relay_addr, "-s", "copy"])
        .args([
            "--recv", "verify", "-t", "0.3", "--warmup", "0.05", "-n", "1",
        ])
        .assert()
        .success();
    assert!(
        relayed.join().unwrap() > AT,
        "the stream was shorter than the changed byte"
    );
    let out = sink.wait_with_output().unwrap();
    let all = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(!out.status.success(), "{all}");
    assert!(
        all.contains("1 mismatches, the first at byte 1000003"),
        "{all}"
    );
    assert!(
        all.contains("1 bytes did not match the pattern, the first at byte 1000003"),
        "{all}"
    );
}

/// With a receiver that is not ours, the sender's own count of bytes put on the socket is
/// the throughput: it must move for the plainest stream (one pooled size, discarded), whose
/// sender sends whole batches by a loop of its own.
#[test]
fn stream_connect_counts_what_a_plain_sender_sent() {
    let (addr, sink) = start_sink(&["--timeout", "30s", "--connections", "2"]);
    let out = sendpath()
        .args([
            "stream",
            "--connect",
            &addr,
            "-s",
            "copy,sendfile",
            "-l",
            "4K",
        ])
        .args(["-t", "0.3", "--warmup", "0.05", "-n", "1", "--json", "-"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert!(sink.wait_with_output().unwrap().status.success());
    // A plain memory stream and a plain (warm) file stream: each has its own loop.
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 2);
    for r in rows {
        let gbps = r["throughput_gbps"]["median"].as_f64().unwrap();
        assert!(
            gbps > 0.1,
            "{}: the sender counted {gbps} Gbit/s",
            r["strategy"]
        );
    }
}

#[test]
fn ctrl_c_keeps_finished_repeats() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let bin = assert_cmd::cargo::cargo_bin("sendpath");
    let child = std::process::Command::new(&bin)
        .args([
            "stream", "-t", "0.5", "--warmup", "0.1", "-n", "10", "--json",
        ])
        .arg(&json)
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    // Two repeats take about 1.2 s; interrupt during a later one.
    std::thread::sleep(Duration::from_millis(1900));
    let st = std::process::Command::new("kill")
        .args(["-INT", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(st.success());
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(130), "interrupted runs exit 130");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let reps = v["results"][0]["repeats"].as_array().unwrap().len();
    println!("repeats kept after Ctrl-C: {reps}");
    assert!((1..10).contains(&reps), "kept {reps} repeats");
}

#[test]
fn file_paths_cold_cache_verify() {
    let out = sendpath()
        .args([
            "stream",
            "--strategy",
            "read-send,mmap-send,sendfile,splice",
            "--size",
            "1M",
        ])
        .args([
            "--cold", "--recv", "verify", "-t", "0.2", "--warmup", "0", "-n", "2", "--csv", "-",
        ])
        .assert()
        .success();
    let rows = verified_rows(&out.get_output().stdout);
    for r in &rows {
        assert!(r["msg_time_us_median"].parse::<f64>().unwrap() > 0.0);
    }
    assert_eq!(rows.len(), 4);
}

#[test]
fn warm_file_paths_go_round_the_file_in_order() {
    // 3000-byte messages from a 10000-byte file: most batches hold a message that runs past
    // the file's end and goes on from its start.
    let out = sendpath()
        .args([
            "stream",
            "--strategy",
            "read-send,mmap-send,sendfile,splice,uring-splice",
        ])
        .args(["--size", "3000", "--file-size", "10000", "--recv", "verify"])
        .args(["-t", "0.2", "--warmup", "0.05", "-n", "1", "--csv", "-"])
        .assert()
        .success();
    assert_eq!(verified_rows(&out.get_output().stdout).len(), 5);
}

/// The rows of a `--csv -` run with `--recv verify`, by column name, after checking that each
/// verified bytes and found no mismatch.
fn verified_rows(csv_out: &[u8]) -> Vec<std::collections::HashMap<String, String>> {
    let mut rd = csv::Reader::from_reader(csv_out);
    let headers = rd.headers().unwrap().clone();
    let rows: Vec<std::collections::HashMap<String, String>> = rd
        .records()
        .map(|rec| {
            let rec = rec.unwrap();
            headers
                .iter()
                .zip(rec.iter())
                .map(|(h, v)| (h.into(), v.into()))
                .collect()
        })
        .collect();
    for r in &rows {
        let path = &r["strategy"];
        assert_eq!(r["mismatches"], "0", "{path}");
        assert!(r["bytes_verified"].parse::<u64>().unwrap() > 0, "{path}");
    }
    rows
}

fn json_of(args: &[&str]) -> serde_json::Value {
    let out = sendpath()
        .args(args)
        .args(["--json", "-"])
        .assert()
        .success();
    serde_json::from_slice(&out.get_output().stdout).unwrap()
}

#[test]
fn bad_values_get_clear_errors_not_panics() {
    fails_with(
        &["stream", "--duration", "99999999999999999999"],
        &["between 0 and 24 hours"],
    );
    fails_with(
        &["stream", "--cpu", "5000,0"],
        &["CPU 5000", "allowed CPUs"],
    );
    fails_with(&["stream", "--size", "2G"], &["between 1B and 1GiB"]);
    fails_with(&["stream", "--pipe-size", "3G"], &["between 4KiB and 1GiB"]);
    for bad in ["0", "2G", "on"] {
        fails_with(
            &["stream", "--arena", bad],
            &["auto, off, or a size of 4KiB..1GiB"],
        );
    }
    fails_with(
        &["stream", "--size", "1G", "--threads", "64", "-t", "0.1"],
        &["MiB available", "smaller --size"],
    );
    fails_with(
        &["rr", "--response", "99999999999999999999G"],
        &["too large"],
    );
    fails_with(&["stream", "--fields", "0"], &["--fields"]);
}

#[test]
fn one_buffer_per_message_and_iperf3_read_size_by_default() {
    let v = json_of(&[
        "stream",
        "-s",
        "msg-zerocopy,copy",
        "-l",
        "4K,64K",
        "-t",
        "0.2",
        "-n",
        "1",
    ]);
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["fields"], 1, "{r}");
        let size = r["size_bytes"].as_u64().unwrap();
        assert_eq!(r["recv_size_bytes"].as_u64().unwrap(), size.max(16 << 10));
        let c = &r["cpu_ns_per_byte"];
        assert!(c["sender"].as_f64().unwrap() > 0.0, "{c}");
        assert!(c["receiver"].as_f64().is_some(), "{c}");
        assert!(c["system_softirq"].as_f64().is_some(), "{c}");
        assert_eq!(
            r["integrity"]["bytes_sent"],
            r["integrity"]["bytes_received"]
        );
    }
    let v = json_of(&[
        "stream",
        "-t",
        "0.2",
        "-n",
        "1",
        "--recv-size",
        "8K",
        "--metrics",
        "minimal",
    ]);
    let r = &v["results"][0];
    assert_eq!(r["recv_size_bytes"], 8192);
    assert!(r["cpu_ns_per_byte"].is_null(), "not measured must be null");
    assert!(r["repeats"][0]["cpu"].is_null());
}

#[test]
fn points_run_in_shuffled_rounds_with_the_seed_recorded() {
    let v = json_of(&[
        "stream",
        "-s",
        "copy,uring",
        "-l",
        "4K,64K",
        "-t",
        "0.1",
        "--warmup",
        "0",
        "-n",
        "2",
        "--seed",
        "5",
    ]);
    assert_eq!(v["schedule"]["seed"], 5);
    assert_eq!(v["schedule"]["rounds"], 2);
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        let rounds = common::rounds_of(r);
        assert_eq!(rounds, vec![0, 1], "{}", r["strategy"]);
    }
}

#[test]
fn cold_sendfile_reads_a_file_that_is_not_in_the_page_cache() {
    let v = json_of(&[
        "stream",
        "-s",
        "sendfile",
        "-l",
        "1M",
        "--cold",
        "--file-size",
        "96M",
        "-t",
        "2",
        "-n",
        "1",
    ]);
    let r = &v["results"][0];
    let fc = &r["file_cache"];
    let fs = fc["filesystem"].as_str().unwrap();
    if fs == "tmpfs" || fs == "ramfs" {
        common::skip(&format!(
            "the temp dir is on {fs}: nothing can be dropped from its cache"
        ));
        return;
    }
    assert_eq!(fc["cold"], true);
    let resident = fc["resident_fraction"].as_f64().unwrap();
    println!("cold sendfile on {fs}: resident fraction {resident} at window start");
    assert!(resident < 0.05, "resident {resident}");
    // Each byte range once: the window cannot carry more than the file.
    assert!(r["repeats"][0]["bytes"].as_u64().unwrap() <= 96 << 20);
}

#[test]
fn a_reset_mid_stream_is_an_error_that_names_the_offset() {
    use std::io::Write;
    let addr = common::free_loopback_addr();
    let bin = assert_cmd::cargo::cargo_bin("sendpath");
    let sink = std::process::Command::new(&bin)
        .args(["sink", "--listen", &addr, "--timeout", "20s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let mut s = None;
    for _ in 0..100 {
        match std::net::TcpStream::connect(&addr) {
            Ok(c) => {
                s = Some(c);
                break;
            }
            Err(_) => std::thread::sleep(Duration::from_millis(50)),
        }
    }
    let mut s = s.expect("sink listening");
    s.write_all(&[7u8; 1000]).unwrap();
    // The reset must come after the sink has read the 1000 bytes (on a busy host a fixed
    // sleep was not always enough): wait until none are left unread at its end.
    let waited = std::time::Instant::now();
    while common::unread_by_peer(&s) != Some(0) {
        assert!(
            waited.elapsed() < Duration::from_secs(10),
            "the sink did not read 1000 bytes within 10 s (unread: {:?})",
            common::unread_by_peer(&s)
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    // SO_LINGER with a zero timeout: close() sends a reset instead of a clean FIN.
    rustix::net::sockopt::set_socket_linger(&s, Some(Duration::ZERO)).unwrap();
    drop(s);
    let out = sink.wait_with_output().unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    let se = String::from_utf8_lossy(&out.stderr);
    println!("{so}{se}");
    assert!(!out.status.success(), "a reset must not exit 0");
    assert!(so.contains("byte offset 1000"), "{so}");
    assert!(se.contains("ended with an error"), "{se}");
}

#[test]
fn the_tcp_counters_never_cost_a_run_its_connections() {
    // A hard limit with room for both ends of 1000 connections but not for the duplicates
    // that read TCP's counters: the run completes, without the counters (null).
    let bin = assert_cmd::cargo::cargo_bin("sendpath");
    let out = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!(
            "ulimit -Sn 1024 && ulimit -Hn 2200 && exec {} stream -s uring --connections 1000 -l 4K -t 0.2 --warmup 0.1 -n 1 --json -",
            bin.display()
        ))
        .output()
        .unwrap();
    let so = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{so}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let v: Value = serde_json::from_str(so[so.find('{').unwrap()..].trim()).unwrap();
    let r = &v["results"][0];
    assert_eq!(
        r["integrity"]["bytes_received"],
        r["integrity"]["bytes_sent"]
    );
    assert!(r["repeats"][0]["tcp"].is_null(), "{r}");
}

/// Every byte of 1000 connections on one ring, vectored (the default where the kernel has
/// SENDMSG_ZC) and linked, is verified; each row says which order it kept.
#[test]
fn many_connections_per_thread_are_verified_in_either_order_and_fairness_is_shown() {
    let out = sendpath().args(["probe", "--json"]).assert().success();
    let probe: Value = serde_json::from_slice(&out.get_output().stdout).unwrap();
    let u = &probe["io_uring"];
    let vectored = u["sendmsg"] == true && u["sendmsg_zc"] == true;
    if !vectored {
        common::skip(
            "the vectored order: io_uring has no SENDMSG or SENDMSG_ZC here (the linked order is still checked, as the default)",
        );
    }
    for (order, conns, want) in [
        ("auto", "1000", if vectored { "vectored" } else { "linked" }),
        ("linked", "200", "linked"),
    ] {
        let v = json_of(&[
            "stream",
            "--strategy",
            "uring,uring-zc",
            "--connections",
            conns,
            "--size",
            "16K",
            "--recv",
            "verify",
            "--uring-order",
            order,
            "-t",
            "0.4",
            "--warmup",
            "0.2",
            "-n",
            "1",
        ]);
        let rows = v["results"].as_array().unwrap();
        assert_eq!(rows.len(), 2);
        for row in rows {
            assert_eq!(row["uring_order"], want, "--uring-order {order}");
            assert_eq!(row["connections_per_thread"].to_string(), conns);
            let i = &row["integrity"];
            assert_eq!(i["mismatches"], 0);
            let sent = i["bytes_sent"].as_u64().unwrap();
            assert!(sent > 0);
            assert_eq!(i["bytes_verified"].as_u64(), Some(sent), "{row}");
            let c = &row["connection_bytes"];
            assert_eq!(c["connections"].to_string(), conns);
            let at = |k: &str| c[k].as_u64().unwrap_or_else(|| panic!("no {k}: {c}"));
            assert!(
                at("min") <= at("median") && at("median") <= at("max"),
                "{c}"
            );
            assert!(at("max") > 0, "{c}");
        }
    }
}

#[test]
fn many_connections_need_an_io_uring_path() {
    fails_with(
        &["stream", "--strategy", "copy,uring", "--connections", "4"],
        &[
            "--connections 4",
            "uring, uring-zc and adaptive",
            "drop copy",
        ],
    );
    fails_with(
        &["stream", "--strategy", "uring", "--connections", "0"],
        &["--connections"],
    );
}

/// An output file that cannot be written is refused before the first window, so nothing
/// measured is lost to it (before, stream, sweep and calibrate found out after measuring).
#[test]
fn unwritable_outputs_are_refused_before_anything_is_measured() {
    let dir = tempfile::tempdir().unwrap();
    let bad = dir.path().join("no-such-dir/out.json");
    let bad = bad.to_str().unwrap();
    for (args, flag) in [
        (
            vec![
                "stream", "-t", "5s", "--warmup", "0", "-n", "1", "--json", bad,
            ],
            "--json",
        ),
        (
            vec![
                "stream", "-t", "5s", "--warmup", "0", "-n", "1", "--csv", bad,
            ],
            "--csv",
        ),
        (
            vec!["rr", "-t", "5s", "--warmup", "0", "-n", "1", "--json", bad],
            "--json",
        ),
        // calibrate makes the profile's directory as saving it would: this one cannot be made.
        (
            vec![
                "calibrate",
                "-t",
                "5s",
                "--out",
                "/proc/sendpath-test/p.json",
            ],
            "--out",
        ),
        (
            vec![
                "serve",
                "--listen",
                "127.0.0.1:0",
                "-t",
                "5s",
                "--json",
                bad,
            ],
            "--json",
        ),
        (
            vec!["http-load", "127.0.0.1:9", "-d", "5s", "--json", bad],
            "--json",
        ),
        (
            vec!["transfer", "-l", "1M", "-n", "1", "--json", bad],
            "--json",
        ),
    ] {
        let t0 = std::time::Instant::now();
        let a = sendpath().args(&args).assert().failure();
        let e = stderr_of(&a);
        assert!(e.contains(flag) && e.contains("cannot "), "{args:?}: {e}");
        // Refused at once: no 5 s window ran.
        assert!(
            t0.elapsed() < Duration::from_secs(4),
            "{args:?} took {:?}",
            t0.elapsed()
        );
    }
    // A directory as the output is refused too.
    fails_with(
        &[
            "stream",
            "-t",
            "5s",
            "-n",
            "1",
            "--json",
            dir.path().to_str().unwrap(),
        ],
        &["--json", "is a directory"],
    );
}

/// A sender that goes silent is named as what the sink's --timeout caught, not as an EAGAIN.
#[test]
fn a_sink_timeout_says_what_timed_out() {
    let addr = common::free_loopback_addr();
    let sink = std::process::Command::new(assert_cmd::cargo::cargo_bin("sendpath"))
        .args(["sink", "--listen", &addr, "--timeout", "2s"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let t0 = std::time::Instant::now();
    let mut c = loop {
        match std::net::TcpStream::connect(&addr) {
            Ok(c) => break c,
            Err(_) if t0.elapsed() < Duration::from_secs(5) => {
                std::thread::sleep(Duration::from_millis(20))
            }
            Err(e) => panic!("the sink never listened: {e}"),
        }
    };
    std::io::Write::write_all(&mut c, &[0u8; 100]).unwrap();
    let out = sink.wait_with_output().unwrap();
    drop(c);
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(!out.status.success(), "the sink exited 0: {o}{e}");
    assert!(
        o.contains("no data for") && !o.contains("os error 11"),
        "{o}"
    );
    assert!(e.contains("--timeout"), "{e}");
}

/// Runs `sendpath stream ARGS -t 1s -n 1 --warmup 0` as user 65534 (`setpriv`), whose
/// `ulimit -l` is the host's (8 MiB here; root is exempt); checks that it succeeded within 60 s
/// (four 1 s windows and their setup at most: far from the 120 s kill) and returns its standard
/// output and results. `None` (skipped) without root or setpriv.
fn stream_as_a_normal_user(args: &[&str]) -> Option<(String, Value)> {
    use std::os::unix::fs::PermissionsExt;
    if sendpath_host::thread::euid() != 0 {
        common::skip("needs root to run the binary as another (unprivileged) user");
        return None;
    }
    if std::process::Command::new("setpriv")
        .arg("--version")
        .output()
        .is_err()
    {
        common::skip("no setpriv (util-linux)");
        return None;
    }
    // The binary and the output where user 65534 can reach them.
    let dir = tempfile::tempdir().unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
    let exe = dir.path().join("sendpath");
    std::fs::copy(assert_cmd::cargo::cargo_bin("sendpath"), &exe).unwrap();
    std::fs::set_permissions(&exe, std::fs::Permissions::from_mode(0o755)).unwrap();
    let json = dir.path().join("out.json");
    let t0 = std::time::Instant::now();
    let out = std::process::Command::new("timeout")
        .args([
            "-s",
            "KILL",
            "120",
            "setpriv",
            "--reuid=65534",
            "--regid=65534",
        ])
        .arg("--clear-groups")
        .arg(&exe)
        .arg("stream")
        .args(args)
        .args(["-t", "1s", "-n", "1", "--warmup", "0", "--json"])
        .arg(&json)
        .output()
        .unwrap();
    let (o, e) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert!(out.status.success(), "{:?}\n{o}\n{e}", out.status);
    assert!(t0.elapsed() < Duration::from_secs(60), "{:?}", t0.elapsed());
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    Some((o.into_owned(), v))
}

/// An arena larger than a normal user may lock: the ring registers what the kernel allows
/// (halving), sends from the rest by address, says so, and the run ends on time, byte-exact.
#[test]
fn an_arena_past_the_locked_memory_limit_shrinks_says_so_and_ends() {
    let stream = [
        "-s", "uring-zc", "-l", "64K", "--arena", "16M", "--recv", "verify",
    ];
    let Some((o, v)) = stream_as_a_normal_user(&stream) else {
        return;
    };
    let r = &v["results"][0];
    assert_eq!(r["uring_buffers"], "arena", "{r}");
    assert_eq!(r["repeats"][0]["integrity"]["mismatches"], 0, "{r}");
    let share = r["arena_registered"].as_f64().unwrap();
    assert!(share > 0.0, "some requests went by index: {r}");
    let said = |w: &str| w.contains("registered") && w.contains("ulimit -l");
    assert!(said(&o), "the table says the arena shrank: {o}");
}

/// With a size mix the arena is cut in slots of the mix's largest message, not of its mean
/// (`size` with a mix): before, a mix of 1 KiB and 32 KiB messages sent under 1% of its
/// zero-copy requests by index, its 32 KiB messages too large for a slot.
#[test]
fn an_arena_with_a_size_mix_holds_its_largest_messages() {
    let v = json_of(&[
        "stream",
        "-s",
        "uring-zc",
        "--size-mix",
        "1K:50,32K:50",
        "--arena",
        "16M",
        "--recv",
        "verify",
        "-t",
        "0.5",
        "-n",
        "1",
        "--warmup",
        "0.1",
    ]);
    let r = &v["results"][0];
    assert_eq!(r["uring_buffers"], "arena", "{r}");
    assert_eq!(r["repeats"][0]["integrity"]["mismatches"], 0, "{r}");
    let share = r["arena_registered"].as_f64().unwrap();
    assert!(share > 0.5, "most requests by index: {share} in {r}");
}

/// By default each io_uring path sends the way it measured faster: `uring` and `uring-zc` in
/// place (`uring-zc`'s zero-copy sends by the arena's index while it has slots; `SEND` takes no registered
/// buffer, so none of `uring`'s); `--arena off` sends both from owned buffers. Every byte
/// arrives either way.
#[test]
fn by_default_uring_and_uring_zc_are_written_in_place() {
    let buffers = |extra: &[&str]| {
        let mut args = vec![
            "stream",
            "-s",
            "uring,uring-zc",
            "-l",
            "16K",
            "--recv",
            "verify",
            "-t",
            "0.3",
            "-n",
            "1",
            "--warmup",
            "0.1",
        ];
        args.extend_from_slice(extra);
        let v = json_of(&args);
        let rows = v["results"].as_array().unwrap().clone();
        for r in &rows {
            assert_eq!(r["repeats"][0]["integrity"]["mismatches"], 0, "{r}");
        }
        rows.iter()
            .map(|r| {
                let share = r["arena_registered"].as_f64();
                // Of the sends that went zero-copy, the share by index.
                let z = &r["repeats"][0]["zerocopy"];
                let by_index = z["registered"].as_f64().zip(z["attempts"].as_f64());
                (
                    r["strategy"].as_str().unwrap().to_string(),
                    r["uring_buffers"].as_str().unwrap().to_string(),
                    share,
                    by_index.map(|(r, a)| r / a.max(1.0)),
                )
            })
            .collect::<Vec<_>>()
    };
    let auto = buffers(&[]);
    let zc = auto.iter().find(|x| x.0 == "uring-zc").unwrap();
    assert_eq!(zc.1, "arena", "{auto:?}");
    assert!(zc.2.unwrap() > 0.0, "requests by index: {auto:?}");
    // On a loaded host notifications slow down until the default 4 MiB arena is all in
    // flight and messages go from the heap, by address; an arena that holds them all sends
    // nearly every zero-copy send by index.
    let large = buffers(&["--arena", "64M"]);
    let zc = large.iter().find(|x| x.0 == "uring-zc").unwrap();
    assert!(zc.3.unwrap() > 0.9, "zero-copy sends by index: {large:?}");
    let uring = auto.iter().find(|x| x.0 == "uring").unwrap();
    assert_eq!(
        (uring.1.as_str(), uring.2),
        ("arena", Some(0.0)),
        "{auto:?}"
    );
    for x in buffers(&["--arena", "off"]) {
        assert_eq!((x.1.as_str(), x.2), ("owned", None), "{x:?}");
    }
}

/// As a normal user, zero-copy sends run into the locked-memory limit (`ulimit -l`, 8 MiB
/// here; root is exempt): they must fall back to copy, counted by reason, and the run must end
/// on time. Before, uring-zc resent a chain the kernel refused for ever and never ended.
#[test]
fn zero_copy_past_the_locked_memory_limit_falls_back_and_ends_as_a_normal_user() {
    let stream = ["-s", "uring-zc,msg-zerocopy", "-l", "1M,16M"];
    let Some((o, v)) = stream_as_a_normal_user(&stream) else {
        return;
    };
    let rows = v["results"].as_array().unwrap();
    assert_eq!(rows.len(), 4);
    for r in rows {
        let f = &r["zerocopy"]["fallbacks"];
        let fell = f["enobufs"].as_u64().unwrap() + f["enomem"].as_u64().unwrap();
        let name = format!("{} {}", r["strategy"], r["size_bytes"]);
        assert!(
            r["throughput_gbps"]["median"].as_f64().unwrap() > 0.0,
            "{name}: {r}"
        );
        // 16 MiB pinned at once is past the 8 MiB limit: every such send went by copy.
        if r["size_bytes"] == 16 << 20 {
            assert!(fell > 0, "{name}: no fallback counted: {f}");
            let warned = r["warnings"].as_array().unwrap().iter().any(|w| {
                let w = w.as_str().unwrap();
                w.contains("sends went by copy") && w.contains("ulimit -l")
            });
            assert!(warned, "{name}: {:?}", r["warnings"]);
        }
    }
    assert!(o.contains("sends went by copy"), "{o}");
}

/// The first Ctrl-C stops a run within about a second, whatever it waits for: here an io_uring
/// sender whose receiver stopped reading (before, the run hung in its sends for ever).
#[test]
fn the_first_interrupt_stops_a_run_stuck_on_a_stalled_receiver() {
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap().to_string();
    // Accepts and never reads.
    let held = std::thread::spawn(move || {
        let c = l.accept().map(|(c, _)| c);
        std::thread::sleep(Duration::from_secs(15));
        drop(c);
    });
    let args = [
        "stream",
        "-s",
        "uring",
        "--connect",
        &addr,
        "-t",
        "30s",
        "-n",
        "1",
    ];
    let (code, took, _, _) = interrupt(
        &[&args[..], &["--warmup", "0"]].concat(),
        Duration::from_secs(2),
    );
    assert!(took < Duration::from_secs(3), "{took:?}");
    assert_eq!(code, Some(130));
    drop(held);
}

/// Without a signal too: a run whose receiver stops reading ends by itself a few seconds after
/// its window, the repeat recorded as cut short with the reason in one vocabulary, for blocking
/// paths (their send timeout), io_uring and MSG_ZEROCOPY (their connections shut down).
#[test]
fn a_stalled_receiver_cannot_hold_a_run() {
    for path in ["copy", "sendfile", "uring", "msg-zerocopy"] {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap().to_string();
        let held = std::thread::spawn(move || {
            let c = l.accept().map(|(c, _)| c);
            std::thread::sleep(Duration::from_secs(20));
            drop(c);
        });
        let t0 = std::time::Instant::now();
        let out = std::process::Command::new("timeout")
            .args(["-s", "KILL", "25"])
            .arg(assert_cmd::cargo::cargo_bin("sendpath"))
            .args([
                "stream",
                "-s",
                path,
                "--connect",
                &addr,
                "-t",
                "1s",
                "-n",
                "1",
            ])
            .args(["--warmup", "0"])
            .output()
            .unwrap();
        let e = String::from_utf8_lossy(&out.stderr);
        // The window, then at most the stall limit and the senders' grace.
        assert!(
            t0.elapsed() < Duration::from_secs(15),
            "{path}: {:?}",
            t0.elapsed()
        );
        assert_ne!(
            out.status.code(),
            Some(137),
            "{path}: killed by the timeout: {e}"
        );
        // The window was measured and the run ends normally, its repeat cut short and told
        // alike for every path, from TCP's own counters (before: a blocking path whose send
        // timeout found a short send said nothing, and every row said the bytes arrived).
        let o = String::from_utf8_lossy(&out.stdout);
        assert!(out.status.success(), "{path}: {o}\n{e}");
        let all = format!("{o}{e}");
        assert!(
            all.contains("1 window(s) cut short: no progress for ")
                && all.contains(
                    ": the receiver stopped taking bytes (it advertised a TCP receive window of 0"
                ),
            "{path}: {all}"
        );
        assert!(!all.contains("arrived"), "{path}: {all}");
        drop(held);
    }
}

/// Runs `args`, sends SIGINT after `after`, and returns its exit code, how long it took to
/// stop, and what it printed on stderr and stdout; fails if it is still running 5 s after the
/// signal.
fn interrupt(args: &[&str], after: Duration) -> (Option<i32>, Duration, String, String) {
    let dir = tempfile::tempdir().unwrap();
    let (log, out) = (dir.path().join("stderr"), dir.path().join("stdout"));
    let mut child = std::process::Command::new(assert_cmd::cargo::cargo_bin("sendpath"))
        .args(args)
        .stdout(std::fs::File::create(&out).unwrap())
        .stderr(std::fs::File::create(&log).unwrap())
        .spawn()
        .unwrap();
    std::thread::sleep(after);
    let pid = rustix::process::Pid::from_raw(child.id() as i32).unwrap();
    rustix::process::kill_process(pid, rustix::process::Signal::INT).unwrap();
    let t0 = std::time::Instant::now();
    let status = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s;
        }
        if t0.elapsed() > Duration::from_secs(5) {
            let _ = child.kill();
            panic!("{args:?}: still running 5 s after Ctrl-C");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let read = |p| std::fs::read_to_string(p).unwrap();
    (status.code(), t0.elapsed(), read(&log), read(&out))
}

/// After Ctrl-C every command exits 130 and says it was interrupted (before: serve, agent and
/// transfer exited 0, calibrate 1).
#[test]
fn every_command_exits_130_after_a_signal_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let profile = dir.path().join("profile.json");
    let (a1, a2, a3) = (
        common::free_loopback_addr(),
        common::free_loopback_addr(),
        common::free_loopback_addr(),
    );
    let cases: [&[&str]; 7] = [
        &["stream", "-t", "30s", "-n", "1", "--warmup", "0"],
        &["rr", "-t", "30s", "-n", "1", "--warmup", "0"],
        &["transfer", "-l", "8M", "--cache", "warm", "-n", "1000"],
        &["calibrate", "-t", "1s", "--out", profile.to_str().unwrap()],
        &["serve", "--listen", &a1],
        &["agent", "--listen", &a2],
        &["sink", "--listen", &a3],
    ];
    for args in cases {
        let (code, _, err, _) = interrupt(args, Duration::from_millis(1500));
        assert_eq!(code, Some(130), "{args:?}: {err}");
        assert!(err.contains("interrupted"), "{args:?}: {err}");
    }
    assert!(
        !profile.exists(),
        "an interrupted calibration writes no profile"
    );
}

/// An interrupted transfer says so in its results and summary, and its table marks each cell
/// that holds fewer rounds than asked (before: "median of 1000 rounds" over 1-2 transfers).
#[test]
fn an_interrupted_transfer_says_so_and_counts_its_rounds() {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("t.json");
    let args = [
        "transfer",
        "-l",
        "8M",
        "--cache",
        "warm",
        "-s",
        "sendfile,read-send",
        "--chunk",
        "64K",
        "-n",
        "1000",
        "--json",
        json.to_str().unwrap(),
    ];
    let (code, _, err, summary) = interrupt(&args, Duration::from_millis(1500));
    assert_eq!(code, Some(130), "{err}");
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["interrupted"], true, "{v}");
    let held = v["rows"][0]["repeats"].as_array().unwrap().len();
    assert!(held > 0 && held < 1000, "{held}");
    assert!(summary.contains("**Interrupted.**"), "{summary}");
    assert!(summary.contains(&format!("n={held}")), "{summary}");
}

/// A results file that cannot be written fails the run naming it (before: written beside and
/// renamed over the path, so a full device behind a symlink was replaced and the run exited 0),
/// and two outputs to one file are refused before anything runs (before: the CSV replaced the
/// JSON).
#[test]
fn results_that_cannot_be_written_fail_naming_the_file() {
    let dir = tempfile::tempdir().unwrap();
    let full = dir.path().join("full.json");
    std::os::unix::fs::symlink("/dev/full", &full).unwrap();
    let f = full.to_str().unwrap();
    let runs: [&[&str]; 4] = [
        &[
            "stream", "-t", "100ms", "-n", "1", "--warmup", "0", "--json", f,
        ],
        &[
            "stream", "-t", "100ms", "-n", "1", "--warmup", "0", "--csv", f,
        ],
        &["rr", "-t", "100ms", "-n", "1", "--warmup", "0", "--json", f],
        &[
            "calibrate",
            "-l",
            "4K",
            "-n",
            "1",
            "--tiebreak-rounds",
            "0",
            "-t",
            "100ms",
            "--warmup",
            "0",
            "--out",
        ],
    ];
    let profile = dir.path().join("p.json");
    for args in runs {
        let mut cmd = sendpath();
        cmd.args(args);
        if args[0] == "calibrate" {
            cmd.arg(&profile).args(["--json", f]);
        }
        let a = cmd.timeout(Duration::from_secs(60)).assert().failure();
        let e = stderr_of(&a);
        assert!(
            e.contains(&format!("cannot write {f}")) && e.contains("No space left"),
            "{args:?}: {e}"
        );
        assert!(full.is_symlink(), "{args:?}: the symlink was replaced");
    }
    let same = dir.path().join("r.json");
    let s = same.to_str().unwrap();
    let dotted = format!("{}/./r.json", dir.path().display());
    fails_with(
        &["stream", "--json", s, "--csv", &dotted],
        &["--json and --csv both write", "give each its own file"],
    );
    fails_with(
        &["calibrate", "--out", s, "--json", s],
        &["--out and --json both write"],
    );
    fails_with(&["stream", "--json", "-", "--csv", "-"], &["both write -"]);
    assert!(!same.exists(), "nothing ran");
}

/// The man pages and completions come from the flags' own definitions: every long flag that
/// `--help` shows is on the command's page and in the bash completion, and the completion of
/// `stream -s` offers every path.
#[test]
fn man_pages_and_completions_cover_every_flag() {
    let bash = String::from_utf8(
        sendpath()
            .args(["completions", "bash"])
            .assert()
            .success()
            .get_output()
            .stdout
            .clone(),
    )
    .unwrap();
    let paths: Vec<&str> = sendpath::Strategy::ALL.iter().map(|s| s.name()).collect();
    assert!(
        bash.contains(&format!("\"{} all\"", paths.join(" "))),
        "no path list for -s"
    );
    let mut pages = 0;
    for cmd in [
        "probe",
        "stream",
        "rr",
        "sink",
        "sweep",
        "report",
        "serve",
        "http-load",
        "calibrate",
        "transfer",
        "agent",
        "compare",
        "completions",
        "man",
    ] {
        let help = stdout_of(&[cmd, "--help"]);
        let page = stdout_of(&["man", cmd]);
        assert!(
            page.starts_with(".ie")
                && page.contains(&format!("sendpath\\-{}", cmd.replace('-', "\\-"))),
            "{cmd}"
        );
        let flags: Vec<&str> = help
            .split_whitespace()
            .filter(|w| w.starts_with("--") && w.len() > 2)
            .map(|w| w.trim_end_matches([',', '.', ')', ':', ';']))
            .collect();
        assert!(!flags.is_empty(), "{cmd}: no flags in its help");
        for f in flags.iter().filter(|f| {
            f.chars()
                .skip(2)
                .all(|c| c.is_ascii_lowercase() || c == '-')
        }) {
            assert!(
                page.contains(&f.replace('-', "\\-")),
                "{cmd}: {f} is not on its man page"
            );
            assert!(bash.contains(f), "{cmd}: {f} is not in the bash completion");
        }
        pages += 1;
    }
    assert_eq!(pages, 14);
    // --out writes sendpath.1 and one page per command, nothing for clap's `help`.
    let dir = tempfile::tempdir().unwrap();
    sendpath()
        .args(["man", "--out"])
        .arg(dir.path())
        .assert()
        .success();
    let mut written: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    written.sort();
    assert_eq!(written.len(), 15, "{written:?}");
    assert!(
        written.contains(&"sendpath-stream.1".to_string()),
        "{written:?}"
    );
    assert!(!written.iter().any(|w| w.contains("help")), "{written:?}");
}

/// What `sendpath ARGS` printed on standard output, after checking it succeeded.
fn stdout_of(args: &[&str]) -> String {
    let out = sendpath().args(args).assert().success();
    String::from_utf8(out.get_output().stdout.clone()).unwrap()
}

/// `compare`: a run against itself is within noise everywhere; a run whose point lost half
/// its throughput fails under --threshold naming it; other studies, damaged files, runs with
/// no point in common and a bad threshold are refused saying what to do.
#[test]
fn compare_judges_points_and_refuses_what_it_cannot_compare() {
    let data = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/previous-main");
    let rows = data.join("results.json");
    let out = sendpath()
        .arg("compare")
        .args([&rows, &rows])
        .args(["--threshold", "5%"])
        .assert()
        .success();
    let md = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(md.contains("Nothing recorded differs"), "{md}");
    assert!(
        md.contains("6 point(s): 0 faster, 0 slower, 6 within noise."),
        "{md}"
    );
    let dir = tempfile::tempdir().unwrap();
    let page = dir.path().join("compare.html");
    sendpath()
        .arg("compare")
        .args([&rows, &rows])
        .arg("--html")
        .arg(&page)
        .assert()
        .success();
    let html = std::fs::read_to_string(&page).unwrap();
    assert!(
        html.matches("<svg").count() >= 1 && html.contains("<table>"),
        "{html}"
    );
    let mut v: Value = serde_json::from_str(&std::fs::read_to_string(&rows).unwrap()).unwrap();
    let first = &mut v["results"][0];
    let label = format!("stream {} ", first["strategy"].as_str().unwrap());
    for r in first["repeats"].as_array_mut().unwrap() {
        let g = r["throughput_gbps"].as_f64().unwrap();
        r["throughput_gbps"] = (g / 2.0).into();
    }
    let half = dir.path().join("half.json");
    std::fs::write(&half, v.to_string()).unwrap();
    let out = sendpath()
        .arg("compare")
        .args([&rows, &half])
        .args(["--threshold", "5%"])
        .output()
        .unwrap();
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{e}");
    assert!(
        e.contains(&format!("slower: {label}")) && e.contains("1 point(s) slower"),
        "{e}"
    );
    // Nothing in common: every size changed.
    for r in v["results"].as_array_mut().unwrap() {
        r["size_bytes"] = 12345.into();
    }
    let other = dir.path().join("other.json");
    std::fs::write(&other, v.to_string()).unwrap();
    let torn = dir.path().join("torn.json");
    let text = std::fs::read_to_string(&rows).unwrap();
    std::fs::write(&torn, &text[..text.len() / 2]).unwrap();
    let http = data.join("http-results.json");
    for (b, says) in [
        (&other, "no point in common"),
        (&torn, "not valid JSON (truncated or damaged?)"),
        (&http, "compare two runs of the same study"),
    ] {
        let e = stderr_of(
            &sendpath()
                .arg("compare")
                .args([&rows, b])
                .assert()
                .failure(),
        );
        assert!(e.contains(says), "{}: {e}", b.display());
    }
    // The server study: requests per second, each point's rounds its repeats.
    let out = sendpath()
        .arg("compare")
        .args([&http, &http])
        .assert()
        .success();
    let md = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(
        md.contains("## requests/s, B against A") && md.contains(" within noise |"),
        "{md}"
    );
    assert!(md.contains(" 0 faster, 0 slower, "), "{md}");
    let e = stderr_of(
        &sendpath()
            .arg("compare")
            .args([&rows, &rows])
            .args(["--threshold", "150%"])
            .assert()
            .failure(),
    );
    assert!(e.contains("under 100%"), "{e}");
}
