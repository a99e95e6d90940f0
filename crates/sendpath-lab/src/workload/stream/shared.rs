//! What a stream run's threads share.

use super::{Finished, OwnLine, RecvCounters};
use crate::cancel::Cancel;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};

/// What a run's threads share: the stop flag, the start barrier, and the bytes each thread
/// (and each connection) moved so far.
pub(super) struct Shared {
    /// Read by every sender before every send; each counter below is written by one thread
    /// per send or read: each alone on its cache lines (`OwnLine`).
    pub(super) stop: Arc<OwnLine<AtomicBool>>,
    /// Set while the window is measured: receivers time messages only then.
    pub(super) measuring: Arc<OwnLine<AtomicBool>>,
    /// The buffers every sender thread shares (`--alloc shared`).
    pub(super) pool: sendpath::SharedPool,
    pub(super) finished: Arc<Finished>,
    pub(super) start: Arc<Barrier>,
    pub(super) received: Vec<Arc<RecvCounters>>,
    pub(super) sent: Vec<Arc<OwnLine<AtomicU64>>>,
    pub(super) conn_bytes: Vec<Arc<[AtomicU64]>>,
}

impl Shared {
    pub(super) fn new(threads: usize, per_thread: usize, bell: &Cancel) -> Shared {
        Shared {
            stop: Arc::new(OwnLine(AtomicBool::new(false))),
            measuring: Arc::new(OwnLine(AtomicBool::new(false))),
            pool: sendpath::SharedPool::new(),
            finished: Arc::new(Finished::new(bell)),
            start: Arc::new(Barrier::new(threads + 1)),
            received: (0..threads).map(|_| Arc::default()).collect(),
            sent: (0..threads).map(|_| Arc::default()).collect(),
            conn_bytes: (0..threads)
                .map(|_| (0..per_thread).map(|_| AtomicU64::new(0)).collect())
                .collect(),
        }
    }

    /// Bytes moved so far: read by our receivers, or put on the sockets when the receiver
    /// is not ours.
    pub(super) fn bytes_now(&self, ours: bool) -> u64 {
        if ours {
            self.bytes_received()
        } else {
            self.sent.iter().map(|c| c.load(Ordering::Relaxed)).sum()
        }
    }

    /// Of [`Shared::bytes_received`], those `--recv zerocopy` mapped.
    pub(super) fn bytes_mapped(&self) -> u64 {
        self.received
            .iter()
            .map(|c| c.mapped.load(Ordering::Relaxed))
            .sum()
    }

    pub(super) fn bytes_received(&self) -> u64 {
        self.received
            .iter()
            .map(|c| c.bytes.load(Ordering::Relaxed))
            .sum()
    }

    /// Bytes each connection's receiver read so far (several connections per thread).
    pub(super) fn per_conn_now(&self) -> Vec<u64> {
        self.conn_bytes
            .iter()
            .flat_map(|t| t.iter().map(|c| c.load(Ordering::Relaxed)))
            .collect()
    }
}
