//! The host's resource limits a run must fit in: open files (`RLIMIT_NOFILE`) and memory for
//! the message buffers. Errors say what is short in the lab's terms; the command line adds
//! which flag changes it.

use rustix::process::{getrlimit, setrlimit, Resource};

/// A run needs more open files than the hard limit allows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TooFewFiles {
    /// Open files the run needs.
    pub(crate) need: u64,
    /// The hard limit (`ulimit -Hn`).
    pub(crate) hard_limit: u64,
}

impl std::fmt::Display for TooFewFiles {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "this run needs {} open files and the hard limit (ulimit -Hn) is {}: raise it, or use fewer connections",
            self.need, self.hard_limit
        )
    }
}

impl std::error::Error for TooFewFiles {}

/// Raises the soft limit on open files to at least `need`, up to the hard limit, as wrk and
/// nginx do; an error when the hard limit is lower.
pub fn raise_nofile(need: usize) -> anyhow::Result<()> {
    let mut lim = getrlimit(Resource::Nofile);
    let need = need as u64;
    if lim.current.is_none_or(|c| c >= need) {
        return Ok(());
    }
    if let Some(hard_limit) = lim.maximum.filter(|m| *m < need) {
        return Err(TooFewFiles { need, hard_limit }.into());
    }
    lim.current = Some(need);
    setrlimit(Resource::Nofile, lim)
        .map_err(std::io::Error::from)
        .map_err(|e| anyhow::anyhow!("setrlimit(RLIMIT_NOFILE): {e}"))
}

/// Raises the soft open-files limit towards `want`, as far as the hard limit allows; returns
/// the limit now in force (a server then caps its connections to fit).
pub fn raise_nofile_upto(want: usize) -> u64 {
    let mut lim = getrlimit(Resource::Nofile);
    let want = want as u64;
    let target = lim.maximum.map_or(want, |m| m.min(want));
    if lim.current.is_some_and(|c| c < target) {
        lim.current = Some(target);
        let _ = setrlimit(Resource::Nofile, lim);
    }
    getrlimit(Resource::Nofile).current.unwrap_or(u64::MAX)
}

/// The message buffers of a run do not fit in the memory available.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TooLittleMemory {
    /// The largest message, bytes.
    pub message_bytes: usize,
    /// Connections.
    pub connections: usize,
    /// Bytes the buffers need.
    pub need_bytes: u128,
    /// `MemAvailable`, bytes.
    pub available_bytes: u64,
}

/// Bytes of buffers a run of `connections` connections of `message` byte messages holds: per
/// connection, a sender keeps up to `depth` + 2 messages (plus up to 8 MiB of zero-copy sends
/// in flight) and the receiver one read buffer of at most 1 MiB.
pub fn buffer_bytes(message: usize, connections: usize, depth: u32) -> u128 {
    let size = message as u128;
    connections as u128 * (size * (u128::from(depth) + 2) + size.min(1 << 20) + (8 << 20))
}

/// Checks that [`buffer_bytes`] fits in the memory available now; passes when `/proc/meminfo`
/// cannot be read.
pub fn check_memory(message: usize, connections: usize, depth: u32) -> Result<(), TooLittleMemory> {
    let need_bytes = buffer_bytes(message, connections, depth);
    match mem_available() {
        Some(available_bytes) if need_bytes > u128::from(available_bytes) => Err(TooLittleMemory {
            message_bytes: message,
            connections,
            need_bytes,
            available_bytes,
        }),
        _ => Ok(()),
    }
}

/// `MemAvailable` from `/proc/meminfo`, bytes.
fn mem_available() -> Option<u64> {
    let m = std::fs::read_to_string("/proc/meminfo").ok()?;
    let line = m.lines().find(|l| l.starts_with("MemAvailable:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib.saturating_mul(1024))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buffers_grow_with_depth_and_connections() {
        let one = buffer_bytes(64 << 10, 1, 8);
        assert_eq!(one, (64 << 10) * 10 + (64 << 10) + (8 << 20));
        assert_eq!(buffer_bytes(64 << 10, 4, 8), 4 * one);
        assert!(check_memory(1 << 40, 1 << 20, 64).is_err());
        assert!(check_memory(64, 1, 1).is_ok());
    }
}
