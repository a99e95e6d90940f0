//! The report's charts: each value against message size, one line per path (the same colour
//! and marker in every chart), with min..max bars where rounds give them.

use crate::render::plot::{line_chart, Series, XAxis};
use crate::study::rows::{Results, Row, Workload};
use crate::units::fmt_size;
use sendpath::Strategy;
use std::collections::BTreeSet;

fn stream_rows(r: &Results) -> impl Iterator<Item = &Row> {
    r.results
        .iter()
        .filter(|x| x.workload == Workload::Stream && x.is_plain())
}

/// A point's value and its min..max over rounds, when known.
type Value = (f64, Option<(f64, f64)>);

/// The min..max over a row's repeats of a per-repeat value.
fn range_over_repeats(
    x: &Row,
    f: impl Fn(&crate::window::Repeat) -> Option<f64>,
) -> Option<(f64, f64)> {
    let v: Vec<f64> = x.repeats.iter().filter_map(f).collect();
    let lo = v.iter().copied().reduce(f64::min)?;
    Some((lo, v.iter().copied().fold(lo, f64::max)))
}

/// Lines of `y` against size, one per path, for rows with `threads`; the min..max bars when
/// every point has them.
fn by_size(r: &Results, threads: usize, y: impl Fn(&Row) -> Option<Value>) -> Vec<Series> {
    let paths: BTreeSet<Strategy> = stream_rows(r).map(|x| x.strategy).collect();
    let mut out = Vec::new();
    for p in Strategy::ALL.into_iter().filter(|s| paths.contains(s)) {
        let mut pts: Vec<(f64, Value)> = stream_rows(r)
            .filter(|x| x.strategy == p && x.threads == threads)
            .filter_map(|x| y(x).map(|v| (x.size_bytes as f64, v)))
            .collect();
        pts.sort_by(|a, b| a.0.total_cmp(&b.0));
        if !pts.is_empty() {
            out.push(Series {
                name: p.to_string(),
                spread: pts.iter().filter_map(|(_, (_, s))| *s).collect(),
                points: pts.iter().map(|&(x, (y, _))| (x, y)).collect(),
            });
        }
    }
    out
}

/// A chart of one value against message size (log axis), captioned with the connection count;
/// `y_log` for values that span decades (CPU per byte).
fn size_chart(
    what: &str,
    y_desc: &str,
    threads: usize,
    y_log: bool,
    series: &[Series],
) -> anyhow::Result<(String, String)> {
    let title = format!("{what}, {threads} connection(s)");
    let svg = line_chart(
        &title,
        "message size (bytes, log scale)",
        y_desc,
        XAxis::LogBytes,
        y_log,
        series,
    )?;
    Ok((
        format!(
            "{what} vs message size, {threads} connection(s). {}",
            reading(what)
        )
        .trim_end()
        .to_string(),
        svg,
    ))
}

/// What to read from a chart of `what`, in one line (its caption).
fn reading(what: &str) -> &'static str {
    const READINGS: [(&str, &str); 12] = [
        ("Throughput", "Higher is better. A path whose line stays above the baseline's from a size up has its crossover there; where the bars overlap, the rounds cannot tell the paths apart."),
        ("Sender-thread CPU", "Lower is better: what each byte costs the sending thread. Zero-copy pays per send (pinning, notifications), so its cost per byte falls as messages grow."),
        ("System-wide CPU", "Lower is better: every CPU's busy time per byte, the receiver and softirq included."),
        ("LLC misses", "Lower is better: last-level cache misses per byte sent."),
        ("Zero-copy sends the kernel copied", "At 1 every zero-copy send was copied anyway (a receiver on this host): those rows measure the bookkeeping plus a copy."),
        ("Completions per notification", "Higher means the kernel reported more sends per error-queue notification (coalescing)."),
        ("Send to completion read", "Lower is better: how long a buffer stays pinned before the program may reuse it."),
        ("Sender context switches", "Lower is better: how often the sending thread blocked or was preempted per MiB."),
        ("Receiver context switches", "Lower is better: how often the receiving thread blocked or was preempted per MiB."),
        ("Message latency", "Lower is better: from the send call to the message's last byte read."),
        ("Sender system calls", "Lower is better: the sending thread's system calls per MiB; batching and larger messages lower them."),
        ("Receiver system calls", "Lower is better: the receiving thread's system calls per MiB."),
    ];
    READINGS
        .iter()
        .find(|(k, _)| what.starts_with(k))
        .map_or("", |(_, r)| r)
}

pub(super) fn plots(r: &Results) -> anyhow::Result<Vec<(String, String)>> {
    let threads: BTreeSet<usize> = stream_rows(r).map(|x| x.threads).collect();
    let sizes: BTreeSet<usize> = stream_rows(r).map(|x| x.size_bytes).collect();
    let mut out = Vec::new();
    for &t in &threads {
        let g = |x: &Row| x.throughput_gbps;
        let s = by_size(r, t, |x| Some((g(x).median, Some((g(x).min, g(x).max)))));
        out.push(size_chart(
            "Throughput (bars: min..max over rounds)",
            "throughput (Gbit/s)",
            t,
            false,
            &s,
        )?);
    }
    if threads.len() > 1 {
        out.extend(latency_charts(r, &sizes)?);
    }
    for &t in &threads {
        let cpu = |f: fn(&crate::window::CpuNsPerByte) -> f64| {
            move |x: &Row| {
                let per = |rep: &crate::window::Repeat| rep.cpu.as_ref().map(|c| f(&c.ns_per_byte));
                x.cpu_ns_per_byte
                    .map(|c| (f(&c), range_over_repeats(x, per)))
            }
        };
        let p = by_size(r, t, cpu(|c| c.sender));
        if !p.is_empty() {
            out.push(size_chart(
                "Sender-thread CPU per byte (log scale)",
                "CPU (ns per byte, log scale)",
                t,
                true,
                &p,
            )?);
        }
        let s = by_size(r, t, cpu(|c| c.system));
        if !s.is_empty() {
            out.push(size_chart(
                "System-wide CPU per byte (log scale)",
                "CPU (ns per byte, log scale)",
                t,
                true,
                &s,
            )?);
        }
        let llc = by_size(r, t, |x| {
            x.median_of(|r| r.hw_llc_misses_per_byte).map(|v| (v, None))
        });
        if !llc.is_empty() {
            out.push(size_chart(
                "LLC misses per byte",
                "LLC misses per byte",
                t,
                true,
                &llc,
            )?);
        }
        let copied = by_size(r, t, |x| x.zerocopy.copied_fraction.map(|v| (v, None)));
        if !copied.is_empty() {
            out.push(size_chart(
                "Zero-copy sends the kernel copied",
                "copied fraction (0..1)",
                t,
                false,
                &copied,
            )?);
        }
        out.extend(notification_charts(r, t)?);
        out.extend(count_charts(r, t)?);
    }
    Ok(out)
}

/// Context switches and system calls per MiB by role (bars: min..max over rounds), and each
/// message's measured latency: for the rows that have them.
fn count_charts(r: &Results, t: usize) -> anyhow::Result<Vec<(String, String)>> {
    type PerRepeat = fn(&crate::window::Repeat) -> Option<u64>;
    let per_mib = |f: PerRepeat| {
        move |x: &Row| {
            let v = |rep: &crate::window::Repeat| rep.per_mib(f(rep));
            x.median_of(v).map(|m| (m, range_over_repeats(x, v)))
        }
    };
    let charts: [(&str, PerRepeat); 4] = [
        ("Sender context switches per MiB (log scale)", |r| {
            r.roles.switches_sender.map(|s| s.total())
        }),
        ("Receiver context switches per MiB (log scale)", |r| {
            r.roles.switches_receiver.map(|s| s.total())
        }),
        ("Sender system calls per MiB (log scale)", |r| {
            r.roles.syscalls_sender
        }),
        ("Receiver system calls per MiB (log scale)", |r| {
            r.roles.syscalls_receiver
        }),
    ];
    let mut out = Vec::new();
    for (what, f) in charts {
        let s = by_size(r, t, per_mib(f));
        if !s.is_empty() {
            out.push(size_chart(
                what,
                "per MiB of payload (log scale)",
                t,
                true,
                &s,
            )?);
        }
    }
    let lat = by_size(r, t, |x| {
        let l = x.latency_us?;
        Some((l.p99, Some((l.p50, l.max))))
    });
    if !lat.is_empty() {
        out.push(size_chart(
            "Message latency, send call to last byte read, p99 (bars: p50..max)",
            "microseconds (log scale)",
            t,
            true,
            &lat,
        )?);
    }
    Ok(out)
}

/// How the kernel coalesced zero-copy completions into notifications, and how long a buffer
/// waited from its send to the reading of its completion: for the rows that have them.
fn notification_charts(r: &Results, t: usize) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let per = by_size(r, t, |x| {
        x.zerocopy.completions_per_notification.map(|v| (v, None))
    });
    if !per.is_empty() {
        out.push(size_chart(
            "Completions per notification (log scale)",
            "completions per notification (coalescing)",
            t,
            true,
            &per,
        )?);
    }
    let lat = by_size(r, t, |x| {
        let z = &x.zerocopy;
        let p99 = z.completion_p99_us?;
        Some((p99, z.completion_p50_us.zip(z.completion_max_us)))
    });
    if !lat.is_empty() {
        out.push(size_chart(
            "Send to completion read, p99 (bars: p50..max)",
            "microseconds",
            t,
            true,
            &lat,
        )?);
    }
    Ok(out)
}

/// Time per message against connections, a chart per size (runs of several thread counts).
fn latency_charts(r: &Results, sizes: &BTreeSet<usize>) -> anyhow::Result<Vec<(String, String)>> {
    let mut out = Vec::new();
    let paths: BTreeSet<Strategy> = stream_rows(r).map(|x| x.strategy).collect();
    for &size in sizes {
        let mut series = Vec::new();
        for &p in &paths {
            let mut pts: Vec<(f64, f64)> = stream_rows(r)
                .filter(|x| x.strategy == p && x.size_bytes == size)
                .filter_map(|x| {
                    // Measured (`--msg-latency`) where the row has it, else the mean derived
                    // from the window's length and its messages.
                    let measured = x.latency_us.map(|l| l.p50);
                    measured
                        .or_else(|| x.median_of(|r| Some(r.msg_time_us)))
                        .map(|m| (x.threads as f64, m))
                })
                .collect();
            pts.sort_by(|a, b| a.0.total_cmp(&b.0));
            series.push(Series {
                name: p.to_string(),
                points: pts,
                spread: Vec::new(),
            });
        }
        out.push((
            format!(
                "Time per message vs connections, {} (measured p50 where messages were timed, else window / messages)",
                fmt_size(size)
            ),
            line_chart(
                &format!("Latency per message, {}", fmt_size(size)),
                "connections (threads)",
                "time per message (us)",
                XAxis::Linear,
                false,
                &series,
            )?,
        ));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    /// Every chart a report draws says what to read from it.
    #[test]
    fn every_chart_says_what_to_read_from_it() {
        for what in [
            "Throughput (bars: min..max over rounds)",
            "Sender-thread CPU per byte (log scale)",
            "System-wide CPU per byte (log scale)",
            "LLC misses per byte",
            "Zero-copy sends the kernel copied",
            "Completions per notification (log scale)",
            "Send to completion read, p99 (bars: p50..max)",
            "Sender context switches per MiB (log scale)",
            "Receiver context switches per MiB (log scale)",
            "Sender system calls per MiB (log scale)",
            "Receiver system calls per MiB (log scale)",
            "Message latency, send call to last byte read, p99 (bars: p50..max)",
        ] {
            assert!(super::reading(what).ends_with('.'), "{what}");
        }
        assert_eq!(super::reading("something new"), "");
    }
}
