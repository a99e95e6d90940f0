//! A stream's senders as tokio tasks (`--runtime tokio,tokio-write`): each sender thread runs
//! a current-thread runtime whose one task sends through sendpath's async sender, or through
//! tokio's own `write_all` / `send` with no sendpath code (the baseline). Like the thread
//! senders: batches of pooled buffers, the pattern written when verifying, the byte counter
//! stored per batch, every wait bounded by the stall limit.

use super::sender::Sender;
use crate::traffic::datagram::HEADER;
use crate::traffic::Runtime;
use crate::workload::file_message;
use anyhow::Context;
use sendpath::{AsyncSender, FileRange, SendStats, Source, Strategy};
use sendpath_host::pattern;
use std::future::Future;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;
use std::time::Duration;

/// What a sender task needs besides its socket.
pub(super) struct Task<'a> {
    pub(super) stop: &'a AtomicBool,
    pub(super) sent: &'a AtomicU64,
    pub(super) start: &'a Barrier,
}

/// A fresh current-thread runtime, with I/O and time.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("building a tokio runtime for the sender")
}

/// `fut` within `limit`, else the stall error a blocking send's timeout gives.
async fn bounded<T>(
    limit: Duration,
    fut: impl Future<Output = anyhow::Result<T>>,
) -> anyhow::Result<T> {
    match tokio::time::timeout(limit, fut).await {
        Ok(r) => r,
        Err(_) => Err(std::io::Error::from(std::io::ErrorKind::WouldBlock)).context(
            super::stall::told(super::stall::Stall::Timeout(limit), None),
        ),
    }
}

/// Closes `tx` (2 s for the kernel to release its buffers): its stats and note. Buffers the
/// kernel held past the deadline are counted in the stats, not an error.
async fn closed(
    tx: sendpath::AsyncSender,
) -> anyhow::Result<(sendpath::SendStats, Option<String>)> {
    let note = tx.note().map(String::from);
    let stats = match tx.close(Duration::from_secs(2)).await {
        Ok(s) => s,
        Err(sendpath::Error::Leaked { stats, .. }) => *stats,
        Err(e) => return Err(e.into()),
    };
    Ok((stats, note))
}

impl Sender {
    /// Sends on `sock` (a TCP stream) until `stop`, as a tokio task.
    pub(super) fn run_tokio(
        &self,
        sock: std::net::TcpStream,
        t: Task<'_>,
    ) -> anyhow::Result<(SendStats, Option<String>)> {
        sock.set_nonblocking(true)?;
        runtime()?.block_on(async move {
            match self.runtime {
                Runtime::TokioWrite => self.tokio_write(sock, t).await,
                _ => self.async_sender(sendpath::Socket::from(sock), t).await,
            }
        })
    }

    /// sendpath's async sender: batches from its pool (file ranges round the file for
    /// `sendfile`), then a close that waits for the last completions.
    async fn async_sender(
        &self,
        sock: sendpath::Socket,
        t: Task<'_>,
    ) -> anyhow::Result<(SendStats, Option<String>)> {
        let mut tx = AsyncSender::open(self.strategy, sock, &self.opts)?;
        t.start.wait();
        let (n, size) = (self.per_batch(), self.size);
        let (mut off, mut total) = (self.first, t.sent.load(Ordering::Relaxed));
        let (mut batch, mut ranges) = (Vec::with_capacity(n), Vec::with_capacity(2 * n));
        let file_len = self.shape.file_len;
        while !t.stop.load(Ordering::Relaxed) {
            if self.strategy.source() == Source::File {
                for _ in 0..n {
                    off = file_message(off % file_len, size, file_len, |r: FileRange| {
                        ranges.push(r);
                        Ok(())
                    })?;
                }
                bounded(self.stall, async { Ok(tx.send_ranges(&ranges).await?) }).await?;
                ranges.clear();
            } else {
                for _ in 0..n {
                    let mut b = tx.take_buf(size);
                    if self.shape.fill {
                        pattern::fill(b.as_mut_slice(), off);
                    }
                    off += size as u64;
                    batch.push(b);
                }
                bounded(self.stall, async { Ok(tx.send_bufs(&mut batch).await?) }).await?;
            }
            total += (n * size) as u64;
            t.sent.store(total, Ordering::Relaxed);
        }
        closed(tx).await
    }

    /// tokio's own `write_all` of each message from a pool of buffers as large as a batch
    /// (what a tokio server writes from), no sendpath code in the loop.
    async fn tokio_write(
        &self,
        sock: std::net::TcpStream,
        t: Task<'_>,
    ) -> anyhow::Result<(SendStats, Option<String>)> {
        use tokio::io::AsyncWriteExt;
        let mut s = tokio::net::TcpStream::from_std(sock)?;
        t.start.wait();
        let (n, size) = (self.per_batch(), self.size);
        let mut bufs: Vec<Vec<u8>> = (0..n).map(|_| vec![crate::units::FILL; size]).collect();
        let (mut off, mut total) = (self.first, t.sent.load(Ordering::Relaxed));
        let mut stats = SendStats::default();
        while !t.stop.load(Ordering::Relaxed) {
            // One stall bound per batch, as the async sender's loop has.
            bounded(self.stall, async {
                for b in &mut bufs {
                    if self.shape.fill {
                        pattern::fill(b, off);
                    }
                    off += size as u64;
                    s.write_all(b).await?;
                }
                Ok(())
            })
            .await?;
            total += (n * size) as u64;
            t.sent.store(total, Ordering::Relaxed);
            stats.sends += n as u64;
            stats.bytes += (n * size) as u64;
        }
        let _ = s.shutdown().await;
        Ok((stats, None))
    }
}

/// One UDP sender task: `size`-byte datagrams, each stamped with its sequence number (and the
/// pattern when verifying), through sendpath's async sender or tokio's own `send`.
pub(super) struct UdpTask {
    pub(super) strategy: Strategy,
    pub(super) runtime: Runtime,
    pub(super) size: usize,
    pub(super) fill: bool,
    pub(super) opts: sendpath::Options,
    pub(super) stall: Duration,
}

impl UdpTask {
    /// Sends on the connected `sock` until `stop`: one call (and await) per datagram, a stall
    /// bound and the byte counter per [`DATAGRAM_BATCH`] of them, on either runtime.
    pub(super) fn run(
        &self,
        sock: std::net::UdpSocket,
        t: Task<'_>,
        stamp: impl Fn(&mut [u8], u64, bool) -> u64,
    ) -> anyhow::Result<(SendStats, Option<String>)> {
        sock.set_nonblocking(true)?;
        let batch = (DATAGRAM_BATCH * self.size) as u64;
        runtime()?.block_on(async move {
            let mut seq = 0u64;
            if self.runtime == Runtime::TokioWrite {
                let s = tokio::net::UdpSocket::from_std(sock)?;
                t.start.wait();
                let mut b = vec![crate::units::FILL; self.size.max(HEADER)];
                let mut stats = SendStats::default();
                while !t.stop.load(Ordering::Relaxed) {
                    bounded(self.stall, async {
                        for _ in 0..DATAGRAM_BATCH {
                            seq += stamp(&mut b, seq, self.fill);
                            s.send(&b).await?;
                        }
                        Ok(())
                    })
                    .await?;
                    t.sent.fetch_add(batch, Ordering::Relaxed);
                    stats.sends += DATAGRAM_BATCH as u64;
                    stats.bytes += batch;
                }
                return Ok((stats, None));
            }
            let mut tx = AsyncSender::open(self.strategy, sock, &self.opts)?;
            t.start.wait();
            while !t.stop.load(Ordering::Relaxed) {
                bounded(self.stall, async {
                    for _ in 0..DATAGRAM_BATCH {
                        let mut b = tx.take_buf(self.size);
                        seq += stamp(b.as_mut_slice(), seq, self.fill);
                        tx.send_buf(b).await?;
                    }
                    Ok(())
                })
                .await?;
                t.sent.fetch_add(batch, Ordering::Relaxed);
            }
            closed(tx).await
        })
    }
}

/// Datagrams per stall bound and per store of the byte counter (the blocking sender's loop
/// stores per datagram; the count is read once a window, so the batch changes no figure).
const DATAGRAM_BATCH: usize = 16;
