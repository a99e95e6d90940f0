//! The speed-of-light reference: the fewest system calls that send the way each sendpath path
//! does, with no sendpath type in the loop. `scripts/overhead-vs-bare` pairs `sendpath stream`
//! with it over TCP on loopback, `scripts/udp-vs-bare` over UDP on the black-hole route.
//!
//! ```text
//! cargo run --release -p sendpath --example bare -- PATH SIZE [--proto tcp|udp]
//!     [--seconds 2] [--warmup 0.5] [--cpu S[,R]] [--depth 8] [--order linked|none|vectored|bundle]
//!     [--fixed] [--arena] [--fixed-file] [--pool] [--bufs 1] [--lib] [--reap-every 32] [--recv-size N] [--file-size N]
//!     [--pipe-size N] [--gso SEG] [--mtu 65535] [--verify] [--recv-process]
//! ```
//!
//! TCP (the default): a loopback connection whose receiver, a thread of this program (pinned to
//! R), discards with `recv(MSG_TRUNC)` `--recv-size` bytes at a time, as `stream --recv
//! discard` does; with `--recv copy` it reads every byte out instead, as `stream --recv copy`
//! does, and with `--verify` also checks each is the 0x5a every path writes (a wrong byte ends
//! the run naming its offset); with `--recv-process` the receiver is a process of its own (bare
//! run again), for callgrind, which runs a program's threads one at a time. UDP: a namespace whose veth peer is down, a permanent neighbour; the device
//! drops every frame at its queue, so nothing copies zero-copy pages (root). It sends for
//! `--warmup` unmeasured, as sendpath does before a window, then for `--seconds`, and prints
//! one line: bytes per second, sends per second, completions and how
//! many came back copied.
//!
//! Memory paths send one buffer that is never rewritten, so reusing it while the kernel holds
//! it is harmless here; with `--pool` each send takes a buffer the kernel has released, as
//! sendpath does (see `pool.rs`). `--bufs N` has `copy`, `serialize` and `gather` send from N
//! buffers in turn, as a sender holding a batch of N messages must (sendpath's stream harness
//! batches up to 16 or 64 KiB): their bytes are no longer all in the L1 cache. Paths: `copy` (`send`), `gather` (`sendmsg`, one iovec),
//! `msg-zerocopy` (`sendmsg(MSG_ZEROCOPY)`, the error queue read every `--reap-every` sends),
//! `uring` (`IORING_OP_SEND`, `MSG_WAITALL`) and `uring-zc` (`IORING_OP_SEND_ZC` with usage
//! reporting; `--fixed` for a registered buffer per pool buffer; `--arena` for one registered
//! region cut in slots (4 MiB, as `stream --arena 4M`: `arena_slots`), sent by index as
//! sendpath's `--arena` does, vectored SENDMSG_ZC
//! included), `--depth` in flight: `--order linked` is a
//! chain of `--depth` linked requests, the next once it is done (sendpath's way with registered
//! buffers or `--uring-order linked`), `none` keeps `--depth` unlinked requests in flight (on TCP their bytes may interleave out of
//! order), `vectored` one `SENDMSG`/`SENDMSG_ZC` over `--depth` buffers at a time (sendpath's
//! way by default), `bundle`
//! one send bundle from a provided-buffer ring (`uring` only, Linux 6.10). `vmsplice` maps
//! fresh pages per message, writes them, vmsplices and splices them, and unmaps them. File paths send a
//! warm `--file-size` file (64 MiB) round and round: `read-send` (`pread`, `send`),
//! `mmap-send` (`send` from a mapping), `sendfile`, `splice` (file, pipe, socket) and
//! `uring-splice` (the two splices as a linked pair on a ring).
//!
//! `--congestion ALGO` sets the sending end's TCP congestion control (bbr paces each
//! connection; on loopback with a timer of its own).
//!
//! `--lib` sends through the library instead (`sendpath::open` with its default options at
//! `--depth`; see `lib_loop.rs`), on the same connection to the same receiver: bare against
//! `bare --lib` is what the library adds, `bare --lib` against `sendpath stream` what the
//! stream harness adds. With `--arena` it writes each message in place, in a 4 MiB arena the
//! library registers (`Options::uring_arena`, slots of the message size), as `stream --arena 4M`
//! does.

use std::time::{Duration, Instant};

mod lib_loop;
mod pool;
mod receiver;
mod route;
use route::Route;

/// `--arena`'s region, with or without `--lib`: the 4 MiB of `sendpath stream --arena 4M`, cut
/// in page-aligned slots of the message size, as the library cuts it. The same number of
/// slots on both sides, since how many sends may wait for their notification changes how fast
/// zero-copy runs (on one host a twin with 272 slots of 4 KiB ran 1.10x one with 1024).
pub(crate) fn arena_slots(size: usize) -> usize {
    ((4usize << 20) / size.next_multiple_of(4096)).max(1)
}

/// The paths a bare twin exists for.
const PATHS: [&str; 12] = [
    "copy",
    "gather",
    "msg-zerocopy",
    "uring",
    "uring-zc",
    "vmsplice",
    "read-send",
    "mmap-send",
    "sendfile",
    "splice",
    "uring-splice",
    "serialize",
];

const USAGE: &str = "usage: bare PATH SIZE [--proto tcp|udp] [--seconds S] [--warmup S] [--cpu S[,R]] [--depth N] [--order linked|none|vectored|bundle] [--fixed] [--arena] [--fixed-file] [--pool] [--bufs N] [--lib] [--reap-every N] [--recv-size N] [--recv copy|discard|verify] [--recv-process] [--verify] [--file-size N] [--pipe-size N] [--gso SEG] [--mtu M] [--congestion ALGO]";

/// How io_uring requests of one connection are ordered.
#[derive(Clone, Copy, PartialEq, Debug)]
pub(crate) enum Order {
    Linked,
    None,
    Vectored,
    Bundle,
}

pub(crate) struct Args {
    pub(crate) path: String,
    pub(crate) size: usize,
    pub(crate) udp: bool,
    pub(crate) gso: Option<u16>,
    seconds: f64,
    warmup: f64,
    pub(crate) depth: usize,
    pub(crate) order: Option<Order>,
    pub(crate) fixed: bool,
    pub(crate) arena: bool,
    pub(crate) fixed_file: bool,
    pub(crate) pool: bool,
    /// How many buffers `copy`, `serialize` and `gather` send from in turn.
    pub(crate) bufs: usize,
    pub(crate) lib: bool,
    pub(crate) reap_every: usize,
    pub(crate) mtu: u32,
    pub(crate) cpu: Option<(usize, Option<usize>)>,
    pub(crate) recv_size: Option<usize>,
    pub(crate) file_size: u64,
    pub(crate) pipe_size: usize,
    /// TCP congestion control of the sending end (`TCP_CONGESTION`); `None`: the host's.
    pub(crate) congestion: Option<String>,
    /// `--verify`: the receiver reads every byte out and checks it is the byte written.
    pub(crate) verify: bool,
    /// `--recv copy`: the receiver reads every byte out (`read()`, as `stream --recv copy`),
    /// checking none; `--recv discard` (the default) drops them with `recv(MSG_TRUNC)`.
    pub(crate) recv_copy: bool,
    /// `--recv-process`: the receiver in a process of its own instead of a thread (for a
    /// tool that runs bare's threads one at a time: callgrind).
    pub(crate) recv_process: bool,
}

/// A size with an optional K/M/G suffix (powers of 1024).
fn size(v: Option<String>, what: &str) -> Result<u64, String> {
    let s = v.ok_or(format!("{what} needs a value: {USAGE}"))?;
    let (num, mul) = match s.trim_end_matches(['i', 'B']).char_indices().last() {
        Some((i, 'K' | 'k')) => (&s[..i], 1 << 10),
        Some((i, 'M' | 'm')) => (&s[..i], 1 << 20),
        Some((i, 'G' | 'g')) => (&s[..i], 1 << 30),
        _ => (s.as_str(), 1),
    };
    num.parse::<u64>()
        .map(|n| n * mul)
        .map_err(|_| format!("{what}: `{s}` is not a size (e.g. 4096, 64K, 1M): {USAGE}"))
}

fn parse_cpu(v: Option<String>) -> Result<(usize, Option<usize>), String> {
    let s = v.ok_or(format!("--cpu needs S or S,R: {USAGE}"))?;
    let bad = || format!("--cpu: `{s}` is not S or S,R (CPU numbers): {USAGE}");
    let mut it = s.split(',').map(|c| c.trim().parse::<usize>());
    let first = it.next().and_then(|c| c.ok()).ok_or_else(bad)?;
    let second = it.next().map(|c| c.map_err(|_| bad())).transpose()?;
    Ok((first, second))
}

fn parse_order(v: Option<String>) -> Result<Order, String> {
    match v.as_deref() {
        Some("linked") => Ok(Order::Linked),
        Some("none") => Ok(Order::None),
        Some("vectored") => Ok(Order::Vectored),
        Some("bundle") => Ok(Order::Bundle),
        _ => Err(format!(
            "--order takes linked, none, vectored or bundle: {USAGE}"
        )),
    }
}

fn parse() -> Result<Args, String> {
    let mut it = std::env::args().skip(1);
    let path = it.next().ok_or(USAGE)?;
    if path == "-h" || path == "--help" {
        println!("{USAGE}\npaths: {}\nsee the top of crates/sendpath/examples/bare/main.rs for what each does", PATHS.join(", "));
        std::process::exit(0);
    }
    if !PATHS.contains(&path.as_str()) {
        return Err(format!(
            "`{path}` is not a path here ({}): {USAGE}",
            PATHS.join(", ")
        ));
    }
    let num = |v: Option<String>, what: &str| -> Result<f64, String> {
        v.and_then(|s| s.parse().ok())
            .ok_or(format!("{what} needs a number: {USAGE}"))
    };
    let mut a = Args {
        path,
        size: size(it.next(), "SIZE")? as usize,
        udp: false,
        gso: None,
        seconds: 2.0,
        warmup: 0.5,
        depth: 8,
        order: None,
        fixed: false,
        arena: false,
        fixed_file: false,
        pool: false,
        bufs: 1,
        lib: false,
        reap_every: 32,
        mtu: 65_535,
        cpu: None,
        recv_size: None,
        verify: false,
        recv_copy: false,
        recv_process: false,
        file_size: 64 << 20,
        pipe_size: 1 << 20,
        congestion: None,
    };
    while let Some(flag) = it.next() {
        match flag.as_str() {
            "--proto" => match it.next().as_deref() {
                Some("udp") => a.udp = true,
                Some("tcp") => a.udp = false,
                _ => return Err(format!("--proto takes tcp or udp: {USAGE}")),
            },
            "--gso" => a.gso = Some(num(it.next(), "--gso")? as u16),
            "--seconds" => a.seconds = num(it.next(), "--seconds")?,
            "--warmup" => a.warmup = num(it.next(), "--warmup")?,
            "--depth" => a.depth = num(it.next(), "--depth")?.max(1.0) as usize,
            "--order" => a.order = Some(parse_order(it.next())?),
            "--reap-every" => a.reap_every = num(it.next(), "--reap-every")?.max(1.0) as usize,
            "--mtu" => a.mtu = num(it.next(), "--mtu")? as u32,
            "--fixed" => a.fixed = true,
            "--arena" => a.arena = true,
            "--fixed-file" => a.fixed_file = true,
            "--pool" => a.pool = true,
            "--bufs" => a.bufs = num(it.next(), "--bufs")? as usize,
            "--lib" => a.lib = true,
            "--verify" => a.verify = true,
            "--recv" => match it.next().as_deref() {
                Some("copy") => a.recv_copy = true,
                Some("discard") => a.recv_copy = false,
                Some("verify") => a.verify = true,
                v => {
                    let v = v.unwrap_or("nothing");
                    return Err(format!(
                        "--recv takes copy, discard or verify, not `{v}`: {USAGE}"
                    ));
                }
            },
            "--cpu" => a.cpu = Some(parse_cpu(it.next())?),
            "--recv-process" => a.recv_process = true,
            "--recv-size" => a.recv_size = Some(size(it.next(), "--recv-size")? as usize),
            "--file-size" => a.file_size = size(it.next(), "--file-size")?,
            "--pipe-size" => a.pipe_size = size(it.next(), "--pipe-size")? as usize,
            "--congestion" => {
                a.congestion = Some(
                    it.next()
                        .ok_or(format!("--congestion needs a value: {USAGE}"))?,
                )
            }
            _ => return Err(format!("unknown flag `{flag}`: {USAGE}")),
        }
    }
    check(a)
}

fn check(a: Args) -> Result<Args, String> {
    if a.udp && a.congestion.is_some() {
        return Err("--congestion is TCP's: drop it with --proto udp".into());
    }
    let max = if a.udp { 65_507 } else { 1 << 30 };
    let bad_time = !(a.seconds > 0.0 && a.warmup >= 0.0 && a.seconds + a.warmup < 1e6);
    if a.size == 0 || a.size > max || bad_time {
        return Err(format!(
            "SIZE must be 1..{max}, --seconds positive and --warmup not negative: {USAGE}"
        ));
    }
    if a.udp && (a.gso.is_none() && a.size > 65_507 || route::is_file_path(&a.path)) {
        return Err(format!("--proto udp runs the memory paths: {USAGE}"));
    }
    let lib_order = matches!(a.order, None | Some(Order::Linked | Order::Vectored));
    if a.lib && (a.gso.is_some() || !lib_order || a.fixed_file) {
        return Err(format!("--lib sends as the library does (one datagram per send, ordered, no registered socket): drop --gso, --fixed-file, and --order other than linked or vectored: {USAGE}"));
    }
    if a.arena && (a.fixed || !matches!(a.path.as_str(), "uring" | "uring-zc")) {
        return Err(format!(
            "--arena is for uring and uring-zc, without --fixed: {USAGE}"
        ));
    }
    if a.order == Some(Order::Bundle) && (a.path != "uring" || a.pool) {
        return Err(format!("--order bundle is for uring (send bundles have no zero-copy form), from one buffer (not --pool): {USAGE}"));
    }
    let copying = route::is_copying_path(&a.path);
    if !(1..=1024).contains(&a.bufs) || a.bufs > 1 && (!copying || a.lib) {
        return Err(format!(
            "--bufs takes 1..1024, for copy, serialize and gather without --lib: {USAGE}"
        ));
    }
    if a.file_size < a.size as u64 && route::is_file_path(&a.path) {
        return Err(format!("--file-size must hold one SIZE: {USAGE}"));
    }
    Ok(a)
}

/// What one run did.
#[derive(Default)]
pub(crate) struct Tally {
    pub(crate) sends: u64,
    pub(crate) bytes: u64,
    pub(crate) completions: u64,
    pub(crate) copied: u64,
    /// `--lib --arena`: buffers the library handed out from its arena (written in place).
    pub(crate) in_place: Option<u64>,
}

fn fail(e: impl std::fmt::Display) -> ! {
    eprintln!("error: {e}");
    std::process::exit(1);
}

fn main() {
    let argv: Vec<String> = std::env::args().collect();
    if argv.get(1).map(String::as_str) == Some("--receive") {
        // The receiver process of `--recv-process`: the bytes it read, for the sender.
        match receiver::serve(&argv[2..]) {
            Ok(n) => println!("{n}"),
            Err(e) => fail(format!("the receiver: {e}")),
        }
        return;
    }
    let a = match parse() {
        Ok(a) => a,
        Err(e) => {
            eprintln!("error: {e}");
            std::process::exit(2);
        }
    };
    let mut route = Route::open(&a).unwrap_or_else(|e| fail(e));
    if let Some((c, _)) = a.cpu {
        if let Err(e) = sys::pin(c) {
            fail(format!("--cpu {c}: {e}"));
        }
    }
    let warm = Instant::now() + Duration::from_secs_f64(a.warmup);
    let warmed = match a.warmup > 0.0 {
        true => route.send(&a, warm),
        false => Ok(Tally::default()),
    };
    let t0 = Instant::now();
    let run = warmed.and_then(|w| {
        Ok((
            w.bytes,
            route.send(&a, t0 + Duration::from_secs_f64(a.seconds))?,
        ))
    });
    let secs = t0.elapsed().as_secs_f64();
    let tcp = !a.udp;
    // The receiver's failure first: a sender then fails only because the receiver left.
    let received = route
        .close()
        .unwrap_or_else(|e| fail(format!("the receiver failed: {e}")));
    let (warm_bytes, t) = run.unwrap_or_else(|e| fail(format!("{} failed: {e}", a.path)));
    if tcp && received != warm_bytes + t.bytes {
        fail(format!(
            "the receiver read {received} bytes of the {} sent",
            warm_bytes + t.bytes
        ));
    }
    println!(
        "bare {} {} B{}{}{}{}{}{}: {:.3} Gbit/s, {:.0} sends/s, {} sends, {} completions, {} copied{}",
        a.path,
        a.size,
        a.gso.map_or(String::new(), |g| format!(" gso {g}")),
        match (a.fixed, a.arena) {
            (true, _) => " fixed",
            (_, true) => " arena",
            _ => "",
        },
        if a.pool { " pool" } else { "" },
        match a.bufs {
            1 => String::new(),
            n => format!(" bufs {n}"),
        },
        if a.lib { " lib" } else { "" },
        a.order
            .map_or(String::new(), |o| format!(" order {o:?}").to_lowercase()),
        t.bytes as f64 * 8.0 / secs / 1e9,
        t.sends as f64 / secs,
        t.sends,
        t.completions,
        t.copied,
        t.in_place
            .map_or(String::new(), |n| format!(", {n} in place"))
    );
}

/// The system calls, each block with why it holds (see `sys/mod.rs`).
mod sys;
