//! Threads, CPUs and namespaces, and the process's CPU time: `geteuid`, `sysconf`,
//! `getrusage`, `sched_setaffinity`, `setns`, `gettid`.

use std::io;

/// `geteuid()`. See geteuid(2).
pub fn euid() -> u32 {
    // SAFETY: always succeeds, no memory effects.
    unsafe { libc::geteuid() }
}

/// `sysconf(_SC_CLK_TCK)`: the unit of `/proc/stat` times, in ticks per second.
pub(crate) fn clock_ticks_per_sec() -> u64 {
    // SAFETY: no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if n > 0 {
        n as u64
    } else {
        100
    }
}

/// What `getrusage` reports, converted to plain numbers.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Rusage {
    /// User CPU time, nanoseconds.
    pub(crate) user_ns: u64,
    /// System CPU time, nanoseconds.
    pub(crate) system_ns: u64,
    /// Voluntary context switches.
    pub(crate) voluntary_csw: u64,
    /// Involuntary context switches.
    pub(crate) involuntary_csw: u64,
}

/// `getrusage(RUSAGE_SELF)` (all threads of the process) or `RUSAGE_THREAD`. See getrusage(2).
pub(crate) fn rusage(thread: bool) -> io::Result<Rusage> {
    // SAFETY: rusage is plain data; all-zero is valid.
    let mut r: libc::rusage = unsafe { std::mem::zeroed() };
    let who = if thread {
        libc::RUSAGE_THREAD
    } else {
        libc::RUSAGE_SELF
    };
    // SAFETY: `r` is a live rusage the kernel fills in.
    super::cvt(unsafe { libc::getrusage(who, &mut r) })?;
    let tv = |t: libc::timeval| t.tv_sec as u64 * 1_000_000_000 + t.tv_usec as u64 * 1000;
    Ok(Rusage {
        user_ns: tv(r.ru_utime),
        system_ns: tv(r.ru_stime),
        voluntary_csw: r.ru_nvcsw as u64,
        involuntary_csw: r.ru_nivcsw as u64,
    })
}

/// `sched_setaffinity(0, {cpu})`: pins the calling thread to one CPU. See sched_setaffinity(2).
/// A CPU number beyond `CPU_SETSIZE` is `EINVAL`.
pub fn pin_current_thread(cpu: usize) -> io::Result<()> {
    if cpu >= libc::CPU_SETSIZE as usize {
        return Err(io::Error::from_raw_os_error(libc::EINVAL));
    }
    // SAFETY: cpu_set_t is a plain bitmask; CPU_ZERO/CPU_SET only touch it.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        libc::CPU_ZERO(&mut set);
        libc::CPU_SET(cpu, &mut set);
        super::cvt(libc::sched_setaffinity(
            0,
            std::mem::size_of::<libc::cpu_set_t>(),
            &set,
        ))
        .map(drop)
    }
}

/// `setns(fd, CLONE_NEWNET)`: moves the calling thread into the network namespace that `ns`
/// (an open `/run/netns/NAME` or `/proc/PID/ns/net`) refers to. Sockets the thread creates
/// afterwards live there. See setns(2).
pub fn enter_netns(ns: std::os::fd::BorrowedFd<'_>) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: plain integer arguments; affects only the calling thread's namespace.
    super::cvt(unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) }).map(drop)
}

/// `gettid()`: the calling thread's id (its `/proc/self/task/TID` entry). See gettid(2).
pub fn gettid() -> i32 {
    // SAFETY: no arguments, no memory effects.
    unsafe { libc::gettid() }
}

/// `sched_getaffinity(0)`: the CPUs the calling thread may run on. See sched_getaffinity(2).
pub fn allowed_cpus() -> io::Result<Vec<usize>> {
    // SAFETY: cpu_set_t is a plain bitmask the kernel fills; CPU_ISSET only reads it, with an
    // index below CPU_SETSIZE.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        super::cvt(libc::sched_getaffinity(
            0,
            std::mem::size_of::<libc::cpu_set_t>(),
            &mut set,
        ))?;
        Ok((0..libc::CPU_SETSIZE as usize)
            .filter(|&c| libc::CPU_ISSET(c, &set))
            .collect())
    }
}
