//! `--topology netns`: the receiver in a network namespace sendpath creates (and removes),
//! joined to this one by a veth pair, with an optional rate limit (an htb class on the
//! sending side's veth) and MTU. Traffic crosses a real device and qdisc instead of loopback,
//! and stays inside the host.
//!
//! Each namespace is named `sendpath-t-PID-N`; one whose process is gone (a run killed before
//! it could clean up) is removed by the next run.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, TcpListener};
use std::os::fd::AsFd;
use std::process::Command;
use std::sync::atomic::{AtomicU32, Ordering};

/// The prefix of every namespace sendpath creates.
const PREFIX: &str = "sendpath-t-";

/// What a run's connections crossed, as results record it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct TopologyInfo {
    /// `netns`.
    pub kind: String,
    /// The namespace the receiver ran in.
    pub namespace: String,
    /// The sender's address (this namespace's end of the veth pair).
    pub sender_addr: IpAddr,
    /// The receiver's address.
    pub receiver_addr: IpAddr,
    /// The rate limit on the sender's veth, bits per second; null for none.
    pub rate_bits_per_s: Option<u64>,
    /// The htb bucket of that limit, bytes (`burst_bytes`); null for no limit, or in results
    /// of versions that did not record it.
    #[serde(default)]
    pub burst_bytes: Option<u64>,
    /// The MTU of both veth ends; null for the default.
    pub mtu: Option<u32>,
}

/// What to build.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct NetnsSpec {
    /// htb rate (and ceiling) on the sender's veth, bits per second.
    pub rate_bits_per_s: Option<u64>,
    /// MTU of both ends.
    pub mtu: Option<u32>,
}

/// A namespace with a veth pair, removed on drop.
#[derive(Debug)]
pub struct Netns {
    info: TopologyInfo,
    /// Removes the namespace if the process exits before this is dropped.
    _at_exit: crate::cancel::Cleanup,
}

/// Runs a command, failing with its stderr.
fn run(prog: &str, args: &[&str]) -> anyhow::Result<String> {
    let out = Command::new(prog).args(args).output().with_context(|| {
        format!("cannot run `{prog}` (install iproute2: apt-get install iproute2)")
    })?;
    if !out.status.success() {
        bail!(
            "`{prog} {}` failed: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr).trim()
        );
    }
    Ok(String::from_utf8_lossy(&out.stdout).into_owned())
}

/// Parses a rate in tc's units: `10gbit`, `500mbit`, `1000kbit`, `64000bit` (bits per second).
pub fn parse_rate(s: &str) -> Result<u64, String> {
    let t = s.trim().to_ascii_lowercase();
    let (num, mult) = [
        ("gbit", 1_000_000_000u64),
        ("mbit", 1_000_000),
        ("kbit", 1_000),
        ("bit", 1),
    ]
    .iter()
    .find_map(|(u, m)| t.strip_suffix(u).map(|n| (n.to_string(), *m)))
    .ok_or_else(|| format!("`{s}`: give a rate like 10gbit, 500mbit or 100kbit"))?;
    let n: f64 = num
        .trim()
        .parse()
        .map_err(|_| format!("`{s}`: give a rate like 10gbit, 500mbit or 100kbit"))?;
    let bits = n * mult as f64;
    if !(bits.is_finite() && (8_000.0..=400e9).contains(&bits)) {
        return Err(format!("`{s}`: the rate must be between 8kbit and 400gbit"));
    }
    Ok(bits as u64)
}

/// The htb bucket for a limit of `bits_per_s`: 5 ms of bytes at the rate, and at least two
/// 64 KiB GSO packets. tc's default (rate / HZ) throttles a fast veth below its rate, and so
/// does a small bucket on a busy host: the bucket fills while the qdisc waits for a CPU to
/// dequeue, and what overflows is lost. Through a 10 Gbit/s class on a 2-vCPU guest, iperf3
/// moved 8.92 Gbit/s (8.70..9.28) with 5 ms and 8.71 (7.14..9.14) with 1 ms, in 8 alternating
/// rounds of 5 s; 5 ms was ahead in 7 of them (median ratio 1.025). Over a measured window of T seconds the bucket lets at most 5 ms / T more through
/// than the rate (0.25% of a 2 s window).
pub(crate) fn burst_bytes(bits_per_s: u64) -> u64 {
    (bits_per_s / 8 / 200).max(128 << 10)
}

/// Removes namespaces of earlier runs whose process is gone.
pub(crate) fn remove_stale() {
    let Ok(list) = run("ip", &["netns", "list"]) else {
        return;
    };
    for line in list.lines() {
        let name = line.split_whitespace().next().unwrap_or("");
        let Some(rest) = name.strip_prefix(PREFIX) else {
            continue;
        };
        let pid = rest.split('-').next().unwrap_or("");
        let alive = pid
            .parse::<u32>()
            .is_ok_and(|p| std::path::Path::new(&format!("/proc/{p}")).exists());
        if !alive {
            let _ = run("ip", &["netns", "del", name]);
        }
    }
}

impl Netns {
    /// Creates the namespace, the veth pair and their addresses (a /30 of 10.211.0.0/16 chosen
    /// from the process id, so parallel runs do not collide), the MTU and the rate limit.
    pub fn create(spec: NetnsSpec) -> anyhow::Result<Netns> {
        if sendpath::host::euid() != 0 {
            return Err(crate::setting::invalid(
                crate::setting::Setting::Topology,
                "a network namespace and a veth pair need root: run as root",
            ));
        }
        remove_stale();
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        let name = format!("{PREFIX}{pid}-{n}");
        let slot = (pid.wrapping_mul(7).wrapping_add(n)) % 16_384;
        let base = Ipv4Addr::new(10, 211, (slot / 64) as u8, ((slot % 64) * 4) as u8);
        let o = base.octets();
        let host = Ipv4Addr::new(o[0], o[1], o[2], o[3] + 1);
        let peer = Ipv4Addr::new(o[0], o[1], o[2], o[3] + 2);
        let (h, p) = (format!("sp{pid}h{n}"), format!("sp{pid}n{n}"));
        if h.len() > 15 {
            bail!("interface name {h} is too long");
        }
        run("ip", &["netns", "add", &name])?;
        let gone = name.clone();
        let ns = Netns {
            _at_exit: crate::cancel::Cleanup::register(move || {
                let _ = run("ip", &["netns", "del", &gone]);
            }),
            info: TopologyInfo {
                kind: "netns".into(),
                namespace: name.clone(),
                sender_addr: host.into(),
                receiver_addr: peer.into(),
                rate_bits_per_s: spec.rate_bits_per_s,
                burst_bytes: spec.rate_bits_per_s.map(burst_bytes),
                mtu: spec.mtu,
            },
        };
        // From here on, dropping `ns` removes the namespace (and the veth pair with it).
        run(
            "ip",
            &[
                "link", "add", &h, "type", "veth", "peer", "name", &p, "netns", &name,
            ],
        )?;
        let (hs, ps) = (format!("{host}/30"), format!("{peer}/30"));
        run("ip", &["addr", "add", &hs, "dev", &h])?;
        run("ip", &["-n", &name, "addr", "add", &ps, "dev", &p])?;
        if let Some(m) = spec.mtu {
            let m = m.to_string();
            run("ip", &["link", "set", &h, "mtu", &m])?;
            run("ip", &["-n", &name, "link", "set", &p, "mtu", &m])?;
        }
        run("ip", &["link", "set", &h, "up"])?;
        run("ip", &["-n", &name, "link", "set", &p, "up"])?;
        run("ip", &["-n", &name, "link", "set", "lo", "up"])?;
        if let Some(r) = spec.rate_bits_per_s {
            let rate = format!("{r}bit");
            let burst = burst_bytes(r).to_string();
            run(
                "tc",
                &[
                    "qdisc", "add", "dev", &h, "root", "handle", "1:", "htb", "default", "1",
                ],
            )?;
            run(
                "tc",
                &[
                    "class", "add", "dev", &h, "parent", "1:", "classid", "1:1", "htb", "rate",
                    &rate, "ceil", &rate, "burst", &burst, "cburst", &burst,
                ],
            )?;
        }
        Ok(ns)
    }

    /// What results record.
    pub fn info(&self) -> &TopologyInfo {
        &self.info
    }

    /// A listener on the receiver's address in the namespace (port chosen by the kernel):
    /// made by a thread that enters the namespace, so the sockets it accepts live there.
    pub(crate) fn listen(&self) -> anyhow::Result<TcpListener> {
        let path = format!("/run/netns/{}", self.info.namespace);
        let addr = self.info.receiver_addr;
        std::thread::spawn(move || -> anyhow::Result<TcpListener> {
            let f = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
            sendpath::host::enter_netns(f.as_fd())
                .context("setns into the receiver's namespace")?;
            TcpListener::bind((addr, 0))
                .with_context(|| format!("binding {addr} in the receiver's namespace"))
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the namespace thread panicked"))?
    }
}

impl Drop for Netns {
    fn drop(&mut self) {
        let _ = run("ip", &["netns", "del", &self.info.namespace]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_read_in_tc_units() {
        assert_eq!(parse_rate("10gbit"), Ok(10_000_000_000));
        assert_eq!(parse_rate("1Gbit"), Ok(1_000_000_000));
        assert_eq!(parse_rate("2.5gbit"), Ok(2_500_000_000));
        assert_eq!(parse_rate("500mbit"), Ok(500_000_000));
        assert!(parse_rate("10g").unwrap_err().contains("10gbit"));
        assert!(parse_rate("0gbit").unwrap_err().contains("between"));
        assert!(parse_rate("fast").is_err());
    }

    #[test]
    fn the_bucket_holds_five_milliseconds_and_two_gso_packets() {
        assert_eq!(burst_bytes(10_000_000_000), 6_250_000);
        assert_eq!(burst_bytes(1_000_000_000), 625_000);
        assert_eq!(burst_bytes(100_000_000), 128 << 10);
    }
}
