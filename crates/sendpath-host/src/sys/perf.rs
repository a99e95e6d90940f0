//! Performance counters through `perf_event_open`: hardware events for the process, and the
//! system calls one thread makes (the `raw_syscalls:sys_enter` tracepoint).

use std::fs::File;
use std::io::{self, Read};
use std::os::fd::{FromRawFd, OwnedFd};

/// The hardware events sendpath reads.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HwEvent {
    /// `PERF_COUNT_HW_CPU_CYCLES`.
    Cycles,
    /// `PERF_COUNT_HW_INSTRUCTIONS`.
    Instructions,
    /// `PERF_COUNT_HW_CACHE_MISSES` (last-level cache misses on most CPUs).
    LlcMisses,
}

/// The first 64 bytes of `struct perf_event_attr` (`PERF_ATTR_SIZE_VER0`), which is all a
/// counting event needs; the kernel accepts this size from any version. Declared here because
/// the `libc` crate does not carry the type.
#[repr(C)]
#[derive(Default)]
struct PerfEventAttr {
    type_: u32,
    size: u32,
    config: u64,
    sample_period: u64,
    sample_type: u64,
    read_format: u64,
    /// Bit field: disabled (0), inherit (1), pinned (2), exclusive (3), exclude_user (4),
    /// exclude_kernel (5), exclude_hv (6), ...
    flags: u64,
    wakeup_events: u32,
    bp_type: u32,
    config1: u64,
}

const PERF_TYPE_HARDWARE: u32 = 0;
const PERF_TYPE_TRACEPOINT: u32 = 2;
const PERF_FLAG_FD_CLOEXEC: libc::c_ulong = 1 << 3;
const ATTR_FLAG_INHERIT: u64 = 1 << 1;
const ATTR_FLAG_EXCLUDE_HV: u64 = 1 << 6;

/// An open counter; read it with [`PerfCounter::read`].
pub struct PerfCounter {
    file: File,
}

impl PerfCounter {
    /// `perf_event_open(&attr, pid = 0, cpu = -1, group = -1, PERF_FLAG_FD_CLOEXEC)` for a
    /// `PERF_TYPE_HARDWARE` event counting this process and the threads it creates afterwards
    /// (`inherit`). Fails with ENOENT or EOPNOTSUPP where the CPU (or the hypervisor) exposes no
    /// PMU, and with EACCES when `perf_event_paranoid` forbids it. See perf_event_open(2).
    pub fn open(event: HwEvent) -> io::Result<PerfCounter> {
        // PERF_COUNT_HW_CPU_CYCLES, _INSTRUCTIONS, _CACHE_MISSES from <linux/perf_event.h>.
        let config = match event {
            HwEvent::Cycles => 0,
            HwEvent::Instructions => 1,
            HwEvent::LlcMisses => 3,
        };
        let attr = PerfEventAttr {
            type_: PERF_TYPE_HARDWARE,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config,
            flags: ATTR_FLAG_INHERIT | ATTR_FLAG_EXCLUDE_HV,
            ..Default::default()
        };
        Self::open_attr(&attr, 0)
    }

    /// Counts the system calls the calling thread makes from now on (the tracepoint
    /// `raw_syscalls:sys_enter`, `pid = 0, cpu = -1`, not inherited): io_uring's kernel
    /// workers and other threads are not counted. Needs tracefs (its id file) and a
    /// `perf_event_paranoid` that lets this user trace itself (root, or -1).
    ///
    /// While any such counter is open, the kernel runs the tracepoint on every system call
    /// of every thread on the host, which makes each a little slower (measure before
    /// comparing speeds taken with and without it).
    pub fn syscalls_of_this_thread() -> io::Result<PerfCounter> {
        Self::syscalls_of_thread(0)
    }

    /// Counts the system calls thread `tid` makes from now on (`pid = tid`), as
    /// [`PerfCounter::syscalls_of_this_thread`] does for the caller; `tid` 0 is the caller.
    pub fn syscalls_of_thread(tid: i32) -> io::Result<PerfCounter> {
        let id = ["/sys/kernel/tracing", "/sys/kernel/debug/tracing"]
            .iter()
            .find_map(|t| {
                std::fs::read_to_string(format!("{t}/events/raw_syscalls/sys_enter/id")).ok()
            })
            .ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::NotFound,
                    "no tracefs: raw_syscalls/sys_enter/id is in neither /sys/kernel/tracing nor /sys/kernel/debug/tracing",
                )
            })?;
        let config = id.trim().parse::<u64>().map_err(io::Error::other)?;
        let attr = PerfEventAttr {
            type_: PERF_TYPE_TRACEPOINT,
            size: std::mem::size_of::<PerfEventAttr>() as u32,
            config,
            flags: ATTR_FLAG_EXCLUDE_HV,
            ..Default::default()
        };
        Self::open_attr(&attr, tid)
    }

    fn open_attr(attr: &PerfEventAttr, pid: libc::pid_t) -> io::Result<PerfCounter> {
        // SAFETY: `attr` is a live, fully initialised attr whose `size` field is its own size
        // (PERF_ATTR_SIZE_VER0); the kernel only reads it.
        let fd = unsafe {
            libc::syscall(
                libc::SYS_perf_event_open,
                attr as *const PerfEventAttr,
                pid,
                -1 as libc::c_int,
                -1 as libc::c_int,
                PERF_FLAG_FD_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: the syscall returned a new descriptor that this process owns.
        let owned = unsafe { OwnedFd::from_raw_fd(fd as i32) };
        Ok(PerfCounter {
            file: File::from(owned),
        })
    }

    /// `read(fd, &value, 8)`: the event count so far.
    pub fn read(&self) -> io::Result<u64> {
        let mut b = [0u8; 8];
        (&self.file).read_exact(&mut b)?;
        Ok(u64::from_ne_bytes(b))
    }
}

#[cfg(test)]
mod tests {
    use super::PerfCounter;

    #[test]
    fn a_thread_s_system_calls_are_counted() {
        let c = match PerfCounter::syscalls_of_this_thread() {
            Ok(c) => c,
            Err(e) => return crate::test_support::skip(&format!("no syscall counter: {e}")),
        };
        let a = c.read().unwrap();
        for _ in 0..100 {
            // SAFETY: getppid has no arguments and cannot fail.
            let _ = unsafe { libc::getppid() };
        }
        let b = c.read().unwrap();
        // 100 getppid and the read between them; nothing else runs on this thread.
        assert!((101..=110).contains(&(b - a)), "{a} -> {b}");
    }
}
