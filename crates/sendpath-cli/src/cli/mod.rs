//! Command-line interface.

mod http;
mod parse;
mod stream;

pub(crate) use http::{HttpLoadArgs, ServeArgs};
pub(crate) use stream::{
    check_memory, load_profile, Metrics, RrArgs, RunArgs, SinkArgs, StreamArgs, TopologyArgs,
};

use anyhow::Context;
use clap::{Args, Parser, Subcommand};
use parse::*;
use sendpath_lab::units::parse_duration;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Which Linux send path should your server use, for your message sizes, on this kernel?
/// sendpath measures them side by side and says.
#[derive(Debug, Parser)]
#[command(name = "sendpath", version, about, propagate_version = true)]
pub(crate) struct Cli {
    #[command(subcommand)]
    pub command: Command,
    /// Check the flags and settings (sizes against the protocol, outputs, profiles, tokens,
    /// memory) and say what would run, measuring nothing: no namespace, server or file is
    /// made.
    #[arg(long, global = true)]
    pub dry_run: bool,
}

/// `--dry-run`, set once from the flags.
static DRY_RUN: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

pub(crate) fn set_dry_run(on: bool) {
    DRY_RUN.store(on, std::sync::atomic::Ordering::Relaxed);
}

/// Whether `--dry-run` was given.
pub(crate) fn is_dry_run() -> bool {
    DRY_RUN.load(std::sync::atomic::Ordering::Relaxed)
}

/// With `--dry-run`, the point where a command's checks end: says what would run and ends
/// the command (`Some(success)`); else `None`, and the command goes on.
pub(crate) fn dry_run(what: impl std::fmt::Display) -> Option<std::process::ExitCode> {
    DRY_RUN.load(std::sync::atomic::Ordering::Relaxed).then(|| {
        println!("dry run: the checks passed; would run {what}");
        std::process::ExitCode::SUCCESS
    })
}

#[derive(Debug, Subcommand)]
pub(crate) enum Command {
    /// Check what this kernel and host can do (io_uring ops, MSG_ZEROCOPY, limits, counters)
    /// and predict what each send path will do here.
    Probe(ProbeArgs),
    /// One-way bulk transfer over loopback (or to --connect ADDR), per strategy x size x threads.
    Stream(StreamArgs),
    /// Request/response latency and rate, the response sent with the chosen strategy.
    Rr(RrArgs),
    /// Receive from any TCP sender and report what arrived.
    Sink(SinkArgs),
    /// Run a preset matrix of strategies x sizes x threads and write results, summary and an
    /// HTML report (the default runs the `quick` preset).
    Sweep(SweepArgs),
    /// Redraw a run's summary.md (and report.html) from its results file, of any study.
    Report(ReportArgs),
    /// An HTTP/1.1 keep-alive server answering every GET with the same body, sending with
    /// io_uring SEND, SEND_ZC, send(2) or epoll + writev; prints what it did on exit.
    Serve(ServeArgs),
    /// A keep-alive HTTP load generator: closed loop (--connections) or open loop (--rate),
    /// latency percentiles and errors by kind.
    HttpLoad(HttpLoadArgs),
    /// Measure which send path wins at which message size on this host (copy, msg-zerocopy,
    /// uring, uring-zc at 256 B..1 MiB, interleaved rounds, about 80 s) and write the host
    /// profile `adaptive` decides from.
    Calibrate(CalibrateArgs),
    /// Time whole-file transfers (7 MB..1 GB by default), each over a fresh connection from
    /// open() to the receiver's acknowledgement: read-send, mmap-send, sendfile, splice and
    /// io_uring splice, warm and cold. System calls are counted in one more transfer of each
    /// point after the timed rounds (counting slows every call).
    Transfer(TransferArgs),
    /// Run the other end on request, on another host or in a namespace: the receiver of
    /// `stream`/`sweep`/`transfer --agent`, the clients of `rr --agent`, the load of
    /// `http-load --agent`; sends back what it measured and its CPU.
    Agent(AgentArgs),
    /// Compare run B with run A (two results of one study: results.json of stream, rr or a
    /// sweep, http-results.json, transfer-results.json, or their directories), point by
    /// point: B/A with a 95% bootstrap interval over each run's repeats, faster, slower or
    /// within noise; what differs between the runs first.
    Compare(CompareArgs),
    /// Print the shell completion script for SHELL (e.g. `sendpath completions bash >
    /// ~/.local/share/bash-completion/completions/sendpath`).
    Completions(CompletionsArgs),
    /// Print the man page of sendpath or of one command as roff (`sendpath man stream | man
    /// -l -`), or write every page to --out DIR.
    Man(ManArgs),
}

#[derive(Debug, Args)]
pub(crate) struct CompareArgs {
    /// The run to compare with (the baseline): a results.json, or a sweep's directory.
    #[arg(value_name = "A")]
    pub a: PathBuf,
    /// The run compared: a results.json, or a sweep's directory.
    #[arg(value_name = "B")]
    pub b: PathBuf,
    /// Exit with status 1 when a point is slower than A, with confidence, by more than this
    /// share (5%, or 0.05), for CI.
    #[arg(long, value_name = "SHARE", value_parser = share)]
    pub threshold: Option<f64>,
    /// Write the comparison (Markdown) to this file instead of standard output.
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Also write it as an HTML page, with a chart of each path's B/A over size (rows study).
    #[arg(long, value_name = "FILE")]
    pub html: Option<PathBuf>,
}

/// A share: `5%` or `0.05`, in 0..1.
fn share(s: &str) -> Result<f64, String> {
    let v = match s.strip_suffix('%') {
        Some(p) => p.trim().parse::<f64>().map(|x| x / 100.0),
        None => s.trim().parse::<f64>(),
    }
    .map_err(|_| format!("`{s}` is not a share: give a percentage (5%) or a fraction (0.05)"))?;
    if !(0.0..1.0).contains(&v) {
        return Err(format!("{s}: a share is at least 0 and under 100%"));
    }
    Ok(v)
}

#[derive(Debug, Args)]
pub(crate) struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    #[arg(value_name = "SHELL")]
    pub shell: clap_complete::Shell,
}

#[derive(Debug, Args)]
pub(crate) struct ManArgs {
    /// The command whose page to print (stream, sweep, ...); none: sendpath's own.
    #[arg(value_name = "COMMAND")]
    pub command: Option<String>,
    /// Write the pages of sendpath and every command (sendpath.1, sendpath-stream.1, ...)
    /// to this directory instead.
    #[arg(long, value_name = "DIR", conflicts_with = "command")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct AgentArgs {
    /// Where to listen for control connections. Anything but loopback needs --token-file.
    #[arg(long, default_value = "127.0.0.1:5300", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// A file whose first line is the secret clients must present (their --token-file).
    #[arg(long, value_name = "FILE")]
    pub token_file: Option<PathBuf>,
    /// Sessions served at once; more are refused as busy.
    #[arg(long, default_value_t = 4, value_parser = clap::value_parser!(u32).range(1..=256))]
    pub max_sessions: u32,
    /// The longest one session may last.
    #[arg(long, default_value = "60m", value_parser = positive_duration)]
    pub max_session: Duration,
    /// The longest one receive may last, whatever a client asks.
    #[arg(long, default_value = "10m", value_parser = positive_duration)]
    pub max_receive: Duration,
    /// The longest a new connection may take to say its whole hello (with its token), however
    /// it trickles in; connections that have not hold no session slot, and past 16 of them a
    /// new one ends the oldest.
    #[arg(long, default_value = "5s", value_parser = hello_timeout)]
    pub hello_timeout: Duration,
    /// Stop by itself after this long (Ctrl-C stops it sooner).
    #[arg(long, short = 't', default_value = "1440m", value_parser = positive_duration)]
    pub duration: Duration,
}

/// Where `--agent` points and the token for it.
#[derive(Debug, Args, Clone)]
pub(crate) struct AgentClientArgs {
    /// Run the other end on `sendpath agent` at HOST[:PORT] (port 5300 by default): it
    /// receives (stream, sweep, transfer) or runs the clients (rr; http-load, against
    /// TARGET's port at the address it reached this host at); its CPU comes back as
    /// cpu.remote.
    #[arg(long, value_name = "HOST[:PORT]", value_parser = sendpath_lab::remote::parse_target)]
    pub agent: Option<SocketAddr>,
    /// With --agent: a file whose first line is the agent's token.
    #[arg(long, value_name = "FILE", requires = "agent")]
    pub token_file: Option<PathBuf>,
}

impl AgentClientArgs {
    /// The agent to use, with its token read.
    pub(crate) fn target(&self) -> anyhow::Result<Option<sendpath_lab::remote::AgentTarget>> {
        let Some(addr) = self.agent else {
            return Ok(None);
        };
        let token = match &self.token_file {
            Some(p) => Some(sendpath_lab::remote::read_token(p)?),
            None => None,
        };
        Ok(Some(sendpath_lab::remote::AgentTarget { addr, token }))
    }
}

#[derive(Debug, Args)]
pub(crate) struct TransferArgs {
    /// File sizes, comma-separated (default: the study's 7 MB, 21 MB, 63 MB, 98 MB, 200 MB,
    /// 350 MB, 700 MB, 1 GB, in decimal megabytes; 64M here means 64 MiB).
    #[arg(long, short = 'l', value_name = "LIST", value_parser = transfer_sizes)]
    pub sizes: Option<std::vec::Vec<u64>>,
    /// File paths, comma-separated: read-send, mmap-send, sendfile, splice, uring-splice.
    #[arg(long, short = 's', default_value = "read-send,mmap-send,sendfile,splice,uring-splice", value_parser = Strategies, hide_possible_values = true)]
    pub strategy: std::vec::Vec<sendpath::Strategy>,
    /// read-send: bytes per read() + send(), comma-separated (each is a method of its own).
    #[arg(long, default_value = "4K,64K,1M", value_parser = message_sizes)]
    pub chunk: std::vec::Vec<usize>,
    /// Page cache state at the start: warm, cold, or warm,cold.
    #[arg(long, default_value = "warm,cold", value_parser = caches)]
    pub cache: std::vec::Vec<sendpath_lab::study::transfer::Cache>,
    /// What the receiver does with the bytes: discard (MSG_TRUNC) or copy (read into a buffer).
    #[arg(long, default_value = "copy", value_parser = ["copy", "discard"])]
    pub recv: String,
    /// The receiver writes what it reads to this file (truncated per transfer) instead.
    #[arg(long, value_name = "PATH")]
    pub sink_file: Option<PathBuf>,
    /// With --sink-file: fsync the file before acknowledging the last byte.
    #[arg(long, requires = "sink_file")]
    pub fsync: bool,
    /// Bytes the receiver asks for per read.
    #[arg(long, default_value = "128K", value_parser = recv_size)]
    pub recv_size: usize,
    /// Rounds: each transfers every size x cache x path once, in a shuffled order.
    #[arg(long, short = 'n', default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// The longest one transfer may take before it fails.
    #[arg(long, default_value = "120s", value_parser = positive_duration)]
    pub timeout: Duration,
    /// Pin the sender to CPU S and the receiver to CPU R.
    #[arg(long, value_name = "S,R", value_parser = cpu_pair)]
    pub cpu: Option<(usize, usize)>,
    /// TCP congestion control of each transfer's connection (as `iperf3 -C`): e.g. cubic,
    /// reno, bbr (default: the host's); recorded in the settings (`tcp_congestion`).
    #[arg(long, value_name = "ALGO")]
    pub congestion: Option<String>,
    /// Seed for the shuffled order of each round (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Write the results as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write one CSV line per transfer to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub remote: AgentClientArgs,
}

#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// Message sizes to measure, comma-separated (default: 256,1K,4K,16K,64K,256K,1M over TCP;
    /// 256,1K,4K,16K,64000 over UDP, whose datagrams carry at most 65507 bytes).
    #[arg(long, short = 'l', value_parser = message_sizes)]
    pub sizes: Option<std::vec::Vec<usize>>,
    /// Rounds: each measures every size with every path, in a shuffled order.
    #[arg(long, short = 'n', default_value_t = 6, value_parser = clap::value_parser!(u32).range(1..=1000))]
    pub repeat: u32,
    /// Extra rounds for sizes whose winner is in doubt: it beat copy in more than half of the
    /// rounds but not in a clear majority (sign test, 5%), or two paths beat copy and pairing
    /// them with each other did not tell which is faster (0: none).
    #[arg(long, default_value_t = 6, value_parser = clap::value_parser!(u32).range(0..=1000))]
    pub tiebreak_rounds: u32,
    /// Measured time per window.
    #[arg(long, short = 't', default_value = "300ms", value_parser = positive_duration)]
    pub duration: Duration,
    /// Unmeasured time before each window.
    #[arg(long, default_value = "100ms", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Where to write the profile (default: the active profile's place, see `sendpath probe`).
    #[arg(long, value_name = "FILE")]
    pub out: Option<PathBuf>,
    /// Also write the measured windows as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Seed for the shuffled order of each round (default: random).
    #[arg(long)]
    pub seed: Option<u64>,
    /// The transport measured: tcp, or udp (with --topology blackhole: zero-copy the kernel
    /// does not copy, so the zero-copy tiers come from non-copied sends).
    #[arg(long, default_value = "tcp", value_parser = parse::protocol)]
    pub proto: sendpath_lab::traffic::datagram::Protocol,
    /// Send SEND_ZC from registered (fixed) buffers, as adaptive will with --fixed-buffers.
    #[arg(long)]
    pub fixed_buffers: bool,
    /// Which paths write their messages in place, as `stream --arena` (auto: uring-zc up to
    /// 64 KiB, as adaptive's ring then sends its uring-zc tiers; off; or SIZE).
    #[arg(long, value_name = "auto|off|SIZE", default_value = "auto", value_parser = parse::arena)]
    pub arena: sendpath_lab::window::Arena,
    #[command(flatten)]
    pub topology: TopologyArgs,
}

#[derive(Debug, Args)]
pub(crate) struct SweepArgs {
    /// Preset to run (see --list-presets).
    #[arg(long, short = 'p', default_value = "quick")]
    pub preset: String,
    /// List the presets and exit.
    #[arg(long)]
    pub list_presets: bool,
    /// Output directory (default: sendpath-results/PRESET-TIME, linked as sendpath-results/latest).
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    pub out: Option<PathBuf>,
    /// Continue an interrupted sweep in DIR, measuring only the points it lacks. It keeps the
    /// preset, windows, warmup, rounds and seed the sweep was started with: the flags that set
    /// those are refused with it.
    #[arg(long, value_name = "DIR", conflicts_with_all = ["preset", "duration", "warmup", "repeat", "seed", "copy_batch"])]
    pub resume: Option<PathBuf>,
    /// Measured time per repeat (overrides the preset).
    #[arg(long, short = 't', value_parser = positive_duration, conflicts_with = "resume")]
    pub duration: Option<Duration>,
    /// Warmup per repeat (overrides the preset).
    #[arg(long, value_parser = parse_duration, conflicts_with = "resume")]
    pub warmup: Option<Duration>,
    /// Rounds over all points (overrides the preset).
    #[arg(long, short = 'n', value_parser = clap::value_parser!(u32).range(1..=1000), conflicts_with = "resume")]
    pub repeat: Option<u32>,
    /// copy: put up to N queued messages in one system call (sendmsg on TCP, sendmmsg on UDP),
    /// as io_uring's vectored requests put 8 (default 1: one send each). A resumed sweep keeps
    /// what it began with.
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u32).range(1..=64), conflicts_with = "resume")]
    pub copy_batch: Option<u32>,
    /// http-server preset: servers to compare (sendpath send modes, and nginx when installed).
    #[arg(long, value_name = "LIST", default_value = sendpath_lab::study::http::DEFAULT_SERVERS, value_parser = http_servers)]
    pub http_servers: std::vec::Vec<sendpath_lab::study::http::Server>,
    /// http-server preset: connection counts.
    #[arg(long, value_name = "LIST", default_value = sendpath_lab::study::http::DEFAULT_CONNECTIONS, value_parser = count_list)]
    pub http_connections: std::vec::Vec<usize>,
    /// http-server preset: body sizes.
    #[arg(long, value_name = "LIST", default_value = sendpath_lab::study::http::DEFAULT_BODIES, value_parser = body_sizes)]
    pub http_bodies: std::vec::Vec<usize>,
    /// http-server preset: closed-loop load tool, wrk (when installed) or http-load.
    #[arg(long, value_name = "TOOL", default_value = "wrk", value_parser = ["wrk", "http-load"])]
    pub http_load: String,
    /// http-server preset: `serve --workers` (default: nginx's worker count, one per CPU or
    /// per server CPU).
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub http_serve_workers: Option<u16>,
    /// http-server preset: `serve --min-wait` (batched waits; 0 turns them off).
    #[arg(long, value_name = "DURATION", default_value = "0", value_parser = min_wait)]
    pub http_min_wait: Duration,
    /// http-server preset: open-loop rates as fractions of nginx's median peak (empty: none).
    #[arg(long, value_name = "LIST", default_value = "0.5,0.8", value_parser = fractions)]
    pub http_open_loop: std::vec::Vec<f64>,
    /// Seed for the shuffled order of each round (default: random; recorded in results.json).
    #[arg(long, conflicts_with = "resume")]
    pub seed: Option<u64>,
    /// The host profile `adaptive` decides from: a file, or `defaults` (default: the active
    /// profile).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
    /// TCP congestion control of the stream points' connections (as `iperf3 -C`): e.g. cubic,
    /// reno, bbr (default: the host's, net.ipv4.tcp_congestion_control). bbr paces each
    /// loopback connection with a timer; recorded per row (`tcp_congestion`).
    #[arg(long, value_name = "ALGO")]
    pub congestion: Option<String>,
    #[command(flatten)]
    pub remote: AgentClientArgs,
    #[command(flatten)]
    pub topology: TopologyArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// A results file of any study: the results.json of `sweep`, `stream --json` or `rr
    /// --json`, the http-results.json of `sweep --preset http-server`, or the
    /// transfer-results.json of `transfer --json` or `sweep --preset file-transfer`.
    pub results: PathBuf,
    /// Where to write summary.md and report.html (a transfer study: summary.md only; default:
    /// beside the results file).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ProbeArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
    /// Show the transmit offloads of this interface only (e.g. eth0; `ip link` lists them).
    #[arg(long, value_name = "NAME")]
    pub iface: Option<String>,
}

/// Refuses a `--congestion` this kernel cannot set before anything runs, then
/// [`note_paced`].
pub(crate) fn check_congestion(name: Option<&str>, local: bool) -> anyhow::Result<()> {
    if let Some(n) = name {
        sendpath_lab::workload::congestion::check(n)?;
    }
    note_paced(name, local);
    Ok(())
}

/// Says when the connections of a run on this host (`local`: loopback or a namespace, no fq
/// qdisc) will be paced by bbr.
pub(crate) fn note_paced(name: Option<&str>, local: bool) {
    if local && sendpath_lab::workload::congestion::paces(name) {
        eprintln!(
            "note: TCP congestion control is bbr, which paces every connection: here, with a \
             timer per connection, at a rate that differs from one connection to the next. \
             --congestion cubic measures the send paths unpaced."
        );
    }
}

/// Refuses to load an address off this host unless `--allow-remote` was given: a mistyped
/// address would otherwise receive the whole load.
pub(crate) fn check_target(flag: &str, addr: SocketAddr, allow_remote: bool) -> anyhow::Result<()> {
    if allow_remote || addr.ip().to_canonical().is_loopback() {
        return Ok(());
    }
    anyhow::bail!(
        "{flag} {addr} is not on this host: sendpath loads only loopback unless --allow-remote is given (for a server or receiver you run there); nothing was sent"
    )
}

/// Checks every output file of a command before the first window, so that nothing measured is
/// lost to a path that cannot be written: `(flag, path)` pairs.
pub(crate) fn check_outputs<'a>(
    outputs: impl IntoIterator<Item = (&'a str, Option<&'a std::path::Path>)>,
) -> anyhow::Result<()> {
    let mut seen: Vec<(&str, std::path::PathBuf)> = Vec::new();
    for (flag, path) in outputs {
        let Some(p) = path else { continue };
        // A dry run makes no directory, so a file in one still to be made is not checked.
        let unmade = p
            .parent()
            .is_some_and(|d| !d.as_os_str().is_empty() && !d.exists());
        if !(is_dry_run() && unmade) {
            sendpath_lab::files::check_writable(p)
                .with_context(|| format!("{flag} {}", p.display()))?;
        }
        let here = same_file_key(p);
        if let Some((other, _)) = seen.iter().find(|(_, k)| *k == here) {
            anyhow::bail!(
                "{other} and {flag} both write {}: one would overwrite the other; give each its own file",
                p.display()
            );
        }
        seen.push((flag, here));
    }
    Ok(())
}

/// What two output paths that name one file have in common: the file itself with symlinks
/// resolved, or its resolved directory and name when it does not exist yet (`-` is stdout).
fn same_file_key(p: &std::path::Path) -> std::path::PathBuf {
    if let Ok(c) = p.canonicalize() {
        return c;
    }
    let dir = match p.parent() {
        Some(d) if !d.as_os_str().is_empty() => d,
        _ => std::path::Path::new("."),
    };
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    dir.join(p.file_name().unwrap_or(p.as_os_str()))
}

/// The flag that sets a setting the lab reports an error about.
pub(crate) fn flag(s: sendpath_lab::setting::Setting) -> &'static str {
    use sendpath_lab::setting::Setting;
    match s {
        Setting::Agent => "--agent",
        Setting::TokenFile => "--token-file",
        Setting::Listen => "--listen",
        Setting::Connect => "--connect",
        Setting::Connections => "--connections",
        Setting::SizeMix => "--size-mix/--alloc fresh",
        Setting::Topology => "--topology",
        Setting::SinkFile => "--sink-file",
        Setting::Cache => "--cache",
        Setting::FileSize => "--file-size",
        Setting::Timeout => "--timeout",
        Setting::Resume => "--resume",
        Setting::Congestion => "--congestion",
        Setting::Datagram => "--size/--gso/--mtu",
    }
}
