//! Every command README.md and docs/usage.md show (in code blocks, and `sendpath ...` in the
//! prose, with and without its optional `[...]` parts), run as written with `--dry-run` (the flags
//! parsed and every check a run makes before it measures), so a documented command cannot
//! fail on its flags; the examples and scripts they name exist (scripts parse with `bash -n`).
//! The Rust they show is compiled by the library's doctests (`DocsCompile`).
//!
//! What a command names that this host has not is provided first: `token`, `results.json`
//! and `DIR/http-results.json` files, a finished sweep at `sendpath-results/latest`, and the
//! agent host `receiver.example`, read as 127.0.0.1 (nothing is contacted in a dry run).

mod common;

use std::path::{Path, PathBuf};

fn repo() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The shell lines of the ```sh blocks of `file`, continuation lines joined.
fn shell_lines(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let (mut out, mut inside, mut pending) = (Vec::new(), false, String::new());
    for line in text.lines() {
        if line.starts_with("```") {
            inside = line == "```sh";
            continue;
        }
        if !inside {
            continue;
        }
        let line = line.trim();
        match line.strip_suffix('\\') {
            Some(head) => pending += &format!("{head} "),
            None => out.push(std::mem::take(&mut pending) + line),
        }
    }
    out
}

/// The sendpath commands written inline in the prose of `file` (`` `sendpath ...` ``), each
/// with its optional `[...]` parts left out and, as a second command, put in.
fn inline_commands(file: &Path) -> Vec<String> {
    let text = std::fs::read_to_string(file).unwrap();
    let mut out = Vec::new();
    for span in text.split('`').skip(1).step_by(2) {
        let span = span.split_whitespace().collect::<Vec<_>>().join(" ");
        if !span.starts_with("sendpath ") {
            continue;
        }
        let mut without = String::new();
        let mut depth = 0;
        for c in span.chars() {
            match c {
                '[' => depth += 1,
                ']' => depth -= 1,
                _ if depth == 0 => without.push(c),
                _ => {}
            }
        }
        out.push(without);
        if span.contains('[') {
            out.push(span.replace(['[', ']'], ""));
        }
    }
    out
}

/// The commands of a shell line: split at `&&` and `&`, comments dropped.
fn commands(line: &str) -> Vec<Vec<String>> {
    let line = line.split(" #").next().unwrap_or("").trim();
    let line = line.replace("&&", "\n").replace(" & ", "\n");
    line.split('\n')
        .map(|c| {
            c.trim()
                .trim_end_matches('&')
                .split_whitespace()
                .map(String::from)
                .collect::<Vec<_>>()
        })
        .filter(|c| !c.is_empty() && !c[0].starts_with('#'))
        .collect()
}

/// What a documented command needs that is not on a fresh host.
fn fixtures(dir: &Path) {
    std::fs::write(dir.join("token"), "a documented token of 32 bytes..\n").unwrap();
    let sweep = dir.join("sendpath-results/latest");
    common::sendpath()
        .current_dir(dir)
        .args(["sweep", "-t", "0.02s", "--warmup", "0", "-n", "1", "--out"])
        .arg(&sweep)
        .timeout(std::time::Duration::from_secs(120))
        .assert()
        .success();
    std::fs::copy(sweep.join("results.json"), dir.join("results.json")).unwrap();
    std::fs::create_dir(dir.join("DIR")).unwrap();
    let http = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/previous-main");
    std::fs::copy(
        http.join("http-results.json"),
        dir.join("DIR/http-results.json"),
    )
    .unwrap();
}

#[test]
fn every_documented_command_passes_its_checks() {
    if sendpath_host::thread::euid() != 0 {
        return common::skip("the documented commands include namespaces and sudo: run as root");
    }
    let dir = tempfile::tempdir().unwrap();
    fixtures(dir.path());
    let (mut ran, mut other) = (0, Vec::new());
    for doc in ["README.md", "docs/usage.md"] {
        let file = repo().join(doc);
        for line in shell_lines(&file).into_iter().chain(inline_commands(&file)) {
            for mut cmd in commands(&line) {
                if cmd[0] == "sudo" {
                    cmd.remove(0);
                }
                let args: Vec<String> = match cmd[0].as_str() {
                    "sendpath" => cmd[1..].to_vec(),
                    "cargo" if cmd.windows(2).any(|w| w == ["-p", "sendpath-cli"]) => {
                        let at = cmd.iter().position(|a| a == "--").unwrap();
                        cmd[at + 1..].to_vec()
                    }
                    _ => {
                        other.push((doc, cmd));
                        continue;
                    }
                };
                let args: Vec<String> = args
                    .into_iter()
                    .map(|a| a.replace("receiver.example", "127.0.0.1"))
                    .collect();
                let a = common::sendpath()
                    .current_dir(dir.path())
                    .args(&args)
                    .arg("--dry-run")
                    .timeout(std::time::Duration::from_secs(30))
                    .assert();
                let out = a.get_output();
                assert!(
                    out.status.success(),
                    "{doc}: `{line}` fails:\n{}",
                    String::from_utf8_lossy(&out.stderr)
                );
                ran += 1;
            }
        }
    }
    println!("{ran} documented sendpath commands passed their checks");
    assert!(
        ran > 60,
        "only {ran} commands found: is the extraction broken?"
    );
    for (doc, cmd) in other {
        check_other(doc, &cmd);
    }
}

/// A documented command that is not sendpath's: an example that exists, a script that exists
/// and parses, or one of the shell's own.
fn check_other(doc: &str, cmd: &[String]) {
    let shown = cmd.join(" ");
    match cmd[0].as_str() {
        "cargo" => {
            if let Some(at) = cmd.iter().position(|a| a == "--example") {
                let name = &cmd[at + 1];
                let ex = repo().join("crates/sendpath/examples");
                let found = ex.join(format!("{name}.rs")).exists() || ex.join(name).is_dir();
                assert!(found, "{doc}: `{shown}`: no example {name}");
            } else {
                assert_eq!(cmd[1], "test", "{doc}: `{shown}`: an unknown cargo command");
            }
        }
        s if s.starts_with("scripts/") => {
            let path = repo().join(s);
            assert!(path.exists(), "{doc}: `{shown}`: no {s}");
            let first = std::fs::read_to_string(&path).unwrap();
            let mut check = if first.starts_with("#!/usr/bin/env python3") {
                let mut c = std::process::Command::new("python3");
                c.args(["-c", "import ast,sys; ast.parse(open(sys.argv[1]).read())"]);
                c
            } else {
                let mut c = std::process::Command::new("bash");
                c.arg("-n");
                c
            };
            let ok = check.arg(&path).status().unwrap().success();
            assert!(ok, "{doc}: `{shown}`: {s} does not parse");
        }
        "head" => {}
        _ => panic!("{doc}: `{shown}`: a command this test does not know how to check"),
    }
}
