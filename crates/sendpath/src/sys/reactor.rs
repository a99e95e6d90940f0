//! Registering a descriptor with the tokio reactor (`epoll_ctl(EPOLL_CTL_ADD)` on the
//! runtime's epoll), for the async sender.

use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};
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

/// A deadline the reactor wakes a task at, without tokio's timer: a timerfd
/// (`CLOCK_MONOTONIC`) registered with the runtime's reactor, so the async sender's `close`
/// works on a runtime built with I/O alone (`enable_io`, no `enable_time`), where
/// `tokio::time` would panic. The timer is made only when a wait is pending: a `close` with
/// nothing left to wait for makes no system call for it.
pub(crate) struct Deadline {
    at: Instant,
    timer: Option<AsyncFd<std::os::fd::OwnedFd>>,
}

impl Deadline {
    /// `after` from now.
    pub(crate) fn after(after: Duration) -> Deadline {
        let now = Instant::now();
        // Past what an `Instant` holds: a deadline that never comes, in practice.
        let far = Duration::from_secs(100 * 365 * 86_400);
        let at = now.checked_add(after).unwrap_or(now + far);
        Deadline { at, timer: None }
    }

    /// What `fut` gives, or `None` once the deadline has passed (at once on every call after
    /// it has); an error where the timer cannot be made (no runtime on this thread, or the
    /// kernel refuses a timerfd).
    pub(crate) async fn within<F: std::future::Future>(
        &mut self,
        fut: F,
    ) -> io::Result<Option<F::Output>> {
        use std::task::Poll;
        let mut fut = std::pin::pin!(fut);
        std::future::poll_fn(|cx| {
            if let Poll::Ready(v) = fut.as_mut().poll(cx) {
                return Poll::Ready(Ok(Some(v)));
            }
            if self.timer.is_none() {
                let left = self.at.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return Poll::Ready(Ok(None));
                }
                match timer(left) {
                    Ok(t) => self.timer = Some(t),
                    Err(e) => return Poll::Ready(Err(e)),
                }
            }
            // Readable: the timer fired. An error: the reactor is gone, and nothing will wake
            // this task again; either way the time is up.
            match self.timer.as_ref().map(|t| t.poll_read_ready(cx)) {
                Some(Poll::Pending) => Poll::Pending,
                _ => Poll::Ready(Ok(None)),
            }
        })
        .await
    }
}

/// A timerfd that fires once, `after` (more than zero) from now, in the reactor.
fn timer(after: Duration) -> io::Result<AsyncFd<std::os::fd::OwnedFd>> {
    use rustix::time::{Itimerspec, TimerfdClockId, TimerfdFlags, TimerfdTimerFlags, Timespec};
    let flags = TimerfdFlags::NONBLOCK | TimerfdFlags::CLOEXEC;
    let fd = rustix::time::timerfd_create(TimerfdClockId::Monotonic, flags)?;
    let at = Itimerspec {
        it_interval: Timespec {
            tv_sec: 0,
            tv_nsec: 0,
        },
        it_value: Timespec {
            tv_sec: after.as_secs().min(i64::MAX as u64) as _,
            tv_nsec: after.subsec_nanos() as _,
        },
    };
    rustix::time::timerfd_settime(&fd, TimerfdTimerFlags::empty(), &at)?;
    register(fd, Interest::READABLE).map_err(|(e, _)| e)
}

#[cfg(test)]
mod tests {
    use super::Deadline;
    use std::time::{Duration, Instant};

    /// A runtime with I/O and no timer, where `tokio::time` panics.
    fn io_only() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_io()
            .build()
            .unwrap()
    }

    #[test]
    fn a_deadline_ends_a_wait_on_a_runtime_without_a_timer() {
        io_only().block_on(async {
            let t0 = Instant::now();
            let mut d = Deadline::after(Duration::from_millis(30));
            let never = std::future::pending::<()>;
            assert_eq!(d.within(never()).await.unwrap(), None);
            let waited = t0.elapsed();
            assert!(waited >= Duration::from_millis(30), "{waited:?}");
            // Passed: at once from now on, and a ready future still gives its value first.
            assert_eq!(d.within(never()).await.unwrap(), None);
            assert_eq!(d.within(std::future::ready(7)).await.unwrap(), Some(7));
        });
    }

    #[test]
    fn a_future_ready_before_its_deadline_gives_its_value_and_makes_no_timer() {
        io_only().block_on(async {
            let mut d = Deadline::after(Duration::from_secs(3600));
            assert_eq!(d.within(async { 5 }).await.unwrap(), Some(5));
            assert!(d.timer.is_none(), "a timer made for a wait that never was");
            // A zero deadline is due at once; so is one past what an `Instant` holds, never.
            let mut now = Deadline::after(Duration::ZERO);
            let never = std::future::pending::<()>;
            assert_eq!(now.within(never()).await.unwrap(), None);
            let mut far = Deadline::after(Duration::MAX);
            assert_eq!(far.within(async { 1 }).await.unwrap(), Some(1));
        });
    }
}
