//! Helpers shared by the CLI tests.
#![allow(dead_code)]

use assert_cmd::Command;

/// The `sendpath` binary under test.
pub fn sendpath() -> Command {
    Command::cargo_bin("sendpath").unwrap()
}

/// What the command wrote to stderr.
pub fn stderr_of(a: &assert_cmd::assert::Assert) -> String {
    String::from_utf8_lossy(&a.get_output().stderr).into_owned()
}

/// Runs `sendpath ARGS`, expects a non-zero exit, and checks that stderr contains every needle.
pub fn fails_with(args: &[&str], needles: &[&str]) {
    let a = sendpath().args(args).assert().failure();
    let e = stderr_of(&a);
    for n in needles {
        assert!(
            e.contains(n),
            "`sendpath {}`: stderr lacks `{n}`:\n{e}",
            args.join(" ")
        );
    }
}
