//! What a driver is made with and what it hands back: its settings, connection ids, receive
//! buffers and events.

use crate::{Options, Socket};
use std::sync::atomic::{AtomicU32, Ordering};

/// A connection of a [`UringDriver`](crate::UringDriver): its index (connections are numbered
/// from 0 in the order they were added, and the index of one that is gone is handed out
/// again), a generation, and the driver it belongs to. An id kept past
/// [`Event::Closed`](crate::Event::Closed), or given to another driver, names no connection:
/// the driver answers it with an error, never with another connection.
///
/// ```no_run
/// # let mut ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
/// let id = ring.add(std::net::TcpStream::connect("127.0.0.1:9000")?, sendpath::Strategy::Uring)?;
/// let mut table = vec![0u64; 16];
/// table[id.index()] += 1; // dense: a table kept by the owner
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    pub(crate) ring: u32,
    pub(crate) idx: u32,
    pub(crate) gen: u32,
}

impl ConnId {
    /// The index: small and dense, for tables kept by the owner.
    pub fn index(self) -> usize {
        self.idx as usize
    }
}

/// A number for each driver made in this process, so a [`ConnId`] says which it is of.
pub(crate) fn next_ring_serial() -> u32 {
    static NEXT: AtomicU32 = AtomicU32::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// Settings of a [`UringDriver`](crate::UringDriver).
///
/// ```
/// use sendpath::{DriverConfig, Options};
/// let cfg = DriverConfig {
///     connections: 1000,
///     ring_zc_inflight: Some(256),
///     options: Options { uring_fixed_buffers: true, ..Options::default() },
/// };
/// # let _ = cfg;
/// ```
#[derive(Debug, Clone, Default)]
pub struct DriverConfig {
    /// Connections the ring is sized for (more can be added; the queues then wrap sooner).
    pub connections: usize,
    /// Cap on SEND_ZC requests awaiting notification over all connections of the ring (a
    /// server worker's cap); a zero-copy send past it goes by copy, counted as `inflight_cap`.
    /// `None`: only each connection's own cap (`options.inflight`) holds, so n connections
    /// may keep n times it awaiting notification, buffers the kernel holds until then.
    pub ring_zc_inflight: Option<usize>,
    /// What each connection sends with: the depth of its chain (`uring_depth`), its zero-copy
    /// cap (`inflight`), usage reporting, registered buffers, the order of a stream's sends,
    /// and `adaptive`'s profile and tunables.
    pub options: Options,
}

impl DriverConfig {
    /// Requests per chain per connection, at least 1.
    pub(crate) fn depth(&self) -> usize {
        self.options.uring_depth.max(1)
    }
}

/// Receive buffers for connections that receive on the ring
/// ([`UringDriver::listen`](crate::UringDriver::listen),
/// [`UringDriver::add_receiving`](crate::UringDriver::add_receiving)).
///
/// ```
/// let cfg = sendpath::RecvConfig { buffers: 2048, size: 4096 };
/// # let _ = cfg;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvConfig {
    /// Provided buffers (a power of two, at most 32768).
    pub buffers: u16,
    /// Bytes per buffer: the most one receive completion carries.
    pub size: usize,
}

impl Default for RecvConfig {
    fn default() -> Self {
        RecvConfig {
            buffers: 1024,
            size: 4096,
        }
    }
}

/// Bytes a receive completion handed over, in one of the ring's provided buffers. Read them
/// with [`UringDriver::received`](crate::UringDriver::received), then give the buffer back
/// with [`UringDriver::recycle`](crate::UringDriver::recycle): the kernel cannot receive into
/// it until then.
///
/// ```no_run
/// # fn on(ring: &mut sendpath::UringDriver, buf: sendpath::RecvBuf) {
/// let n = ring.received(&buf).len();
/// ring.recycle(buf);
/// # let _ = n;
/// # }
/// ```
#[derive(Debug, PartialEq, Eq)]
pub struct RecvBuf {
    pub(crate) id: u16,
    pub(crate) len: usize,
}

impl RecvBuf {
    /// Bytes received.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was received (never handed out: end of file is
    /// [`Event::RecvEnded`]).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Something the ring did besides sending, for the owner's event loop
/// ([`UringDriver::take_events`](crate::UringDriver::take_events)).
///
/// ```no_run
/// # fn on(ring: &mut sendpath::UringDriver) -> sendpath::Result<()> {
/// use sendpath::{Event, Strategy};
/// let mut events = Vec::new();
/// ring.take_events(&mut events);
/// for e in events {
///     match e {
///         Event::Accepted(sock) => { ring.add_receiving(sock, Strategy::UringZc)?; }
///         Event::Received { conn, buf } => ring.recycle(buf),
///         Event::RecvEnded { conn, .. } => ring.close(conn),
///         _ => {}
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Debug)]
#[non_exhaustive]
pub enum Event {
    /// The listener accepted a connection (not yet added).
    Accepted(Socket),
    /// An accept failed (`EMFILE`, say); the listener stays armed.
    AcceptFailed(std::io::Error),
    /// Bytes arrived on a connection.
    Received {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        buf: RecvBuf,
    },
    /// A connection's receiving ended: `None` at end of file, else the error.
    RecvEnded {
        /// The connection.
        conn: ConnId,
        /// The error, when it was not end of file.
        error: Option<std::io::Error>,
    },
    /// A file send of [`UringDriver::send_file`](crate::UringDriver::send_file) ended: every
    /// byte reached the socket (`Ok` with the bytes, head included), or it failed (the
    /// connection should then be closed: part of the response went out).
    FileSent {
        /// The connection.
        conn: ConnId,
        /// Bytes sent, or why it stopped.
        result: std::io::Result<u64>,
    },
    /// A connection given to [`UringDriver::close`](crate::UringDriver::close) is gone: its
    /// socket is closed, no completion names it any more, and its id names no connection.
    Closed(ConnId),
}
