//! Command-line interface.

use clap::{Args, Parser, Subcommand};
use sendpath_lab::traffic::RecvMode;
use sendpath_lab::units::{parse_duration, parse_size};
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
    /// Re-render summary.md and report.html from a results.json.
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
    /// io_uring splice, warm and cold.
    Transfer(TransferArgs),
    /// Run the other end on request, on another host or in a namespace: the receiver of
    /// `stream`/`sweep`/`transfer --agent`, the clients of `rr --agent`, the load of
    /// `http-load --agent`; sends back what it measured and its CPU.
    Agent(AgentArgs),
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
    #[arg(long, short = 's', default_value = "read-send,mmap-send,sendfile,splice,uring-splice", value_parser = strategy_list)]
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

fn transfer_sizes(s: &str) -> Result<Vec<u64>, String> {
    s.split(',')
        .map(|x| bounded_size(x, "a file size", 4096, 64 << 30).map(|v| v as u64))
        .collect()
}

fn caches(s: &str) -> Result<Vec<sendpath_lab::study::transfer::Cache>, String> {
    s.split(',')
        .map(|x| sendpath_lab::study::transfer::Cache::parse(x.trim()))
        .collect()
}

#[derive(Debug, Args)]
pub(crate) struct CalibrateArgs {
    /// Message sizes to measure, comma-separated.
    #[arg(long, short = 'l', default_value = "256,1K,4K,16K,64K,256K,1M", value_parser = message_sizes)]
    pub sizes: std::vec::Vec<usize>,
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
}

#[derive(Debug, Args)]
pub(crate) struct ServeArgs {
    /// Address to listen on (127.0.0.1:0 picks a free port and prints it).
    #[arg(long, default_value = "127.0.0.1:8080", value_name = "ADDR")]
    pub listen: SocketAddr,
    /// How responses are sent: copy (send(2)), uring (io_uring SEND), uring-zc (io_uring
    /// SEND_ZC), epoll (epoll + writev, no io_uring) or adaptive (SEND or SEND_ZC per send,
    /// by the host profile).
    #[arg(long, default_value = "uring", value_parser = send_mode())]
    pub send: sendpath_lab::http::serve::SendMode,
    /// Worker threads, each with its own SO_REUSEPORT listener (default: one per allowed CPU).
    #[arg(long, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,
    /// Pin worker i to the i-th of these CPUs (comma-separated), in turn.
    #[arg(long, value_name = "CPUS", value_parser = cpu_list)]
    pub cpu: Option<std::vec::Vec<usize>>,
    /// Body bytes of every response (written by the server, printable, seeded).
    #[arg(long, default_value = "88", value_parser = body_size)]
    pub body: usize,
    /// Serve this file as the body instead: spliced through a pipe on the ring (copy, uring,
    /// uring-zc), or sent with sendfile(2) (epoll).
    #[arg(long, value_name = "PATH", conflicts_with = "body")]
    pub file: Option<PathBuf>,
    /// Seed of the body bytes.
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// SEND_ZC requests awaiting notification per worker before sends go by copy.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub zc_inflight: u32,
    /// Close a connection with no request for this long (a half-sent request included).
    #[arg(long, default_value = "60s", value_parser = positive_duration)]
    pub idle_timeout: Duration,
    /// Connections per worker beyond which new ones are closed at once (default: 10000, or
    /// what the open-files limit allows).
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=1_000_000))]
    pub max_connections: Option<u32>,
    /// Responses per io_uring chain per connection.
    #[arg(long, default_value_t = 8, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub uring_depth: u32,
    /// io_uring modes, with --min-wait: the most completions a batched wait holds out for
    /// (also at most the worker's connections).
    #[arg(long, default_value_t = 32, value_parser = clap::value_parser!(u32).range(1..=4096))]
    pub wait_nr: u32,
    /// io_uring modes: batch waits under load. A worker that handled 4 or more completions
    /// since its last wait holds out for as many (at most --wait-nr), for at most this long
    /// once one has come (io_uring's min_wait_usec, Linux 6.12; at most 10ms). Less CPU per
    /// request when saturated, more latency below that; 0 (default) wakes at the first.
    #[arg(long, default_value = "0", value_parser = min_wait)]
    pub min_wait: Duration,
    /// Stop by itself after this long (SIGINT or SIGTERM stop it sooner).
    #[arg(long, short = 't', default_value = "10m", value_parser = positive_duration)]
    pub duration: Duration,
    /// Write the report as JSON to FILE on exit.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// The host profile `--send adaptive` decides from: a file, or `defaults` (default: the
    /// active profile).
    #[arg(long, value_name = "FILE")]
    pub profile: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct HttpLoadArgs {
    /// The server, e.g. 127.0.0.1:8080 (loopback or a namespace address only).
    #[arg(value_name = "ADDR")]
    pub target: SocketAddr,
    /// Keep-alive connections in total.
    #[arg(long, short = 'c', default_value_t = 100, value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub connections: u32,
    /// Threads (connections are spread over them).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub threads: u16,
    /// Pin thread i to the i-th of these CPUs (comma-separated), in turn.
    #[arg(long, value_name = "CPUS", value_parser = cpu_list)]
    pub cpu: Option<std::vec::Vec<usize>>,
    /// Measured time.
    #[arg(long, short = 'd', default_value = "10s", value_parser = positive_duration)]
    pub duration: Duration,
    /// Load before the measured window, not counted.
    #[arg(long, default_value = "1s", value_parser = parse_duration)]
    pub warmup: Duration,
    /// Open loop: requests per second over all connections, latency counted from each
    /// request's intended send time. Without it, closed loop.
    #[arg(long, short = 'R', value_parser = positive_rate)]
    pub rate: Option<f64>,
    /// Request target.
    #[arg(long, default_value = "/")]
    pub path: String,
    /// A response slower than this counts as a timeout; the connection is opened again.
    #[arg(long, default_value = "2s", value_parser = positive_duration)]
    pub timeout: Duration,
    /// Write the report as JSON to FILE.
    #[arg(long, value_name = "FILE")]
    pub json: Option<PathBuf>,
    /// Write the report as CSV (a header and one record) to FILE.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    #[command(flatten)]
    pub remote: AgentClientArgs,
}

fn send_mode() -> impl clap::builder::TypedValueParser<Value = sendpath_lab::http::serve::SendMode>
{
    use clap::builder::TypedValueParser;
    use sendpath_lab::http::serve::SendMode;
    clap::builder::PossibleValuesParser::new(SendMode::ALL.map(SendMode::name))
        .try_map(|s| s.parse::<SendMode>())
}

fn body_sizes(s: &str) -> Result<Vec<usize>, String> {
    s.split(',').map(body_size).collect()
}

fn http_servers(s: &str) -> Result<Vec<sendpath_lab::study::http::Server>, String> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(str::parse)
        .collect()
}

fn fractions(s: &str) -> Result<Vec<f64>, String> {
    s.split(',')
        .filter(|x| !x.trim().is_empty())
        .map(|x| match x.trim().parse::<f64>() {
            Ok(f) if f > 0.0 && f <= 2.0 => Ok(f),
            _ => Err(format!(
                "`{x}`: a fraction of the peak rate, above 0 and at most 2"
            )),
        })
        .collect()
}

fn body_size(s: &str) -> Result<usize, String> {
    bounded_size(s, "the body size", 0, MAX_MESSAGE)
}

fn positive_rate(s: &str) -> Result<f64, String> {
    match s.parse::<f64>() {
        Ok(r) if r.is_finite() && r > 0.0 && r <= 1e9 => Ok(r),
        _ => Err(format!(
            "`{s}`: a rate is requests per second, above 0 and at most 1e9"
        )),
    }
}

fn cpu_list(s: &str) -> Result<Vec<usize>, String> {
    let allowed = sendpath::host::allowed_cpus().unwrap_or_default();
    s.split(',').map(|x| one_cpu(x, &allowed)).collect()
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
    /// Continue an interrupted sweep in DIR, measuring only the points it lacks.
    #[arg(long, value_name = "DIR")]
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
    #[command(flatten)]
    pub remote: AgentClientArgs,
    #[command(flatten)]
    pub topology: TopologyArgs,
}

#[derive(Debug, Args)]
pub(crate) struct ReportArgs {
    /// A results.json written by `sendpath sweep` or `sendpath stream --json`, or the
    /// http-results.json of `sweep --preset http-server`.
    pub results: PathBuf,
    /// Where to write summary.md and report.html (default: beside the results file).
    #[arg(long, value_name = "DIR")]
    pub out: Option<PathBuf>,
}

#[derive(Debug, Args)]
pub(crate) struct ProbeArgs {
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

fn min_wait(s: &str) -> Result<Duration, String> {
    let d = parse_duration(s)?;
    if d > Duration::from_millis(10) {
        return Err(format!(
            "`{s}`: a minimum wait is at most 10ms (0 turns batched waits off)"
        ));
    }
    Ok(d)
}

/// Largest message, response or receive size: one GiB.
pub(crate) const MAX_MESSAGE: usize = 1 << 30;

fn bounded_size(s: &str, what: &str, min: usize, max: usize) -> Result<usize, String> {
    let v = parse_size(s)?;
    if v < min || v > max {
        return Err(format!(
            "`{s}`: {what} must be between {} and {}",
            sendpath_lab::units::fmt_size(min),
            sendpath_lab::units::fmt_size(max)
        ));
    }
    Ok(v)
}

fn message_size(s: &str) -> Result<usize, String> {
    bounded_size(s, "a message size", 1, MAX_MESSAGE)
}

fn message_sizes(s: &str) -> Result<Vec<usize>, String> {
    s.split(',').map(message_size).collect()
}

fn recv_size(s: &str) -> Result<usize, String> {
    bounded_size(s, "the receive size", 1, MAX_MESSAGE)
}

fn pipe_size(s: &str) -> Result<usize, String> {
    bounded_size(s, "the pipe size", 4096, 1 << 30)
}

fn file_size(s: &str) -> Result<usize, String> {
    bounded_size(s, "the file size", 4096, 1 << 40)
}

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

/// `--recv`: the modes' names, listed in `--help` and in the error for any other value.
fn recv_mode() -> impl clap::builder::TypedValueParser<Value = RecvMode> {
    use clap::builder::TypedValueParser;
    clap::builder::PossibleValuesParser::new(RecvMode::ALL.map(RecvMode::name))
        .try_map(|s| s.parse::<RecvMode>())
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
pub(crate) struct RunArgs {
    /// Send paths, comma-separated, or `all`: copy, serialize, gather, msg-zerocopy, uring,
    /// uring-zc, vmsplice, adaptive, read-send, mmap-send, sendfile, splice, uring-splice.
    #[arg(long, short = 's', default_value = "copy", value_parser = strategy_list)]
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
    /// (read() and check every byte against the pattern).
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
    /// Zero-copy sends awaiting completion per connection before falling back to copy.
    #[arg(long, default_value_t = 256, value_parser = clap::value_parser!(u32).range(1..=65536))]
    pub inflight: u32,
    /// Send SEND_ZC from registered (fixed) buffers.
    #[arg(long)]
    pub fixed_buffers: bool,
    /// Pipe size for splice and vmsplice (4K..1G; the kernel may grant less).
    #[arg(long, default_value = "1M", value_parser = pipe_size)]
    pub pipe_size: usize,
    /// `minimal` takes only time and bytes (no CPU or counter readings): the baseline that
    /// shows what measuring costs (scripts/overhead).
    #[arg(long, value_enum, default_value = "full")]
    pub metrics: Metrics,
    /// Message buffers of memory paths, comma-separated: pool (reuse buffers the path
    /// released) and/or fresh (allocate and fill a new one per message); each is a point.
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

fn alloc_list(s: &str) -> Result<Vec<sendpath_lab::traffic::mix::Alloc>, String> {
    s.split(',').map(|x| x.trim().parse()).collect()
}

fn size_mix(s: &str) -> Result<sendpath_lab::traffic::mix::SizeMix, String> {
    sendpath_lab::traffic::mix::SizeMix::parse(s, MAX_MESSAGE)
}

/// The host profile for `adaptive`: `file` when given, else the active one (the defaults when
/// there is none); `None` when no strategy is `adaptive`.
pub(crate) fn load_profile(
    file: Option<&std::path::Path>,
    strategies: &[sendpath::Strategy],
) -> anyhow::Result<Option<std::sync::Arc<sendpath::profile::Profile>>> {
    use anyhow::Context;
    use sendpath::profile::Profile;
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
    /// Throughput, CPU (process and system), hardware counters when present.
    Full,
    /// Throughput only.
    Minimal,
}

impl RunArgs {
    /// The send paths' options; `profile` is what [`load_profile`] returned.
    pub(crate) fn options(
        &self,
        profile: Option<std::sync::Arc<sendpath::profile::Profile>>,
    ) -> sendpath::Options {
        sendpath::Options {
            inflight: sendpath::policy::InflightLimits {
                max_sends: self.inflight as usize,
                ..Default::default()
            },
            uring_depth: self.uring_depth as usize,
            uring_fixed_buffers: self.fixed_buffers,
            pipe_size: self.pipe_size,
            profile,
            adaptive: sendpath::policy::adaptive::AdaptiveConfig {
                run_min: self
                    .adaptive_run
                    .unwrap_or(sendpath::policy::adaptive::AdaptiveConfig::default().run_min),
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
    /// Message sizes, comma-separated, with units (64, 4K, 64KiB, 1M; at most 1G).
    #[arg(long, short = 'l', default_value = "64K", value_parser = message_sizes)]
    pub size: std::vec::Vec<usize>,
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
    /// Send to a receiver elsewhere (e.g. `sendpath sink` or `nc -l`) instead of our own.
    #[arg(long, short = 'c', value_name = "ADDR", conflicts_with = "agent")]
    pub connect: Option<SocketAddr>,
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
    #[command(flatten)]
    pub topology: TopologyArgs,
    #[command(flatten)]
    pub remote: AgentClientArgs,
}

/// Where the receiver runs (`--topology`, `--rate`, `--mtu`).
#[derive(Debug, Args, Clone)]
pub(crate) struct TopologyArgs {
    /// Where the receiver runs: loopback, or netns (a network namespace sendpath creates and
    /// removes, joined by a veth pair; needs root and iproute2).
    #[arg(long, default_value = "loopback", value_parser = ["loopback", "netns"])]
    pub topology: String,
    /// With --topology netns: limit the sender's veth to this rate (htb), e.g. 1gbit, 10gbit.
    #[arg(long, value_name = "RATE", value_parser = sendpath_lab::topology::parse_rate)]
    pub rate: Option<u64>,
    /// With --topology netns: the MTU of both veth ends.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1280..=65535))]
    pub mtu: Option<u32>,
}

impl TopologyArgs {
    /// The namespace to receive in, created (and announced) when `--topology netns`.
    pub(crate) fn create(
        &self,
        elsewhere: bool,
    ) -> anyhow::Result<Option<std::sync::Arc<sendpath_lab::topology::Netns>>> {
        use sendpath_lab::topology::{Netns, NetnsSpec};
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
                ", rate {:.3} Gbit/s (htb, burst {} B)",
                r as f64 / 1e9,
                i.burst_bytes.unwrap_or(0)
            )),
            i.mtu.map_or(String::new(), |m| format!(", MTU {m}"))
        );
        Ok(Some(std::sync::Arc::new(ns)))
    }
}

fn cpu_pair(s: &str) -> Result<(usize, usize), String> {
    let (a, b) = s
        .split_once(',')
        .ok_or_else(|| format!("`{s}`: give two CPUs, sender then receiver, e.g. 0,1"))?;
    let allowed = sendpath::host::allowed_cpus().unwrap_or_default();
    Ok((one_cpu(a, &allowed)?, one_cpu(b, &allowed)?))
}

/// A CPU number this process may run on (`allowed` empty: any).
fn one_cpu(x: &str, allowed: &[usize]) -> Result<usize, String> {
    let c = x
        .trim()
        .parse::<usize>()
        .map_err(|_| format!("`{x}` is not a CPU number"))?;
    if !allowed.is_empty() && !allowed.contains(&c) {
        return Err(format!(
            "CPU {c} is not one this process may run on; the allowed CPUs are {}",
            allowed
                .iter()
                .map(|c| c.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ));
    }
    Ok(c)
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
    #[command(flatten)]
    pub remote: AgentClientArgs,
}

#[derive(Debug, Args)]
pub(crate) struct SinkArgs {
    /// Address to listen on, e.g. 127.0.0.1:5201.
    #[arg(long, value_name = "ADDR")]
    pub listen: SocketAddr,
    /// What to do with the bytes: copy, discard (MSG_TRUNC) or verify.
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
