//! What stream rows count beyond throughput: each message's latency (`--msg-latency`), context
//! switches and system calls by role, and the copies each path makes by construction.

mod common;
use common::{fails_with, sendpath, skip, stderr_of};
use serde_json::Value;

fn run_json(args: &[&str]) -> Option<Value> {
    let dir = tempfile::tempdir().unwrap();
    let json = dir.path().join("r.json");
    let a = sendpath()
        .args(args)
        .args(["--json", json.to_str().unwrap()])
        .assert();
    let out = a.get_output();
    if !out.status.success() {
        let e = stderr_of(&a);
        if e.contains("raw_syscalls") {
            skip(&e);
            return None;
        }
        panic!("sendpath {}: {e}", args.join(" "));
    }
    Some(serde_json::from_str(&std::fs::read_to_string(json).unwrap()).unwrap())
}

/// A short stream (one 0.3 s window) of 4 KiB messages by `paths`, with `extra` flags, as
/// [`run_json`] runs it.
fn stream_4k(paths: &str, extra: &[&str]) -> Option<Value> {
    let mut args = vec!["stream", "-s", paths, "-l", "4K", "-t", "0.3s", "-n", "1"];
    args.extend_from_slice(extra);
    run_json(&args)
}

fn row<'a>(v: &'a Value, path: &str) -> &'a Value {
    v["results"]
        .as_array()
        .unwrap()
        .iter()
        .find(|r| r["strategy"] == path)
        .unwrap_or_else(|| panic!("no {path} row"))
}

/// `--metrics copies`: the kernel counted every byte a reading receiver copied into user
/// memory and none of a discarding one's, whatever the sender's path; a counter the kernel
/// refused is null with its reason, never 0.
#[test]
fn the_kernel_counts_what_each_receiver_copied() {
    let per_byte = |recv: &str| -> Option<Value> {
        let a = sendpath()
            .args(["stream", "-s", "copy,sendfile", "-l", "64K", "-t", "0.3s"])
            .args([
                "--warmup",
                "0.1s",
                "-n",
                "1",
                "--metrics",
                "copies",
                "--recv",
                recv,
            ])
            .args(["--json", "-"])
            .assert();
        if !a.get_output().status.success() {
            let e = stderr_of(&a);
            assert!(e.contains("--metrics copies:"), "{e}");
            skip(&e);
            return None;
        }
        Some(common::stdout_json(&a))
    };
    let Some(copying) = per_byte("copy") else {
        return;
    };
    // rr too: both ends read what the other sent, every byte of it copied.
    let a = sendpath()
        .args([
            "rr",
            "-s",
            "copy",
            "--response",
            "4K",
            "-t",
            "0.3s",
            "--warmup",
            "0.1s",
        ])
        .args(["-n", "1", "--metrics", "copies", "--json", "-"])
        .assert()
        .success();
    let rr = common::stdout_json(&a);
    let k = &rr["results"][0]["kernel_copies"];
    let r = k["receive_per_byte"].as_f64().unwrap();
    assert!((0.98..=1.02).contains(&r), "rr: {k}");
    let discarding = per_byte("discard").unwrap();
    let counters = copying["environment"]["copy_counters"].as_array().unwrap();
    assert_eq!(counters.len(), 3, "{counters:?}");
    for path in ["copy", "sendfile"] {
        let k = &row(&copying, path)["kernel_copies"];
        let r = k["receive_per_byte"].as_f64().unwrap();
        assert!((0.98..=1.02).contains(&r), "{path}: {k}");
        let d = row(&discarding, path)["kernel_copies"]["receive_per_byte"]
            .as_f64()
            .unwrap();
        assert!(d < 0.01, "{path}: discarding copied {d} per byte");
        for (field, counts) in [("send_per_byte", "send"), ("deferred_per_byte", "deferred")] {
            let c = counters.iter().find(|c| c["counts"] == counts).unwrap();
            match c["unavailable"].as_str() {
                Some(why) => {
                    assert!(k[field].is_null(), "{path}: {field} uncounted but {k}");
                    assert!(!why.is_empty());
                }
                None => assert!(k[field].is_number(), "{path}: {field}: {k}"),
            }
        }
    }
}

#[test]
fn every_memory_message_is_timed_and_still_verified() {
    let v = run_json(&[
        "stream",
        "-s",
        "copy,msg-zerocopy,sendfile",
        "-l",
        "4K",
        "-t",
        "0.4s",
        "-n",
        "1",
        "--warmup",
        "0.1s",
        "--msg-latency",
        "--recv",
        "verify",
    ])
    .unwrap();
    for path in ["copy", "msg-zerocopy"] {
        let r = row(&v, path);
        let l = &r["latency_us"];
        let (p50, p99) = (l["p50"].as_f64().unwrap(), l["p99"].as_f64().unwrap());
        // From a send call to the read of the message's last byte: more than nothing, less
        // than the whole window.
        assert!(p50 > 0.0 && p50 <= p99 && p99 < 400_000.0, "{path}: {l}");
        assert_eq!(r["integrity"]["mismatches"], 0, "{path}");
        assert!(
            r["integrity"]["bytes_verified"].as_u64().unwrap() > 0,
            "{path}"
        );
        assert!(!r["repeats"][0]["latency_hist_ns"]
            .as_array()
            .unwrap()
            .is_empty());
    }
    // File paths send the file's bytes: no stamp, so no latency (null, not 0).
    assert!(row(&v, "sendfile")["latency_us"].is_null());
}

#[test]
fn rows_count_switches_by_role_and_name_the_copies_of_their_path() {
    let v = stream_4k("copy,read-send", &[]).unwrap();
    let c = row(&v, "copy");
    let rep = &c["repeats"][0];
    for role in ["switches_sender", "switches_receiver"] {
        assert!(rep[role]["voluntary"].is_u64(), "{role}: {rep}");
        assert!(c["per_mib"][role].is_f64(), "{role}");
    }
    // Not asked for: null, and the environment says why.
    assert!(rep["syscalls_sender"].is_null());
    let why = v["environment"]["syscalls_unavailable"].as_str().unwrap();
    assert!(why.contains("--metrics syscalls"), "{why}");
    let copies = |r: &Value| r["data_copies"].as_array().unwrap().len();
    assert_eq!(copies(c), 2);
    assert_eq!(copies(row(&v, "read-send")), 4);
}

#[test]
fn system_calls_are_counted_per_send_when_asked() {
    let Some(v) = stream_4k("copy", &["--metrics", "syscalls"]) else {
        return;
    };
    assert!(v["environment"]["syscalls_unavailable"].is_null());
    let r = row(&v, "copy");
    // One send() per 4 KiB message: 256 per MiB, and a few more around the window.
    let per_mib = r["per_mib"]["syscalls_sender"].as_f64().unwrap();
    assert!((250.0..300.0).contains(&per_mib), "{per_mib}");
    assert!(r["per_mib"]["syscalls_receiver"].as_f64().unwrap() > 0.0);
}

#[test]
fn system_calls_are_refused_for_more_threads_than_are_counted() {
    // 40 sender threads and their 40 receivers: more than the 64 counters, refused before a
    // window runs (a window would have left them null).
    fails_with(
        &[
            "stream",
            "-P",
            "1,40",
            "--metrics",
            "syscalls",
            "-t",
            "0.1s",
        ],
        &[
            "--metrics syscalls",
            "at most 64 threads",
            "has 80",
            "fewer threads",
        ],
    );
    fails_with(
        &[
            "rr",
            "--concurrency",
            "33",
            "--metrics",
            "syscalls",
            "-t",
            "0.1s",
        ],
        &["at most 64 threads", "66"],
    );
}

#[test]
fn msg_latency_refuses_what_it_cannot_time() {
    fails_with(
        &["stream", "--msg-latency", "--recv", "discard", "-t", "0.1s"],
        &["--msg-latency", "--recv discard"],
    );
    fails_with(
        &["stream", "--msg-latency", "-s", "sendfile", "-t", "0.1s"],
        &["--msg-latency", "memory path"],
    );
    fails_with(
        &[
            "stream",
            "--msg-latency",
            "-l",
            "32",
            "--fields",
            "8",
            "-t",
            "0.1s",
        ],
        &["--msg-latency", "at least 64 B"],
    );
    fails_with(&["stream", "--metrics", "everything"], &["--metrics"]);
}

#[test]
fn burst_load_records_what_each_allocation_mode_allocated() {
    let v = run_json(&[
        "stream",
        "-s",
        "copy",
        "-l",
        "256",
        "-P",
        "2",
        "--alloc",
        "pool,fresh,shared",
        "--burst",
        "200/1ms",
        "-t",
        "0.3s",
        "-n",
        "1",
        "--recv",
        "verify",
    ])
    .unwrap();
    let rows = v["results"].as_array().unwrap();
    let per_message = |alloc: &str| {
        let r = rows.iter().find(|r| r["alloc"] == alloc).unwrap();
        assert_eq!(r["burst"], "200/1ms");
        assert_eq!(r["integrity"]["mismatches"], 0, "{alloc}");
        r["per_mib"]["allocations"].as_f64().unwrap() * 256.0 / 1048576.0
    };
    // A pool, private or shared, allocates nothing per message; fresh allocates its buffer.
    let (pool, shared, fresh) = (
        per_message("pool"),
        per_message("shared"),
        per_message("fresh"),
    );
    assert!(pool < 0.05 && shared < 0.05, "pool {pool}, shared {shared}");
    assert!((0.9..1.5).contains(&fresh), "fresh {fresh}");
}

#[test]
fn one_buffer_and_several_field_messages_of_a_size_mix_stay_in_order() {
    // With two fields a 1-byte message is one buffer (batched by send_bufs) and a 4 KiB one
    // two (sent at once): the batch must go first.
    let v = run_json(&[
        "stream",
        "-s",
        "gather,uring",
        "--fields",
        "2",
        "--size-mix",
        "1:50,4K:50",
        "-t",
        "0.2s",
        "-n",
        "1",
        "--recv",
        "verify",
    ])
    .unwrap();
    for r in v["results"].as_array().unwrap() {
        assert_eq!(r["integrity"]["mismatches"], 0, "{}", r["strategy"]);
        assert!(r["integrity"]["bytes_verified"].as_u64().unwrap() > 0);
    }
}

#[test]
fn a_burst_that_never_sends_or_a_shared_pool_where_none_is_is_refused() {
    fails_with(&["stream", "--burst", "0/1ms"], &["--burst", "never sends"]);
    fails_with(&["stream", "--burst", "10"], &["--burst", "MESSAGES/GAP"]);
    fails_with(
        &[
            "stream",
            "-s",
            "uring",
            "--connections",
            "4",
            "--burst",
            "10/1ms",
            "-t",
            "0.1s",
        ],
        &["--burst", "--connections"],
    );
    fails_with(&["rr", "--alloc", "shared"], &["--alloc shared", "stream"]);
    fails_with(
        &["stream", "--alloc", "heap"],
        &["--alloc", "pool, fresh or shared"],
    );
}

#[test]
fn uring_splice_enters_the_kernel_once_per_pair() {
    let Some(v) = stream_4k(
        "uring-splice",
        &["--metrics", "syscalls", "--recv", "discard"],
    ) else {
        return;
    };
    // One io_uring_enter submits the linked pair and waits for both halves: 256 per MiB of
    // 4 KiB messages (a wait per completion made three).
    let per_mib = row(&v, "uring-splice")["per_mib"]["syscalls_sender"]
        .as_f64()
        .unwrap();
    assert!((250.0..300.0).contains(&per_mib), "{per_mib}");
}
