//! TCP's own counters around a stream window, read from the senders' duplicates and the
//! receivers' shared sockets.

use crate::window::TcpWindow;
use std::net::TcpStream;
use std::os::fd::AsFd;
use std::sync::Arc;

/// Whether `n` more descriptors fit under the soft open-files limit, counting those open now.
pub(super) fn room_for_fds(n: usize) -> bool {
    let limit = rustix::process::getrlimit(rustix::process::Resource::Nofile).current;
    let open = std::fs::read_dir("/proc/self/fd").map_or(usize::MAX, |d| d.count());
    limit.is_none_or(|l| open.saturating_add(n) as u64 <= l)
}

/// TCP's counters summed over a run's connections: the senders' `TCP_INFO`, and the packets
/// the receivers' sockets dropped (when the receivers are ours).
#[derive(Debug, Clone, Copy)]
pub(super) struct TcpCounts {
    pub(super) senders: Option<sendpath_host::socket::TcpCounters>,
    drops: Option<u64>,
}

impl TcpCounts {
    /// Reads the senders' (`tx`) and receivers' (`rx`) sockets; a value is `None` when any
    /// socket could not be read.
    pub(super) fn read(tx: &[TcpStream], rx: &[Arc<TcpStream>], ours: bool) -> TcpCounts {
        let senders = tx
            .iter()
            .map(|s| sendpath_host::socket::tcp_counters(s.as_fd()).ok())
            .try_fold(
                sendpath_host::socket::TcpCounters {
                    zero_window: Some(0),
                    ..Default::default()
                },
                |a, c| {
                    let c = c?;
                    Some(sendpath_host::socket::TcpCounters {
                        retrans_segs: a.retrans_segs + c.retrans_segs,
                        busy_us: a.busy_us + c.busy_us,
                        rwnd_limited_us: a.rwnd_limited_us + c.rwnd_limited_us,
                        zero_window: a.zero_window.zip(c.zero_window).map(|(a, c)| a + c),
                    })
                },
            );
        let drops = if ours && !rx.is_empty() {
            rx.iter()
                .map(|s| {
                    sendpath_host::socket::socket_drops(s.as_fd())
                        .ok()
                        .map(u64::from)
                })
                .sum()
        } else {
            None
        };
        TcpCounts { senders, drops }
    }

    /// What changed since `before`, as results record it; `None` without sender counts.
    pub(super) fn since(self, before: TcpCounts) -> Option<TcpWindow> {
        let (a, b) = (self.senders?, before.senders?);
        let retrans_segs = a.retrans_segs.saturating_sub(b.retrans_segs);
        Some(TcpWindow {
            retrans_segs,
            receiver_drops: self
                .drops
                .zip(before.drops)
                .map(|(a, b)| a.saturating_sub(b)),
            connection_retrans_segs: retrans_segs,
            busy_us: a.busy_us.saturating_sub(b.busy_us),
            rwnd_limited_us: a.rwnd_limited_us.saturating_sub(b.rwnd_limited_us),
            // A state at the window's end, not a count over it.
            zero_window_connections: a.zero_window,
        })
    }
}
