//! `sendpath transfer` and `sweep --preset file-transfer`, run as a user would.

mod common;

use common::{fails_with, sendpath};
use serde_json::Value;

/// Whether cold runs can drop files from the page cache here (a disk-backed temp dir or
/// /var/tmp), else the reason.
fn disk_backed_tmp() -> Result<(), String> {
    let fs = |d: &str| -> Option<String> {
        let out = std::process::Command::new("stat")
            .args(["-f", "-c", "%T", d])
            .output()
            .ok()?;
        Some(String::from_utf8_lossy(&out.stdout).trim().to_string())
    };
    let tmp = std::env::temp_dir();
    let memory = |t: &Option<String>| matches!(t.as_deref(), Some("tmpfs" | "ramfs"));
    let (a, b) = (fs(tmp.to_str().unwrap()), fs("/var/tmp"));
    if memory(&a) && memory(&b) {
        return Err(format!(
            "the temp dir ({a:?}) and /var/tmp ({b:?}) keep files in memory: cold transfers cannot be cold"
        ));
    }
    Ok(())
}

#[test]
fn transfer_times_whole_files_warm_and_cold_with_every_method() {
    if let Err(reason) = disk_backed_tmp() {
        common::skip(&reason);
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let (json, csv) = (dir.path().join("t.json"), dir.path().join("t.csv"));
    let out = sendpath()
        .args([
            "transfer",
            "-l",
            "5M,9M",
            "-s",
            "read-send,mmap-send,sendfile,splice,uring-splice",
        ])
        .args([
            "--chunk", "4K,1M", "-n", "2", "--seed", "5", "--recv", "discard",
        ])
        .arg("--json")
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        text.contains("### warm file, receiver discard")
            && text.contains("### cold file, receiver discard")
            && text.contains("sendfile saves vs read-send 4KiB")
            && text.contains("Context switches per transfer")
            && text.contains("| read-send 4KiB | 4 | 2 | disk -> page cache (DMA)")
            && text.contains("| sendfile | 2 | 0 |"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["schema_version"], 1);
    assert_eq!(v["settings"]["sink"], "discard");
    let rows = v["rows"].as_array().unwrap();
    let (mut switches, mut cold) = (0, Vec::new());
    // 2 sizes x 2 caches x (2 read-send chunks + 4 paths).
    assert_eq!(rows.len(), 24, "{v}");
    for r in rows {
        let size = r["file_bytes"].as_u64().unwrap();
        let reps = r["repeats"].as_array().unwrap();
        assert_eq!(common::rounds_of(r), [0, 1], "{r}");
        for x in reps {
            assert_eq!(x["bytes_received"].as_u64().unwrap(), size, "{r}");
            assert!(x["seconds"].as_f64().unwrap() > 0.0);
            assert!(x["cpu_receiver_ms"].as_f64().is_some());
            // Each thread's context switches, both kinds, are read for every transfer. How
            // many of each kind depends on the host: a receiver that never waits for bytes is
            // preempted instead of blocking.
            for role in ["switches_sender", "switches_receiver"] {
                for kind in ["voluntary", "involuntary"] {
                    let n = x[role][kind].as_u64();
                    assert!(n.is_some(), "{role}.{kind}: {x}");
                    switches += n.unwrap_or(0);
                }
            }
            let resident = x["resident_fraction"].as_f64().unwrap();
            match r["cache"].as_str().unwrap() {
                // A loaded host may keep some pages past every drop: the row must say so.
                "cold" => {
                    cold.push(resident);
                    let warned = r["warnings"]
                        .to_string()
                        .contains("still in the page cache");
                    assert!(resident < 0.2 || warned, "{resident} cached, unsaid: {r}");
                }
                _ => assert!(resident > 0.95, "a warm start found {resident} cached: {r}"),
            }
        }
    }
    // Most cold starts find the file dropped from the page cache.
    let dropped = cold.iter().filter(|&&f| f < 0.2).count();
    assert!(
        dropped * 2 > cold.len(),
        "cold starts found cached: {cold:?}"
    );
    // 48 transfers of warm and cold files do not all run without a single context switch:
    // the counters are read, not left at zero.
    assert!(switches > 0, "no context switch counted in any transfer");
    system_calls_match_how_each_path_sends(&v);
    a_discarding_receiver_copied_nothing(&v);
    let labels: std::collections::BTreeSet<&str> =
        rows.iter().map(|r| r["label"].as_str().unwrap()).collect();
    assert_eq!(
        labels.into_iter().collect::<Vec<_>>(),
        [
            "mmap-send",
            "read-send 1MiB",
            "read-send 4KiB",
            "sendfile",
            "splice",
            "uring-splice"
        ]
    );
    // Two timed rounds per point, and the transfer that counted system calls when it could.
    let counted = usize::from(v["syscalls_unavailable"].is_null());
    let lines = std::fs::read_to_string(&csv).unwrap();
    assert_eq!(lines.lines().count(), 1 + 24 * (2 + counted), "{lines}");
    let last = |l: &str| l.rsplit(',').next().unwrap().to_string();
    let flags: Vec<String> = lines.lines().skip(1).map(last).collect();
    assert_eq!(flags.iter().filter(|f| *f == "true").count(), 24 * counted);
}

/// The kernel's copies are counted in the same untimed transfer: a discarding receiver copied
/// nothing into user memory (but the sender's one-byte acknowledgement), whatever the path.
fn a_discarding_receiver_copied_nothing(v: &Value) {
    let counters = v["environment"]["copy_counters"].as_array().unwrap();
    let receive = counters.iter().find(|c| c["counts"] == "receive");
    if let Some(why) = receive.map_or(Some("no counter loaded"), |c| c["unavailable"].as_str()) {
        return common::skip(&format!("kernel copies: {why}"));
    }
    for r in v["rows"].as_array().unwrap() {
        let k = &r["kernel_copies"];
        assert_eq!(k["receive_bytes"], 1, "the acknowledgement only: {r}");
        assert!(k["receive_per_byte"].as_f64().unwrap() < 1e-6, "{k}");
        assert!(
            r["repeats"][0]["kernel_copied"].is_null(),
            "a timed round counted"
        );
    }
}

/// System calls are counted in one transfer per point after the timed rounds, never in a timed
/// one (the counter slows every call). read-send in 4 KiB chunks makes at least a pread and a
/// send per chunk, as the study counts; sendfile far fewer calls than there are 4 KiB chunks;
/// every receiver reads.
fn system_calls_match_how_each_path_sends(v: &Value) {
    for r in v["rows"].as_array().unwrap() {
        for x in r["repeats"].as_array().unwrap() {
            assert!(x["syscalls_sender"].is_null(), "a timed round counted: {x}");
            assert!(
                x["syscalls_receiver"].is_null(),
                "a timed round counted: {x}"
            );
        }
    }
    if let Some(why) = v["syscalls_unavailable"].as_str() {
        return common::skip(why);
    }
    for r in v["rows"].as_array().unwrap() {
        let chunks = r["file_bytes"].as_u64().unwrap() / 4096;
        let x = &r["counted"];
        assert_eq!(x["bytes_received"], r["file_bytes"], "{r}");
        let tx = x["syscalls_sender"]
            .as_u64()
            .expect("the sender's calls are counted");
        assert!(x["syscalls_receiver"].as_u64().unwrap() > 0, "{x}");
        assert_eq!(r["syscalls_sender"].as_f64(), Some(tx as f64), "{r}");
        match r["label"].as_str().unwrap() {
            "read-send 4KiB" => assert!(tx >= 2 * chunks, "{tx} calls for {chunks} chunks"),
            "sendfile" => assert!(tx < chunks / 8, "{tx} calls for {chunks} 4 KiB pages"),
            _ => {}
        }
    }
}

/// Each method's transfer, into a sink file of its own, is the source byte for byte (one sink
/// file for both would hold only the last transfer: the receiver recreates it per transfer).
#[test]
fn the_receiver_writes_the_file_it_was_sent() {
    let dir = tempfile::tempdir().unwrap();
    for method in ["sendfile", "uring-splice"] {
        let sink = dir.path().join(format!("{method}.bin"));
        sendpath()
            .args(["transfer", "-l", "3M", "-s", method, "--cache", "warm"])
            .args(["-n", "1", "--fsync", "--sink-file"])
            .arg(&sink)
            .assert()
            .success();
        let got = std::fs::read(&sink).unwrap();
        assert_eq!(got.len(), 3 << 20, "{method}");
        let mut want = vec![0u8; got.len()];
        sendpath_host::pattern::fill(&mut want, 0);
        let first = got.iter().zip(&want).position(|(a, b)| a != b);
        assert_eq!(
            first, None,
            "{method}: the received file differs from the source at this offset"
        );
    }
}

#[test]
fn bad_transfer_input_is_refused_with_advice() {
    fails_with(
        &["transfer", "--cache", "lukewarm"],
        &["unknown cache state `lukewarm`", "warm,cold"],
    );
    fails_with(
        &["transfer", "-s", "copy", "-l", "1M"],
        &["copy sends from memory", "read-send, mmap-send"],
    );
    fails_with(&["transfer", "--fsync"], &["--sink-file"]);
    fails_with(
        &["transfer", "-l", "1K"],
        &["a file size must be between 4KiB"],
    );
    fails_with(
        &["sweep", "--preset", "file-transfer", "-t", "1s"],
        &["--duration and --warmup do not apply"],
    );
    let out = sendpath()
        .args(["sweep", "--list-presets"])
        .assert()
        .success();
    let text = String::from_utf8_lossy(&out.get_output().stdout).into_owned();
    assert!(
        text.contains("file-transfer") && text.contains("7 MB..1 GB"),
        "{text}"
    );
}

/// A receiver that cannot write its sink file says so: before, the sender's "connection reset
/// by peer" was all the error said.
#[test]
fn a_sink_file_that_cannot_be_written_is_named_as_the_cause() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().to_str().unwrap();
    common::fails_with(
        &[
            "transfer",
            "-l",
            "1M",
            "-s",
            "sendfile",
            "-n",
            "1",
            "--sink-file",
            d,
        ],
        &["--sink-file", "the receiver failed", "cannot create it"],
    );
    if std::path::Path::new("/dev/full").exists() {
        common::fails_with(
            &[
                "transfer",
                "-l",
                "1M",
                "-s",
                "sendfile",
                "-n",
                "1",
                "--sink-file",
                "/dev/full",
            ],
            &[
                "--sink-file",
                "is the disk full?",
                "No space left on device",
            ],
        );
    }
}

#[test]
fn transfer_sets_and_records_its_congestion_control_or_refuses_it() {
    let dir = tempfile::tempdir().unwrap();
    let (json, csv) = (dir.path().join("t.json"), dir.path().join("t.csv"));
    sendpath()
        .args(["transfer", "-l", "1M", "-s", "sendfile", "--cache", "warm"])
        .args(["-n", "1", "--congestion", "reno", "--json"])
        .arg(&json)
        .arg("--csv")
        .arg(&csv)
        .assert()
        .success();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["settings"]["tcp_congestion"], "reno", "{v}");
    let lines = std::fs::read_to_string(&csv).unwrap();
    let mut rows = csv::Reader::from_reader(lines.as_bytes());
    let at = rows
        .headers()
        .unwrap()
        .iter()
        .position(|h| h == "tcp_congestion");
    let at = at.expect("a tcp_congestion column");
    for r in rows.records() {
        assert_eq!(&r.unwrap()[at], "reno");
    }
    // Without the flag: the host's default, whatever it is.
    let default = std::fs::read_to_string("/proc/sys/net/ipv4/tcp_congestion_control").unwrap();
    sendpath()
        .args(["transfer", "-l", "1M", "-s", "sendfile", "--cache", "warm"])
        .args(["-n", "1", "--json"])
        .arg(&json)
        .assert()
        .success();
    let v: Value = serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    assert_eq!(v["settings"]["tcp_congestion"], default.trim());
    fails_with(
        &["transfer", "-l", "1M", "--congestion", "no-such-cc"],
        &["--congestion: no-such-cc", "available here"],
    );
}

/// Two transfer runs compare point by point (method, size, cache), in Gbit/s.
#[test]
fn two_transfer_runs_compare() {
    let dir = tempfile::tempdir().unwrap();
    let runs: Vec<_> = ["a.json", "b.json"]
        .iter()
        .map(|f| dir.path().join(f))
        .collect();
    for r in &runs {
        sendpath()
            .args([
                "transfer",
                "-l",
                "3M",
                "-s",
                "sendfile,read-send",
                "-n",
                "2",
            ])
            .args(["--cache", "warm", "--json"])
            .arg(r)
            .assert()
            .success();
    }
    let out = sendpath().arg("compare").args(&runs).assert().success();
    let md = String::from_utf8_lossy(&out.get_output().stdout).to_string();
    assert!(md.contains("## Gbit/s, B against A"), "{md}");
    assert!(md.contains("| sendfile 3MiB warm |"), "{md}");
    assert!(md.contains("4 point(s): "), "{md}");
    // `report` redraws a transfer run's summary from its results alone (before: it read the
    // file as a rows study's and refused it for its schema version).
    let out = dir.path().join("redrawn");
    std::fs::create_dir(&out).unwrap();
    sendpath()
        .arg("report")
        .arg(&runs[0])
        .arg("--out")
        .arg(&out)
        .assert()
        .success();
    let summary = std::fs::read_to_string(out.join("summary.md")).unwrap();
    assert!(summary.contains("sendfile"), "{summary}");
}
