//! Sweep presets, several of them shaped after published studies of this question so results
//! can be set beside the published ones.

use crate::traffic::datagram::Protocol;
use crate::traffic::mix::Alloc;
use sendpath::Strategy;
use std::time::Duration;

/// One sweep: a matrix of strategies x sizes x threads, and its timing.
#[derive(Debug, Clone, Default)]
pub struct Preset {
    pub name: &'static str,
    pub about: &'static str,
    pub strategies: Vec<Strategy>,
    pub sizes: Vec<usize>,
    pub threads: Vec<usize>,
    pub fields: usize,
    pub duration: Duration,
    pub warmup: Duration,
    pub repeat: u32,
    /// Buffer allocation modes: every point is measured with each.
    pub allocs: Vec<Alloc>,
    /// Size mixes measured as points of their own, after the single sizes.
    pub mixes: Vec<&'static str>,
    /// The transport; UDP presets run on the black-hole route (`--topology blackhole`).
    pub proto: Protocol,
    /// Paths measured a second time from registered buffers (`--fixed-buffers`).
    pub fixed_also: Vec<Strategy>,
    /// UDP: GSO points (size, segment) for every path, after the single sizes.
    pub gso: Vec<(usize, u16)>,
    /// Time each message at the receiver (`stream --msg-latency`).
    pub msg_latency: bool,
    /// Burst load (`stream --burst`): the burst, and the sizes measured with it for every
    /// path and allocation mode.
    pub burst: Option<(&'static str, Vec<usize>)>,
    /// The receivers every single-size point is measured with (`--recv`); empty: `copy`.
    pub recvs: Vec<crate::workload::RecvMode>,
    /// Count the bytes the kernel copies (`--metrics copies`: BPF, root).
    pub count_copies: bool,
}

const K: usize = 1024;
const M: usize = 1024 * 1024;

fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// Every preset, in the order `--list-presets` shows them.
pub(crate) fn all() -> Vec<Preset> {
    vec![
        quick(),
        pa02(),
        zerocopy_paper(),
        message_sizes(),
        mixed(),
        file_paths(),
        udp_zerocopy(),
        copies(),
        copies_udp(),
    ]
}

/// The `copies-udp` preset.
fn copies_udp() -> Preset {
    use Strategy::*;
    Preset {
        name: "copies-udp",
        about: "the copies preset's send side: UDP on the black-hole route (root; no receiver), copy, msg-zerocopy, uring and uring-zc x 1400 B and 64000 B, the bytes the sender's kernel copied from user memory and after a zero-copy send (where fentry and fexit attach)",
        strategies: vec![Copy, MsgZerocopy, Uring, UringZc],
        sizes: vec![1400, 64_000],
        threads: vec![1],
        fields: 1,
        duration: ms(1000),
        warmup: ms(300),
        repeat: 3,
        allocs: vec![Alloc::Pool],
        proto: Protocol::Udp,
        count_copies: true,
        ..Default::default()
    }
}

/// The `copies` preset.
fn copies() -> Preset {
    use crate::workload::RecvMode;
    use Strategy::*;
    Preset {
        name: "copies",
        about: "the bytes the kernel copies, counted by BPF (root): copy, serialize, gather, msg-zerocopy, read-send, mmap-send, sendfile and splice x 4 KiB and 64 KiB (8 fields) x receivers that copy, discard and map (--recv zerocopy), beside the copy counts the PA02 and transferTo studies claim",
        strategies: vec![
            Copy, Serialize, Gather, MsgZerocopy, ReadSend, MmapSend, Sendfile, Splice,
        ],
        sizes: vec![4 * K, 64 * K],
        threads: vec![1],
        fields: 8,
        duration: ms(1000),
        warmup: ms(300),
        repeat: 3,
        allocs: vec![Alloc::Pool],
        recvs: vec![RecvMode::Copy, RecvMode::Discard, RecvMode::Zerocopy],
        count_copies: true,
        ..Default::default()
    }
}

/// The `udp-zerocopy` preset.
fn udp_zerocopy() -> Preset {
    use Strategy::*;
    Preset {
        name: "udp-zerocopy",
        about: "UDP on the black-hole route (root; the device's queue drops every frame, so zero-copy is never copied): copy, msg-zerocopy, uring, uring-zc, uring-zc from registered buffers x 1400 B..64000 B and GSO 64000/1400, beside the SEND_ZC and UDP GSO authors' figures",
        strategies: vec![Copy, MsgZerocopy, Uring, UringZc],
        sizes: vec![1400, 4 * K, 16 * K, 64_000],
        threads: vec![1],
        fields: 1,
        duration: ms(2000),
        warmup: ms(500),
        repeat: 5,
        allocs: vec![Alloc::Pool],
        mixes: vec![],
        proto: Protocol::Udp,
        fixed_also: vec![UringZc],
        gso: vec![(64_000, 1400)],
        msg_latency: false,
        burst: None,
        ..Default::default()
    }
}

/// The `quick` preset.
fn quick() -> Preset {
    use Strategy::*;
    Preset {
        name: "quick",
        about: "a cross-section of the presets below: memory and file paths from 256 B to 1 MiB, 1 connection, 8 rounds (about 3.5 minutes)",
        strategies: vec![
            Copy, MsgZerocopy, Uring, UringZc, Vmsplice, ReadSend, Sendfile, Splice,
        ],
        sizes: vec![256, 4 * K, 64 * K, M],
        threads: vec![1],
        fields: 1,
        duration: ms(500),
        warmup: ms(200),
        repeat: 8,
        allocs: vec![Alloc::Pool],
        mixes: vec![],
        ..Default::default()
    }
}

/// The `pa02` preset.
fn pa02() -> Preset {
    use Strategy::*;
    Preset {
        name: "pa02",
        about: "two-copy (serialize), one-copy (gather) and zero-copy (msg-zerocopy) messages of 8 fields, 256 B..16 KiB x 1..8 threads: 48 points, as in the PA02 study, each message timed from its send call to its last byte read",
        strategies: vec![Serialize, Gather, MsgZerocopy],
        sizes: vec![256, K, 4 * K, 16 * K],
        threads: vec![1, 2, 4, 8],
        fields: 8,
        duration: ms(2000),
        warmup: ms(500),
        repeat: 5,
        allocs: vec![Alloc::Pool],
        mixes: vec![],
        msg_latency: true,
        ..Default::default()
    }
}

/// The `zerocopy-paper` preset.
fn zerocopy_paper() -> Preset {
    use Strategy::*;
    Preset {
        name: "zerocopy-paper",
        about: "copy vs msg-zerocopy at 4K..1M with process and system CPU per byte and their ratio, laid out like the MSG_ZEROCOPY paper's table",
        strategies: vec![Copy, MsgZerocopy],
        sizes: vec![4 * K, 16 * K, 64 * K, 256 * K, M],
        threads: vec![1],
        fields: 1,
        duration: ms(3000),
        warmup: ms(500),
        repeat: 5,
        allocs: vec![Alloc::Pool],
        mixes: vec![],
        ..Default::default()
    }
}

/// The `message-sizes` preset.
fn message_sizes() -> Preset {
    use Strategy::*;
    Preset {
        name: "message-sizes",
        about: "64 B, 512 B, 1 KiB and 64 KiB across all memory paths and adaptive, one buffer per message, from pooled buffers and from buffers allocated and filled per message (the Net.ZMQ study's pooling vs zero-copy question), then 64 B and 64 KiB under burst load (1000 messages, 2 ms idle)",
        strategies: vec![
            Copy, Serialize, Gather, MsgZerocopy, Uring, UringZc, Vmsplice, Adaptive,
        ],
        sizes: vec![64, 512, K, 64 * K],
        threads: vec![1],
        fields: 1,
        duration: ms(2000),
        warmup: ms(500),
        repeat: 5,
        allocs: vec![Alloc::Pool, Alloc::Fresh],
        mixes: vec![],
        burst: Some(("1000/2ms", vec![64, 64 * K])),
        ..Default::default()
    }
}

/// The `mixed` preset.
fn mixed() -> Preset {
    use Strategy::*;
    Preset {
        name: "mixed",
        about: "message sizes drawn from a mix, the same sequence for every path (88:70,4K:20,1M:10 and 256:50,4K:30,64K:20 drawn per message; 4K:90,64K:10 in bursts of 32 and of 1024; 64K:16,1M:1, equal bytes of each size, in bursts of 256): adaptive against each fixed memory path",
        strategies: vec![Copy, MsgZerocopy, Uring, UringZc, Adaptive],
        sizes: vec![],
        threads: vec![1],
        fields: 1,
        duration: ms(2000),
        warmup: ms(500),
        repeat: 8,
        allocs: vec![Alloc::Pool],
        mixes: vec![
            "88:70,4K:20,1M:10",
            "256:50,4K:30,64K:20",
            "4K:90,64K:10/32",
            "4K:90,64K:10/1024",
            "64K:16,1M:1/256",
        ],
        ..Default::default()
    }
}

/// The `file-paths` preset.
fn file_paths() -> Preset {
    use Strategy::*;
    Preset {
        name: "file-paths",
        about: "read-send, mmap-send, sendfile and splice for 64 KiB..16 MiB chunks of a warm file (the sendfile file-server study)",
        strategies: vec![ReadSend, MmapSend, Sendfile, Splice],
        sizes: vec![64 * K, 256 * K, M, 4 * M, 16 * M],
        threads: vec![1],
        fields: 1,
        duration: ms(2000),
        warmup: ms(500),
        repeat: 5,
        allocs: vec![Alloc::Pool],
        mixes: vec![],
        ..Default::default()
    }
}

/// Looks a row sweep's preset up by name.
pub(crate) fn find(name: &str) -> Result<Preset, String> {
    all()
        .into_iter()
        .find(|p| p.name == name)
        .ok_or_else(|| unknown(name))
}

/// Which study a preset runs.
#[derive(Debug, Clone)]
pub enum Study {
    /// Rows of stream or rr points ([`crate::study::rows`]).
    Rows(Box<Preset>),
    /// The server study ([`crate::study::http`]).
    Http,
    /// The file-transfer study ([`crate::study::transfer`]).
    Transfer,
}

impl Study {
    /// The study's name: its folder under `study/` (`rows`, `http`, `transfer`).
    pub fn name(&self) -> &'static str {
        match self {
            Study::Rows(_) => "rows",
            Study::Http => "http",
            Study::Transfer => "transfer",
        }
    }
}

/// One line of the preset table.
#[derive(Debug, Clone)]
pub struct Entry {
    /// `--preset NAME`.
    pub name: &'static str,
    /// What it runs, in a line.
    pub about: &'static str,
    /// Points in its plan (with the study's defaults).
    pub points: usize,
    /// The study.
    pub study: Study,
}

/// Every preset of every study, in the order `--list-presets` shows them.
pub fn table() -> Vec<Entry> {
    let mut t: Vec<Entry> = all()
        .into_iter()
        .map(|p| Entry {
            name: p.name,
            about: p.about,
            points: crate::study::rows::points(&p).len(),
            study: Study::Rows(Box::new(p)),
        })
        .collect();
    t.push(Entry {
        name: crate::study::http::PRESET,
        about: crate::study::http::ABOUT,
        points: crate::study::http::preset_points(),
        study: Study::Http,
    });
    t.push(Entry {
        name: crate::study::transfer::PRESET,
        about: crate::study::transfer::ABOUT,
        points: crate::study::transfer::preset_points(),
        study: Study::Transfer,
    });
    t
}

/// Looks any preset up by name.
pub fn lookup(name: &str) -> Result<Entry, String> {
    table()
        .into_iter()
        .find(|e| e.name == name)
        .ok_or_else(|| unknown(name))
}

/// The error for a name no preset has: every preset's name.
fn unknown(name: &str) -> String {
    format!(
        "unknown preset `{name}`; the presets are: {}",
        table()
            .iter()
            .map(|e| e.name)
            .collect::<Vec<_>>()
            .join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pa02_has_48_points() {
        let p = find("pa02").unwrap();
        assert_eq!(p.strategies.len() * p.sizes.len() * p.threads.len(), 48);
    }

    #[test]
    fn only_pa02_and_copies_send_several_fields() {
        for p in all() {
            let want = if ["pa02", "copies"].contains(&p.name) {
                8
            } else {
                1
            };
            assert_eq!(p.fields, want, "{}", p.name);
        }
    }

    #[test]
    fn every_mix_of_a_preset_parses() {
        for p in all() {
            for m in &p.mixes {
                crate::traffic::mix::SizeMix::parse(m, 1 << 30).unwrap();
            }
        }
        assert_eq!(find("mixed").unwrap().mixes.len(), 5);
    }

    #[test]
    fn unknown_preset_lists_the_names() {
        let e = find("nope").unwrap_err();
        assert!(e.contains("quick") && e.contains("file-paths"), "{e}");
        assert!(
            e.contains("http-server") && e.contains("file-transfer"),
            "{e}"
        );
    }

    #[test]
    fn the_table_lists_every_study_with_its_planned_points() {
        let t = table();
        assert_eq!(t.len(), all().len() + 2);
        let http = lookup("http-server").unwrap();
        assert!(matches!(http.study, Study::Http));
        assert_eq!(http.points, 4 * 3 * 4);
        let transfer = lookup("file-transfer").unwrap();
        assert_eq!(transfer.points, 8 * 2 * 7);
        assert_eq!(lookup("pa02").unwrap().points, 48);
        // 4 paths x 4 sizes, uring-zc from registered buffers at each size, and the 5 at GSO.
        assert_eq!(lookup("udp-zerocopy").unwrap().points, 16 + 4 + 5);
    }
}
