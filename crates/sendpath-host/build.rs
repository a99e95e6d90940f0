//! Builds the BPF object behind `--metrics copies` (bpf/copies.bpf.c) with clang, when the
//! host has one that targets BPF. Without it the build still succeeds: the object is left
//! empty and the counter says at run time why it cannot count (`SENDPATH_BPF_UNBUILT`).
//!
//! The step, by hand: `clang -g -O2 -target bpf -c bpf/copies.bpf.c -o copies.bpf.o`
//! (`-g` keeps the BTF that aya needs for the map and the CO-RE field read). `CLANG` names
//! another compiler.

use std::path::PathBuf;
use std::process::Command;

fn main() {
    let src = "bpf/copies.bpf.c";
    println!("cargo:rerun-if-changed={src}");
    println!("cargo:rerun-if-env-changed=CLANG");
    let out = PathBuf::from(std::env::var_os("OUT_DIR").expect("cargo sets OUT_DIR"));
    let obj = out.join("copies.bpf.o");
    let clang = std::env::var("CLANG").unwrap_or_else(|_| "clang".into());
    let built = Command::new(&clang)
        .args(["-g", "-O2", "-target", "bpf", "-c", src, "-o"])
        .arg(&obj)
        .output();
    let why = match built {
        Ok(o) if o.status.success() => None,
        Ok(o) => {
            let err = String::from_utf8_lossy(&o.stderr);
            let first = err.lines().next().unwrap_or("no message").to_string();
            println!(
                "cargo:warning=--metrics copies disabled: {clang} could not build {src}: {first}"
            );
            Some(format!("{clang} could not build {src} ({first})"))
        }
        Err(e) => Some(format!(
            "{clang} was not found when sendpath was built ({e})"
        )),
    };
    if let Some(why) = why {
        std::fs::write(&obj, b"").expect("OUT_DIR is writable");
        println!(
            "cargo:rustc-env=SENDPATH_BPF_UNBUILT=the BPF copy counter was not built: {why}; install clang (Debian: apt-get install clang), then `cargo clean -p sendpath-host` and rebuild"
        );
    }
}
