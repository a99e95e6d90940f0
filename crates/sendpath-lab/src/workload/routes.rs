//! Whether zero-copy sends come back copied on each route this host offers (`sendpath probe`):
//! UDP datagrams with MSG_ZEROCOPY and with SEND_ZC on loopback, across a veth pair into a
//! namespace, and into the black hole (a veth whose peer is down). The first two deliver to a
//! local socket, where the kernel copies pinned pages; the black hole frees them unread.

use crate::topology::{Netns, NetnsSpec};
use sendpath::{Msg, Options, Strategy};
use serde::Serialize;
use std::net::UdpSocket;
use std::time::Duration;

/// Datagrams sent per path and route: small enough for any MTU (a fragmented datagram is
/// copied by the fragmenter, which would say nothing of the route).
const SENDS: usize = 256;
const SIZE: usize = 1400;

/// What one path's test sends on one route came back as.
#[derive(Debug, Clone, Serialize)]
pub struct RouteZeroCopy {
    /// `loopback`, `netns` or `blackhole`.
    pub route: &'static str,
    /// `msg-zerocopy` or `uring-zc`.
    pub path: Strategy,
    /// Zero-copy sends made.
    pub sends: u64,
    /// Their completions.
    pub completions: u64,
    /// The fraction of completions the kernel reported copied; null when unknown.
    pub copied_fraction: Option<f64>,
    /// Why the route could not be tried (not root, no iproute2, a failed send).
    pub error: Option<String>,
}

/// Every route, each with both zero-copy paths.
pub fn zero_copy_by_route() -> Vec<RouteZeroCopy> {
    let mut out = Vec::new();
    for route in ["loopback", "netns", "blackhole"] {
        let made = sockets(route);
        for path in [Strategy::MsgZerocopy, Strategy::UringZc] {
            let r = made
                .as_ref()
                .map_err(|e| format!("{e:#}"))
                .and_then(|(tx, _, _)| try_path(tx, path).map_err(|e| format!("{e:#}")));
            out.push(match r {
                Ok(s) => RouteZeroCopy {
                    route,
                    path,
                    sends: s.zerocopy.attempts,
                    completions: s.zerocopy.completions,
                    copied_fraction: s.copied_fraction,
                    error: None,
                },
                Err(e) => RouteZeroCopy {
                    route,
                    path,
                    sends: 0,
                    completions: 0,
                    copied_fraction: None,
                    error: Some(e),
                },
            });
        }
    }
    out
}

/// The sender's socket on `route`, the receiver's (kept open while the sends run) and the
/// namespace (removed when dropped).
fn sockets(route: &str) -> anyhow::Result<(UdpSocket, Option<UdpSocket>, Option<Netns>)> {
    Ok(match route {
        "loopback" => {
            let rx = UdpSocket::bind("127.0.0.1:0")?;
            let tx = UdpSocket::bind("127.0.0.1:0")?;
            tx.connect(rx.local_addr()?)?;
            (tx, Some(rx), None)
        }
        "netns" => {
            let ns = Netns::create(NetnsSpec::default())?;
            let rx = ns.udp_receiver()?;
            let tx = UdpSocket::bind("0.0.0.0:0")?;
            tx.connect(rx.local_addr()?)?;
            (tx, Some(rx), Some(ns))
        }
        _ => {
            let ns = Netns::blackhole(None)?;
            (ns.udp_sender()?, None, Some(ns))
        }
    })
}

/// [`SENDS`] datagrams with `path`, then the wait for their completions.
fn try_path(tx: &UdpSocket, path: Strategy) -> anyhow::Result<sendpath::SendStatsSummary> {
    let mut p = sendpath::open(path, tx.try_clone()?, &Options::default())?;
    for _ in 0..SENDS {
        let mut b = p.take_buf(SIZE);
        b.as_mut_slice().fill(0x5a);
        p.send(Msg::one(b))?;
    }
    p.finish(Duration::from_secs(2))?;
    Ok(p.stats().summary())
}
