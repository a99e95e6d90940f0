//! The rows study's exporters: each of its output formats is an [`Exporter`] that reads only
//! the typed [`Results`] (and the [`Analysis`] derived from them, computed once per
//! [`Document`]): JSON, CSV, Markdown (`summary.md`) and HTML (`report.html`). The terminal
//! table is here too. The server and transfer studies write their files from their own
//! results, in their `summary.rs`.

use crate::files::write_text;
use crate::study::rows::analysis::{analyse, Analysis};
use crate::study::rows::{Results, Row};
use crate::window::{ConnectionBytes, CpuNsPerByte, Receiver};
use std::cell::OnceCell;
use std::path::Path;

/// What the exporters read: the results, and their analysis, computed on first use.
pub struct Document<'a> {
    results: &'a Results,
    analysis: OnceCell<Analysis>,
}

impl<'a> Document<'a> {
    /// A document over `results`.
    pub fn new(results: &'a Results) -> Document<'a> {
        Document {
            results,
            analysis: OnceCell::new(),
        }
    }

    /// The results.
    pub fn results(&self) -> &'a Results {
        self.results
    }

    /// Crossovers and recommendations (computed once, however many exporters ask).
    pub fn analysis(&self) -> &Analysis {
        self.analysis.get_or_init(|| analyse(self.results))
    }
}

/// One output format.
pub trait Exporter {
    /// The format's name (`json`, `csv`, `markdown`, `html`).
    fn name(&self) -> &'static str;
    /// Its file name in a results directory.
    fn file_name(&self) -> &'static str;
    /// The document in this format.
    fn render(&self, doc: &Document<'_>) -> anyhow::Result<String>;
}

/// `results.json`: everything, raw repeats included (`schema_version` says the layout).
pub struct Json;
/// `results.csv`: one line per row, one column per summary value.
pub struct Csv;
impl Exporter for Json {
    fn name(&self) -> &'static str {
        "json"
    }
    fn file_name(&self) -> &'static str {
        "results.json"
    }
    fn render(&self, doc: &Document<'_>) -> anyhow::Result<String> {
        Ok(serde_json::to_string_pretty(doc.results())? + "\n")
    }
}

impl Exporter for Csv {
    fn name(&self) -> &'static str {
        "csv"
    }
    fn file_name(&self) -> &'static str {
        "results.csv"
    }
    fn render(&self, doc: &Document<'_>) -> anyhow::Result<String> {
        csv_text(doc.results())
    }
}

/// Writes what `e` renders of `doc` to `path` (`-` for stdout).
pub(crate) fn export(e: &dyn Exporter, doc: &Document<'_>, path: &Path) -> anyhow::Result<()> {
    write_text(path, &e.render(doc)?)
}

/// CSV header, one column per field a spreadsheet needs. Empty cells are values that were not
/// measured.
pub(crate) const CSV_HEADER: [&str; 91] = [
    "workload",
    "strategy",
    "size_bytes",
    "request_bytes",
    "threads",
    "connections_per_thread",
    "fields",
    "recv_mode",
    "recv_size_bytes",
    "rate_per_s",
    "repeats",
    "throughput_gbps_median",
    "throughput_gbps_min",
    "throughput_gbps_max",
    "messages_per_s_median",
    "msg_time_us_median",
    "cpu_sender_user_ns_per_byte",
    "cpu_sender_system_ns_per_byte",
    "cpu_sender_ns_per_byte",
    "cpu_receiver_user_ns_per_byte",
    "cpu_receiver_system_ns_per_byte",
    "cpu_receiver_ns_per_byte",
    "cpu_system_user_ns_per_byte",
    "cpu_system_system_ns_per_byte",
    "cpu_system_softirq_ns_per_byte",
    "cpu_system_irq_ns_per_byte",
    "cpu_system_ns_per_byte",
    "cpu_remote_ns_per_byte",
    "est_cycles_per_byte",
    "hw_cycles_per_byte",
    "hw_llc_misses_per_byte",
    "zc_attempts",
    "zc_completions",
    "zc_copied_fraction",
    "fallback_enobufs",
    "fallback_inflight_cap",
    "fallback_unsupported",
    "fallback_enomem",
    "bytes_sent",
    "bytes_verified",
    "mismatches",
    "file_cold",
    "file_resident_fraction",
    "latency_p50_us",
    "latency_p90_us",
    "latency_p99_us",
    "latency_p999_us",
    "latency_max_us",
    "conn_bytes_min",
    "conn_bytes_median",
    "conn_bytes_max",
    "size_mix",
    "alloc",
    "adaptive_copy_sends",
    "adaptive_zerocopy_sends",
    "adaptive_file_sends",
    "adaptive_backoffs",
    "adaptive_switches",
    "tcp_retrans_segs",
    "tcp_receiver_drops",
    "tcp_windows",
    "tcp_rwnd_stalled_windows",
    "protocol",
    "gso_segment_bytes",
    "fixed_buffers",
    "send_side_only",
    "datagrams_sent",
    "datagrams_received",
    "datagrams_lost",
    "datagrams_reordered",
    "datagram_receiver_drops",
    "zc_notifications",
    "zc_completions_per_notification",
    "zc_completion_p50_us",
    "zc_completion_p99_us",
    "zc_completion_max_us",
    "data_copies",
    "cpu_copies",
    "switches_sender_per_mib",
    "switches_receiver_per_mib",
    "syscalls_sender_per_mib",
    "syscalls_receiver_per_mib",
    "uring_order",
    "tcp_congestion",
    "messages_per_call",
    "uring_buffers",
    "arena_registered",
    "recv_mapped_fraction",
    "kernel_copies_receive_per_byte",
    "kernel_copies_send_per_byte",
    "kernel_copies_deferred_per_byte",
];

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.6}"))
}

/// The CSV text of `r`.
fn csv_text(r: &Results) -> anyhow::Result<String> {
    let mut w = csv::Writer::from_writer(Vec::new());
    w.write_record(CSV_HEADER)?;
    for row in &r.results {
        let mut record = point_columns(row);
        record.extend(cpu_columns(row));
        record.extend(zerocopy_columns(row));
        record.extend(tail_columns(row));
        record.extend(datagram_columns(row));
        record.extend(notification_columns(row));
        record.extend(per_mib_columns(row));
        w.write_record(record)?;
    }
    let bytes = w.into_inner().map_err(|e| anyhow::anyhow!("csv: {e}"))?;
    Ok(String::from_utf8(bytes)?)
}

/// What a row measured: the point and its throughput.
fn point_columns(row: &Row) -> Vec<String> {
    vec![
        row.workload.to_string(),
        row.strategy.to_string(),
        row.size_bytes.to_string(),
        row.request_bytes.map_or(String::new(), |b| b.to_string()),
        row.threads.to_string(),
        row.connections_per_thread.to_string(),
        row.fields.to_string(),
        row.recv_mode.to_string(),
        row.recv_size_bytes.map_or(String::new(), |b| b.to_string()),
        opt(row.rate_per_s),
        row.repeats.len().to_string(),
        format!("{:.6}", row.throughput_gbps.median),
        format!("{:.6}", row.throughput_gbps.min),
        format!("{:.6}", row.throughput_gbps.max),
        format!("{:.3}", row.messages_per_s.median),
        opt(row.median_of(|r| Some(r.msg_time_us))),
    ]
}

/// CPU per byte by role and kind, and cycles per byte.
fn cpu_columns(row: &Row) -> Vec<String> {
    let c = row.cpu_ns_per_byte;
    let cpu = |g: fn(&CpuNsPerByte) -> f64| opt(c.as_ref().map(g));
    let cpu_o = |g: fn(&CpuNsPerByte) -> Option<f64>| opt(c.as_ref().and_then(g));
    vec![
        cpu(|c| c.sender_user),
        cpu(|c| c.sender_system),
        cpu(|c| c.sender),
        cpu_o(|c| c.receiver_user),
        cpu_o(|c| c.receiver_system),
        cpu_o(|c| c.receiver),
        cpu(|c| c.system_user),
        cpu(|c| c.system_system),
        cpu(|c| c.system_softirq),
        cpu(|c| c.system_irq),
        cpu(|c| c.system),
        cpu_o(|c| c.remote),
        opt(row.median_of(|r| r.est_cycles_per_byte)),
        opt(row.median_of(|r| r.hw_cycles_per_byte)),
        opt(row.median_of(|r| r.hw_llc_misses_per_byte)),
    ]
}

/// Zero-copy counts and fallbacks, integrity, the file cache and latency.
fn zerocopy_columns(row: &Row) -> Vec<String> {
    let l = row.latency_us;
    let f = row.zerocopy.counts.fallbacks;
    vec![
        row.zerocopy.counts.attempts.to_string(),
        row.zerocopy.counts.completions.to_string(),
        opt(row.zerocopy.copied_fraction),
        f.enobufs.to_string(),
        f.inflight_cap.to_string(),
        f.unsupported.to_string(),
        f.enomem.to_string(),
        row.integrity.bytes_sent.to_string(),
        row.integrity.bytes_verified.to_string(),
        row.integrity.mismatches.to_string(),
        row.file_cache
            .as_ref()
            .map_or(String::new(), |fc| fc.cold.to_string()),
        opt(row.file_cache.as_ref().and_then(|fc| fc.resident_fraction)),
        opt(l.map(|l| l.p50)),
        opt(l.map(|l| l.p90)),
        opt(l.map(|l| l.p99)),
        opt(l.map(|l| l.p999)),
        opt(l.map(|l| l.max)),
    ]
}

/// Fairness across connections, the size mix and allocation, adaptive's decisions, TCP.
fn tail_columns(row: &Row) -> Vec<String> {
    let dec = |g: fn(&sendpath::Decisions) -> u64| {
        row.zerocopy
            .decisions
            .as_ref()
            .map_or(String::new(), |d| g(d).to_string())
    };
    let cb = |g: fn(&ConnectionBytes) -> u64| {
        row.connection_bytes
            .as_ref()
            .map_or(String::new(), |c| g(c).to_string())
    };
    let tcp = row.tcp_totals();
    vec![
        cb(|c| c.min),
        cb(|c| c.median),
        cb(|c| c.max),
        row.size_mix.clone().unwrap_or_default(),
        row.alloc.name().to_string(),
        dec(|d| d.copy_sends),
        dec(|d| d.zerocopy_sends),
        dec(|d| d.file_sends),
        dec(|d| d.backoffs),
        dec(|d| d.switches),
        tcp.map_or(String::new(), |t| t.retrans_segs.to_string()),
        tcp.and_then(|t| t.receiver_drops)
            .map_or(String::new(), |d| d.to_string()),
        tcp.map_or(String::new(), |t| t.windows.to_string()),
        tcp.map_or(String::new(), |t| t.rwnd_stalled_windows.to_string()),
    ]
}

/// The protocol and, for UDP, the datagrams summed over the row's repeats.
fn datagram_columns(row: &Row) -> Vec<String> {
    let d = row.datagram_totals();
    let o = |v: Option<u64>| v.map_or(String::new(), |x| x.to_string());
    vec![
        row.protocol.name().to_string(),
        row.gso_segment_bytes
            .map_or(String::new(), |g| g.to_string()),
        row.fixed_buffers.to_string(),
        row.send_side_only.to_string(),
        o(d.map(|d| d.sent)),
        o(d.and_then(|d| d.received)),
        o(d.and_then(|d| d.lost)),
        o(d.and_then(|d| d.reordered)),
        o(d.and_then(|d| d.receiver_drops)),
    ]
}

/// Zero-copy notifications: how many, how coalesced, how long a send waited for its
/// completion to be read.
fn notification_columns(row: &Row) -> Vec<String> {
    let z = &row.zerocopy;
    vec![
        z.counts.notifications.to_string(),
        opt(z.completions_per_notification),
        opt(z.completion_p50_us),
        opt(z.completion_p99_us),
        opt(z.completion_max_us),
    ]
}

/// The path's copies by construction, and context switches and system calls per MiB.
fn per_mib_columns(row: &Row) -> Vec<String> {
    let c = row.data_copies.as_ref();
    let cpu = row
        .strategy
        .data_copies()
        .map(|c| c.iter().filter(|c| c.by_cpu).count());
    let p = row.per_mib.unwrap_or_default();
    vec![
        c.map_or(String::new(), |c| c.join("; ")),
        cpu.map_or(String::new(), |n| n.to_string()),
        opt(p.switches_sender),
        opt(p.switches_receiver),
        opt(p.syscalls_sender),
        opt(p.syscalls_receiver),
        row.uring_order.clone().unwrap_or_default(),
        row.tcp_congestion.clone().unwrap_or_default(),
        opt(row.messages_per_call),
        row.uring_buffers.clone().unwrap_or_default(),
        opt(row.arena_registered),
        opt(row.recv_mapped_fraction),
        opt(row.kernel_copies.and_then(|k| k.receive_per_byte)),
        opt(row.kernel_copies.and_then(|k| k.send_per_byte)),
        opt(row.kernel_copies.and_then(|k| k.deferred_per_byte)),
    ]
}

/// The kernel-copies line of a row that counted them (`--metrics copies`): bytes copied per
/// payload byte, each direction, or "not counted" where its counter did not attach.
pub(crate) fn kernel_copies_line(row: &Row) -> Option<String> {
    let k = row.kernel_copies?;
    let f = |v: Option<f64>| v.map_or("not counted".to_string(), |x| format!("{x:.3}"));
    Some(format!(
        "    kernel copies per payload byte: into user memory {}, from user memory {}, after a zero-copy send {}",
        f(k.receive_per_byte),
        f(k.send_per_byte),
        f(k.deferred_per_byte)
    ))
}

/// The notification line of a row with zero-copy completions.
pub(crate) fn notification_line(row: &Row) -> Option<String> {
    let z = &row.zerocopy;
    let per = z.completions_per_notification?;
    let lat = match (
        z.completion_p50_us,
        z.completion_p99_us,
        z.completion_max_us,
    ) {
        (Some(a), Some(b), Some(c)) => {
            // One unit for the three, the one that suits the largest.
            let (div, unit) = match c {
                c if c >= 1e6 => (1e6, "s"),
                c if c >= 1e4 => (1e3, "ms"),
                _ => (1.0, "us"),
            };
            let (a, b, c) = (a / div, b / div, c / div);
            format!("; from send to completion read: p50 {a:.1}, p99 {b:.1}, max {c:.1} {unit}")
        }
        _ => String::new(),
    };
    Some(format!(
        "    zero-copy completions: {} in {} notifications ({per:.1} per notification){lat}",
        z.counts.completions, z.counts.notifications
    ))
}

/// The datagram line of a UDP row: sent, and what our receiver saw of them.
pub(crate) fn datagram_line(row: &Row) -> Option<String> {
    let d = row.datagram_totals()?;
    let received = match (d.received, d.lost, d.reordered) {
        (Some(r), Some(l), Some(o)) => format!(
            ", received {r}, lost {l} ({:.2}%), reordered {o}, dropped by the receiving socket {}",
            l as f64 * 100.0 / d.sent.max(1) as f64,
            d.receiver_drops.map_or("?".into(), |x| x.to_string())
        ),
        _ => ", none received (no receiver of ours)".into(),
    };
    Some(format!(
        "    datagrams over {} repeat(s): sent {}{received}",
        row.repeats.len(),
        d.sent
    ))
}

/// One table line for a row.
pub(crate) fn table_line(row: &Row) -> String {
    let t = row.throughput_gbps;
    let copied = match (row.zerocopy.counts.attempts, row.zerocopy.copied_fraction) {
        (0, _) => "-".to_string(),
        (_, Some(f)) => crate::units::percent(f),
        (_, None) => "unknown".to_string(),
    };
    let fb = row.zerocopy.counts.fallbacks.total();
    let lat = match (row.latency_us, row.latency_spread_us) {
        (Some(l), Some(sp)) => format!(
            "  p50 {:.1} [{:.1}..{:.1}] p99 {:.1} [{:.1}..{:.1}] us",
            l.p50, sp.p50.min, sp.p50.max, l.p99, sp.p99.min, sp.p99.max
        ),
        _ => String::new(),
    };
    let integ = match (row.recv_mode, row.recv_mapped_fraction) {
        (Receiver::Verify, _) => format!(
            "  verified {} B, {} bad",
            row.integrity.bytes_verified, row.integrity.mismatches
        ),
        (Receiver::Zerocopy, Some(f)) => {
            format!("  received {} mapped", crate::units::percent(f))
        }
        _ => String::new(),
    };
    let decided = row.zerocopy.decisions.map_or(String::new(), |d| {
        format!(
            "  sends copy/zc/file {}/{}/{} backoffs {} switches {}",
            d.copy_sends + d.backoff_copies + d.cap_copies,
            d.zerocopy_sends,
            d.file_sends,
            d.backoffs,
            d.switches
        )
    });
    let cpu = match row.cpu_ns_per_byte {
        Some(c) => format!(
            "{:>6.3}/{:<6}/{:>6.3}",
            c.sender,
            c.receiver
                .or(c.remote)
                .map_or("-".into(), |r| format!("{r:.3}")),
            c.system_softirq
        ),
        None => format!("{:^20}", "not measured"),
    };
    format!(
        "{:<13}{:>8}{:>4}  {:>8.3} Gbit/s [{:.3}..{:.3}]  {:>10.0} msg/s  cpu {cpu} ns/B  copied {:>7}  fallbacks {:>6}{lat}{integ}{decided}",
        row.strategy,
        row.size_label(),
        row.threads,
        t.median,
        t.min,
        t.max,
        row.messages_per_s.median,
        copied,
        fb,
    )
}

/// The header printed above table lines.
/// The bytes-per-connection line of a row with several connections per thread.
pub(crate) fn fairness_line(row: &Row) -> Option<String> {
    let c = row.connection_bytes?;
    Some(format!(
        "    {} connections, bytes per connection in the window: min {}, median {}, max {} (min/max {})",
        c.connections,
        crate::units::fmt_size(c.min as usize),
        crate::units::fmt_size(c.median as usize),
        crate::units::fmt_size(c.max as usize),
        c.min_over_max().map_or("-".into(), |f| format!("{f:.2}")),
    ))
}

pub(crate) fn table_header() -> String {
    format!(
        "{:<13}{:>8}{:>4}  {:>8} (median [min..max] over rounds)  cpu sender/receiver/softirq   copied   fallbacks",
        "strategy", "size", "thr", "throughput"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::rows::Workload;
    use crate::study::rows::{Html, Markdown};
    use crate::window::Repeat;

    #[test]
    fn completion_ages_are_read_in_one_unit_that_suits_them() {
        let line = |p50, p99, max| {
            let mut row = Row::default();
            let z = &mut row.zerocopy;
            z.completions_per_notification = Some(8.0);
            (
                z.completion_p50_us,
                z.completion_p99_us,
                z.completion_max_us,
            ) = (Some(p50), Some(p99), Some(max));
            notification_line(&row).unwrap()
        };
        assert!(line(6.7, 20.0, 90.0).ends_with("p50 6.7, p99 20.0, max 90.0 us"));
        assert!(line(313.3, 1638.4, 22446.0).ends_with("p50 0.3, p99 1.6, max 22.4 ms"));
        assert!(line(1107296.3, 2080374.8, 2080374.8).ends_with("p50 1.1, p99 2.1, max 2.1 s"));
    }

    #[test]
    fn every_exporter_renders_the_same_rows() {
        let mut r: Results =
            serde_json::from_str(include_str!("../../../tests/data/empty-results.json")).unwrap();
        for (i, s) in [sendpath::Strategy::Copy, sendpath::Strategy::UringZc]
            .into_iter()
            .enumerate()
        {
            let mut row = Row {
                workload: Workload::Stream,
                strategy: s,
                size_bytes: 65536,
                threads: 1,
                connections_per_thread: 1,
                repeats: vec![Repeat {
                    throughput_gbps: 10.0 + i as f64,
                    ..Repeat::default()
                }],
                ..Row::default()
            };
            row.summarise();
            r.results.push(row);
        }
        let doc = Document::new(&r);
        let all: [&dyn Exporter; 4] = [&Json, &Csv, &Markdown, &Html];
        let names: std::collections::BTreeSet<_> = all.iter().map(|e| e.file_name()).collect();
        assert_eq!(names.len(), 4);
        for e in all {
            let text = e.render(&doc).unwrap();
            assert!(text.contains("uring-zc"), "{}: {text}", e.name());
        }
        let back: Results = serde_json::from_str(&Json.render(&doc).unwrap()).unwrap();
        assert_eq!(back.results, r.results, "JSON round-trips the typed rows");
        let csv = Csv.render(&doc).unwrap();
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(lines.len(), 3);
        assert_eq!(lines[0].split(',').count(), CSV_HEADER.len());
        assert!(
            lines[2].starts_with("stream,uring-zc,65536,"),
            "{}",
            lines[2]
        );
        // The table pads names to one column width, typed or not.
        let a = table_line(&r.results[0]);
        let b = table_line(&r.results[1]);
        assert_eq!(a.find("64KiB"), b.find("64KiB"), "{a}\n{b}");
    }
}
