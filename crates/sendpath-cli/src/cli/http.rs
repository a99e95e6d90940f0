//! The flags of `serve` and `http-load`.

use super::parse::*;
use super::AgentClientArgs;
use clap::Args;
use sendpath_lab::units::parse_duration;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

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
    /// The server, e.g. 127.0.0.1:8080: on this host unless --allow-remote.
    #[arg(value_name = "ADDR")]
    pub target: SocketAddr,
    /// Load a server that is not on this host (loopback). Only aim at servers you run.
    #[arg(long)]
    pub allow_remote: bool,
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
