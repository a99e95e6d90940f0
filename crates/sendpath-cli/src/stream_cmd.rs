//! `sendpath stream` and `sendpath rr`: flags to points, run in rounds by the lab's runner.

use crate::cli::{RrArgs, RunArgs, StreamArgs};
use anyhow::bail;
use sendpath::Profile;
use sendpath::{Source, Strategy};
use sendpath_lab::cancel::Cancel;
use sendpath_lab::measure::Meter;
use sendpath_lab::study::rows::Schedule;
use sendpath_lab::study::rows::{fresh_seed, source_file, stream_matrix, Point, Recorder};
use sendpath_lab::topology::TopologyInfo;
use sendpath_lab::traffic::datagram::Protocol;
use sendpath_lab::traffic::mix::Alloc;
use sendpath_lab::traffic::Runtime;
use sendpath_lab::workload::rr::RrPoint;
use sendpath_lab::workload::stream::StreamPoint;
use sendpath_lab::workload::{PatternFile, RecvMode};
use std::sync::Arc;

fn recv_size(a: &RunArgs, size: usize) -> usize {
    a.recv_size
        .unwrap_or_else(|| sendpath_lab::traffic::default_recv_size(size))
}

pub(crate) fn stream(a: &StreamArgs, cancel: &Cancel) -> anyhow::Result<std::process::ExitCode> {
    let sizes: Vec<usize> = match &a.size_mix {
        Some(m) => vec![m.mean().round() as usize],
        None => a.sizes(),
    };
    let largest: Vec<usize> = match &a.size_mix {
        Some(m) => vec![m.max()],
        None => a.sizes(),
    };
    check_stream(a, &largest)?;
    let profile = crate::cli::load_profile(a.run.profile.as_deref(), &a.run.strategy)?;
    let agent = a.remote.target()?;
    if let Some(done) = crate::cli::dry_run(stream_plan(a, sizes.len())) {
        return Ok(done);
    }
    let verify = a.run.recv == RecvMode::Verify;
    let file = if a.run.strategy.iter().any(|s| s.source() == Source::File) {
        Some(source_file(&largest, a.file_size, verify, a.cold)?)
    } else {
        None
    };
    let netns = a.topology.create(
        a.connect.is_some() || a.remote.agent.is_some(),
        a.proto == Protocol::Udp,
    )?;
    let mut points = Vec::new();
    for &runtime in &a.runtime {
        // tokio-write is tokio's own writes: one row per size, a copying send.
        let strategies = match runtime {
            Runtime::TokioWrite => vec![sendpath::Strategy::Copy],
            _ => a.run.strategy.clone(),
        };
        for &alloc in &a.run.alloc {
            points.extend(stream_matrix(
                &strategies,
                &sizes,
                &a.threads,
                |strategy, size, threads| {
                    // What a receive and an arena's slot must hold: a mix's largest message.
                    let largest = a.size_mix.as_ref().map_or(size, |m| m.max());
                    StreamPoint {
                        strategy,
                        size,
                        threads,
                        connections: a.connections as usize,
                        fields: usize::from(a.run.fields),
                        recv: a.run.recv,
                        recv_size: recv_size(&a.run, largest),
                        duration: a.run.duration,
                        warmup: a.run.warmup,
                        connect: a.connect,
                        cpus: a.cpu,
                        cold: a.cold,
                        opts: a.run.options((strategy, largest), profile.clone()),
                        mix: a.size_mix.clone(),
                        alloc,
                        netns: netns.clone(),
                        agent: agent.clone(),
                        proto: a.proto,
                        gso: a.gso,
                        msg_latency: a.msg_latency,
                        burst: a.burst,
                        congestion: a.congestion.clone(),
                        runtime,
                    }
                },
            ));
        }
    }
    let topology = netns.as_ref().map(|n| n.info().clone());
    let agent = agent.map(|t| t.addr.to_string());
    run_matrix(
        &a.run,
        &points,
        file.as_ref(),
        profile,
        (topology, agent),
        cancel,
    )
}

/// What a stream run would measure, in one line (--dry-run).
fn stream_plan(a: &StreamArgs, sizes: usize) -> String {
    let r = &a.run;
    format!(
        "stream: {} path(s) x {sizes} size(s) x {} thread count(s) x {} runtime(s), {} round(s) of {:?}",
        r.strategy.len(),
        a.threads.len(),
        a.runtime.len(),
        r.repeat,
        r.duration
    )
}

/// Refuses, before anything runs, what the stream flags cannot do together.
fn check_stream(a: &StreamArgs, largest: &[usize]) -> anyhow::Result<()> {
    if let Some(addr) = a.connect {
        crate::cli::check_target("--connect", addr, a.allow_remote)?;
    }
    let per_thread = a.connections as usize;
    let most_threads = a.threads.iter().copied().max().unwrap_or(1);
    let conns: Vec<usize> = a.threads.iter().map(|t| t * per_thread).collect();
    crate::cli::check_memory(largest, &conns, &a.run)?;
    check_connections(a, per_thread, most_threads)?;
    check_udp(a)?;
    check_msg_latency(a)?;
    check_recv_zerocopy(a)?;
    check_congestion(a)?;
    check_runtime(a)?;
    crate::cli::check_outputs([
        ("--json", a.run.json.as_deref()),
        ("--csv", a.run.csv.as_deref()),
    ])?;
    if a.connect.is_some() && a.run.recv != RecvMode::Copy {
        eprintln!("note: --recv applies to sendpath's own receiver; with --connect the remote end decides");
    }
    Ok(())
}

/// Refuses what the tokio runtimes do not run: the paths without an async sender, and the
/// thread sender's shapes of load (several connections per thread, size mixes, other
/// buffers, bursts, fields, message timing).
fn check_runtime(a: &StreamArgs) -> anyhow::Result<()> {
    if !a.runtime.iter().any(|r| r.is_tokio()) {
        return Ok(());
    }
    let async_paths = [
        Strategy::Copy,
        Strategy::MsgZerocopy,
        Strategy::Uring,
        Strategy::UringZc,
        Strategy::Adaptive,
        Strategy::Sendfile,
    ];
    if a.runtime.contains(&Runtime::Tokio) {
        let other: Vec<&str> = (a.run.strategy.iter())
            .filter(|s| !async_paths.contains(s))
            .map(|s| s.name())
            .collect();
        if !other.is_empty() {
            bail!(
                "--runtime tokio runs sendpath's async sender, which copy, msg-zerocopy, uring, uring-zc, adaptive and sendfile have: drop {} from --strategy",
                other.join(", ")
            );
        }
    }
    let shapes = [
        (a.connections > 1, "--connections"),
        (a.size_mix.is_some(), "--size-mix"),
        (
            a.run.alloc.iter().any(|x| *x != Alloc::Pool),
            "--alloc fresh or shared",
        ),
        (a.burst.is_some(), "--burst"),
        (a.run.fields > 1, "--fields"),
        (a.msg_latency, "--msg-latency"),
        (a.cold, "--cold"),
        (a.gso.is_some(), "--gso"),
    ];
    if let Some((_, flag)) = shapes.iter().find(|(on, _)| *on) {
        bail!("{flag} runs on the thread sender: drop it, or drop tokio and tokio-write from --runtime");
    }
    Ok(())
}

/// The first flag, among those that take the receiver from one TCP connection per thread of
/// a sendpath receiver and then `also`, that is set: what a check of that receiver refuses.
fn not_one_tcp_connection(a: &StreamArgs, also: &[(bool, &'static str)]) -> Option<&'static str> {
    [
        (a.proto == Protocol::Udp, "--proto udp"),
        (a.connections > 1, "--connections"),
        (a.connect.is_some(), "--connect"),
    ]
    .iter()
    .chain(also)
    .find_map(|&(on, flag)| on.then_some(flag))
}

/// Refuses what `--recv zerocopy` cannot map: it is our own receiver of one TCP connection
/// per thread (`TCP_ZEROCOPY_RECEIVE` on a region mapped from that socket).
fn check_recv_zerocopy(a: &StreamArgs) -> anyhow::Result<()> {
    if a.run.recv != RecvMode::Zerocopy {
        return Ok(());
    }
    if let Some(flag) = not_one_tcp_connection(a, &[(a.msg_latency, "--msg-latency")]) {
        bail!("--recv zerocopy maps the pages of one TCP connection per receiver thread (ours, or a sendpath agent's): drop {flag}");
    }
    Ok(())
}

/// Refuses what `--msg-latency` cannot time: a stamp needs a memory message of 8 bytes per
/// field or more, over TCP, one connection per thread, read by our own receiver.
fn check_msg_latency(a: &StreamArgs) -> anyhow::Result<()> {
    use sendpath_lab::traffic::stamp::STAMP_BYTES;
    if !a.msg_latency {
        return Ok(());
    }
    let also = [
        (a.remote.agent.is_some(), "--agent"),
        (a.run.recv == RecvMode::Discard, "--recv discard"),
    ];
    if let Some(flag) = not_one_tcp_connection(a, &also) {
        bail!("--msg-latency times each message at our own receiver reading its bytes over TCP, one connection per thread, on this host's clock: drop {flag}");
    }
    if !a.run.strategy.iter().any(|s| s.source() == Source::Memory) {
        bail!("--msg-latency stamps memory messages; file paths send the file's own bytes: add a memory path (copy, uring, ...)");
    }
    let smallest = match &a.size_mix {
        Some(m) => m.parts.iter().map(|p| p.0).min().unwrap_or(0),
        None => a.sizes().into_iter().min().unwrap_or(0),
    };
    let fields = usize::from(a.run.fields);
    if smallest / fields < STAMP_BYTES {
        bail!("--msg-latency writes an {STAMP_BYTES}-byte stamp into each message's first field: {smallest} B in {fields} field(s) is too small; use messages of at least {} B", STAMP_BYTES * fields);
    }
    Ok(())
}

/// Refuses a `--congestion` this kernel lacks, and notes when our loopback connections will
/// be paced by bbr.
fn check_congestion(a: &StreamArgs) -> anyhow::Result<()> {
    if a.proto == Protocol::Udp {
        anyhow::ensure!(
            a.congestion.is_none(),
            "--congestion is TCP's: drop it with --proto udp"
        );
        return Ok(());
    }
    let local = a.connect.is_none() && a.remote.agent.is_none();
    crate::cli::check_congestion(a.congestion.as_deref(), local)
}

/// Refuses what a UDP stream cannot do, and `--gso` without it.
fn check_udp(a: &StreamArgs) -> anyhow::Result<()> {
    use sendpath_lab::traffic::datagram::HEADER;
    if a.proto == Protocol::Tcp {
        if a.gso.is_some() {
            bail!("--gso cuts UDP sends into datagrams: add --proto udp");
        }
        return Ok(());
    }
    let other: Vec<&str> = a
        .run
        .strategy
        .iter()
        .filter(|s| !sendpath_lab::workload::stream::udp::sends_datagrams(**s))
        .map(|s| s.name())
        .collect();
    if !other.is_empty() {
        bail!(
            "--proto udp sends datagrams from memory (copy, serialize, gather, msg-zerocopy, uring, uring-zc, adaptive): drop {}",
            other.join(", ")
        );
    }
    let refused = [
        (a.size_mix.is_some(), "--size-mix"),
        (a.burst.is_some(), "--burst"),
        (a.connections > 1, "--connections"),
        (
            a.run.alloc.iter().any(|x| *x != Alloc::Pool),
            "--alloc fresh or shared",
        ),
        (a.run.fields > 1, "--fields"),
        (a.remote.agent.is_some(), "--agent"),
    ];
    if let Some((_, flag)) = refused.iter().find(|(on, _)| *on) {
        bail!("--proto udp runs one datagram size from pooled buffers, one socket per sender thread, with our own receiver or none: drop {flag}");
    }
    for size in a.sizes() {
        let seg = a.gso.map_or(size, usize::from);
        if size > sendpath_lab::traffic::datagram::MAX_PAYLOAD {
            bail!(
                "--size {size}: a UDP send carries at most {} bytes (with or without --gso)",
                sendpath_lab::traffic::datagram::MAX_PAYLOAD
            );
        }
        let last = match size % seg {
            0 => seg.min(size),
            r => r,
        };
        if last < HEADER {
            bail!("--size {size} with datagrams of {seg} bytes leaves a datagram of {last} bytes: each must hold its {HEADER}-byte sequence number");
        }
        check_segments(size, a.gso)?;
    }
    Ok(())
}

/// Refuses a `--gso` send cut into more datagrams than the kernel takes in one send.
fn check_segments(size: usize, gso: Option<u16>) -> anyhow::Result<()> {
    let Some(seg) = gso.map(usize::from) else {
        return Ok(());
    };
    let n = size.div_ceil(seg);
    match sendpath_lab::traffic::datagram::max_gso_segments() {
        Some(most) if n > most => bail!(
            "--gso {seg} with --size {size}: {n} datagrams per send, and this kernel cuts one send into at most {most} (UDP_MAX_SEGMENTS): give --gso {} or more, or a smaller --size",
            size.div_ceil(most)
        ),
        _ => Ok(()),
    }
}

/// Refuses `--connections` above 1 with what cannot share a ring (a size mix, fresh buffers,
/// paths off the ring), and makes room for the connections' descriptors.
fn check_connections(a: &StreamArgs, per_thread: usize, most_threads: usize) -> anyhow::Result<()> {
    if per_thread > 1
        && (a.size_mix.is_some()
            || a.run.alloc.iter().any(|x| *x != Alloc::Pool)
            || a.burst.is_some())
    {
        bail!(
            "--size-mix, --alloc fresh or shared and --burst run one connection per sender thread: drop --connections"
        );
    }
    if per_thread > 1 {
        let other: Vec<&str> = a
            .run
            .strategy
            .iter()
            .filter(|s| !s.on_ring())
            .map(|s| s.name())
            .collect();
        if !other.is_empty() {
            bail!(
                "--connections {per_thread} puts each sender thread's connections on one io_uring ring, which only uring, uring-zc and adaptive use: drop {} from --strategy, or use -P for one thread per connection",
                other.join(", ")
            );
        }
        // Both ends of every connection, plus rings, files and the listener; as far as the
        // hard limit allows, room for the duplicates that read TCP's counters too.
        sendpath_lab::limits::raise_nofile(2 * most_threads * per_thread + 64)?;
        sendpath_lab::limits::raise_nofile_upto(4 * most_threads * per_thread + 128);
    }
    Ok(())
}

/// Refuses points with more threads than system calls are counted for (one counter each), which
/// would leave their windows' counts null.
fn check_counted(points: &[Point]) -> Result<(), String> {
    use sendpath_lab::measure::MAX_COUNTED;
    match points.iter().map(Point::counted_threads).max() {
        Some(n) if n > MAX_COUNTED => Err(format!(
            "it counts the calls of at most {MAX_COUNTED} threads, and a point here has {n} (a sender per -P thread or rr connection, and its receiver when it runs here): give fewer threads or connections, or leave out --metrics syscalls"
        )),
        _ => Ok(()),
    }
}

/// Why a run without `--metrics syscalls` has no system-call counts.
const NOT_ASKED: &str = "not counted: --metrics syscalls counts them (the tracepoint slows every system call while it runs)";

/// Runs `points` in the rounds of `a` (`--repeat`, `--seed`), writing `--json`/`--csv` after
/// every window, then prints the table and ends the run: what `stream` and `rr` share.
fn run_matrix(
    a: &RunArgs,
    points: &[Point],
    file: Option<&PatternFile>,
    profile: Option<Arc<Profile>>,
    (topology, agent): (Option<TopologyInfo>, Option<String>),
    cancel: &Cancel,
) -> anyhow::Result<std::process::ExitCode> {
    crate::cli::check_outputs([("--json", a.json.as_deref()), ("--csv", a.csv.as_deref())])?;
    let schedule = Schedule {
        rounds: a.repeat,
        seed: a.seed.unwrap_or_else(fresh_seed),
    };
    let mut rec = Recorder::new(a.json.clone(), a.csv.clone(), schedule);
    rec.cancel = cancel.clone();
    rec.results.environment.profile = profile.map(|p| (*p).clone());
    rec.results.environment.topology = topology;
    rec.results.environment.agent = agent;
    let mut meter = Meter::open(a.metrics == crate::cli::Metrics::Minimal);
    rec.results.environment.syscalls_unavailable = match a.metrics {
        crate::cli::Metrics::Syscalls => {
            match check_counted(points).and_then(|()| meter.count_syscalls()) {
                Ok(()) => None,
                Err(why) => bail!("--metrics syscalls: {why}"),
            }
        }
        _ => Some(NOT_ASKED.into()),
    };
    if a.metrics == crate::cli::Metrics::Copies {
        let states = meter
            .count_copies()
            .map_err(|why| anyhow::anyhow!("--metrics copies: {why}"))?;
        rec.results.environment.copy_counters = Some(states);
    }
    if points.len() > 1 && schedule.rounds > 1 {
        rec.say(&format!(
            "{} points x {} rounds, each round in a shuffled order (seed {})",
            points.len(),
            schedule.rounds,
            schedule.seed
        ));
    }
    let ran = rec.run_rounds(points, file, &mut meter, &|| {});
    // A failed round still shows the windows that finished before it.
    if ran.is_ok() || !rec.results.results.is_empty() {
        rec.print_table();
    }
    ran?;
    rec.finish()
}

pub(crate) fn rr(a: &RrArgs, cancel: &Cancel) -> anyhow::Result<std::process::ExitCode> {
    if let Some(r) = a.rate {
        if !(r.is_finite() && r > 0.0) {
            bail!("--rate must be a positive number of requests per second");
        }
    }
    if matches!(a.run.recv, RecvMode::Discard | RecvMode::Zerocopy) {
        bail!("--recv {} does not apply to rr (the client must read each response); use copy or verify", a.run.recv.name());
    }
    if a.run.alloc.contains(&Alloc::Shared) {
        bail!("--alloc shared (one pool for every sender thread) is a stream setting: rr takes pool or fresh");
    }
    let responses: Vec<usize> = match &a.size_mix {
        Some(m) => vec![m.mean().round() as usize],
        None => a.response.clone(),
    };
    let largest: Vec<usize> = match &a.size_mix {
        Some(m) => vec![m.max()],
        None => a.response.clone(),
    };
    crate::cli::check_memory(&largest, &a.concurrency, &a.run)?;
    let profile = crate::cli::load_profile(a.run.profile.as_deref(), &a.run.strategy)?;
    let agent = a.remote.target()?;
    crate::cli::check_congestion(a.congestion.as_deref(), agent.is_none())?;
    crate::cli::check_outputs([
        ("--json", a.run.json.as_deref()),
        ("--csv", a.run.csv.as_deref()),
    ])?;
    let what = format!(
        "rr: {} path(s) x {} response size(s) x {} concurrency level(s), {} round(s)",
        a.run.strategy.len(),
        responses.len(),
        a.concurrency.len(),
        a.run.repeat
    );
    if let Some(done) = crate::cli::dry_run(what) {
        return Ok(done);
    }
    let mut points = Vec::new();
    for &strategy in &a.run.strategy {
        if strategy.source() == Source::File {
            eprintln!("note: rr sends responses from memory; skipping file path {strategy}");
            continue;
        }
        for (&response, &alloc) in responses
            .iter()
            .flat_map(|r| a.run.alloc.iter().map(move |al| (r, al)))
        {
            for &concurrency in &a.concurrency {
                points.push(Point::Rr(RrPoint {
                    strategy,
                    request: a.request,
                    response,
                    concurrency,
                    fields: usize::from(a.run.fields),
                    recv: a.run.recv,
                    duration: a.run.duration,
                    warmup: a.run.warmup,
                    rate: a.rate,
                    cpus: a.cpu,
                    opts: a.run.options(
                        (strategy, a.size_mix.as_ref().map_or(response, |m| m.max())),
                        profile.clone(),
                    ),
                    mix: a.size_mix.clone(),
                    alloc,
                    agent: agent.clone(),
                    congestion: a.congestion.clone(),
                }));
            }
        }
    }
    let agent = agent.map(|t| t.addr.to_string());
    run_matrix(&a.run, &points, None, profile, (None, agent), cancel)
}
