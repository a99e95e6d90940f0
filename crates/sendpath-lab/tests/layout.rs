//! The lab's import graph, drawn from its source: which top-level module names which
//! (`crate::X` in code outside `#[cfg(test)]` modules). The test fails on an import loop or on
//! an arrow that runs up the layers below, and prints the graph (`scripts/lab-imports`).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

/// The layers, lowest first. A module may import modules of its own layer or below, never
/// above; loops are refused even within a layer.
const LAYERS: [&[&str]; 7] = [
    &[
        "units", "files", "cancel", "topology", "traffic", "limits", "setting", "probe",
    ],
    &["results"],
    &["measure", "analysis", "export", "render"],
    &["http", "remote"],
    &["workload"],
    &["study", "calibrate", "compare"],
    &["agent"],
];

fn layer_of(m: &str) -> usize {
    LAYERS
        .iter()
        .position(|l| l.contains(&m))
        .unwrap_or_else(|| panic!("module `{m}` is in no layer: add it to LAYERS"))
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

fn graph() -> BTreeMap<String, BTreeSet<String>> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut g: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for f in files {
        let rel = f.strip_prefix(&src).unwrap();
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

#[test]
fn the_lab_imports_down_the_layers_without_loops() {
    let g = graph();
    for layer in LAYERS.iter().rev() {
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
                layer_of(t) <= layer_of(from),
                "`{from}` imports `{t}`, a layer above it (see LAYERS)"
            );
        }
    }
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
