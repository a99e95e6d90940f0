//! The only place in the crate with `unsafe`: thin wrappers over the system calls the send paths
//! use. Each wrapper's doc names the call it makes and its man page; each `unsafe` block says why
//! it holds. Everything above this module works with safe types (`BorrowedFd`, slices, owned
//! buffers) and `io::Result`. (The crate root allows `unsafe_code` for this module only.)

pub(crate) mod bufring;
pub(crate) mod file;
pub(crate) mod mem;
#[cfg(feature = "tokio")]
pub(crate) mod reactor;
pub(crate) mod socket;
pub(crate) mod uring;

#[cfg(test)]
mod netns_tests;

use std::io;

/// Flags of a send call (`MSG_*`, see send(2)): typed, so a receive flag or a raw integer
/// cannot be passed where a send flag belongs.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SendFlags(libc::c_int);

impl SendFlags {
    /// `MSG_NOSIGNAL`: a closed peer is `EPIPE`, not SIGPIPE.
    pub(crate) const NOSIGNAL: SendFlags = SendFlags(libc::MSG_NOSIGNAL);
    /// `MSG_DONTWAIT`: `EAGAIN` instead of waiting for socket space (the async sender's).
    #[cfg(feature = "tokio")]
    pub(crate) const DONTWAIT: SendFlags = SendFlags(libc::MSG_DONTWAIT);
    /// `MSG_ZEROCOPY`: completions on the error queue (needs `SO_ZEROCOPY`).
    pub(crate) const ZEROCOPY: SendFlags = SendFlags(libc::MSG_ZEROCOPY);

    fn bits(self) -> libc::c_int {
        self.0
    }

    /// The same flags as rustix's type (the `MSG_*` values are the kernel's either way).
    #[inline]
    fn rustix(self) -> rustix::net::SendFlags {
        rustix::net::SendFlags::from_bits_retain(self.0 as u32)
    }
}

impl std::ops::BitOr for SendFlags {
    type Output = SendFlags;
    fn bitor(self, o: SendFlags) -> SendFlags {
        SendFlags(self.0 | o.0)
    }
}

/// Flags of `splice`/`vmsplice` (`SPLICE_F_*`, see splice(2)).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct SpliceFlags(libc::c_uint);

impl SpliceFlags {
    /// `SPLICE_F_MOVE`: move pages rather than copy, where the kernel can.
    pub(crate) const MOVE: SpliceFlags = SpliceFlags(libc::SPLICE_F_MOVE);

    fn bits(self) -> libc::c_uint {
        self.0
    }
}

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
