//! The bytes the kernel copies between user memory and socket buffers, by thread, counted by
//! BPF programs in the kernel (`bpf/copies.bpf.c`, built by `build.rs`, loaded with aya).
//!
//! Three counters, each attached where the kernel lets it:
//! - **to user** (tracepoint `skb:skb_copy_datagram_iovec`): received data copied into user
//!   memory, by the thread that received it;
//! - **from user** (fexit on `_copy_from_iter` and `_copy_from_iter_nocache`): data copied
//!   from user memory, by the thread that sent it; it also counts whatever else the thread
//!   copies in (a write to a file), so watch threads that only send;
//! - **deferred** (fentry on `skb_copy_ubufs`): zero-copy buffers the kernel copied after the
//!   send (the COPIED flag of MSG_ZEROCOPY's notifications), host-wide, since the copy may
//!   run in softirq on any thread.
//!
//! Loading needs root (or `CAP_BPF` with `CAP_PERFMON`); fentry and fexit need a kernel that
//! allows BPF trampolines. [`CopyCounter::open`] attaches what it can and says why not for the
//! rest ([`Counter::unavailable`]).

use aya::maps::{HashMap, MapData};
use aya::programs::{FEntry, FExit, ProgramError, TracePoint};
use aya::{Btf, Ebpf};

/// The object `build.rs` built; empty when it could not (then `SENDPATH_BPF_UNBUILT` says
/// why).
static OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/copies.bpf.o"));

/// What one counter counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CopyKind {
    /// Received data copied into user memory.
    ToUser,
    /// Data copied from user memory (sends).
    FromUser,
    /// Zero-copy buffers copied after the send.
    Deferred,
}

/// One counter: where it hooks the kernel, and why it is not counting, if it is not.
#[derive(Debug, Clone)]
pub struct Counter {
    /// What it counts.
    pub kind: CopyKind,
    /// The kernel hooks it attaches to (`tracepoint skb:skb_copy_datagram_iovec`).
    pub hooks: &'static str,
    /// Why it did not attach; `None` when it counts.
    pub unavailable: Option<String>,
}

/// Bytes copied by one thread since it was watched, each direction `None` where its counter
/// did not attach (what was copied after a zero-copy send is host-wide:
/// [`CopyCounter::deferred`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Copied {
    /// Received data copied into user memory.
    pub to_user: Option<u64>,
    /// Data copied from user memory.
    pub from_user: Option<u64>,
}

/// The loaded programs and the map of watched threads.
pub struct CopyCounter {
    /// Holds the programs and their links: dropping it detaches them.
    _bpf: Ebpf,
    map: HashMap<MapData, u32, [u64; 3]>,
    counters: Vec<Counter>,
    watched: Vec<u32>,
}

/// The map key of the host-wide deferred count (no thread has id 0).
const ANY: u32 = 0;

impl CopyCounter {
    /// Loads the programs and attaches each it can; `Err` with what to do when none can be
    /// loaded (not built, not root).
    pub fn open() -> Result<CopyCounter, String> {
        if let Some(why) = option_env!("SENDPATH_BPF_UNBUILT") {
            return Err(why.to_string());
        }
        let mut bpf = Ebpf::load(OBJECT).map_err(|e| {
            format!("the BPF copy counter could not be loaded ({e}): it needs root, or CAP_BPF and CAP_PERFMON")
        })?;
        let map = bpf
            .take_map("COPIED")
            .ok_or("the BPF object has no COPIED map")?;
        let map = HashMap::try_from(map).map_err(|e| format!("the COPIED map: {e}"))?;
        let btf = Btf::from_sys_fs().map_err(|e| format!("no kernel BTF ({e})"));
        let counters = vec![
            Counter {
                kind: CopyKind::ToUser,
                hooks: "tracepoint skb:skb_copy_datagram_iovec",
                unavailable: tracepoint(
                    &mut bpf,
                    "copied_to_user",
                    "skb",
                    "skb_copy_datagram_iovec",
                )
                .err(),
            },
            Counter {
                kind: CopyKind::FromUser,
                hooks: "fexit _copy_from_iter, _copy_from_iter_nocache",
                unavailable: trampoline(
                    &mut bpf,
                    &btf,
                    false,
                    "copied_from_user",
                    "_copy_from_iter",
                )
                .and_then(|()| {
                    trampoline(
                        &mut bpf,
                        &btf,
                        false,
                        "copied_from_user_nocache",
                        "_copy_from_iter_nocache",
                    )
                })
                .err(),
            },
            Counter {
                kind: CopyKind::Deferred,
                hooks: "fentry skb_copy_ubufs",
                unavailable: trampoline(&mut bpf, &btf, true, "copied_deferred", "skb_copy_ubufs")
                    .err(),
            },
        ];
        if counters.iter().all(|c| c.unavailable.is_some()) {
            let why: Vec<String> = counters
                .iter()
                .map(|c| format!("{}: {}", c.hooks, c.unavailable.as_deref().unwrap_or("")))
                .collect();
            return Err(format!("no BPF copy counter attached ({})", why.join("; ")));
        }
        let mut c = CopyCounter {
            _bpf: bpf,
            map,
            counters,
            watched: Vec::new(),
        };
        c.map
            .insert(ANY, [0; 3], 0)
            .map_err(|e| format!("the COPIED map: {e}"))?;
        Ok(c)
    }

    /// Each counter and whether it attached.
    pub fn counters(&self) -> &[Counter] {
        &self.counters
    }

    /// Why `kind` is not counted, or `None` when it is.
    pub fn unavailable(&self, kind: CopyKind) -> Option<&str> {
        self.counters
            .iter()
            .find(|c| c.kind == kind)
            .and_then(|c| c.unavailable.as_deref())
    }

    /// Counts exactly the threads `tids` from now on: threads not watched before start at 0,
    /// threads no longer listed are dropped. Up to 1023 threads.
    pub fn watch(&mut self, tids: &[i32]) -> Result<(), String> {
        let want: Vec<u32> = tids.iter().map(|&t| t as u32).collect();
        for &t in self.watched.iter().filter(|t| !want.contains(t)) {
            let _ = self.map.remove(&t);
        }
        for &t in want.iter().filter(|t| !self.watched.contains(t)) {
            self.map
                .insert(t, [0; 3], 0)
                .map_err(|e| format!("watching thread {t}: {e}"))?;
        }
        self.watched = want;
        Ok(())
    }

    /// What thread `tid` copied since it was watched; `None` when it is not watched.
    pub fn read(&self, tid: i32) -> Option<Copied> {
        let counts = |kind| self.unavailable(kind).is_none();
        self.map.get(&(tid as u32), 0).ok().map(|v| Copied {
            to_user: counts(CopyKind::ToUser).then_some(v[0]),
            from_user: counts(CopyKind::FromUser).then_some(v[1]),
        })
    }

    /// Zero-copy bytes the host's kernel copied after the send since the counter opened;
    /// `None` when that counter did not attach.
    pub fn deferred(&self) -> Option<u64> {
        if self.unavailable(CopyKind::Deferred).is_some() {
            return None;
        }
        self.map.get(&ANY, 0).ok().map(|v| v[2])
    }
}

/// Loads and attaches tracepoint program `prog` to `category:name`.
fn tracepoint(bpf: &mut Ebpf, prog: &str, category: &str, name: &str) -> Result<(), String> {
    let p: &mut TracePoint = program(bpf, prog)?;
    p.load().map_err(load_error)?;
    p.attach(category, name).map_err(load_error)?;
    Ok(())
}

/// Loads and attaches fentry (`entry`) or fexit program `prog` to kernel function `func`.
fn trampoline(
    bpf: &mut Ebpf,
    btf: &Result<Btf, String>,
    entry: bool,
    prog: &str,
    func: &str,
) -> Result<(), String> {
    let btf = btf.as_ref().map_err(Clone::clone)?;
    let why = |e: ProgramError| {
        let eperm = matches!(&e, ProgramError::LoadError { io_error, .. } if io_error.raw_os_error() == Some(libc::EPERM));
        let hint = if eperm {
            " (EPERM as root: a security policy, such as kernel lockdown, refuses tracing programs)"
        } else {
            ""
        };
        format!(
            "{func}: {}; fentry and fexit programs need a kernel that allows BPF trampolines{hint}",
            load_error(e)
        )
    };
    if entry {
        let p: &mut FEntry = program(bpf, prog)?;
        p.load(func, btf).map_err(why)?;
        p.attach().map_err(why)?;
    } else {
        let p: &mut FExit = program(bpf, prog)?;
        p.load(func, btf).map_err(why)?;
        p.attach().map_err(why)?;
    }
    Ok(())
}

fn program<'a, P>(bpf: &'a mut Ebpf, name: &str) -> Result<&'a mut P, String>
where
    &'a mut P: TryFrom<&'a mut aya::programs::Program, Error = ProgramError>,
{
    let p = bpf
        .program_mut(name)
        .ok_or_else(|| format!("the BPF object has no program {name}"))?;
    p.try_into().map_err(|e: ProgramError| e.to_string())
}

/// The kernel's answer, without the verifier's log (the system call's error says enough:
/// EPERM where the kernel refuses the program type, ENOENT where the function is missing).
fn load_error(e: ProgramError) -> String {
    match e {
        ProgramError::LoadError { io_error, .. } => {
            format!("the kernel refused the program: {io_error}")
        }
        ProgramError::SyscallError(s) => format!("{}: {}", s.call, s.io_error),
        e => e.to_string(),
    }
}
