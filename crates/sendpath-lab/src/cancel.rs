//! Cancellation: one token shared by everything a run starts. Ctrl-C (or an agent's stop
//! request) cancels it; every load loop checks it and stops at its next check, and the runner
//! writes the windows already measured.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A cancellation token; clones share one flag.
#[derive(Debug, Clone, Default)]
pub struct Cancel(Arc<AtomicBool>);

impl Cancel {
    /// A token not cancelled yet.
    pub fn new() -> Cancel {
        Cancel::default()
    }

    /// Cancels; returns whether it was already cancelled (a second Ctrl-C).
    pub fn cancel(&self) -> bool {
        self.0.swap(true, Ordering::Relaxed)
    }

    /// Whether the run was cancelled.
    pub fn is_cancelled(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    /// Sleeps up to `d`, waking early when cancelled or when `done()` holds. Returns false if
    /// cancelled.
    pub(crate) fn sleep_unless(&self, d: Duration, done: impl Fn() -> bool) -> bool {
        let end = Instant::now() + d;
        while Instant::now() < end && !done() {
            if self.is_cancelled() {
                return false;
            }
            std::thread::sleep((end - Instant::now()).min(Duration::from_millis(5)));
        }
        !self.is_cancelled()
    }

    /// Sleeps up to `d`, waking early when cancelled. Returns false if cancelled.
    pub(crate) fn sleep(&self, d: Duration) -> bool {
        self.sleep_unless(d, || false)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn clones_share_the_flag_and_sleep_wakes_early() {
        let c = Cancel::new();
        let d = c.clone();
        assert!(c.sleep(Duration::from_millis(1)));
        let t = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(20));
            d.cancel()
        });
        let start = Instant::now();
        assert!(!c.sleep(Duration::from_secs(10)));
        assert!(start.elapsed() < Duration::from_secs(5));
        assert!(!t.join().unwrap(), "first cancel");
        assert!(c.cancel(), "second cancel reports the first");
    }
}
