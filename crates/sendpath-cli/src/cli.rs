//! Command-line interface.

use crate::units::{parse_duration, parse_size, parse_size_list};
use crate::workload::RecvMode;
use clap::{Args, Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Which Linux send path should your server use, for your message sizes, on this kernel?
/// sendpath measures them side by side and says.
#[derive(Debug, Parser)]
#[command(name = "sendpath", version, about, propagate_version = true)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Command,
}

#[derive(Debug, Subcommand)]
pub enum Command {
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
    /// Re-render summary.md and report.html from a results.json.
    Report(ReportArgs),
}

#[derive(Debug, Args)]
pub struct SweepArgs {
    /// Preset to run (see --list-presets).
    #[arg(long, short = 'p', default_value = "quick")]
    pub preset: String,
    /// List the presets and exit.
    #[arg(long)]
    pub list_presets: bool,
    /// Output directory (default: sendpath-results/PRESET-TIME, linked as sendpath-results/latest).
    #[arg(long, value_name = "DIR", conflicts_with = "resume")]
    pub out: Option<PathBuf>,
    /// Continue an interrupted sweep in DIR, measuring only the points it lacks.
    #[arg(long, value_name = "DIR")]
    pub resume: Option<PathBuf>,
    /// Measured time per repeat (overrides the preset).
    #[arg(long, short = 't', value_parser = positive_duration, conflicts_with = "resume")]
    pub duration: Option<Duration>,
    /// Warmup per repeat (overrides the preset).
    #[arg(long, value_parser = parse_duration, conflicts_with = "resume")]
    pub warmup: Option<Duration>,
    /// Repeats per point (overrides the preset).
    #[arg(long, short = 'n', value_parser = clap::value_parser!(u32).range(1..), conflicts_with = "resume")]
    pub repeat: Option<u32>,
}

#[derive(Debug, Args)]
pub struct ReportArgs {
    /// A results.json written by `sendpath sweep` or `sendpath stream --json`.
    pub results: PathBuf,
    /// Where to write summary.md and report.html (default: beside the results file).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// Print JSON instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn positive_duration(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d.is_zero() {
        return Err(format!("`{s}`: must be longer than zero"));
    }
    Ok(d)
}

fn count_list(s: &str) -> Result<Vec<usize>, String> {
    s.split(',')
        .map(|x| match x.trim().parse::<usize>() {
            Ok(0) | Err(_) => Err(format!("`{x}` is not a positive whole number")),
            Ok(n) => Ok(n),
        })
        .collect()
}

fn strategy_list(s: &str) -> Result<Vec<sendpath::Strategy>, String> {
    if s == "all" {
        return Ok(sendpath::Strategy::ALL.to_vec());
    }
    s.split(',')
        .map(|x| sendpath::Strategy::parse(x.trim()).map_err(|e| e.to_string()))
        .collect()
}

/// Settings shared by the measuring commands.
#[derive(Debug, Args, Clone)]
pub struct RunArgs {
    /// Send paths, comma-separated, or `all`: copy, serialize, gather, msg-zerocopy, uring,
    /// uring-zc, vmsplice, read-send, mmap-send, sendfile, splice.
    #[arg(long, short = 's', default_value = "copy", value_parser = strategy_list)]
    pub strategy: std::vec::Vec<sendpath::Strategy>,
    /// Fields per message for serialize, gather and msg-zerocopy.
    #[arg(long, default_value_t = 8)]
    pub fields: usize,
    /// Measured time per repeat (e.g. 5, 2.5s, 500ms).
    #[arg(long, short = 't', default_value = "3s", value_parser = positive_duration)]
    pub duration: Duration,
    /// Unmeasured time before each repeat.
    #[arg(long, default_value = "0.5s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Repeats per point; the median is reported with min..max.
    #[arg(long, short = 'n', default_value_t = 3, value_parser = clap::value_parser!(u32).range(1..))]
    pub repeat: u32,
    /// What the receiver does with the bytes.
    #[arg(long, value_enum, default_value = "copy")]
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
    /// Zero-copy sends awaiting completion per connection before falling back to copy.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..))]
    pub inflight: u32,
    /// Send SEND_ZC from registered (fixed) buffers.
    #[arg(long)]
    pub fixed_buffers: bool,
    /// Pipe size for splice and vmsplice.
    #[arg(long, default_value = "1M", value_parser = parse_size)]
    pub pipe_size: usize,
    /// `minimal` takes only time and bytes (no CPU or counter readings): the baseline that
    /// shows what measuring costs (scripts/overhead).
    #[arg(long, value_enum, default_value = "full")]
    pub metrics: Metrics,
}

/// How much is measured around each window.
#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Metrics {
    /// Throughput, CPU (process and system), hardware counters when present.
    Full,
    /// Throughput only.
    Minimal,
}

impl RunArgs {
    pub fn options(&self) -> sendpath::Options {
        sendpath::Options {
            inflight: sendpath::policy::InflightLimits {
                max_sends: self.inflight as usize,
                ..Default::default()
            },
            uring_depth: self.uring_depth as usize,
            uring_fixed_buffers: self.fixed_buffers,
            pipe_size: self.pipe_size,
            ..Default::default()
        }
    }
}

#[derive(Debug, Args)]
pub struct StreamArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Message sizes, comma-separated, with units (64, 4K, 64KiB, 1M).
    #[arg(long, short = 'l', default_value = "64K", value_parser = parse_size_list)]
    pub size: std::vec::Vec<usize>,
    /// Connections, comma-separated; each has its own sender and receiver thread.
    #[arg(long, short = 'P', default_value = "1", value_parser = count_list)]
    pub threads: std::vec::Vec<usize>,
    /// Send to a receiver elsewhere (e.g. `sendpath sink` or `nc -l`) instead of our own.
    #[arg(long, short = 'c', value_name = "ADDR")]
    pub connect: Option<SocketAddr>,
    /// Pin every sender to CPU S and every receiver to CPU R.
    #[arg(long, value_name = "S,R", value_parser = cpu_pair)]
    pub cpu: Option<(usize, usize)>,
    /// File paths: drop the source file from the page cache before each repeat.
    #[arg(long)]
    pub cold: bool,
    /// File paths: size of the source file, which is sent round and round (default: 8 messages,
    /// at least 64 MiB). `--file-size 1M --size 1M` resends one hot megabyte, as `iperf3 -Z` does.
    #[arg(long, value_parser = parse_size)]
    pub file_size: Option<usize>,
}

fn cpu_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("`{s}`: give two CPUs, sender then receiver, e.g. 0,1"))?;
    let p = |x: &str| {
        x.trim()
            .parse::<usize>()
            .map_err(|_| format!("`{x}` is not a CPU number"))
    };
    Ok((p(a)?, p(b)?))
}

#[derive(Debug, Args)]
pub struct RrArgs {
    #[command(flatten)]
    pub run: RunArgs,
    /// Request size.
    #[arg(long, default_value = "64", value_parser = parse_size)]
    pub request: usize,
    /// Response sizes, comma-separated (the response is sent with the strategy).
    #[arg(long, short = 'l', default_value = "64", value_parser = parse_size_list)]
    pub response: std::vec::Vec<usize>,
    /// Connections, comma-separated list.
    #[arg(long, short = 'C', default_value = "1", value_parser = count_list)]
    pub concurrency: std::vec::Vec<usize>,
    /// Open loop at this many requests per second in total (latency from the intended send
    /// time); closed loop when absent.
    #[arg(long)]
    pub rate: Option<f64>,
}

#[derive(Debug, Args)]
pub struct SinkArgs {
    /// Address to listen on, e.g. 127.0.0.1:5201.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// What to do with the bytes.
    #[arg(long, value_enum, default_value = "copy")]
    pub recv: RecvMode,
    /// Connections to accept before exiting.
    #[arg(long, default_value_t = 1)]
    pub connections: usize,
    /// Give up after this long.
    #[arg(long, default_value = "120s", value_parser = positive_duration)]
    pub timeout: Duration,
}
