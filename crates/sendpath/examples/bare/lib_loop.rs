//! `--lib`: the same sends made through the library's own path (`sendpath::open`), on bare's
//! connection, to bare's receiver, in bare's loop. Against plain bare it measures what the
//! library adds; against `sendpath stream` what the stream harness (its threads, counters and
//! windows) adds.

use super::{Args, Tally};
use sendpath::{FileRange, Options, SendPath, Source, Strategy};
use std::fs::File;
use std::io;
use std::os::fd::OwnedFd;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A library path open on bare's connection, and where in the file it is.
pub(crate) struct LibPath {
    path: Box<dyn SendPath>,
    /// The file's length for the file paths; 0 for the memory paths.
    file_len: u64,
    offset: u64,
}

impl LibPath {
    /// Opens `a.path` on `sock` (a duplicate of the route's socket), with the library's
    /// default options at bare's depth and order (and `file`, for the file paths).
    pub(crate) fn open(a: &Args, sock: OwnedFd, file: Option<&File>) -> Result<LibPath, String> {
        let strategy = Strategy::parse(&a.path).map_err(|e| e.to_string())?;
        let mut opts = Options {
            uring_depth: a.depth,
            uring_fixed_buffers: a.fixed,
            // As the stream harness's `--arena 4M`: 4 MiB cut into slots of the message size.
            uring_arena: a.arena.then(|| sendpath::ArenaConfig {
                slot_size: a.size,
                slots: super::arena_slots(a.size),
            }),
            zc_reap_every: a.reap_every,
            uring_order: match a.order {
                Some(super::Order::Linked) => Some(sendpath::Order::Linked),
                Some(super::Order::Vectored) => Some(sendpath::Order::Vectored),
                _ => None,
            },
            ..Options::default()
        };
        let file_len = match file.filter(|_| strategy.source() == Source::File) {
            Some(f) => {
                let len = f.metadata().map_err(|e| e.to_string())?.len();
                opts.file = Some(Arc::new(f.try_clone().map_err(|e| e.to_string())?));
                len
            }
            None => 0,
        };
        let path = sendpath::open(strategy, sock, &opts).map_err(|e| e.to_string())?;
        Ok(LibPath {
            path,
            file_len,
            offset: 0,
        })
    }

    /// Sends `a.size`-byte messages until `until` (read every 64 sends or so, as bare's loops
    /// read it), in batches as the stream harness sends them (memory messages by `send_bufs`,
    /// file messages by `send_ranges`), then waits for the last completions.
    pub(crate) fn send(&mut self, a: &Args, until: Instant) -> io::Result<Tally> {
        let p = self.path.as_mut();
        let slots = |p: &dyn SendPath| p.stats().arena.as_ref().map(|a| a.slots);
        let before = (
            p.stats().zerocopy.completions,
            p.stats().zerocopy.copied,
            slots(p),
        );
        let mut t = Tally::default();
        // As the stream harness batches: up to 16 messages, until one takes the batch to
        // 64 KiB, per `send_bufs` or `send_ranges`.
        let per_batch = (64usize << 10).div_ceil(a.size.max(1)).min(16);
        let mut batch = Vec::with_capacity(per_batch);
        let mut ranges = Vec::with_capacity(2 * per_batch);
        // As the stream harness: in place with an arena, and always on copy and msg-zerocopy
        // (in buffers of their own).
        let in_place = a.arena || matches!(a.path.as_str(), "copy" | "msg-zerocopy");
        while Instant::now() < until {
            let mut sends = 0;
            while sends < 64 {
                if self.file_len > 0 {
                    for _ in 0..per_batch {
                        self.offset = file_message(&mut ranges, a.size, self.offset, self.file_len);
                    }
                    p.send_ranges(&ranges).map_err(io::Error::other)?;
                    ranges.clear();
                } else if in_place {
                    // Written in place: the library's slot, filled where the kernel reads it.
                    let verify = a.verify;
                    p.send_in_place(per_batch, a.size, &mut |_, b| {
                        if verify {
                            b.fill(crate::route::BYTE);
                        }
                    })
                    .map_err(io::Error::other)?;
                } else {
                    for _ in 0..per_batch {
                        let mut b = p.take_buf(a.size);
                        // What the receiver checks under --verify (a program writes what it
                        // sends; the speed run sends the pool's bytes as they are).
                        if a.verify {
                            b.as_mut_slice().fill(crate::route::BYTE);
                        }
                        batch.push(b);
                    }
                    p.send_bufs(&mut batch).map_err(io::Error::other)?;
                }
                sends += per_batch;
            }
            t.sends += sends as u64;
            t.bytes += (sends * a.size) as u64;
        }
        p.finish(Duration::from_secs(2)).map_err(io::Error::other)?;
        t.completions = p.stats().zerocopy.completions - before.0;
        t.copied = p.stats().zerocopy.copied - before.1;
        t.in_place = slots(p).map(|n| n - before.2.unwrap_or(0));
        Ok(t)
    }
}

/// The ranges of one message of `size` bytes from the file at `offset` (below `len`), round
/// and round, onto `ranges`; the next offset. A comparison, not a division, finds the wrap,
/// as bare's own loop does.
fn file_message(ranges: &mut Vec<FileRange>, size: usize, offset: u64, len: u64) -> u64 {
    let mut at = offset;
    let mut left = size as u64;
    while left > 0 {
        let n = left.min(len - at);
        ranges.push(FileRange {
            offset: at,
            len: n as usize,
        });
        left -= n;
        at += n;
        if at == len {
            at = 0;
        }
    }
    at
}
