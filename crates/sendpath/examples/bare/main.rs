//! The speed-of-light reference for UDP sends on the black-hole route: the fewest system calls
//! that send datagrams the way each sendpath path does, with no sendpath type in the loop.
//! `stream --proto udp --topology blackhole` is compared against it (`scripts/udp-vs-bare`).
//!
//! ```text
//! cargo run --release -p sendpath --example bare -- uring-zc 64000 [--fixed] [--gso 1400]
//!     [--seconds 2] [--depth 8] [--reap-every 32] [--mtu 65535] [--cpu C]
//! ```
//!
//! It makes its own namespace (a veth whose peer is down, a permanent neighbour: the device
//! drops every frame at its queue, so nothing copies zero-copy pages; root), sends from one buffer for
//! `--seconds`, and prints one line: bytes per second, sends per second, completions and how
//! many came back copied. Paths: `copy` (`send`), `msg-zerocopy` (`sendmsg(MSG_ZEROCOPY)`, the
//! error queue read every `--reap-every` sends), `uring` (`IORING_OP_SEND`, `--depth` in
//! flight, not linked: a datagram socket needs no order between sends), `uring-zc`
//! (`IORING_OP_SEND_ZC` with usage reporting, `--fixed` for a registered buffer). The buffer is
//! never rewritten, so reusing it while the kernel holds it is harmless here (sendpath waits).

use std::net::UdpSocket;
use std::os::fd::AsFd;
use std::process::Command;
use std::time::{Duration, Instant};

struct Args {
    path: String,
    size: usize,
    gso: Option<u16>,
    seconds: f64,
    depth: usize,
    fixed: bool,
    reap_every: usize,
    mtu: u32,
    cpu: Option<usize>,
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let usage = "usage: bare copy|msg-zerocopy|uring|uring-zc SIZE [--gso SEG] [--seconds S] [--depth N] [--fixed] [--reap-every N] [--mtu M] [--cpu C]";
    let path = it.next().ok_or(usage)?;
    if !["copy", "msg-zerocopy", "uring", "uring-zc"].contains(&path.as_str()) {
        return Err(format!("`{path}` is not a path here: {usage}"));
    }
    let num = |v: Option<String>, what: &str| -> Result<f64, String> {
        v.and_then(|s| s.parse().ok())
            .ok_or(format!("{what} needs a number: {usage}"))
    };
    let mut a = Args {
        path,
        size: num(it.next(), "SIZE")? as usize,
        gso: None,
        seconds: 2.0,
        depth: 8,
        fixed: false,
        reap_every: 32,
        mtu: 65_535,
        cpu: None,
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--gso" => a.gso = Some(num(it.next(), "--gso")? as u16),
            "--seconds" => a.seconds = num(it.next(), "--seconds")?,
            "--depth" => a.depth = num(it.next(), "--depth")?.max(1.0) as usize,
            "--reap-every" => a.reap_every = num(it.next(), "--reap-every")?.max(1.0) as usize,
            "--mtu" => a.mtu = num(it.next(), "--mtu")? as u32,
            "--fixed" => a.fixed = true,
            "--cpu" => a.cpu = Some(num(it.next(), "--cpu")? as usize),
            _ => return Err(format!("unknown flag `{flag}`: {usage}")),
        }
    }
    if a.size == 0 || a.size > 65_507 || a.seconds.is_nan() || a.seconds <= 0.0 {
        return Err(format!(
            "SIZE must be 1..65507 and --seconds positive: {usage}"
        ));
    }
    Ok(a)
}

/// What one run did.
#[derive(Default)]
struct Tally {
    sends: u64,
    completions: u64,
    copied: u64,
}

fn main() {
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let ns = match Blackhole::create(a.mtu) {
        Ok(ns) => ns,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    let sock = match ns.socket(a.gso) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(1);
        }
    };
    if let Some(c) = a.cpu {
        if let Err(e) = sys::pin(c) {
            eprintln!("error: --cpu {c}: {e}");
            std::process::exit(1);
        }
    }
    let buf = vec![0x5au8; a.size];
    let until = Instant::now() + Duration::from_secs_f64(a.seconds);
    let t0 = Instant::now();
    let run = match a.path.as_str() {
        "copy" => sys::copy(&sock, &buf, until),
        "msg-zerocopy" => sys::msg_zerocopy(&sock, &buf, until, a.reap_every),
        _ => sys::uring(&sock, &buf, until, a.depth, a.path == "uring-zc", a.fixed),
    };
    let secs = t0.elapsed().as_secs_f64();
    match run {
        Ok(t) => println!(
            "bare {} {} B{}{}: {:.3} Gbit/s, {:.0} sends/s, {} sends, {} completions, {} copied",
            a.path,
            a.size,
            a.gso.map_or(String::new(), |g| format!(" gso {g}")),
            if a.fixed { " fixed" } else { "" },
            t.sends as f64 * a.size as f64 * 8.0 / secs / 1e9,
            t.sends as f64 / secs,
            t.sends,
            t.completions,
            t.copied
        ),
        Err(e) => {
            eprintln!("error: {} failed: {e}", a.path);
            std::process::exit(1);
        }
    }
}

/// The namespace, removed on drop.
struct Blackhole(String);

impl Blackhole {
    fn create(mtu: u32) -> Result<Blackhole, String> {
        let name = format!("sendpath-bare-{}", std::process::id());
        let ns = Blackhole(name.clone());
        let ip = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("ip")
                .args(["-n", &name])
                .args(args)
                .output()
                .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
            match out.status.success() {
                true => Ok(()),
                false => Err(format!(
                    "`ip {}` failed (root needed): {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
            }
        };
        let out = Command::new("ip").args(["netns", "add", &name]).output();
        if !out.is_ok_and(|o| o.status.success()) {
            return Err("`ip netns add` failed: run as root, with iproute2".into());
        }
        let m = mtu.to_string();
        ip(&[
            "link", "add", "va", "mtu", &m, "type", "veth", "peer", "name", "vb", "mtu", &m,
        ])?;
        ip(&["addr", "add", "192.0.2.1/30", "dev", "va"])?;
        ip(&["link", "set", "va", "up"])?;
        ip(&[
            "neigh",
            "add",
            "192.0.2.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "va",
            "nud",
            "permanent",
        ])?;
        Ok(ns)
    }

    /// A UDP socket made inside the namespace, connected to the neighbour that never answers.
    fn socket(&self, gso: Option<u16>) -> Result<UdpSocket, String> {
        let path = format!("/run/netns/{}", self.0);
        std::thread::spawn(move || -> Result<UdpSocket, String> {
            let f = std::fs::File::open(&path).map_err(|e| format!("{path}: {e}"))?;
            sys::setns(f.as_fd()).map_err(|e| format!("setns: {e}"))?;
            let s = UdpSocket::bind("192.0.2.1:0").map_err(|e| e.to_string())?;
            s.connect("192.0.2.2:9").map_err(|e| e.to_string())?;
            sys::setsockopt(
                &s,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )?;
            if let Some(seg) = gso {
                sys::setsockopt(&s, libc::SOL_UDP, 103, i32::from(seg))?; // UDP_SEGMENT
            }
            Ok(s)
        })
        .join()
        .map_err(|_| "the namespace thread panicked".to_string())?
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// The system calls, each unsafe block with why it holds: the example's only `unsafe`.
#[allow(unsafe_code)]
mod sys;
