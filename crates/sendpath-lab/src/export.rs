//! Exporters: JSON, CSV and the terminal table, all from [`Results`].

use crate::results::{ConnectionBytes, CpuNsPerByte, Receiver, Results, Row};
use crate::units::fmt_size;
use anyhow::Context;
use std::io::Write;
use std::path::Path;

fn open_out(path: &Path) -> anyhow::Result<Box<dyn Write>> {
    if path == Path::new("-") {
        return Ok(Box::new(std::io::stdout()));
    }
    Ok(Box::new(std::fs::File::create(path).with_context(
        || format!("cannot write {}", path.display()),
    )?))
}

/// Writes the JSON file (whole, every time: it is rewritten after each point).
pub fn write_json(path: &Path, r: &Results) -> anyhow::Result<()> {
    let text = serde_json::to_string_pretty(r)?;
    if path == Path::new("-") {
        println!("{text}");
        return Ok(());
    }
    // Write beside, then rename: an interrupted write never leaves a torn file.
    let tmp = path.with_extension("json.partial");
    std::fs::write(&tmp, text).with_context(|| format!("cannot write {}", tmp.display()))?;
    std::fs::rename(&tmp, path).with_context(|| format!("cannot write {}", path.display()))?;
    Ok(())
}

/// CSV header, one column per field a spreadsheet needs. Empty cells are values that were not
/// measured.
pub const CSV_HEADER: [&str; 50] = [
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
];

fn opt(v: Option<f64>) -> String {
    v.map_or(String::new(), |x| format!("{x:.6}"))
}

/// Writes the CSV file.
pub fn write_csv(path: &Path, r: &Results) -> anyhow::Result<()> {
    let mut w = csv::Writer::from_writer(open_out(path)?);
    w.write_record(CSV_HEADER)?;
    for row in &r.results {
        let l = row.latency_us;
        let f = row.zerocopy.fallbacks;
        let c = row.cpu_ns_per_byte;
        let cpu = |g: fn(&CpuNsPerByte) -> f64| opt(c.as_ref().map(g));
        let cpu_o = |g: fn(&CpuNsPerByte) -> Option<f64>| opt(c.as_ref().and_then(g));
        let cb = |g: fn(&ConnectionBytes) -> u64| {
            row.connection_bytes
                .as_ref()
                .map_or(String::new(), |c| g(c).to_string())
        };
        w.write_record([
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
            opt(row.median_of(|r| r.est_cycles_per_byte)),
            opt(row.median_of(|r| r.hw_cycles_per_byte)),
            opt(row.median_of(|r| r.hw_llc_misses_per_byte)),
            row.zerocopy.attempts.to_string(),
            row.zerocopy.completions.to_string(),
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
            cb(|c| c.min),
            cb(|c| c.median),
            cb(|c| c.max),
        ])?;
    }
    w.flush()?;
    Ok(())
}

/// One table line for a row.
pub fn table_line(row: &Row) -> String {
    let t = row.throughput_gbps;
    let copied = match (row.zerocopy.attempts, row.zerocopy.copied_fraction) {
        (0, _) => "-".to_string(),
        (_, Some(f)) => format!("{:.0}%", f * 100.0),
        (_, None) => "unknown".to_string(),
    };
    let fb = row.zerocopy.fallbacks.total();
    let lat = match (row.latency_us, row.latency_spread_us) {
        (Some(l), Some(sp)) => format!(
            "  p50 {:.1} [{:.1}..{:.1}] p99 {:.1} [{:.1}..{:.1}] us",
            l.p50, sp.p50.min, sp.p50.max, l.p99, sp.p99.min, sp.p99.max
        ),
        _ => String::new(),
    };
    let integ = if row.recv_mode == Receiver::Verify {
        format!(
            "  verified {} B, {} bad",
            row.integrity.bytes_verified, row.integrity.mismatches
        )
    } else {
        String::new()
    };
    let cpu = match row.cpu_ns_per_byte {
        Some(c) => format!(
            "{:>6.3}/{:<6}/{:>6.3}",
            c.sender,
            c.receiver.map_or("-".into(), |r| format!("{r:.3}")),
            c.system_softirq
        ),
        None => format!("{:^20}", "not measured"),
    };
    format!(
        "{:<13}{:>8}{:>4}  {:>8.3} Gbit/s [{:.3}..{:.3}]  {:>10.0} msg/s  cpu {cpu} ns/B  copied {:>7}  fallbacks {:>6}{lat}{integ}",
        row.strategy,
        fmt_size(row.size_bytes),
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
pub fn fairness_line(row: &Row) -> Option<String> {
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

pub fn table_header() -> String {
    format!(
        "{:<13}{:>8}{:>4}  {:>8} (median [min..max] over rounds)  cpu sender/receiver/softirq   copied   fallbacks",
        "strategy", "size", "thr", "throughput"
    )
}
