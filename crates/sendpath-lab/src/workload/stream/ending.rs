//! How a stream repeat ends: the senders that stall after the window are stopped and named,
//! the receivers that cannot drain in time have their reads ended, and what arrived is checked
//! against what was sent.

use super::stall::Stall;
use super::{Peer, Shared, GRACE};
use crate::window::Integrity;
use anyhow::bail;
use std::net::TcpStream;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// How the senders stalled after the window, when they did: the run shut their connections
/// down (`abandoned`), or a sender's send timeout (`limit`) ran out (that error is taken out
/// of `first_err`: the window was measured, and the repeat goes on as cut short).
pub(super) fn stalled_senders(
    abandoned: bool,
    limit: Duration,
    first_err: &mut Option<anyhow::Error>,
) -> Option<Stall> {
    if abandoned {
        first_err.take();
        return Some(Stall::AfterWindow(2 * GRACE));
    }
    first_err.take_if(|e| crate::setting::timed_out(e))?;
    Some(Stall::Timeout(limit))
}

/// Whether every thread of `handles` ended within `d`.
fn all_end_within<T>(handles: &[JoinHandle<T>], d: Duration) -> bool {
    let end = std::time::Instant::now() + d;
    while handles.iter().any(|h| !h.is_finished()) {
        if std::time::Instant::now() >= end {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    true
}

/// Waits twice [`GRACE`] (a sender's last sends and its final wait for completions) for the
/// senders to end after the window; past it (a send waiting on a receiver that stopped
/// reading; io_uring's sends take no send timeout) shuts their connections down, through the
/// duplicates, so the waiting sends fail and the threads end. Whether it had to.
pub(super) fn stop_stalled_senders(
    senders: &[JoinHandle<crate::workload::Sent>],
    tx_dups: &[TcpStream],
) -> bool {
    if all_end_within(senders, 2 * GRACE) {
        return false;
    }
    for s in tx_dups {
        let _ = s.shutdown(std::net::Shutdown::Both);
    }
    !tx_dups.is_empty()
}

/// Waits [`GRACE`] for the receivers to read to the end; past it (a link slower than what the
/// senders left in the socket buffers) ends their reads (`shutdown(SHUT_RD)` on the sockets
/// they share with the run: a read then sees the end of the stream) and says why.
pub(super) fn stop_draining<T>(
    receivers: &[JoinHandle<T>],
    rx: &[Arc<TcpStream>],
) -> Option<String> {
    if all_end_within(receivers, GRACE) {
        return None;
    }
    for s in rx {
        let _ = s.shutdown(std::net::Shutdown::Read);
    }
    Some(format!(
        "the receivers were still reading {GRACE:?} after the senders stopped (a link slower than the bytes left in the socket buffers): their reads were ended, so not every byte sent was received"
    ))
}

/// Fills in the bytes received (from the agent or our receivers) and refuses a run where
/// they differ from the bytes sent.
pub(super) fn check_arrival(
    peer: &mut Peer,
    shared: &Shared,
    integrity: &mut Integrity,
    cut_short: bool,
) -> anyhow::Result<()> {
    if let Some((mut c, _)) = peer.agent.take() {
        let f = c.finish()?;
        let total = f.total;
        integrity.bytes_received = Some(total.bytes);
        integrity.bytes_verified = f.verified;
        integrity.mismatches = f.mismatches;
        integrity.bytes_mapped = f.mapped;
        if total.bytes != integrity.bytes_sent && !cut_short {
            bail!(
                "the senders put {} bytes on the sockets but the agent received {}: bytes were lost or invented",
                integrity.bytes_sent,
                total.bytes
            );
        }
    }
    if peer.ours() {
        let got = shared.bytes_received();
        integrity.bytes_received = Some(got);
        if got != integrity.bytes_sent && !cut_short {
            bail!(
                "the senders put {} bytes on the sockets but the receivers read {got}: bytes were lost or invented",
                integrity.bytes_sent
            );
        }
    }
    Ok(())
}
