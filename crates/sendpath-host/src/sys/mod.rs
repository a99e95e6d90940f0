//! The only place in the crate with `unsafe`: thin wrappers over the system calls the
//! measuring tools use. Each wrapper's doc names the call it makes and its man page; each
//! `unsafe` block says why it holds.

pub(crate) mod alloc;
pub(crate) mod ethtool;
pub(crate) mod file;
pub(crate) mod host;
pub(crate) mod perf;
pub(crate) mod socket;
pub(crate) mod zerocopy_rx;

use std::io;

/// Turns a `-1` return into the thread's `errno` as an `io::Error`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}
