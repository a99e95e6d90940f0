//! Registering a descriptor with the tokio reactor (`epoll_ctl(EPOLL_CTL_ADD)` on the
//! runtime's epoll), for the async sender.

use std::io;
use std::os::fd::AsRawFd;
use tokio::io::unix::AsyncFd;
use tokio::io::Interest;

/// A descriptor that stays open, and names the same file description, for as long as the
/// value lives: what the reactor may be given.
///
/// # Safety
///
/// `as_raw_fd` must return one open descriptor for the value's whole life, never closed or
/// replaced while the value exists.
pub(crate) unsafe trait StableFd: AsRawFd {}

// SAFETY: a `Socket` owns its `OwnedFd`, which is closed only when the `Socket` is dropped.
unsafe impl StableFd for crate::Socket {}

// SAFETY: an `OwnedFd` is open until it is dropped, and never changes.
unsafe impl StableFd for std::os::fd::OwnedFd {}

/// Registers `inner` with the current runtime's reactor for `interest`: an error (with
/// `inner` back) where there is no runtime on this thread or `epoll_ctl` fails. (A runtime
/// built without I/O panics here, as tokio's own sockets do.)
pub(crate) fn register<T: StableFd>(
    inner: T,
    interest: Interest,
) -> Result<AsyncFd<T>, (io::Error, T)> {
    if tokio::runtime::Handle::try_current().is_err() {
        return Err((io::Error::other("no tokio runtime on this thread"), inner));
    }
    // SAFETY: `T: StableFd` keeps its descriptor open and the same for its whole life, which
    // is the AsyncFd's (it owns `inner`).
    unsafe { AsyncFd::register_with_interest(inner, interest) }.map_err(|e| {
        let (inner, e) = e.into_parts();
        (e, inner)
    })
}
