//! The library's examples, run as a new user runs them: each builds against the public API
//! only, does its work on loopback and checks every byte it sent.

mod common;

use std::process::Command;

/// Runs example `name` with `args`; its output, after checking it succeeded.
fn run(name: &str, args: &[&str]) -> Option<String> {
    let exe = match common::example(name, &format!("examples/{name}.rs")) {
        Ok(p) => p,
        Err(why) => {
            common::skip(&why);
            return None;
        }
    };
    let out = Command::new(exe)
        .args(args)
        .output()
        .expect("the example runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{name} {args:?}: {text}{err}");
    Some(text)
}

#[test]
fn the_blocking_sender_gets_every_byte_through_each_memory_path() {
    for path in ["copy", "msg-zerocopy", "uring-zc", "adaptive"] {
        let Some(out) = run("blocking_sender", &[path, "65536", "500"]) else {
            return;
        };
        assert!(
            out.contains("sent 32768000 bytes in 500 messages, received 32768000, 0 wrong"),
            "{out}"
        );
    }
}

#[test]
fn the_ring_server_answers_1000_clients_and_every_byte_is_checked() {
    if !sendpath::probe().io_uring.send_zc {
        return common::skip("io_uring SEND_ZC unavailable here");
    }
    let args = ["--clients", "1000", "--requests", "3", "--body", "16384"];
    let Some(out) = run("ring_server", &args) else {
        return;
    };
    assert!(
        out.contains("1000 of 1000 clients got every byte of 3 responses"),
        "{out}"
    );
    // 3000 heads and 3000 bodies; SEND_ZC went out for the bodies at least.
    assert!(out.contains("in 3000 messages"), "{out}");
}

#[test]
fn the_adaptive_example_runs() {
    let Some(out) = run("adaptive", &[]) else {
        return;
    };
    assert!(out.contains("sent "), "{out}");
}

#[cfg(feature = "tokio")]
#[test]
fn the_tokio_server_answers_1000_clients_and_every_byte_is_checked() {
    let args = ["--clients", "1000", "--requests", "2", "--body", "16384"];
    let Some(out) = run("tokio_server", &args) else {
        return;
    };
    assert!(
        out.contains("1000 of 1000 clients got every byte of 2 responses"),
        "{out}"
    );
}

#[cfg(not(feature = "tokio"))]
#[test]
fn the_tokio_server_needs_the_tokio_feature() {
    common::skip("built without the `tokio` feature: cargo test -p sendpath --features tokio");
}
