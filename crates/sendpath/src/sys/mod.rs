//! The only place in the crate with `unsafe`: thin wrappers over the system calls the send paths
//! use. Each wrapper's doc names the call it makes and its man page; each `unsafe` block says why
//! it holds. Everything above this module works with safe types (`BorrowedFd`, slices, owned
//! buffers) and `io::Result`. (The crate root allows `unsafe_code` for this module only.)

pub mod file;
pub mod host;
pub mod mem;
pub mod perf;
pub mod socket;
pub mod uring;

use std::io;

/// Turns a `-1` return into the thread's `errno` as an `io::Error`.
fn cvt(ret: libc::c_int) -> io::Result<libc::c_int> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret)
    }
}

/// Like [`cvt`] for calls that return `ssize_t`.
fn cvt_size(ret: libc::ssize_t) -> io::Result<usize> {
    if ret == -1 {
        Err(io::Error::last_os_error())
    } else {
        Ok(ret as usize)
    }
}
