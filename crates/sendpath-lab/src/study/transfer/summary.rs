//! The file-transfer study's summary (the transferTo study's Table 1 layout) and CSV, from its
//! results alone.

use super::{
    Cache, Method, TransferResults, TransferRow, STUDY_BASELINE, STUDY_TABLE, STUDY_ZEROCOPY,
};
use crate::units::fmt_size;
use crate::window::{Environment, Spread};
use anyhow::Context;

/// `1 - sendfile / read-send 4KiB` per round: the fraction of the time sendfile saves.
pub(crate) fn saved_per_round(base: &TransferRow, other: &TransferRow) -> Option<Spread> {
    let v: Vec<f64> = base
        .repeats
        .iter()
        .filter_map(|b| {
            let o = other.repeats.iter().find(|o| o.round == b.round)?;
            (b.seconds > 0.0).then(|| 1.0 - o.seconds / b.seconds)
        })
        .collect();
    (!v.is_empty()).then(|| Spread::of(&v))
}

/// The route of the transfers, in words.
fn route(env: &Environment) -> String {
    match (&env.agent, &env.topology) {
        (Some(a), _) => format!("received by `sendpath agent` at {a}"),
        (None, Some(t)) => format!(
            "through a veth pair into namespace {}{}",
            t.namespace,
            t.rate_bits_per_s
                .map_or(String::new(), |b| format!(", {:.3} Gbit/s", b as f64 / 1e9))
        ),
        (None, None) => "loopback".into(),
    }
}

/// `7 MB` for the study's decimal sizes, `64 MiB` otherwise.
pub fn size_label(b: u64) -> String {
    if b.is_multiple_of(1_000_000) && b >= 1_000_000 {
        if b.is_multiple_of(1_000_000_000) {
            format!("{} GB", b / 1_000_000_000)
        } else {
            format!("{} MB", b / 1_000_000)
        }
    } else {
        fmt_size(b as usize)
    }
}

/// The study's Table 1 layout, one table per cache state: time per transfer for every method,
/// the share `sendfile` saves over 4 KiB `read-send` (per round), and the study's figures.
pub fn summary(r: &TransferResults) -> String {
    let axes = Axes::of(r);
    let mut out = String::new();
    if r.interrupted {
        let made: usize = r.rows.iter().map(|x| x.repeats.len()).sum();
        let planned = axes.sizes.len() * axes.caches.len() * axes.methods.len();
        out += &format!(
            "\n> **Interrupted.** The run stopped after a signal: {made} of {} timed transfers were made; a cell marked `n=K` holds K rounds.\n",
            planned * r.settings.rounds as usize
        );
    }
    for &cache in &axes.caches {
        out += &time_table(r, &axes, cache);
        out += &cpu_table(r, &axes, cache);
        out += &switch_table(r, &axes, cache);
        out += &syscall_table(r, &axes, cache);
    }
    out += &copies_table(r, &axes);
    out += &format!(
        "\nSource files on {}; each transfer timed from open() to the receiver's acknowledgement of the last byte, over a fresh connection ({}, TCP congestion control {}). The study's figures: Linux 2.6, Java, files on a disk, receiver reading 4 KiB at a time.\n",
        r.settings.filesystem,
        route(&r.environment),
        r.settings.tcp_congestion.as_deref().unwrap_or("unknown")
    );
    let warned: Vec<String> = r
        .rows
        .iter()
        .flat_map(|x| {
            x.warnings.iter().map(move |w| {
                format!(
                    "- {} {} {}: {w}",
                    size_label(x.file_bytes),
                    x.cache.name(),
                    x.label
                )
            })
        })
        .collect();
    if !warned.is_empty() {
        out += "\nWarnings:\n";
        out += &warned.join("\n");
        out += "\n";
    }
    out
}

/// The copies each method makes by construction, beside the study's four for read + send and
/// two for sendfile, and what the kernel counted in the largest file's counted transfer.
fn copies_table(r: &TransferResults, axes: &Axes) -> String {
    let mut out = String::from("\nCopies of the data by construction, from the disk to the NIC (a receiver on this host reads from the socket instead of a NIC), and the bytes the kernel copied per file byte in the counted transfer of the largest file (into user memory: our receiver's reads; from user memory: the sender's sends; `-`: not counted, the results file's `copy_counters` say why). The study counts 4 for read + send (2 by the CPU) and 2 for sendfile.\n\n| method | copies | by the CPU | which | kernel: into user memory | kernel: from user memory |\n|---|---|---|---|---|---|\n");
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
    for m in &axes.methods {
        let Some(c) = m.strategy.data_copies() else {
            continue;
        };
        let cpu = c.iter().filter(|c| c.by_cpu).count();
        let which: Vec<String> = c.iter().map(ToString::to_string).collect();
        let k = r
            .rows
            .iter()
            .filter(|x| &x.method == m && x.kernel_copies.is_some())
            .max_by_key(|x| x.file_bytes)
            .and_then(|x| x.kernel_copies);
        out += &format!(
            "| {} | {} | {cpu} | {} | {} | {} |\n",
            m.label(),
            c.len(),
            which.join("; "),
            f(k.and_then(|k| k.receive_per_byte)),
            f(k.and_then(|k| k.send_per_byte)),
        );
    }
    out
}

/// The methods, sizes and cache states the results hold, each sorted.
struct Axes {
    methods: Vec<Method>,
    sizes: Vec<u64>,
    caches: Vec<Cache>,
}

impl Axes {
    fn of(r: &TransferResults) -> Axes {
        fn sorted<T: Ord>(mut v: Vec<T>) -> Vec<T> {
            v.sort();
            v.dedup();
            v
        }
        Axes {
            methods: sorted(r.rows.iter().map(|x| x.method).collect()),
            sizes: sorted(r.rows.iter().map(|x| x.file_bytes).collect()),
            caches: sorted(r.rows.iter().map(|x| x.cache).collect()),
        }
    }

    /// `| first | method | method |` and its separator line, with `extra` columns after.
    fn header(&self, first: &str, extra: &[&str]) -> String {
        let mut h = format!("| {first} |");
        for m in &self.methods {
            h += &format!(" {} |", m.label());
        }
        for e in extra {
            h += &format!(" {e} |");
        }
        h += "\n|---|";
        h += &"---|".repeat(self.methods.len() + extra.len());
        h + "\n"
    }
}

/// ` n=K` for a row that holds K < `rounds` rounds (an interrupted run), else nothing.
fn short(x: &TransferRow, rounds: u32) -> String {
    match x.repeats.len() {
        n if n < rounds as usize => format!(" n={n}"),
        _ => String::new(),
    }
}

/// Time per transfer for one cache state, with what sendfile saves and the study's figures.
fn time_table(r: &TransferResults, axes: &Axes, cache: Cache) -> String {
    let mut out = format!(
        "\n### {} file, receiver {}: time per transfer, ms, median (min..max) of {} rounds{}\n\n",
        cache.name(),
        r.settings.sink,
        r.settings.rounds,
        if r.interrupted { " (n=K: only K)" } else { "" }
    );
    let compare = axes.methods.contains(&STUDY_BASELINE) && axes.methods.contains(&STUDY_ZEROCOPY);
    let saves = "sendfile saves vs read-send 4KiB (per round)";
    let study = "study: normal / transferTo, ms (saved)";
    let extra: &[&str] = if compare { &[saves, study] } else { &[study] };
    out += &axes.header("file size", extra);
    for &size in &axes.sizes {
        out += &format!("| {} |", size_label(size));
        for m in &axes.methods {
            out += &match r.row(size, cache, m) {
                Some(x) => format!(
                    " {:.0} ({:.0}..{:.0}){} |",
                    x.ms.median,
                    x.ms.min,
                    x.ms.max,
                    short(x, r.settings.rounds)
                ),
                None => " null |".into(),
            };
        }
        if compare {
            let saved = r
                .row(size, cache, &STUDY_BASELINE)
                .zip(r.row(size, cache, &STUDY_ZEROCOPY))
                .and_then(|(b, o)| saved_per_round(b, o));
            out += &match saved {
                Some(s) => format!(
                    " {:.0}% ({:.0}..{:.0}) |",
                    s.median * 100.0,
                    s.min * 100.0,
                    s.max * 100.0
                ),
                None => " null |".into(),
            };
        }
        out += &match STUDY_TABLE.iter().find(|t| t.0 == size) {
            Some((_, n, z)) => format!(" {n:.0} / {z:.0} ({:.0}%) |\n", (1.0 - z / n) * 100.0),
            None => " - |\n".into(),
        };
    }
    out
}

/// CPU per transfer for one cache state: the sender (process less receiver) and receiver.
fn cpu_table(r: &TransferResults, axes: &Axes, cache: Cache) -> String {
    let title = format!(
        "CPU per transfer, ms, sender (process less receiver) / receiver thread (medians), {} file:",
        cache.name()
    );
    pair_table(r, axes, cache, &title, |x| {
        (x.cpu_sender_ms, x.cpu_receiver_ms)
    })
}

/// Context switches per transfer for one cache state, sender / receiver thread, beside what
/// the study counts per chunk (user/kernel mode switches of its system calls, which these
/// scheduler counters do not see).
fn switch_table(r: &TransferResults, axes: &Axes, cache: Cache) -> String {
    if !r.rows.iter().any(|x| x.switches_sender.is_some()) {
        return String::new();
    }
    let title = format!(
        "Context switches per transfer (the threads blocked or were preempted; medians), sender / receiver thread, {} file. The study counts 4 user/kernel switches per chunk for read + send (two system calls) and 2 for sendfile (one): mode switches of the calls, which these scheduler counters do not count.",
        cache.name()
    );
    pair_table(r, axes, cache, &title, |x| {
        (x.switches_sender, x.switches_receiver)
    })
}

/// System calls per transfer and per MiB for one cache state, sender / receiver thread, beside
/// what the study counts per chunk (read + send: two calls; sendfile: one).
fn syscall_table(r: &TransferResults, axes: &Axes, cache: Cache) -> String {
    if let Some(why) = &r.syscalls_unavailable {
        return format!("\nSystem calls per transfer: not counted ({why}).\n");
    }
    if !r.rows.iter().any(|x| x.syscalls_sender.is_some()) {
        return String::new();
    }
    let title = format!(
        "System calls per transfer (as the kernel counts them, in one transfer after the timed rounds: counting slows every call), sender / receiver thread, {} file. The study counts 2 per chunk for read + send (read, send) and 1 for sendfile; per MiB below.",
        cache.name()
    );
    let per_mib = format!(
        "System calls per MiB, sender / receiver thread, {} file:",
        cache.name()
    );
    pair_table(r, axes, cache, &title, |x| {
        (x.syscalls_sender, x.syscalls_receiver)
    }) + &pair_table(r, axes, cache, &per_mib, |x| {
        let mib = x.file_bytes as f64 / f64::from(1 << 20);
        (
            x.syscalls_sender.map(|n| n / mib),
            x.syscalls_receiver.map(|n| n / mib),
        )
    })
}

/// A figure with the digits it needs: whole numbers (counts) and values from 10 up without a
/// fraction, two significant digits below.
fn figure(v: f64) -> String {
    match v.abs() {
        a if a >= 10.0 || v.fract() == 0.0 => format!("{v:.0}"),
        a if a >= 1.0 => format!("{v:.1}"),
        _ => format!("{v:.2}"),
    }
}

/// A table of sizes by methods, each cell `sender / receiver` as `f` gives them for the row.
fn pair_table(
    r: &TransferResults,
    axes: &Axes,
    cache: Cache,
    title: &str,
    f: impl Fn(&TransferRow) -> (Option<f64>, Option<f64>),
) -> String {
    let mut out = format!("\n{title}\n\n");
    out += &axes.header("file size", &[]);
    for &size in &axes.sizes {
        out += &format!("| {} |", size_label(size));
        for m in &axes.methods {
            let cell = r.row(size, cache, m).map(|x| {
                let v = |v: Option<f64>| v.map_or("null".into(), figure);
                let (a, b) = f(x);
                format!(" {} / {} |", v(a), v(b))
            });
            out += &cell.unwrap_or_else(|| " null |".into());
        }
        out += "\n";
    }
    out
}

/// One CSV line per transfer: the timed rounds (`counted` false, system calls empty), then the
/// transfer that counted system calls (`counted` true; its time is not a round's).
pub fn write_csv(r: &TransferResults, path: &std::path::Path) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record([
        "file_bytes",
        "cache",
        "method",
        "strategy",
        "chunk_bytes",
        "sink",
        "tcp_congestion",
        "round",
        "seconds",
        "throughput_gbps",
        "resident_fraction",
        "cpu_sender_ms",
        "cpu_receiver_ms",
        "bytes_received",
        "switches_sender_voluntary",
        "switches_sender_involuntary",
        "switches_receiver_voluntary",
        "switches_receiver_involuntary",
        "syscalls_sender",
        "syscalls_receiver",
        "counted",
    ])?;
    let opt = |v: Option<f64>| v.map_or(String::new(), |v| v.to_string());
    let sw = |c: Option<crate::window::ContextSwitches>,
              f: fn(&crate::window::ContextSwitches) -> u64| {
        c.map_or(String::new(), |c| f(&c).to_string())
    };
    for row in &r.rows {
        let timed = row.repeats.iter().map(|x| (x, false));
        for (x, counted) in timed.chain(row.counted.iter().map(|x| (x, true))) {
            w.write_record([
                row.file_bytes.to_string(),
                row.cache.name().into(),
                row.label.clone(),
                row.method.strategy.to_string(),
                row.method
                    .chunk_bytes
                    .map_or(String::new(), |c| c.to_string()),
                r.settings.sink.clone(),
                r.settings.tcp_congestion.clone().unwrap_or_default(),
                x.round.to_string(),
                x.seconds.to_string(),
                x.throughput_gbps.to_string(),
                opt(x.resident_fraction),
                opt(x.cpu_sender_ms),
                opt(x.cpu_receiver_ms),
                x.bytes_received.to_string(),
                sw(x.roles.switches_sender, |c| c.voluntary),
                sw(x.roles.switches_sender, |c| c.involuntary),
                sw(x.roles.switches_receiver, |c| c.voluntary),
                sw(x.roles.switches_receiver, |c| c.involuntary),
                x.roles
                    .syscalls_sender
                    .map_or(String::new(), |n| n.to_string()),
                x.roles
                    .syscalls_receiver
                    .map_or(String::new(), |n| n.to_string()),
                counted.to_string(),
            ])?;
        }
    }
    let bytes = w.into_inner().context("rendering the CSV")?;
    crate::files::write_text(
        path,
        &String::from_utf8(bytes).context("rendering the CSV")?,
    )
}
