//! `--topology netns`: the receiver in a network namespace sendpath creates (and removes),
//! joined to this one by a veth pair, with an optional rate limit (an htb class on the
//! sending side's veth) and MTU. Traffic crosses a real device and qdisc instead of loopback,
//! and stays inside the host.
//!
//! `--topology blackhole`: a namespace whose veth peer is down, where UDP datagrams go through
//! UDP, IP and the neighbour table to the device, whose queue drops them for want of a carrier
//! (no local receiver, so zero-copy pages
//! are never copied): the send side only, an upper bound of what a NIC with offloads allows.
//!
//! Each namespace is named `sendpath-t-PID-N`; one whose process is gone (a run killed before
//! it could clean up) is removed by the next run.

use anyhow::{bail, Context};
use serde::{Deserialize, Serialize};
use std::net::{IpAddr, Ipv4Addr, TcpListener, UdpSocket};
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

/// A namespace's name, its two interface names and the two addresses of its /30 of
/// 10.211.0.0/16: the first /30 from one the process id points at that no interface of this
/// namespace holds, chosen and taken while [`AddrLock`] is held, so concurrent runs on one
/// host never share one.
struct Names {
    namespace: String,
    host_if: String,
    peer_if: String,
    host: Ipv4Addr,
    peer: Ipv4Addr,
}

/// /30 subnets in 10.211.0.0/16.
const SUBNETS: u32 = 16_384;

impl Names {
    fn next() -> anyhow::Result<Names> {
        static NEXT: AtomicU32 = AtomicU32::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // SENDPATH_TOPOLOGY_SUBNET makes runs start at one subnet (how a test makes two
        // concurrent runs want the same one).
        let first = std::env::var("SENDPATH_TOPOLOGY_SUBNET").ok();
        let start = first
            .and_then(|v| v.parse::<u32>().ok())
            .unwrap_or_else(|| pid.wrapping_mul(7))
            .wrapping_add(n)
            % SUBNETS;
        let used = used_subnets()?;
        let Some(slot) = free_subnet(start, &used) else {
            bail!("every /30 of 10.211.0.0/16 is in use on this host: remove stale veth interfaces (ip -4 addr)");
        };
        let o = [10, 211, (slot / 64) as u8, ((slot % 64) * 4) as u8];
        let names = Names {
            namespace: format!("{PREFIX}{pid}-{n}"),
            host_if: format!("sp{pid}h{n}"),
            peer_if: format!("sp{pid}n{n}"),
            host: Ipv4Addr::new(o[0], o[1], o[2], o[3] + 1),
            peer: Ipv4Addr::new(o[0], o[1], o[2], o[3] + 2),
        };
        if names.host_if.len() > 15 {
            bail!("interface name {} is too long", names.host_if);
        }
        Ok(names)
    }
}

/// The /30 subnets of 10.211.0.0/16 that addresses of this namespace's interfaces fall in.
fn used_subnets() -> anyhow::Result<std::collections::HashSet<u32>> {
    let out = run("ip", &["-o", "-4", "addr", "show"])?;
    Ok(out
        .split_whitespace()
        .filter_map(|w| w.split('/').next()?.parse::<Ipv4Addr>().ok())
        .filter(|a| a.octets()[..2] == [10, 211])
        .map(|a| u32::from(a.octets()[2]) * 64 + u32::from(a.octets()[3]) / 4)
        .collect())
}

/// The first subnet from `start` (wrapping) not in `used`.
fn free_subnet(start: u32, used: &std::collections::HashSet<u32>) -> Option<u32> {
    (0..SUBNETS)
        .map(|i| (start + i) % SUBNETS)
        .find(|s| !used.contains(s))
}

/// Held from choosing a namespace's subnet until its address is on an interface: runs on one
/// host take turns (`flock` on a file in /run, released when the file closes).
struct AddrLock(#[allow(dead_code)] std::fs::File);

impl AddrLock {
    fn take() -> anyhow::Result<AddrLock> {
        let path = "/run/sendpath-topology.lock";
        let f = std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(path)
            .with_context(|| format!("opening {path}"))?;
        rustix::fs::flock(&f, rustix::fs::FlockOperation::LockExclusive)
            .with_context(|| format!("locking {path}"))?;
        Ok(AddrLock(f))
    }
}

/// The error for a topology asked of a user who is not root.
fn needs_root(kind: &str) -> anyhow::Error {
    crate::setting::invalid(
        crate::setting::Setting::Topology,
        format!("{kind} creates a network namespace and a veth pair, which needs root: run as root, or choose the loopback topology"),
    )
}

impl Netns {
    /// Creates the namespace, the veth pair and their addresses, the MTU and the rate limit.
    pub fn create(spec: NetnsSpec) -> anyhow::Result<Netns> {
        if sendpath_host::thread::euid() != 0 {
            return Err(needs_root("netns"));
        }
        remove_stale();
        let lock = AddrLock::take()?;
        let Names {
            namespace: name,
            host_if: h,
            peer_if: p,
            host,
            peer,
        } = Names::next()?;
        let ns = Netns::add(TopologyInfo {
            kind: "netns".into(),
            namespace: name.clone(),
            sender_addr: host.into(),
            receiver_addr: peer.into(),
            rate_bits_per_s: spec.rate_bits_per_s,
            burst_bytes: spec.rate_bits_per_s.map(burst_bytes),
            mtu: spec.mtu,
        })?;
        // From here on, dropping `ns` removes the namespace (and the veth pair with it).
        run(
            "ip",
            &[
                "link", "add", &h, "type", "veth", "peer", "name", &p, "netns", &name,
            ],
        )?;
        let (hs, ps) = (format!("{host}/30"), format!("{peer}/30"));
        run("ip", &["addr", "add", &hs, "dev", &h])?;
        drop(lock);
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

    /// `ip netns add` for `info`, whose namespace is removed when the result is dropped (or
    /// at a forced exit).
    fn add(info: TopologyInfo) -> anyhow::Result<Netns> {
        run("ip", &["netns", "add", &info.namespace])?;
        let gone = info.namespace.clone();
        Ok(Netns {
            _at_exit: crate::cancel::Cleanup::register(move || {
                let _ = run("ip", &["netns", "del", &gone]);
            }),
            info,
        })
    }

    /// `--topology blackhole`: a namespace holding a veth pair whose peer end stays down, with
    /// MTU `mtu` (65535 when `None`), an address on the live end and a permanent neighbour
    /// entry for the other address, so that nothing waits for ARP. A UDP datagram sent there
    /// goes through UDP, IP and the neighbour table to the device, whose queue drops it (no
    /// carrier) before the driver: no local receiver, so the kernel never copies zero-copy
    /// pages. The senders' sockets are made inside the namespace.
    pub fn blackhole(mtu: Option<u32>) -> anyhow::Result<Netns> {
        if sendpath_host::thread::euid() != 0 {
            return Err(needs_root("blackhole"));
        }
        remove_stale();
        let n = Names::next()?;
        let mtu = mtu.unwrap_or(65_535);
        let ns = Netns::add(TopologyInfo {
            kind: "blackhole".into(),
            namespace: n.namespace.clone(),
            sender_addr: n.host.into(),
            receiver_addr: n.peer.into(),
            rate_bits_per_s: None,
            burst_bytes: None,
            mtu: Some(mtu),
        })?;
        let ip = |args: &[&str]| {
            let mut all = vec!["-n", n.namespace.as_str()];
            all.extend_from_slice(args);
            run("ip", &all)
        };
        let (h, p, m) = (n.host_if.as_str(), n.peer_if.as_str(), mtu.to_string());
        ip(&[
            "link", "add", h, "mtu", &m, "type", "veth", "peer", "name", p, "mtu", &m,
        ])?;
        ip(&["addr", "add", &format!("{}/30", n.host), "dev", h])?;
        ip(&["link", "set", h, "up"])?;
        let (peer, mac) = (n.peer.to_string(), "02:00:00:00:00:02");
        ip(&[
            "neigh",
            "add",
            &peer,
            "lladdr",
            mac,
            "dev",
            h,
            "nud",
            "permanent",
        ])?;
        Ok(ns)
    }

    /// Whether this is the black-hole route (no receiver; frames dropped at the device's queue).
    pub fn is_blackhole(&self) -> bool {
        self.info.kind == "blackhole"
    }

    /// What results record.
    pub fn info(&self) -> &TopologyInfo {
        &self.info
    }

    /// Runs `f` on a thread that has entered the namespace, so the sockets it makes live
    /// there (a socket keeps its namespace when the thread that made it leaves).
    fn inside<T: Send + 'static>(
        &self,
        f: impl FnOnce() -> anyhow::Result<T> + Send + 'static,
    ) -> anyhow::Result<T> {
        let path = format!("/run/netns/{}", self.info.namespace);
        std::thread::spawn(move || -> anyhow::Result<T> {
            let ns = std::fs::File::open(&path).with_context(|| format!("opening {path}"))?;
            sendpath_host::thread::enter_netns(ns.as_fd()).context("setns into the namespace")?;
            f()
        })
        .join()
        .map_err(|_| anyhow::anyhow!("the namespace thread panicked"))?
    }

    /// A listener on the receiver's address in the namespace (port chosen by the kernel).
    pub(crate) fn listen(&self) -> anyhow::Result<TcpListener> {
        let addr = self.info.receiver_addr;
        self.inside(move || {
            TcpListener::bind((addr, 0))
                .with_context(|| format!("binding {addr} in the receiver's namespace"))
        })
    }

    /// A UDP socket bound to the receiver's address in the namespace (port chosen by the
    /// kernel).
    pub(crate) fn udp_receiver(&self) -> anyhow::Result<UdpSocket> {
        let addr = self.info.receiver_addr;
        self.inside(move || {
            UdpSocket::bind((addr, 0))
                .with_context(|| format!("binding UDP {addr} in the receiver's namespace"))
        })
    }

    /// A UDP socket in the black-hole namespace, connected to the neighbour that never
    /// answers (port 9, discard).
    pub(crate) fn udp_sender(&self) -> anyhow::Result<UdpSocket> {
        let (from, to) = (self.info.sender_addr, self.info.receiver_addr);
        self.inside(move || {
            let s = UdpSocket::bind((from, 0)).with_context(|| format!("binding UDP {from}"))?;
            s.connect((to, 9))
                .with_context(|| format!("connecting UDP to {to}:9"))?;
            Ok(s)
        })
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
    fn a_subnet_in_use_is_skipped() {
        // Two runs whose process ids point at the same /30 (before, both took it).
        let used = [100, 101].into_iter().collect();
        assert_eq!(free_subnet(100, &used), Some(102));
        assert_eq!(free_subnet(SUBNETS - 1, &[SUBNETS - 1].into()), Some(0));
        assert_eq!(free_subnet(5, &(0..SUBNETS).collect()), None);
    }

    /// Two namespaces whose process ids point at the same /30 get different ones (before, the
    /// second took the first's, and its connections went into the first's namespace).
    #[test]
    fn concurrent_namespaces_never_share_a_subnet() {
        if sendpath_host::thread::euid() != 0 || run("ip", &["-V"]).is_err() {
            return crate::units::skip("needs root and iproute2 (ip netns)");
        }
        let a = Netns::create(NetnsSpec::default()).unwrap();
        let used = used_subnets().unwrap();
        let IpAddr::V4(ha) = a.info().sender_addr else {
            unreachable!()
        };
        let slot_a = u32::from(ha.octets()[2]) * 64 + u32::from(ha.octets()[3]) / 4;
        assert!(used.contains(&slot_a), "{ha} is seen as taken");
        // A second run starting at the same subnet gets the next free one.
        assert_ne!(free_subnet(slot_a, &used), Some(slot_a));
        let b = Netns::create(NetnsSpec::default()).unwrap();
        assert_ne!(a.info().sender_addr, b.info().sender_addr);
        assert_ne!(a.info().receiver_addr, b.info().receiver_addr);
    }

    #[test]
    fn the_bucket_holds_five_milliseconds_and_two_gso_packets() {
        assert_eq!(burst_bytes(10_000_000_000), 6_250_000);
        assert_eq!(burst_bytes(1_000_000_000), 625_000);
        assert_eq!(burst_bytes(100_000_000), 128 << 10);
    }
}
