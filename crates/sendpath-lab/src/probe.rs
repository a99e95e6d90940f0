//! What this host is, and what its kernel lets each path do, for `sendpath probe` and the
//! `environment` of every result file: the library's [`sendpath::probe`] (io_uring opcodes,
//! MSG_ZEROCOPY, whether a local receiver makes the kernel copy) with the host around it
//! (CPU, locked memory, hardware counters, interface offloads) and a prediction per path.

use sendpath::{IoUringProbe, MsgZerocopyProbe};
use sendpath_host::copies::{CopyCounter, CopyKind};
use sendpath_host::perf::{HwEvent, PerfCounter};
use serde::{Deserialize, Serialize};
use std::io;

/// Locked-memory limit that pinned zero-copy pages are charged against.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MemlockProbe {
    /// `RLIMIT_MEMLOCK` soft limit, bytes (null: unlimited).
    pub soft_bytes: Option<u64>,
    /// Hard limit, bytes (null: unlimited).
    pub hard_bytes: Option<u64>,
    /// This process has `CAP_IPC_LOCK` (root normally does), so pinned pages are not charged.
    pub exempt: bool,
}

/// Hardware performance counters.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct HwCountersProbe {
    /// cycles, instructions and LLC misses can all be opened.
    pub available: bool,
    /// Why not: the call and errno that failed.
    pub reason: Option<String>,
}

/// One plain-language prediction.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Prediction {
    /// The send path or topic (`msg-zerocopy`, `uring-zc`, `sendfile`, ...).
    pub path: String,
    /// What will happen, and the evidence.
    pub text: String,
}

/// Everything `sendpath probe` reports.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ProbeReport {
    /// `uname -r`.
    pub kernel_release: String,
    /// `model name` from `/proc/cpuinfo`.
    pub cpu_model: String,
    /// CPUs this process may run on.
    pub cpus: usize,
    /// `cpu MHz` of the first CPU (nominal clock, used only for labelled estimates).
    pub cpu_mhz: Option<f64>,
    /// io_uring.
    pub io_uring: IoUringProbe,
    /// MSG_ZEROCOPY.
    pub msg_zerocopy: MsgZerocopyProbe,
    /// `/proc/sys/net/core/optmem_max`: per-socket ancillary memory, which bounds outstanding
    /// MSG_ZEROCOPY notifications.
    pub optmem_max_bytes: Option<u64>,
    /// Locked memory.
    pub memlock: MemlockProbe,
    /// Hardware counters.
    pub hw_counters: HwCountersProbe,
    /// MTU of `lo`.
    pub loopback_mtu: Option<u32>,
    /// `/proc/sys/fs/pipe-max-size`.
    pub pipe_max_size_bytes: Option<u64>,
    /// What to expect from each path here.
    pub predictions: Vec<Prediction>,
    /// Every network interface's transmit offloads; empty in reports written before they
    /// were probed.
    #[serde(default)]
    pub offloads: Vec<Offloads>,
    /// The kernel copy counters `--metrics copies` would attach, each with why not where it
    /// cannot: filled by `sendpath probe` ([`copy_counters`], which loads them), empty in a
    /// run's environment (whose own `copy_counters` are the ones the run counted with).
    #[serde(default)]
    pub copy_counters: Vec<CopyCounterState>,
}

/// One of the kernel copy counters (`--metrics copies`) and whether it counted in this run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CopyCounterState {
    /// `receive` (into user memory), `send` (from user memory) or `deferred`.
    pub counts: String,
    /// The kernel hooks it attaches to.
    pub hooks: String,
    /// Why it did not attach here; null when it counted.
    pub unavailable: Option<String>,
}

impl CopyCounterState {
    /// The state of each of `c`'s counters.
    pub(crate) fn of(c: &CopyCounter) -> Vec<CopyCounterState> {
        c.counters()
            .iter()
            .map(|k| CopyCounterState {
                counts: match k.kind {
                    CopyKind::ToUser => "receive",
                    CopyKind::FromUser => "send",
                    CopyKind::Deferred => "deferred",
                }
                .into(),
                hooks: k.hooks.into(),
                unavailable: k.unavailable.clone(),
            })
            .collect()
    }
}

/// Loads the copy counters to see which attach (they detach again at once); when none can
/// load, one entry saying why. Not part of [`run`]: loading them takes tens of milliseconds,
/// which every run's start would pay for a list only `sendpath probe` shows.
pub fn copy_counters() -> Vec<CopyCounterState> {
    open_copy_counter().1
}

/// The copy counters and their states; when none can load, no counter and one state saying
/// why.
pub(crate) fn open_copy_counter() -> (Option<CopyCounter>, Vec<CopyCounterState>) {
    match CopyCounter::open() {
        Ok(c) => {
            let states = CopyCounterState::of(&c);
            (Some(c), states)
        }
        Err(why) => (
            None,
            vec![CopyCounterState {
                counts: "receive, send, deferred".into(),
                hooks: "BPF".into(),
                unavailable: Some(why),
            }],
        ),
    }
}

/// What a network interface offloads on transmit (as `ethtool -k` shows it), as far as copy
/// avoidance cares: MSG_ZEROCOPY and SEND_ZC pages reach the device uncopied only when it
/// takes scatter-gather lists and computes checksums itself; otherwise the stack copies them.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Offloads {
    /// The interface (`eth0`).
    pub interface: String,
    /// `tx-scatter-gather`.
    pub scatter_gather: bool,
    /// Any `tx-checksum-*` (IPv4, IPv6 or generic).
    pub checksum: bool,
    /// `tx-tcp-segmentation` (TSO).
    pub tcp_segmentation: bool,
    /// `tx-generic-segmentation` (GSO).
    pub generic_segmentation: bool,
    /// `tx-udp-segmentation` (USO, what `--gso` hands the device).
    pub udp_segmentation: bool,
    /// Why the features could not be read.
    pub error: Option<String>,
}

impl Offloads {
    /// Whether zero-copy pages can reach this device without a copy.
    pub fn zero_copy_possible(&self) -> bool {
        self.error.is_none() && self.scatter_gather && self.checksum
    }
}

/// Every interface in `/sys/class/net`, with its offloads.
fn probe_offloads() -> Vec<Offloads> {
    let mut names: Vec<String> = std::fs::read_dir("/sys/class/net")
        .map(|d| {
            d.filter_map(|e| e.ok()?.file_name().into_string().ok())
                .collect()
        })
        .unwrap_or_default();
    names.sort();
    names
        .into_iter()
        .map(|interface| match sendpath_host::net::features(&interface) {
            Ok(f) => {
                let on = |p: &dyn Fn(&str) -> bool| f.iter().any(|(n, a)| *a && p(n));
                Offloads {
                    scatter_gather: on(&|n| n == "tx-scatter-gather"),
                    checksum: on(&|n| n.starts_with("tx-checksum-")),
                    tcp_segmentation: on(&|n| n == "tx-tcp-segmentation"),
                    generic_segmentation: on(&|n| n == "tx-generic-segmentation"),
                    udp_segmentation: on(&|n| n == "tx-udp-segmentation"),
                    interface,
                    error: None,
                }
            }
            Err(e) => Offloads {
                interface,
                error: Some(e.to_string()),
                ..Offloads::default()
            },
        })
        .collect()
}

fn read_num<T: std::str::FromStr>(path: &str) -> Option<T> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

fn cpuinfo_field(text: &str, key: &str) -> Option<String> {
    text.lines()
        .find(|l| l.split(':').next().map(str::trim) == Some(key))
        .and_then(|l| l.split_once(':'))
        .map(|(_, v)| v.trim().to_string())
}

/// `CAP_IPC_LOCK` (bit 14) in the effective set, from `/proc/self/status`.
fn has_cap_ipc_lock() -> bool {
    let Ok(s) = std::fs::read_to_string("/proc/self/status") else {
        return sendpath_host::thread::euid() == 0;
    };
    s.lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|v| u64::from_str_radix(v.trim(), 16).ok())
        .is_some_and(|caps| caps & (1 << 14) != 0)
}

/// `uname -r`.
pub fn kernel_release() -> String {
    rustix::system::uname()
        .release()
        .to_string_lossy()
        .into_owned()
}

/// `getrlimit(RLIMIT_MEMLOCK)`: (soft, hard) in bytes, `None` meaning unlimited.
fn memlock_limit() -> (Option<u64>, Option<u64>) {
    let r = rustix::process::getrlimit(rustix::process::Resource::Memlock);
    (r.current, r.maximum)
}

/// The name of an errno, for messages (`ENOENT`), falling back to the number.
fn errno_name(e: &io::Error) -> String {
    let n = e.raw_os_error().unwrap_or(0);
    let name = match n {
        libc::ENOENT => "ENOENT",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::ENODEV => "ENODEV",
        _ => return format!("errno {n}"),
    };
    name.to_string()
}

fn probe_hw_counters() -> HwCountersProbe {
    for (ev, name) in [
        (HwEvent::Cycles, "PERF_COUNT_HW_CPU_CYCLES"),
        (HwEvent::Instructions, "PERF_COUNT_HW_INSTRUCTIONS"),
        (HwEvent::LlcMisses, "PERF_COUNT_HW_CACHE_MISSES"),
    ] {
        if let Err(e) = PerfCounter::open(ev) {
            let hint = match e.raw_os_error() {
                Some(libc::ENOENT) | Some(libc::EOPNOTSUPP) | Some(libc::ENODEV) => {
                    "no hardware PMU exposed (common in VMs)"
                }
                Some(libc::EACCES) | Some(libc::EPERM) => {
                    "not permitted: run as root or lower /proc/sys/kernel/perf_event_paranoid"
                }
                _ => "unavailable",
            };
            return HwCountersProbe {
                available: false,
                reason: Some(format!(
                    "perf_event_open({name}): {} ({}): {hint}",
                    e,
                    errno_name(&e)
                )),
            };
        }
    }
    HwCountersProbe {
        available: true,
        reason: None,
    }
}

fn predictions(r: &ProbeReport) -> Vec<Prediction> {
    let mut v = Vec::new();
    let mut add = |path: &str, text: String| {
        v.push(Prediction {
            path: path.into(),
            text,
        })
    };
    match (&r.msg_zerocopy.supported, r.msg_zerocopy.local_copied) {
        (true, Some(true)) => add(
            "msg-zerocopy",
            "MSG_ZEROCOPY to a local receiver: the kernel will copy (a test send here completed with SO_EE_CODE_ZEROCOPY_COPIED). Expect it slower than copy on loopback; true zero-copy needs a NIC and a remote receiver.".into(),
        ),
        (true, _) => add(
            "msg-zerocopy",
            "MSG_ZEROCOPY to a local receiver completed without the COPIED bit: sends can avoid the copy here.".into(),
        ),
        (false, _) => add(
            "msg-zerocopy",
            format!(
                "MSG_ZEROCOPY unavailable ({}): msg-zerocopy will send by copy and count `unsupported` fallbacks.",
                r.msg_zerocopy.error.as_deref().unwrap_or("unknown")
            ),
        ),
    }
    let u = &r.io_uring;
    let text = if !u.enabled {
        format!(
            "io_uring unavailable ({}): uring and uring-zc will run as copy.",
            u.error.as_deref().unwrap_or("unknown")
        )
    } else if !u.send_zc {
        "IORING_OP_SEND_ZC missing: uring-zc will run as uring.".into()
    } else if !u.send_zc_report_usage {
        "SEND_ZC works but cannot report copies (no IORING_SEND_ZC_REPORT_USAGE): the copied fraction will be unknown.".into()
    } else if u.send_zc_local_copied == Some(true) {
        "io_uring SEND_ZC to a local receiver: the kernel will copy (IORING_NOTIF_USAGE_ZC_COPIED set on a test send here).".into()
    } else {
        "io_uring SEND_ZC to a local receiver was not copied.".into()
    };
    add("uring-zc", text);
    add(
        "sendfile",
        "sendfile and splice: no send-side copy (page-cache pages are referenced); the receiver still copies once into its buffer.".into(),
    );
    add(
        "vmsplice",
        "vmsplice: no send-side copy, but sendpath maps fresh pages per message so none is rewritten before the receiver reads it; that cost is measured.".into(),
    );
    if !r.hw_counters.available {
        add(
            "hw-counters",
            "No hardware counters: CPU cost comes from /proc/stat and getrusage; cycles per byte are estimates from the nominal clock.".into(),
        );
    }
    if !r.memlock.exempt {
        add(
            "memlock",
            format!(
                "Not exempt from RLIMIT_MEMLOCK: pinned zero-copy pages count against {} per user; expect ENOBUFS fallbacks past it (run as root or raise `ulimit -l`).",
                r.memlock
                    .soft_bytes
                    .map_or("unlimited".to_string(), |b| format!("{} KiB", b / 1024))
            ),
        );
    }
    v
}

/// Checks everything, for `sendpath probe` and the `environment` of every result file.
pub fn run() -> ProbeReport {
    let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
    let (soft, hard) = memlock_limit();
    let caps = sendpath::probe();
    let mut r = ProbeReport {
        kernel_release: kernel_release(),
        cpu_model: cpuinfo_field(&cpuinfo, "model name").unwrap_or_else(|| "unknown".into()),
        cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
        cpu_mhz: cpuinfo_field(&cpuinfo, "cpu MHz").and_then(|s| s.parse().ok()),
        io_uring: caps.io_uring,
        msg_zerocopy: caps.msg_zerocopy,
        optmem_max_bytes: read_num("/proc/sys/net/core/optmem_max"),
        memlock: MemlockProbe {
            soft_bytes: soft,
            hard_bytes: hard,
            exempt: has_cap_ipc_lock(),
        },
        hw_counters: probe_hw_counters(),
        loopback_mtu: read_num("/sys/class/net/lo/mtu"),
        pipe_max_size_bytes: read_num("/proc/sys/fs/pipe-max-size"),
        predictions: Vec::new(),
        offloads: probe_offloads(),
        copy_counters: Vec::new(),
    };
    r.predictions = predictions(&r);
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpuinfo_fields_parse() {
        let t = "processor\t: 0\nmodel name\t: Test CPU @ 2.0GHz\ncpu MHz\t\t: 1999.9\n";
        assert_eq!(cpuinfo_field(t, "model name").unwrap(), "Test CPU @ 2.0GHz");
        assert_eq!(cpuinfo_field(t, "cpu MHz").unwrap(), "1999.9");
        assert!(cpuinfo_field(t, "flags").is_none());
    }

    #[test]
    fn predictions_follow_the_evidence() {
        let mut r = ProbeReport::default();
        r.msg_zerocopy.supported = true;
        r.msg_zerocopy.local_copied = Some(true);
        r.memlock.exempt = true;
        r.hw_counters.available = true;
        let p = predictions(&r);
        assert!(p[0].text.contains("the kernel will copy"));
        assert!(!p
            .iter()
            .any(|p| p.path == "memlock" || p.path == "hw-counters"));
        r.msg_zerocopy.supported = false;
        r.msg_zerocopy.error = Some("setsockopt(SO_ZEROCOPY): EOPNOTSUPP".into());
        r.memlock.exempt = false;
        let p = predictions(&r);
        assert!(p[0].text.contains("unavailable"));
        assert!(p.iter().any(|p| p.path == "memlock"));
    }
}
