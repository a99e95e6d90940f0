//! The import graphs of the lab and of the library, drawn from their source: which top-level
//! module names which (`crate::X` in code outside `#[cfg(test)]` modules). Each test fails on
//! an import loop or on an arrow that runs up its crate's layers below, and prints the graph
//! (`scripts/lab-imports`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The lab's layers, lowest first. A module may import modules of its own layer or below,
/// never above; loops are refused even within a layer.
const LAB: &[&[&str]] = &[
    &[
        "units", "files", "cancel", "topology", "traffic", "limits", "setting", "probe",
    ],
    &["window"],
    &["measure", "render"],
    &["http", "remote"],
    &["workload"],
    &["study", "compare"],
    &["agent"],
];

fn layer_of(layers: &[&[&str]], m: &str) -> usize {
    layers
        .iter()
        .position(|l| l.contains(&m))
        .unwrap_or_else(|| panic!("module `{m}` is in no layer: add it to the crate's layers"))
}

fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.is_dir() {
            rust_files(&p, out);
        } else if p.extension().is_some_and(|x| x == "rs") {
            out.push(p);
        }
    }
}

/// The file's code without a trailing `#[cfg(test)] mod ...` and without comments.
fn code(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let end = (0..lines.len())
        .find(|&i| {
            lines[i].trim_start().starts_with("#[cfg(test)]")
                && lines
                    .get(i + 1)
                    .is_some_and(|n| n.trim_start().starts_with("mod "))
        })
        .unwrap_or(lines.len());
    lines[..end]
        .iter()
        .map(|l| l.split("//").next().unwrap_or(""))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The top-level modules `text` names: `crate::X` and `use crate::{X, Y::...}`.
fn imports(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let ident = |s: &str| -> String {
        s.chars()
            .take_while(|c| c.is_alphanumeric() || *c == '_')
            .collect()
    };
    for (i, _) in text.match_indices("crate::") {
        let rest = &text[i + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let inner = group.split('}').next().unwrap_or("");
            for part in inner.split(',') {
                let name = ident(part.trim());
                if !name.is_empty() && name != "self" {
                    out.insert(name);
                }
            }
        } else {
            out.insert(ident(rest));
        }
    }
    out
}

fn graph(src: &Path) -> BTreeMap<String, BTreeSet<String>> {
    let mut files = Vec::new();
    rust_files(src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(src).unwrap();
        let top = rel
            .components()
            .next()
            .unwrap()
            .as_os_str()
            .to_string_lossy();
        let top = top.trim_end_matches(".rs").to_string();
        if top == "lib" {
            continue;
        }
        let names = imports(&code(&std::fs::read_to_string(&f).unwrap()));
        let edges = g.entry(top.clone()).or_default();
        edges.extend(names.into_iter().filter(|n| *n != top));
    }
    g
}

fn find_loop(g: &BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    fn visit(
        n: &str,
        g: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) -> Option<Vec<String>> {
        if let Some(i) = path.iter().position(|p| p == n) {
            let mut l = path[i..].to_vec();
            l.push(n.to_string());
            return Some(l);
        }
        if done.contains(n) {
            return None;
        }
        path.push(n.to_string());
        for k in g.get(n).into_iter().flatten() {
            if let Some(l) = visit(k, g, path, done) {
                return Some(l);
            }
        }
        path.pop();
        done.insert(n.to_string());
        None
    }
    let mut done = BTreeSet::new();
    g.keys()
        .find_map(|n| visit(n, g, &mut Vec::new(), &mut done))
}

/// Prints `src`'s graph by layer, then fails on a loop or an arrow up the `layers`.
fn check(src: &Path, layers: &[&[&str]]) {
    let g = graph(src);
    for layer in layers.iter().rev() {
        for m in *layer {
            let to: Vec<&str> = g
                .get(*m)
                .into_iter()
                .flatten()
                .map(String::as_str)
                .collect();
            println!("{m:>10} -> {}", to.join(", "));
        }
    }
    if let Some(l) = find_loop(&g) {
        panic!("import loop: {}", l.join(" -> "));
    }
    for (from, to) in &g {
        for t in to {
            assert!(
                layer_of(layers, t) <= layer_of(layers, from),
                "`{from}` imports `{t}`, a layer above it (see the crate's layers)"
            );
        }
    }
}

#[test]
fn the_lab_imports_down_the_layers_without_loops() {
    check(&Path::new(env!("CARGO_MANIFEST_DIR")).join("src"), LAB);
}

/// The library's decisions: modules that must do no I/O, so that they are tested on simulated
/// kernel events (`ConnState`, the completion types, the adaptive policy).
const DECISIONS: [&str; 3] = ["completion", "policy", "send"];

/// What a decision module's code may not name: system calls, files, sockets, rings, and the
/// library's modules that make them. `sys::uring`'s request descriptions (`Part`, `Payload`,
/// `SendOp`) are data, named by the one line allowed below; errno constants are values.
const IO: [&str; 12] = [
    "rustix::",
    "io_uring::",
    "std::fs",
    "std::net",
    "std::os::fd",
    "crate::sys",
    "crate::driver",
    "crate::aio",
    "crate::socket",
    "crate::Socket",
    "crate::strategy",
    "crate::open",
];
const REQUEST_DATA: &str = "pub(crate) use crate::sys::uring::{Part, Payload, SendOp};";

/// Where `text` names I/O: each offending line, by number.
fn io_in(text: &str) -> Vec<String> {
    code(text)
        .lines()
        .enumerate()
        .filter(|(_, l)| l.trim() != REQUEST_DATA)
        .filter(|(_, l)| {
            IO.iter().any(|n| l.contains(n))
                || l.match_indices("libc::")
                    .any(|(i, _)| l[i + 6..].starts_with(|c: char| c.is_ascii_lowercase()))
        })
        .map(|(i, l)| format!("{}: {}", i + 1, l.trim()))
        .collect()
}

#[test]
fn the_library_decisions_do_no_io() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("../sendpath/src");
    let mut found = Vec::new();
    let mut read = 0;
    for m in DECISIONS {
        let mut files = Vec::new();
        rust_files(&src.join(m), &mut files);
        for f in files {
            read += 1;
            for l in io_in(&std::fs::read_to_string(&f).unwrap()) {
                found.push(format!("{}:{l}", f.strip_prefix(&src).unwrap().display()));
            }
        }
    }
    assert!(
        read >= 8,
        "read {read} files of {DECISIONS:?}: the library moved?"
    );
    assert!(
        found.is_empty(),
        "I/O in a decision module:\n{}",
        found.join("\n")
    );
}

/// Every crate root denies `unsafe_code`; only a module named `sys` may allow it.
#[test]
fn unsafe_is_allowed_only_in_sys() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    for (krate, root_file) in [
        ("sendpath", "src/lib.rs"),
        ("sendpath-host", "src/lib.rs"),
        ("sendpath-lab", "src/lib.rs"),
        ("sendpath-cli", "src/main.rs"),
    ] {
        let text = std::fs::read_to_string(root.join(krate).join(root_file)).unwrap();
        assert!(
            text.contains("#![deny(unsafe_code)]"),
            "{krate} must deny unsafe_code"
        );
        let lines: Vec<&str> = text.lines().collect();
        for (i, l) in lines.iter().enumerate() {
            if l.contains("allow(unsafe_code)") {
                let next = lines[i + 1..]
                    .iter()
                    .find(|n| !n.trim_start().starts_with("#["));
                assert!(
                    next.is_some_and(|n| n.trim() == "mod sys;"),
                    "{krate}: unsafe_code allowed outside `mod sys`: {next:?}"
                );
            }
        }
    }
}

#[test]
fn the_io_reader_sees_calls_and_spares_data() {
    assert_eq!(io_in("let fd = rustix::net::socket(a, b, None)?;").len(), 1);
    assert_eq!(io_in("if res == -libc::ENOMEM {").len(), 0);
    assert_eq!(io_in("unsafe { libc::close(fd) };").len(), 1);
    assert_eq!(io_in(REQUEST_DATA).len(), 0);
    assert_eq!(io_in("// crate::sys in a comment").len(), 0);
}

#[test]
fn the_graph_reader_sees_loops_and_grouped_imports() {
    assert_eq!(
        imports("use crate::{a::B, c};\nlet x = crate::d::e();"),
        ["a", "c", "d"].map(String::from).into()
    );
    assert!(
        imports(&code(
            "use crate::x;\n#[cfg(test)]\nmod tests { use crate::y; }"
        ))
        .len()
            == 1
    );
    let mut g = BTreeMap::new();
    g.insert("a".to_string(), BTreeSet::from(["b".to_string()]));
    g.insert("b".to_string(), BTreeSet::from(["a".to_string()]));
    assert_eq!(find_loop(&g).unwrap(), ["a", "b", "a"]);
    g.get_mut("b").unwrap().clear();
    assert!(find_loop(&g).is_none());
}
