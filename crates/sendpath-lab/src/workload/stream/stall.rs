//! One vocabulary for a stream that stopped moving, whatever the path: what was measured (a
//! window that moved no byte, a send that made no progress until its timeout, senders still
//! sending after the window), why, as far as TCP's own counters tell it, and what the run did.

use super::{Ended, Shared, StreamPoint, Window};
use crate::cancel::Cancel;
use crate::window::{Repeat, TcpWindow};
use std::time::{Duration, Instant};

/// How a repeat's senders stopped making progress.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Stall {
    /// The window's last this long moved no byte.
    Window(Duration),
    /// A send made no progress for this long (its send timeout): it was abandoned.
    Timeout(Duration),
    /// The senders made no progress for this long after the window: their connections were
    /// shut down.
    AfterWindow(Duration),
}

/// How often the window samples the bytes moved, to see a stall inside it.
const PROGRESS_SAMPLE: Duration = Duration::from_millis(100);

/// Sleeps out the window (until `pt.duration`, every sender finished, or Ctrl-C), sampling
/// the bytes moved; whether it was not cancelled, and how long its end went without progress.
pub(super) fn sleep_window(
    pt: &StreamPoint,
    shared: &Shared,
    ours: bool,
    cancel: &Cancel,
) -> (bool, Duration) {
    let t0 = Instant::now();
    let end = t0 + pt.duration;
    let all_done = || shared.finished.count() == pt.threads;
    let (mut last, mut moved_at) = (shared.bytes_now(ours), t0);
    loop {
        let now = Instant::now();
        if now >= end || all_done() {
            return (true, now - moved_at);
        }
        if !cancel.sleep_unless((end - now).min(PROGRESS_SAMPLE), all_done) {
            return (false, Duration::ZERO);
        }
        let b = shared.bytes_now(ours);
        if b != last {
            (last, moved_at) = (b, Instant::now());
        }
    }
}

/// Why a repeat ended before every byte arrived, told alike for every path: a window that
/// moved no byte first (what the window measured), then a sender that stalled after it, then
/// receivers whose reads were ended.
pub(super) fn cut_short(
    pt: &StreamPoint,
    w: &Window,
    ended: &Ended,
    repeat: &Repeat,
) -> Option<String> {
    let stall = in_window(pt.duration, w.bytes, w.idle_tail).or(ended.stall);
    match stall {
        Some(s) => Some(told(s, repeat.tcp.as_ref())),
        None => ended.drained.clone(),
    }
}

/// A stall inside a window of `window` that moved `moved` bytes, its end `idle_tail` without a
/// byte moving: none moved, or none in its last half (a receiver that stopped once the socket
/// buffers filled); told to the tenth of a second.
pub(crate) fn in_window(window: Duration, moved: u64, idle_tail: Duration) -> Option<Stall> {
    let idle = if moved == 0 { window } else { idle_tail };
    (idle * 2 >= window && !idle.is_zero())
        .then(|| Stall::Window(Duration::from_millis(idle.as_millis() as u64 / 100 * 100)))
}

/// What the window's TCP counters say of why bytes stopped, as far as they tell it: a receiver
/// that advertises a window of 0 stopped reading; one whose window is open while the senders
/// had bytes to send sits behind a link too slow (its window may still be full of bytes in
/// flight: `rwnd_limited` alone does not tell the two apart).
fn cause(tcp: Option<&TcpWindow>) -> &'static str {
    match tcp.map(|t| (t.zero_window_connections, t.busy_us)) {
        Some((Some(n), _)) if n > 0 => {
            "the receiver stopped taking bytes (it advertised a TCP receive window of 0: tcpi_snd_wnd in TCP_INFO)"
        }
        Some((Some(0), busy)) if busy > 0 => {
            "the link carries less than one message in the window (the senders had bytes to send and the receiver's TCP window was open)"
        }
        _ => "the receiver stopped taking bytes, or the link carries less than one message in the window",
    }
}

/// The one sentence every path's stall is told in: "no progress for D: why; what the run did".
/// `tcp` is the window's TCP counters, when they were read.
pub(crate) fn told(stall: Stall, tcp: Option<&TcpWindow>) -> String {
    let (d, then) = match stall {
        Stall::Window(d) => (d, "the window's throughput is not a measure of the path"),
        Stall::Timeout(d) => (d, "the send was abandoned at its timeout"),
        Stall::AfterWindow(d) => (
            d,
            "the senders were still sending after the window, and their connections were shut down",
        ),
    };
    format!("no progress for {d:?}: {}; {then}", cause(tcp))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tcp(busy_ms: u64, zero_window: Option<u64>) -> TcpWindow {
        TcpWindow {
            busy_us: busy_ms * 1000,
            rwnd_limited_us: busy_ms * 1000,
            zero_window_connections: zero_window,
            ..TcpWindow::default()
        }
    }

    #[test]
    fn a_zero_receive_window_is_told_as_a_receiver_that_stopped_reading() {
        let w = told(
            Stall::Window(Duration::from_secs(1)),
            Some(&tcp(1000, Some(1))),
        );
        assert!(
            w.starts_with("no progress for 1s: the receiver stopped taking bytes (it advertised"),
            "{w}"
        );
        assert!(
            w.ends_with("the window's throughput is not a measure of the path"),
            "{w}"
        );
    }

    #[test]
    fn a_window_is_stalled_when_nothing_moved_or_its_last_half_moved_nothing() {
        let s = Duration::from_secs;
        let ms = Duration::from_millis;
        assert_eq!(in_window(s(1), 0, ms(10)), Some(Stall::Window(s(1))));
        // Bytes at first (the socket buffers filling), then none for most of the window.
        assert_eq!(
            in_window(s(10), 4 << 20, ms(9_350)),
            Some(Stall::Window(ms(9_300)))
        );
        assert_eq!(in_window(s(10), 4 << 20, s(5)), Some(Stall::Window(s(5))));
        // Moving to the end, or a pause under half the window: no stall.
        assert_eq!(in_window(s(10), 4 << 20, ms(100)), None);
        assert_eq!(in_window(s(10), 4 << 20, ms(4_900)), None);
        assert_eq!(in_window(Duration::ZERO, 0, Duration::ZERO), None);
    }

    /// A window held back by the receiver's window (rwnd_limited) whose receiver still
    /// advertises room: bytes in flight on a slow link, not a receiver that stopped reading.
    #[test]
    fn an_open_window_with_bytes_to_send_is_told_as_a_slow_link() {
        let w = told(
            Stall::Timeout(Duration::from_secs(3)),
            Some(&tcp(1000, Some(0))),
        );
        assert!(
            w.contains(": the link carries less than one message"),
            "{w}"
        );
        assert!(!w.contains("receiver stopped"), "{w}");
        assert!(w.ends_with("abandoned at its timeout"), "{w}");
    }

    #[test]
    fn without_the_receive_window_both_causes_are_named() {
        for t in [None, Some(tcp(1000, None)), Some(tcp(0, Some(0)))] {
            let w = told(Stall::AfterWindow(Duration::from_secs(4)), t.as_ref());
            assert!(
                w.contains("stopped taking bytes, or the link carries"),
                "{w}"
            );
            assert!(w.contains("shut down"), "{w}");
        }
    }

    #[test]
    fn every_stall_is_told_in_one_form() {
        let t = tcp(500, Some(2));
        for s in [
            Stall::Window(Duration::from_secs(1)),
            Stall::Timeout(Duration::from_secs(1)),
            Stall::AfterWindow(Duration::from_secs(1)),
        ] {
            let w = told(s, Some(&t));
            assert!(
                w.starts_with("no progress for 1s: the receiver stopped taking bytes ("),
                "{w}"
            );
        }
    }
}
