//! The copies table: each path's copies as a study counts them, as the path makes them by
//! construction, and as the kernel counted them (`--metrics copies`, the `copies` preset),
//! with where the three agree. Decided from the results alone.

use crate::render::Table;
use crate::study::rows::{Results, Row, Workload};
use crate::units::fmt_size;
use crate::window::Receiver;
use sendpath::Strategy;
use std::collections::BTreeSet;

/// What a study says one path copies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Claim {
    /// Who says it.
    pub(crate) study: &'static str,
    /// In its words.
    pub(crate) words: &'static str,
    /// Copies it counts.
    pub(crate) copies: usize,
    /// Of those, made by the CPU (the rest by a device's DMA).
    pub(crate) by_cpu: usize,
}

/// The studies' counts (`../shared/studies`: PA02 §3, the transferTo article's figures 1-3,
/// the MSG_ZEROCOPY paper §1); `None` for a path no study counts.
pub(crate) fn claim(path: Strategy) -> Option<Claim> {
    let c = |study, words, copies, by_cpu| Claim {
        study,
        words,
        copies,
        by_cpu,
    };
    Some(match path {
        Strategy::Serialize => c(
            "PA02 A1",
            "two-copy: user buffer to socket buffer, socket buffer to NIC",
            2,
            1,
        ),
        Strategy::Gather => c("PA02 A2", "one-copy: no serialization", 1, 1),
        Strategy::MsgZerocopy => c(
            "PA02 A3, MSG_ZEROCOPY paper",
            "zero-copy: the send copy is gone",
            0,
            0,
        ),
        Strategy::ReadSend => c("transferTo", "four copies, two by the CPU", 4, 2),
        Strategy::Sendfile => c("transferTo", "two copies, none by the CPU", 2, 0),
        _ => return None,
    })
}

/// What the kernel counted for one path and size, by receiver.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub(crate) struct Counted {
    /// Receive-side copies per payload byte with a receiver that copies, discards, maps.
    pub(crate) receive: [Option<f64>; 3],
    /// Send-side copies per payload byte (any receiver's row).
    pub(crate) send: Option<f64>,
    /// Deferred copies per payload byte.
    pub(crate) deferred: Option<f64>,
    /// The share of zero-copy sends the kernel reported copied (COPIED flag).
    pub(crate) zc_copied: Option<f64>,
    /// The route had no receiver (the black hole): the send side only.
    pub(crate) send_side_only: bool,
}

/// Where claim, construction and count agree, in a sentence or a few.
pub(crate) fn verdict(path: Strategy, claim: Option<Claim>, n: &Counted) -> String {
    let made = path.data_copies().unwrap_or(&[]);
    let cpu = made.iter().filter(|c| c.by_cpu).count();
    let mut says = Vec::new();
    if n.send_side_only {
        says.push(
            "no receiver on this route (the black hole frees every frame): the send side only"
                .to_string(),
        );
    }
    if let Some(c) = claim {
        let dma = c.copies - c.by_cpu;
        if dma > 0 {
            says.push(format!(
                "the claim counts {dma} DMA cop{} the CPU does not make",
                plural(dma)
            ));
        }
        match cpu.cmp(&c.by_cpu) {
            std::cmp::Ordering::Equal => says.push(format!(
                "its {cpu} CPU cop{} agree{} with the path's",
                plural(cpu),
                if cpu == 1 { "s" } else { "" }
            )),
            std::cmp::Ordering::Greater => {
                let names: Vec<String> = made
                    .iter()
                    .filter(|c| c.by_cpu)
                    .map(|c| format!("{} -> {}", c.from, c.to))
                    .collect();
                says.push(format!(
                    "it counts {} of the path's {cpu} CPU copies ({})",
                    c.by_cpu,
                    names.join(", ")
                ));
            }
            std::cmp::Ordering::Less => says.push(format!(
                "it counts {} CPU cop{} the path does not make",
                c.by_cpu - cpu,
                plural(c.by_cpu - cpu)
            )),
        }
    }
    let into_socket = made
        .iter()
        .filter(|c| c.by_cpu && c.to == "socket buffer")
        .count();
    if let Some(s) = n.send {
        let agree = (s - into_socket as f64).abs() < 0.15;
        says.push(format!(
            "the kernel copied {s:.2} B from user memory per byte sent ({} the {into_socket} by construction)",
            if agree { "as" } else { "not" }
        ));
    }
    if let Some(f) = n.zc_copied.filter(|&f| f > 0.5) {
        says.push(format!("here the kernel copied {} of the zero-copy sends after the fact (their COPIED flag): the claim holds only where the receiver is on another host", crate::units::percent(f)));
    }
    if let Some(r) = n.receive[0].filter(|&r| r > 0.5) {
        says.push(format!("no study counts the receiver's copy into user memory: {r:.2} B per byte with a receiver that reads"));
    }
    says.join("; ")
}

fn plural(n: usize) -> &'static str {
    if n == 1 {
        "y"
    } else {
        "ies"
    }
}

/// The rows of `path` at `size` by receiver, and what they counted.
fn counted(r: &Results, path: Strategy, size: usize) -> Counted {
    let row = |recv: Receiver| -> Option<&Row> {
        r.results.iter().find(|x| {
            x.workload == Workload::Stream
                && x.strategy == path
                && x.size_bytes == size
                && x.recv_mode == recv
                && x.threads == 1
                && x.kernel_copies.is_some()
        })
    };
    let rows = [
        row(Receiver::Copy),
        row(Receiver::Discard),
        row(Receiver::Zerocopy),
    ];
    let k = rows.map(|x| x.and_then(|x| x.kernel_copies));
    Counted {
        receive: k.map(|k| k.and_then(|k| k.receive_per_byte)),
        send: k.iter().flatten().find_map(|k| k.send_per_byte),
        deferred: k.iter().flatten().find_map(|k| k.deferred_per_byte),
        zc_copied: rows
            .iter()
            .flatten()
            .find_map(|x| x.zerocopy.copied_fraction),
        send_side_only: rows.iter().flatten().any(|x| x.send_side_only),
    }
}

/// The table, when any row counted copies.
pub(crate) fn table(r: &Results) -> Option<Table> {
    let keys: BTreeSet<(usize, usize)> = r
        .results
        .iter()
        .filter(|x| x.workload == Workload::Stream && x.kernel_copies.is_some() && x.threads == 1)
        .map(|x| {
            (
                Strategy::ALL
                    .iter()
                    .position(|s| *s == x.strategy)
                    .unwrap_or(0),
                x.size_bytes,
            )
        })
        .collect();
    if keys.is_empty() {
        return None;
    }
    let mut t = Table::new(
        "Copies: claimed, by construction, counted by the kernel",
        &[
            "path",
            "size",
            "study",
            "claims",
            "by construction",
            "received, copying",
            "discarding",
            "mapping",
            "sent",
            "deferred",
            "where they agree",
        ],
    )
    .noted(NOTE);
    let f = |v: Option<f64>| v.map_or("-".to_string(), |x| format!("{x:.2}"));
    for (i, size) in keys {
        let path = Strategy::ALL[i];
        let c = claim(path);
        let n = counted(r, path, size);
        let made = path.data_copies().unwrap_or(&[]);
        let cpu = made.iter().filter(|c| c.by_cpu).count();
        t.rows.push(vec![
            path.to_string(),
            fmt_size(size),
            c.map_or("-".into(), |c| c.study.into()),
            c.map_or("-".into(), |c| {
                format!("{} ({} by CPU): {}", c.copies, c.by_cpu, c.words)
            }),
            format!("{} ({cpu} by CPU)", made.len()),
            f(n.receive[0]),
            f(n.receive[1]),
            f(n.receive[2]),
            f(n.send),
            f(n.deferred),
            verdict(path, c, &n),
        ]);
    }
    Some(t)
}

const NOTE: &str = "Kernel counts are bytes copied per payload byte, medians over rounds, counted by BPF on the window's own threads: received (tracepoint skb:skb_copy_datagram_iovec) with a receiver that reads, one that discards (MSG_TRUNC) and one that maps pages (TCP_ZEROCOPY_RECEIVE); sent (fexit _copy_from_iter) and deferred (fentry skb_copy_ubufs, the copy behind MSG_ZEROCOPY's COPIED flag). A dash is a figure not counted: the results file's environment (copy_counters) says why. Copies by construction are the path's moves from its source to the NIC, including DMA; user-space copies (serialize's) are invisible to the kernel's counters. On loopback there is no NIC, and a warm file is already in the page cache: the DMA copies the studies count do not happen here, while the receiver's copy, which none counts, does.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_verdicts_name_dma_counted_copies_missed_and_the_receivers_copy() {
        let read = Counted {
            receive: [Some(1.0), Some(0.0), Some(0.3)],
            ..Counted::default()
        };
        let v = verdict(Strategy::Serialize, claim(Strategy::Serialize), &read);
        assert!(v.contains("1 DMA copy"), "{v}");
        assert!(v.contains("counts 1 of the path's 2 CPU copies"), "{v}");
        assert!(v.contains("fields -> one user buffer"), "{v}");
        assert!(v.contains("receiver's copy into user memory: 1.00"), "{v}");
        let v = verdict(
            Strategy::Sendfile,
            claim(Strategy::Sendfile),
            &Counted::default(),
        );
        assert!(
            v.contains("2 DMA copies") && v.contains("0 CPU copies agree"),
            "{v}"
        );
        assert!(
            !v.contains("receiver"),
            "nothing counted, nothing said: {v}"
        );
        let sent = Counted {
            send: Some(0.98),
            ..Counted::default()
        };
        let v = verdict(Strategy::Gather, claim(Strategy::Gather), &sent);
        assert!(
            v.contains("0.98 B from user memory per byte sent (as the 1"),
            "{v}"
        );
        let zc = Counted {
            send: Some(0.9),
            zc_copied: Some(1.0),
            ..Counted::default()
        };
        let v = verdict(Strategy::MsgZerocopy, claim(Strategy::MsgZerocopy), &zc);
        assert!(
            v.contains("(not the 0") && v.contains("100% of the zero-copy sends"),
            "{v}"
        );
        assert_eq!(claim(Strategy::Splice), None);
    }
}
