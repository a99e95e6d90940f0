//! The `udp-zerocopy` preset's tables: each path's throughput on the UDP rows with the ratios
//! the published studies quote, paired by round, and those studies' figures beside them.

use crate::render::Table;
use crate::study::rows::analysis::paired;
use crate::study::rows::{Results, Row};
use crate::traffic::datagram::Protocol;
use crate::units::fmt_size;
use sendpath::Strategy::{self, Copy, MsgZerocopy, Uring, UringZc};
use std::collections::BTreeSet;

/// The row of `path` at `size` on UDP, from registered buffers or not, with or without GSO.
fn find(r: &Results, path: Strategy, size: usize, fixed: bool, gso: Option<usize>) -> Option<&Row> {
    r.results.iter().find(|x| {
        x.protocol == Protocol::Udp
            && x.strategy == path
            && x.size_bytes == size
            && x.fixed_buffers == fixed
            && x.gso_segment_bytes == gso
            && x.threads == 1
            && x.size_mix.is_none()
    })
}

/// `1.84 (5/5)`: the median of a/b over the rounds both have, and in how many a was faster.
fn ratio(a: Option<&Row>, b: Option<&Row>) -> String {
    match a.zip(b).and_then(|(a, b)| paired(a, b)) {
        Some(p) => format!("{:.2} ({}/{})", p.median_ratio, p.wins, p.rounds),
        None => "-".into(),
    }
}

fn gbps(x: Option<&Row>) -> String {
    x.map_or("-".into(), |x| format!("{:.2}", x.throughput_gbps.median))
}

/// Both tables, when the results hold UDP rows.
pub(crate) fn tables(r: &Results) -> Vec<Table> {
    let sizes: BTreeSet<usize> = r
        .results
        .iter()
        .filter(|x| x.protocol == Protocol::Udp && x.gso_segment_bytes.is_none())
        .map(|x| x.size_bytes)
        .collect();
    if sizes.is_empty() {
        return Vec::new();
    }
    vec![paths_table(r, &sizes), published_table(r)]
}

/// Per size: each path's Gbit/s and the ratios that say what zero-copy saved.
fn paths_table(r: &Results, sizes: &BTreeSet<usize>) -> Table {
    let send_side = r.results.iter().any(|x| x.send_side_only);
    let title = format!(
        "UDP, one datagram per send{}: Gbit/s (median over rounds) and ratios (median of the per-round ratios, rounds the first was faster / rounds)",
        if send_side {
            " on the black-hole route (send side only: frames dropped at the device's queue, before the driver; an upper bound of what a NIC with offloads allows)"
        } else {
            ""
        }
    );
    let mut t = Table::new(
        &title,
        &[
            "size",
            "copy",
            "msg-zerocopy",
            "msg-zerocopy / copy",
            "uring",
            "uring-zc",
            "uring-zc / uring",
            "uring-zc fixed",
            "uring-zc fixed / uring",
            "uring-zc fixed / msg-zerocopy",
            "uring-zc fixed sends/s",
            "zero-copy completions copied",
        ],
    );
    for &s in sizes {
        let [c, mz, u, zc] =
            [Copy, MsgZerocopy, Uring, UringZc].map(|p| find(r, p, s, false, None));
        let zf = find(r, UringZc, s, true, None);
        let copied: Vec<String> = [mz, zc, zf]
            .iter()
            .flatten()
            .filter_map(|x| x.zerocopy.copied_fraction)
            .map(crate::units::percent)
            .collect();
        t.rows.push(vec![
            fmt_size(s),
            gbps(c),
            gbps(mz),
            ratio(mz, c),
            gbps(u),
            gbps(zc),
            ratio(zc, u),
            gbps(zf),
            ratio(zf, u),
            ratio(zf, mz),
            zf.map_or("-".into(), |x| format!("{:.0}", x.messages_per_s.median)),
            if copied.is_empty() {
                "-".into()
            } else {
                copied.join(" / ")
            },
        ]);
    }
    t
}

/// The published figures of the SEND_ZC and UDP GSO patch sets beside what this run measured.
fn published_table(r: &Results) -> Table {
    let mut t = Table::new(
        "The published figures beside this run's (same ratios; theirs on other hardware and kernels)",
        &["figure", "published", "this run"],
    );
    let big = r
        .results
        .iter()
        .filter(|x| x.protocol == Protocol::Udp && x.gso_segment_bytes.is_none())
        .map(|x| x.size_bytes)
        .max()
        .unwrap_or(0);
    let at = |p, fixed| find(r, p, big, fixed, None);
    t.rows.push(vec![
        "io_uring SEND_ZC over MSG_ZEROCOPY, UDP 64 KB datagrams, a device that drops frames (io_uring zero-copy send patches, Begunkov, 2021)".into(),
        "2.44x best, 1.88x worst".into(),
        format!(
            "{}: uring-zc fixed / msg-zerocopy {}, uring-zc / msg-zerocopy {}",
            fmt_size(big),
            ratio(at(UringZc, true), at(MsgZerocopy, false)),
            ratio(at(UringZc, false), at(MsgZerocopy, false))
        ),
    ]);
    let small = 4096;
    t.rows.push(vec![
        "SEND_ZC against SEND at a 4 KB payload (same patches: zero-copy \"only slightly outperforms\")".into(),
        "slightly above 1x".into(),
        format!(
            "4KiB: uring-zc / uring {}, uring-zc fixed / uring {}",
            ratio(find(r, UringZc, small, false, None), find(r, Uring, small, false, None)),
            ratio(find(r, UringZc, small, true, None), find(r, Uring, small, false, None))
        ),
    ]);
    t.rows.push(vec![
        "UDP GSO against one datagram per send, at equal CPU (UDP GSO patches, de Bruijn, 2018: 876 MB/s without, 2139 MB/s with, 11.2 G cycles each)".into(),
        "2.44x the bytes per CPU cycle".into(),
        format!(
            "bytes per sender CPU second, GSO over one datagram of the segment size: {} (on the black hole a GSO packet is dropped whole before the driver, so no segmentation is paid, as with a NIC's UDP segmentation offload; their NIC segmented in software)",
            gso_line(r)
        ),
    ]);
    t
}

/// Bytes per sender-CPU second with GSO over without, for each GSO row and its plain twin (a
/// send of the segment size).
fn gso_line(r: &Results) -> String {
    let lines: Vec<String> = r
        .results
        .iter()
        .filter(|x| x.protocol == Protocol::Udp && x.gso_segment_bytes.is_some())
        .filter_map(|g| {
            let seg = g.gso_segment_bytes?;
            let plain = find(r, g.strategy, seg, g.fixed_buffers, None)?;
            let cpu = |x: &Row| x.cpu_ns_per_byte.map(|c| c.sender).filter(|c| *c > 0.0);
            let gain = cpu(plain)? / cpu(g)?;
            Some(format!(
                "{}{} {}/{seg}: {gain:.2}x",
                g.strategy,
                if g.fixed_buffers { " fixed" } else { "" },
                fmt_size(g.size_bytes)
            ))
        })
        .collect();
    if lines.is_empty() {
        "- (no GSO row with a plain row of its segment size)".into()
    } else {
        lines.join("; ")
    }
}
