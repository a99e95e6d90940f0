//! The flags of `stream`, `rr` and `sink`, and what they share (`RunArgs`, `TopologyArgs`).

use super::parse::*;
use super::AgentClientArgs;
use clap::Args;
use sendpath_lab::traffic::RecvMode;
use sendpath_lab::units::parse_duration;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Refuses a run whose buffers cannot fit in memory, naming the flags that shrink them.
pub(crate) fn check_memory(
    sizes: &[usize],
    threads: &[usize],
    run: &RunArgs,
) -> anyhow::Result<()> {
    let size = sizes.iter().copied().max().unwrap_or(0);
    let conns = threads.iter().copied().max().unwrap_or(1);
    sendpath_lab::limits::check_memory(size, conns, run.uring_depth).map_err(|e| {
        anyhow::anyhow!(
            "{} messages over {} connection(s) need about {} MiB of buffers, and this host has {} MiB available: use a smaller --size/--response, fewer connections, or a lower --uring-depth",
            sendpath_lab::units::fmt_size(e.message_bytes),
            e.connections,
            e.need_bytes >> 20,
            e.available_bytes >> 20
        )
    })
}

/// Settings shared by the measuring commands.
#[derive(Debug, Args, Clone)]
pub(crate) struct RunArgs {
    /// Send paths, comma-separated, or `all`: copy, serialize, gather, msg-zerocopy, uring,
    /// uring-zc, vmsplice, adaptive, read-send, mmap-send, sendfile, splice, uring-splice.
    #[arg(long, short = 's', default_value = "copy", value_parser = Strategies, hide_possible_values = true)]
    pub strategy: std::vec::Vec<sendpath::Strategy>,
    /// Buffers per message for memory paths (serialize copies them into one, gather and
    /// msg-zerocopy send them as iovecs, the others send each in turn). One by default, so that
    /// paths differ only in how they send; the `pa02` preset uses 8, as its study did.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub fields: u16,
    /// Measured time per window: one window per point per round (e.g. 5, 2.5s, 500ms).
    #[arg(long, short = 't', default_value = "3s", value_parser = positive_duration)]
    pub duration: Duration,
    /// Unmeasured time before each window.
    #[arg(long, default_value = "0.5s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Rounds: each round measures every point once, in a shuffled order; the median over
    /// rounds is reported with min..max.
    #[arg(long, short = 'n', default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Seed for the shuffled order of points in each round (default: random; recorded in the
    /// JSON as `schedule.seed`).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Bytes the receiver asks for per read (default: the message size clamped to
    /// 16 KiB..1 MiB, as iperf3 reads its -l block).
    #[arg(long, value_parser = recv_size)]
    pub recv_size: Option<usize>,
    /// What the receiver does with the bytes: copy (read() into a buffer, what an application
    /// does), discard (recv(MSG_TRUNC): the kernel drops them without copying out), verify
    /// (read() and check every byte against the pattern), zerocopy (TCP_ZEROCOPY_RECEIVE:
    /// map whole received pages, copy the rest; the row counts bytes mapped).
    #[arg(long, default_value = "copy", value_parser = recv_mode())]
    pub recv: RecvMode,
    /// Write results as JSON to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write results as CSV to FILE (`-` for stdout).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// io_uring requests in flight per connection (uring, uring-zc).
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub uring_depth: u32,
    /// copy: put up to N queued messages in one system call (one sendmsg over them on TCP,
    /// one sendmmsg on UDP), as io_uring's vectored requests do; 1 sends each by its own send.
    /// Set it to --uring-depth to compare copy with uring like for like.
    #[arg(long, value_name = "N", default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=64))]
    pub copy_batch: u32,
    /// Zero-copy sends awaiting completion per connection before falling back to copy. Sends
    /// from registered buffers (--fixed-buffers, --arena) are not counted: their pages were
    /// pinned once, when registered, and the buffers' slots bound them.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub inflight: u32,
    /// msg-zerocopy: read the error queue once N sends await completion and no released
    /// buffer is free (1: whenever the pool is empty), so one read collects many merged
    /// completions.
    #[arg(long, value_name = "N", default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub zc_reap_every: u32,
    /// Send SEND_ZC from registered (fixed) buffers.
    #[arg(long)]
    pub fixed_buffers: bool,
    /// Which io_uring paths write messages in place, into an arena the ring registers once
    /// (cut in slots of the message size; SEND_ZC by its index, SEND by address): auto (the
    /// faster way, as measured: uring, uring-zc and adaptive in place from 4 MiB for
    /// messages up to 64 KiB; owned with --fixed-buffers), off
    /// (every path owned), or SIZE (4K..1G: uring, uring-zc and adaptive in place from SIZE
    /// bytes). Past `ulimit -l` the ring registers what the kernel allows and says so.
    #[arg(long, value_name = "auto|off|SIZE", default_value = "auto", value_parser = arena)]
    pub arena: sendpath_lab::window::Arena,
    /// How io_uring keeps a connection's queued sends in order (uring, uring-zc, adaptive):
    /// vectored (one SENDMSG or SENDMSG_ZC over them), linked (one SEND or SEND_ZC each, in a
    /// linked chain), or auto (vectored where the kernel has it, without --fixed-buffers).
    #[arg(long, default_value = "auto", value_parser = ["auto", "vectored", "linked"])]
    pub uring_order: String,
    /// Pipe size for splice and vmsplice (4K..1G; the kernel may grant less).
    #[arg(long, default_value = "1M", value_parser = pipe_size)]
    pub pipe_size: usize,
    /// `minimal` takes only time and bytes (no CPU or counter readings): the baseline that
    /// shows what measuring costs (scripts/overhead); `syscalls` also counts system calls
    /// by role, which slows every system call while it runs; `copies` also counts the bytes
    /// the kernel copies by role, with BPF (root; `sendpath probe` lists what attaches).
    #[arg(long, value_enum, default_value = "full")]
    pub metrics: Metrics,
    /// Message buffers of memory paths, comma-separated: pool (reuse buffers the path
    /// released) and/or fresh (allocate and fill a new one per message) and/or shared (stream:
    /// one pool for every sender thread behind a lock, so a buffer released on one thread may
    /// be taken by another); each is a point.
    #[arg(long, default_value = "pool", value_parser = alloc_list)]
    pub alloc: std::vec::Vec<sendpath_lab::traffic::mix::Alloc>,
    /// The host profile `adaptive` decides from: a file, or `defaults` for the documented
    /// defaults (default: the active profile, see `sendpath probe`; the defaults when there is
    /// none).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// adaptive: zero-copy-sized sends in a row before zero-copy is used (0: at once).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u64).range(0..=1_000_000_000))]
    pub adaptive_run: Option<u64>,
}

/// The host profile for `adaptive`: `file` when given, else the active one (the defaults when
/// there is none); `None` when no strategy is `adaptive`.
pub(crate) fn load_profile(
    file: Option<&std::path::Path>,
    strategies: &[sendpath::Strategy],
) -> anyhow::Result<Option<std::sync::Arc<sendpath::Profile>>> {
    use anyhow::Context;
    use sendpath::Profile;
    if !strategies.contains(&sendpath::Strategy::Adaptive) {
        return Ok(None);
    }
    let p = match file {
        Some(f) if f == std::path::Path::new("defaults") => Profile::defaults(),
        Some(f) => Profile::load(f).with_context(|| format!("--profile {}", f.display()))?,
        None => Profile::load_active().context("the active host profile (see `sendpath probe`; remove the file or re-run `sendpath calibrate`)")?.0,
    };
    Ok(Some(std::sync::Arc::new(p)))
}

/// How much is measured around each window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub(crate) enum Metrics {
    /// Throughput, CPU (process and system), context switches by role, hardware counters
    /// when present.
    Full,
    /// Throughput only.
    Minimal,
    /// Full, and each thread's system calls (the kernel's raw_syscalls:sys_enter tracepoint;
    /// root; a counter for each sender and receiver thread, 64 at most). While
    /// it counts, every system call on the host is slower: compare speeds only with runs that
    /// also counted.
    Syscalls,
    /// Full, and the bytes the kernel copies between user memory and socket buffers by
    /// role, counted by BPF programs (root; each counter the kernel refuses is left null
    /// with its reason; `sendpath probe` lists them).
    Copies,
}

impl RunArgs {
    /// The options of `strategy` sending messages of up to `largest` bytes; `profile` is
    /// what [`load_profile`] returned.
    pub(crate) fn options(
        &self,
        (strategy, largest): (sendpath::Strategy, usize),
        profile: Option<std::sync::Arc<sendpath::Profile>>,
    ) -> sendpath::Options {
        sendpath::Options {
            inflight: sendpath::InflightLimits {
                max_sends: self.inflight as usize,
                ..Default::default()
            },
            zc_reap_every: self.zc_reap_every as usize,
            uring_depth: self.uring_depth as usize,
            copy_batch: self.copy_batch as usize,
            uring_fixed_buffers: self.fixed_buffers,
            uring_arena: self.arena.config_for(strategy, self.fixed_buffers, largest),
            uring_order: match self.uring_order.as_str() {
                "vectored" => Some(sendpath::Order::Vectored),
                "linked" => Some(sendpath::Order::Linked),
                _ => None,
            },
            pipe_size: self.pipe_size,
            profile,
            adaptive: sendpath::AdaptiveConfig {
                run_min: self
                    .adaptive_run
                    .unwrap_or(sendpath::AdaptiveConfig::default().run_min),
                ..Default::default()
            },
            ..Default::default()
        }
    }
}

#[derive(Debug, Args)]
pub(crate) struct StreamArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Message sizes, comma-separated, with units (64, 4K, 64KiB, 1M; at most 1G; UDP at
    /// most 65507) [default: 64K, or 64000 with --proto udp].
    #[arg(long, short = 'l', value_parser = message_sizes)]
    pub size: Option<std::vec::Vec<usize>>,
    /// Draw each message's size from a mix instead, SIZE:WEIGHT comma-separated (e.g.
    /// 88:70,4K:20,1M:10), optionally /BURST to send each drawn size that many times in a row
    /// (4K:90,64K:10/32); every path sends the same sequence of sizes.
    #[arg(long, value_name = "MIX", value_parser = size_mix, conflicts_with = "size")]
    pub size_mix: Option<sendpath_lab::traffic::mix::SizeMix>,
    /// Sender threads, comma-separated; each has its own connection(s) and receiver thread.
    #[arg(long, short = 'P', default_value = "1", value_parser = count_list)]
    pub threads: std::vec::Vec<usize>,
    /// Connections per sender thread, multiplexed on the thread's one io_uring ring (uring and
    /// uring-zc only; above 1 a receiver thread reads its sender's connections with epoll and
    /// the table shows bytes per connection: min, median, max).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub connections: u32,
    /// Send to a receiver elsewhere (e.g. `sendpath sink` or `nc -l`) instead of our own; on
    /// this host unless --allow-remote.
    #[arg(long, short = 'c', value_name = "ADDR", conflicts_with = "agent")]
    pub connect: Option<SocketAddr>,
    /// Let --connect send to a receiver that is not on this host (loopback). Only aim at
    /// receivers you run.
    #[arg(long, requires = "connect")]
    pub allow_remote: bool,
    /// Pin every sender to CPU S and every receiver to CPU R.
    #[arg(long, value_name = "S,R", value_parser = cpu_pair)]
    pub cpu: Option<(usize, usize)>,
    /// File paths: a cold page cache. The file is on a disk-backed filesystem, dropped from the
    /// page cache before each window, not read by a warmup, and each byte range is sent at most
    /// once per window (the window ends early when the file is used up).
    #[arg(long)]
    pub cold: bool,
    /// File paths: size of the source file, sent round and round when warm (default: 8 messages,
    /// at least 64 MiB; 1 GiB with --cold). `--file-size 1M --size 1M` resends one hot
    /// megabyte, as `iperf3 -Z` does.
    #[arg(long, value_parser = file_size)]
    pub file_size: Option<usize>,
    /// The transport: tcp, or udp (one connected UDP socket per sender thread, each send one
    /// datagram, or one GSO super-datagram with --gso; memory paths only). Our UDP receiver
    /// counts datagrams lost and reordered from a sequence number in each.
    #[arg(long, default_value = "tcp", value_parser = protocol)]
    pub proto: sendpath_lab::traffic::datagram::Protocol,
    /// UDP: cut each send of --size bytes into datagrams of SEG bytes (segmentation offload,
    /// UDP_SEGMENT), as QUIC servers send.
    #[arg(long, value_name = "SEG", value_parser = clap::value_parser!(u16).range(1..=65507))]
    pub gso: Option<u16>,
    /// Time every message: the sender writes the time of the send call into its first 8
    /// bytes, and our receiver times it when its last byte is read (p50/p99 per window, in
    /// `latency_us`). Memory paths over TCP, one connection per thread, --recv copy or verify;
    /// costs a clock read per message at each end.
    #[arg(long)]
    pub msg_latency: bool,
    /// Send in bursts: MESSAGES back to back, then GAP idle (`1000/5ms`), as a server answers
    /// bursts of requests; with --alloc pool,fresh, the Net.ZMQ study's burst load. Rows show
    /// what the process allocated per window (`heap`). One connection per thread.
    #[arg(long, value_name = "MESSAGES/GAP", value_parser = sendpath_lab::traffic::mix::Burst::parse)]
    pub burst: Option<sendpath_lab::traffic::mix::Burst>,
    /// TCP congestion control of the senders' connections (as `iperf3 -C`): e.g. cubic, reno,
    /// bbr (default: the host's, net.ipv4.tcp_congestion_control). bbr paces each loopback
    /// connection with a timer, at a rate that varies from one connection to the next; the
    /// algorithm is recorded per row (`tcp_congestion`).
    #[arg(long, value_name = "ALGO")]
    pub congestion: Option<String>,
    /// What runs the senders, comma-separated: thread (sendpath's blocking paths, a thread
    /// each); tokio (sendpath's async sender, a tokio task each: copy, msg-zerocopy, uring,
    /// uring-zc, adaptive, sendfile); tokio-write (tokio's own write_all / send with no
    /// sendpath code: the baseline a tokio server starts from, one row per size). Rows record
    /// it (`runtime`).
    #[arg(long, default_value = "thread", value_parser = runtime_list)]
    pub runtime: std::vec::Vec<sendpath_lab::traffic::Runtime>,
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub remote: AgentClientArgs,
}

/// Where the receiver runs (`--topology`, `--rate`, `--mtu`).
#[derive(Debug, Args, Clone)]
pub(crate) struct TopologyArgs {
    /// Where the receiver runs: loopback; netns (a network namespace sendpath creates and
    /// removes, joined by a veth pair; needs root and iproute2); or blackhole (UDP only: a
    /// namespace whose veth peer is down, whose queue drops every frame, so zero-copy is
    /// never copied; the send side only, an upper bound of what a NIC with offloads allows).
    #[arg(long, default_value = "loopback", value_parser = ["loopback", "netns", "blackhole"])]
    pub topology: String,
    /// With --topology netns: limit the sender's veth to this rate (htb), e.g. 1gbit, 10gbit.
    #[arg(long, value_name = "RATE", value_parser = sendpath_lab::topology::parse_rate)]
    pub rate: Option<u64>,
    /// With --topology netns or blackhole: the MTU of the veth ends (blackhole: 65535 unless
    /// given).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1280..=65535))]
    pub mtu: Option<u32>,
}

impl StreamArgs {
    /// The message sizes: `--size`, else 64 KiB (64000 B for UDP, which carries at most 65507
    /// bytes per send).
    pub(crate) fn sizes(&self) -> Vec<usize> {
        let udp = self.proto == sendpath_lab::traffic::datagram::Protocol::Udp;
        self.size
            .clone()
            .unwrap_or_else(|| vec![if udp { 64_000 } else { 64 << 10 }])
    }
}

impl TopologyArgs {
    /// The namespace to receive in, created (and announced) when `--topology netns`.
    /// `udp`: the run sends UDP (the black-hole route takes nothing else).
    pub(crate) fn create(
        &self,
        elsewhere: bool,
        udp: bool,
    ) -> anyhow::Result<Option<std::sync::Arc<sendpath_lab::topology::Netns>>> {
        use sendpath_lab::topology::{Netns, NetnsSpec};
        if self.topology == "blackhole" {
            return self.blackhole(elsewhere, udp).map(Some);
        }
        if self.topology != "netns" {
            if self.rate.is_some() || self.mtu.is_some() {
                anyhow::bail!(
                    "--rate and --mtu shape the veth pair of --topology netns: add --topology netns"
                );
            }
            return Ok(None);
        }
        if elsewhere {
            anyhow::bail!("--topology netns puts our own receiver in a namespace: it cannot go with --connect or --agent");
        }
        let ns = Netns::create(NetnsSpec {
            rate_bits_per_s: self.rate,
            mtu: self.mtu,
        })?;
        let i = ns.info();
        eprintln!(
            "topology: receiver in namespace {} at {}, sender at {} over a veth pair{}{}",
            i.namespace,
            i.receiver_addr,
            i.sender_addr,
            i.rate_bits_per_s.map_or(String::new(), |r| format!(
                ", rate {} (htb, burst {} B)",
                tc_rate(r),
                i.burst_bytes.unwrap_or(0)
            )),
            i.mtu.map_or(String::new(), |m| format!(", MTU {m}"))
        );
        Ok(Some(std::sync::Arc::new(ns)))
    }

    /// The black-hole route, for UDP only, announced with what its figures are.
    fn blackhole(
        &self,
        elsewhere: bool,
        udp: bool,
    ) -> anyhow::Result<std::sync::Arc<sendpath_lab::topology::Netns>> {
        if !udp {
            anyhow::bail!("--topology blackhole has no receiver, so TCP cannot run there (no peer answers its handshake): use `stream --proto udp`, or `sweep --preset udp-zerocopy`; for TCP use --topology netns (where zero-copy is copied at the receiver)");
        }
        if elsewhere {
            anyhow::bail!("--topology blackhole sends into a namespace with no receiver: it cannot go with --connect or --agent");
        }
        if self.rate.is_some() {
            anyhow::bail!("--rate shapes the veth pair of --topology netns; the black-hole route is not limited: drop --rate");
        }
        let ns = sendpath_lab::topology::Netns::blackhole(self.mtu)?;
        let i = ns.info();
        eprintln!(
            "topology: black hole in namespace {}: UDP from {} to {}, whose veth peer is down (MTU {}); send side only: no receiver; frames dropped at the device's queue (no carrier), before the driver; an upper bound of what a NIC with offloads allows",
            i.namespace,
            i.sender_addr,
            i.receiver_addr,
            i.mtu.unwrap_or(65_535)
        );
        Ok(std::sync::Arc::new(ns))
    }
}

#[derive(Debug, Args)]
pub(crate) struct RrArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Request size.
    #[arg(long, default_value = "64", value_parser = message_size)]
    pub request: usize,
    /// Response sizes, comma-separated (the response is sent with the strategy).
    #[arg(long, short = 'l', default_value = "64", value_parser = message_sizes)]
    pub response: std::vec::Vec<usize>,
    /// Draw each response's size from a mix instead, SIZE:WEIGHT comma-separated (e.g.
    /// 88:70,4K:20,1M:10), optionally /BURST; client and server follow the same sequence.
    #[arg(long, value_name = "MIX", value_parser = size_mix, conflicts_with = "response")]
    pub size_mix: Option<sendpath_lab::traffic::mix::SizeMix>,
    /// Connections, comma-separated list.
    #[arg(long, short = 'C', default_value = "1", value_parser = count_list)]
    pub concurrency: std::vec::Vec<usize>,
    /// Open loop at this many requests per second in total (latency from the intended send
    /// time); closed loop when absent.
    #[arg(long)]
    pub rate: Option<f64>,
    /// Pin every server to CPU S and every client to CPU C.
    #[arg(long, value_name = "S,C", value_parser = cpu_pair)]
    pub cpu: Option<(usize, usize)>,
    /// TCP congestion control of the connections (as `iperf3 -C`): e.g. cubic, reno, bbr
    /// (default: the host's); set on both ends (with --agent, on ours, which sends the
    /// responses) and recorded per row (`tcp_congestion`).
    #[arg(long, value_name = "ALGO")]
    pub congestion: Option<String>,
    #[command(flatten)]
    pub remote: AgentClientArgs,
}

#[derive(Debug, Args)]
pub(crate) struct SinkArgs {
    /// Address to listen on, e.g. 127.0.0.1:5201.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// What to do with the bytes: copy, discard (MSG_TRUNC), verify, or zerocopy
    /// (TCP_ZEROCOPY_RECEIVE: map whole received pages, copy the rest).
    #[arg(long, default_value = "copy", value_parser = recv_mode())]
    pub recv: RecvMode,
    /// Connections to accept before exiting.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Give up after this long.
    #[arg(long, default_value = "120s", value_parser = positive_duration)]
    pub timeout: Duration,
    /// Bytes asked for per read.
    #[arg(long, default_value = "128K", value_parser = recv_size)]
    pub recv_size: usize,
}

/// A rate in bits per second as tc(8) writes one: 8kbit, 1.5Mbit, 10Gbit.
fn tc_rate(bits_per_s: u64) -> String {
    let (v, unit) = match bits_per_s {
        r if r >= 1_000_000_000 => (r as f64 / 1e9, "Gbit"),
        r if r >= 1_000_000 => (r as f64 / 1e6, "Mbit"),
        r if r >= 1_000 => (r as f64 / 1e3, "kbit"),
        r => (r as f64, "bit"),
    };
    format!("{}{unit}", (v * 1000.0).round() / 1000.0)
}

#[cfg(test)]
mod tests {
    #[test]
    fn rates_are_written_as_tc_writes_them() {
        assert_eq!(super::tc_rate(8_000), "8kbit");
        assert_eq!(super::tc_rate(1_500_000), "1.5Mbit");
        assert_eq!(super::tc_rate(10_000_000_000), "10Gbit");
        assert_eq!(super::tc_rate(999), "999bit");
    }
}
