//! `examples/bare`, the speed-of-light twin `scripts/overhead-vs-bare` compares sendpath with:
//! every path it has runs on loopback TCP (plain and through the library, `--lib`) and its
//! receiver reads every byte it sent, every io_uring order runs, and bad input is refused with
//! exit status 2.

use std::path::PathBuf;
use std::process::{Command, Output};

mod common;

/// The example's binary (see [`common::example`]).
fn bare() -> Result<PathBuf, String> {
    common::example("bare", "examples/bare")
}

fn run(args: &[&str]) -> Option<Output> {
    run_env(args, None)
}

/// [`run`] with one more environment variable.
fn run_env(args: &[&str], env: Option<(&str, &str)>) -> Option<Output> {
    let b = match bare() {
        Ok(b) => b,
        Err(why) => {
            common::skip(&why);
            return None;
        }
    };
    let mut c = Command::new(b);
    c.args(args).envs(env);
    Some(c.output().expect("bare runs"))
}

/// Sends per second from bare's line, after checking it succeeded.
fn sends(args: &[&str]) -> Option<f64> {
    let out = run(args)?;
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "bare {args:?}: {}{text}",
        String::from_utf8_lossy(&out.stderr)
    );
    let rate = text
        .split(" Gbit/s, ")
        .nth(1)
        .and_then(|r| r.split(' ').next());
    Some(rate.and_then(|r| r.parse().ok()).expect("a sends/s figure"))
}

#[test]
fn every_path_sends_and_its_receiver_reads_every_byte() {
    let paths = [
        "copy",
        "serialize",
        "gather",
        "msg-zerocopy",
        "uring",
        "uring-zc",
        "vmsplice",
        "read-send",
        "mmap-send",
        "sendfile",
        "splice",
        "uring-splice",
    ];
    // Plain, and through the library's path in bare's loop (`--lib`): bare checks in both
    // that its receiver read every byte sent and (`--verify`) that each is the byte written.
    for p in paths {
        for lib in [None, Some("--lib")] {
            let mut args = vec![
                p,
                "16K",
                "--seconds",
                "0.2",
                "--warmup",
                "0.05",
                "--file-size",
                "1M",
                "--verify",
            ];
            args.extend(lib);
            let Some(rate) = sends(&args) else { return };
            assert!(rate > 0.0, "{p} {lib:?} sent nothing");
        }
    }
}

/// `--arena`, bare's own loop and the library's (`--lib`): every byte read and checked, and
/// the library's messages written in its arena (`N in place`): every one for `uring`, whose
/// slots come back at each completion; some for `uring-zc`, whose slots wait for their
/// notifications, so that past the arena's 256 slots of 16 KiB the rest come from the heap.
#[test]
fn the_in_place_twins_send_every_byte_and_the_library_s_from_its_arena() {
    for p in ["uring", "uring-zc"] {
        for lib in [None, Some("--lib")] {
            let mut args = vec![p, "16K", "--seconds", "0.2", "--warmup", "0.05", "--arena"];
            args.extend(lib);
            args.push("--verify");
            let Some(out) = run(&args) else { return };
            let line = String::from_utf8_lossy(&out.stdout);
            assert!(
                out.status.success(),
                "bare {args:?}: {line}{}",
                String::from_utf8_lossy(&out.stderr)
            );
            let sends = field(&line, " sends,");
            assert!(sends > 0, "bare {args:?} sent nothing: {line}");
            match lib {
                Some(_) if p == "uring" => {
                    assert!(field(&line, " in place") >= sends, "bare {args:?}: {line}")
                }
                Some(_) => assert!(field(&line, " in place") > 0, "bare {args:?}: {line}"),
                None => assert!(!line.contains("in place"), "{line}"),
            }
        }
    }
}

/// The number just before `label` in bare's line.
fn field(line: &str, label: &str) -> u64 {
    let before = &line[..line
        .find(label)
        .unwrap_or_else(|| panic!("no `{label}` in {line}"))];
    before
        .rsplit([' ', ','])
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or_else(|| panic!("no number before `{label}` in {line}"))
}

/// The check above can fail: a receiver told to expect another byte than the one written
/// ends the run, naming the offset, with a non-zero exit (`SENDPATH_BARE_EXPECT` is the byte
/// the receiver checks for, a test hook).
#[test]
fn a_wrong_byte_fails_the_twins_receiver_naming_its_offset() {
    let Some(out) = run_env(
        &[
            "copy",
            "16K",
            "--seconds",
            "0.1",
            "--warmup",
            "0",
            "--verify",
        ],
        Some(("SENDPATH_BARE_EXPECT", "0x5b")),
    ) else {
        return;
    };
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{e}");
    assert!(
        e.contains("the receiver failed: byte 0 of the stream is 0x5a where 0x5b was expected"),
        "{e}"
    );
}

/// `--recv-process` (the receiver a process of its own, for callgrind): the library's stream
/// lane and bare's own loop send to it, it checks every byte and the run checks it read all
/// that was sent; told to expect another byte, it fails the run with its reason.
#[test]
fn a_receiver_in_a_process_of_its_own_checks_every_byte() {
    for extra in [&["--lib", "--arena"][..], &[][..]] {
        let mut args = vec!["uring", "4K", "--seconds", "0.2", "--warmup", "0"];
        args.extend_from_slice(&["--recv-process", "--verify"]);
        args.extend_from_slice(extra);
        let Some(out) = run(&args) else {
            return;
        };
        let text = String::from_utf8_lossy(&out.stdout);
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{args:?}: {e}");
        assert!(field(&text, " sends,") > 0, "{text}");
    }
    let args = ["copy", "16K", "--seconds", "0.1", "--warmup", "0"];
    let args = [&args[..], &["--recv-process", "--verify"]].concat();
    let Some(out) = run_env(&args, Some(("SENDPATH_BARE_EXPECT", "0x5b"))) else {
        return;
    };
    let e = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "{e}");
    assert!(
        e.contains("byte 0 of the stream is 0x5a where 0x5b was expected")
            && e.contains("the receiver failed: the receiver process ended with exit status: 1"),
        "{e}"
    );
}

/// `--recv copy` reads every byte out without checking it (the peer tools' receiver): the same
/// wrong expected byte that fails `--verify` above passes, the run still checks that every
/// byte sent was read, and an unknown receiver is refused with exit status 2.
#[test]
fn a_copying_receiver_reads_every_byte_and_checks_none() {
    for path in ["copy", "sendfile"] {
        let args = [
            path,
            "64K",
            "--seconds",
            "0.1",
            "--warmup",
            "0",
            "--file-size",
            "1M",
            "--recv",
            "copy",
        ];
        let Some(out) = run_env(&args, Some(("SENDPATH_BARE_EXPECT", "0x5b"))) else {
            return;
        };
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{path}: {e}");
    }
    let Some(out) = run(&["copy", "4K", "--recv", "mmap"]) else {
        return;
    };
    let e = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{e}");
    assert!(
        e.contains("--recv takes copy, discard or verify, not `mmap`"),
        "{e}"
    );
}

/// UDP on the black-hole route through the library's own path in bare's loop (`--lib --proto
/// udp`, what `scripts/udp-vs-bare`'s `lib` case runs): datagrams go, and every zero-copy send's
/// notification comes back before the run ends (the path's `finish` waits for them).
#[test]
fn the_library_sends_udp_in_the_twins_loop() {
    for path in ["copy", "msg-zerocopy", "uring", "uring-zc"] {
        let args = [
            path,
            "1400",
            "--lib",
            "--proto",
            "udp",
            "--seconds",
            "0.2",
            "--warmup",
            "0.05",
        ];
        let Some(out) = run(&args) else { return };
        let (text, err) = (
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
        );
        if !out.status.success() && err.contains("run as root") {
            common::skip("the black-hole route needs root (a network namespace)");
            return;
        }
        assert!(out.status.success(), "bare {args:?}: {err}");
        let count = |what: &str| field(&text, &format!(" {what},"));
        assert!(count("sends") > 0, "{path}: {text}");
        if path.ends_with("zc") || path == "msg-zerocopy" {
            assert_eq!(count("completions"), count("sends"), "{path}: {text}");
        }
    }
}

#[test]
fn every_io_uring_order_runs() {
    for (path, order) in [
        ("uring", "linked"),
        ("uring", "none"),
        ("uring", "vectored"),
        ("uring", "bundle"),
        ("uring-zc", "linked"),
        ("uring-zc", "none"),
        ("uring-zc", "vectored"),
    ] {
        let args = [
            path,
            "64K",
            "--seconds",
            "0.2",
            "--order",
            order,
            "--fixed-file",
        ];
        let Some(rate) = sends(&args) else { return };
        assert!(rate > 0.0, "{path} --order {order} sent nothing");
    }
    let Some(rate) = sends(&["uring-zc", "64K", "--seconds", "0.2", "--fixed"]) else {
        return;
    };
    assert!(rate > 0.0);
    // Through the library, in either of its orders.
    for path in ["uring", "uring-zc"] {
        for order in ["linked", "vectored"] {
            let args = [path, "64K", "--seconds", "0.2", "--lib", "--order", order];
            let Some(rate) = sends(&args) else { return };
            assert!(rate > 0.0, "{path} --lib --order {order} sent nothing");
        }
    }
}

#[test]
fn congestion_control_is_set_or_refused() {
    let Some(rate) = sends(&["copy", "64K", "--seconds", "0.2", "--congestion", "reno"]) else {
        return;
    };
    assert!(rate > 0.0);
    for (args, says) in [
        (
            &["copy", "4K", "--congestion", "no-such-cc"][..],
            "--congestion no-such-cc",
        ),
        (
            &["copy", "4K", "--proto", "udp", "--congestion", "cubic"][..],
            "TCP's",
        ),
    ] {
        let out = run(args).expect("bare was found above");
        let e = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success() && e.contains(says), "{args:?}: {e}");
    }
}

#[test]
fn the_copying_paths_send_from_several_buffers_in_turn() {
    for p in ["copy", "serialize", "gather"] {
        let args = [
            p,
            "4K",
            "--bufs",
            "16",
            "--seconds",
            "0.2",
            "--warmup",
            "0.05",
        ];
        let Some(out) = run(&args) else { return };
        let text = String::from_utf8_lossy(&out.stdout);
        // bare checks that its receiver read every byte sent, and says how many buffers.
        assert!(out.status.success(), "bare {args:?}: {text}");
        assert!(
            text.contains(&format!("bare {p} 4096 B bufs 16:")),
            "{text}"
        );
    }
}

#[test]
fn help_prints_the_usage() {
    let Some(out) = run(&["--help"]) else { return };
    assert!(out.status.success());
    let text = String::from_utf8_lossy(&out.stdout);
    assert!(
        text.contains("usage: bare PATH SIZE") && text.contains("uring-splice"),
        "{text}"
    );
}

#[test]
fn bad_input_is_refused_with_status_2() {
    for (args, says) in [
        (&["copy", "64K", "--bogus"][..], "unknown flag `--bogus`"),
        (&["nope", "64K"][..], "`nope` is not a path here"),
        (&["copy", "0"][..], "SIZE must be"),
        (
            &["copy", "64K", "--seconds", "-1"][..],
            "--seconds positive",
        ),
        (&["copy", "64K", "--order", "sideways"][..], "--order takes"),
        (
            &["uring-zc", "64K", "--order", "bundle"][..],
            "bundle is for uring",
        ),
        (&["sendfile", "4K", "--proto", "udp"][..], "memory paths"),
        (&["copy", "64K", "--cpu", "x"][..], "--cpu"),
        (
            &["uring", "64K", "--lib", "--order", "none"][..],
            "--lib sends as the library does",
        ),
        (
            &["copy", "64000", "--lib", "--proto", "udp", "--gso", "1400"][..],
            "drop --gso",
        ),
        (&["uring", "4K", "--bufs", "4"][..], "--bufs takes"),
        (
            &["copy", "4K", "--arena"][..],
            "--arena is for uring and uring-zc",
        ),
        (
            &["uring-zc", "4K", "--arena", "--fixed"][..],
            "without --fixed",
        ),
        (&["copy", "4K", "--bufs", "0"][..], "--bufs takes"),
    ] {
        let Some(out) = run(args) else { return };
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "bare {args:?}: {err}");
        assert!(err.contains(says), "bare {args:?} said: {err}");
    }
}
