//! Measured latency per message (`stream --msg-latency`): the sender writes the time of the
//! send call into each message's first bytes, and our receiver, which knows where messages
//! begin (fixed sizes, or the mix's sequence), times each message when its last byte is read.
//! One clock (`CLOCK_MONOTONIC`) serves both ends, so both must run on this host.

use crate::traffic::mix::MixSizes;
use hdrhistogram::Histogram;

/// Bytes of a message's stamp: the send time, nanoseconds of `CLOCK_MONOTONIC`, little-endian.
pub const STAMP_BYTES: usize = 8;

/// `CLOCK_MONOTONIC` now, nanoseconds (the vDSO: no system call).
pub(crate) fn now_ns() -> u64 {
    let t = rustix::time::clock_gettime(rustix::time::ClockId::Monotonic);
    t.tv_sec as u64 * 1_000_000_000 + t.tv_nsec as u64
}

/// Writes the time now into the first [`STAMP_BYTES`] of `buf` (nothing when it is shorter).
pub(crate) fn stamp(buf: &mut [u8]) {
    if let Some(head) = buf.get_mut(..STAMP_BYTES) {
        head.copy_from_slice(&now_ns().to_le_bytes());
    }
}

/// Where the messages of one connection begin: every `size` bytes, or the sizes of a mix in
/// the order its seed fixes.
pub(crate) enum Sizes {
    Fixed(usize),
    Mix(MixSizes),
}

impl Sizes {
    fn next(&mut self) -> usize {
        match self {
            Sizes::Fixed(n) => *n,
            Sizes::Mix(m) => m.next().unwrap_or(1),
        }
    }
}

/// Reads the stamps of one connection's byte stream, chunk by chunk as they are read, and
/// records each message's latency (from its send call to the read that brought its last byte)
/// while recording is on.
pub(crate) struct StampReader {
    sizes: Sizes,
    /// The current message's size, and how many of its bytes were read.
    size: usize,
    at: usize,
    /// Its stamp, as far as read.
    head: [u8; STAMP_BYTES],
    /// The stream offset of the next byte (to put the pattern back over stamps).
    offset: u64,
    /// Put the pattern back over each stamp, so a verifier checks the other bytes.
    restore: bool,
    /// Latencies of whole messages, nanoseconds.
    pub(crate) hist: Histogram<u64>,
    /// Messages whose stamp lay in the future or more than the histogram's range back.
    pub(crate) implausible: u64,
}

impl StampReader {
    pub(crate) fn new(mut sizes: Sizes, restore: bool) -> StampReader {
        let size = sizes.next();
        StampReader {
            sizes,
            size,
            at: 0,
            head: [0; STAMP_BYTES],
            offset: 0,
            restore,
            hist: crate::units::new_histogram(),
            implausible: 0,
        }
    }

    /// Takes in the bytes of one read, arrived at `now` (ns), recording the messages they end
    /// when `record`.
    pub(crate) fn feed(&mut self, mut chunk: &mut [u8], now: u64, record: bool) {
        while !chunk.is_empty() {
            let n = chunk.len().min(self.size - self.at);
            if self.at < STAMP_BYTES {
                let k = n.min(STAMP_BYTES - self.at);
                self.head[self.at..self.at + k].copy_from_slice(&chunk[..k]);
                if self.restore {
                    sendpath_host::pattern::fill(&mut chunk[..k], self.offset);
                }
            }
            self.at += n;
            self.offset += n as u64;
            chunk = &mut chunk[n..];
            if self.at == self.size {
                if record {
                    self.record(now);
                }
                self.size = self.sizes.next();
                self.at = 0;
            }
        }
    }

    fn record(&mut self, now: u64) {
        let sent = u64::from_le_bytes(self.head);
        match now.checked_sub(sent) {
            Some(ns) if ns < crate::units::HISTOGRAM_MAX_NS => {
                crate::units::record_ns(&mut self.hist, ns)
            }
            _ => self.implausible += 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn message(size: usize, sent: u64, offset: u64) -> Vec<u8> {
        let mut m = vec![0u8; size];
        sendpath_host::pattern::fill(&mut m, offset);
        m[..STAMP_BYTES].copy_from_slice(&sent.to_le_bytes());
        m
    }

    #[test]
    fn messages_split_across_reads_are_timed_when_their_last_byte_arrives() {
        let mut r = StampReader::new(Sizes::Fixed(20), false);
        let mut s: Vec<u8> = message(20, 1_000, 0);
        s.extend(message(20, 2_000, 20));
        // A read of 5 bytes (half a stamp), then 30 (the first message ends), then the rest.
        let (a, rest) = s.split_at_mut(5);
        let (b, c) = rest.split_at_mut(30);
        r.feed(a, 1_200, true);
        assert_eq!(r.hist.len(), 0);
        r.feed(b, 1_500, true);
        assert_eq!((r.hist.len(), r.hist.max()), (1, 500));
        r.feed(c, 2_700, true);
        assert_eq!(r.hist.len(), 2);
        assert_eq!((r.hist.min(), r.hist.max()), (500, 700));
        assert_eq!(r.implausible, 0);
    }

    #[test]
    fn outside_the_window_nothing_is_recorded_yet_the_boundaries_are_kept() {
        let mut r = StampReader::new(Sizes::Fixed(16), false);
        let mut s = message(16, 5, 0);
        r.feed(&mut s, 100, false);
        let mut t = message(16, 50, 16);
        r.feed(&mut t, 100, true);
        assert_eq!((r.hist.len(), r.hist.max()), (1, 50));
    }

    #[test]
    fn a_mix_is_followed_in_its_seeded_order() {
        let mix = crate::traffic::mix::SizeMix::parse("16:1,40:1", 1 << 20).unwrap();
        let sizes: Vec<usize> = mix.sizes(3).take(6).collect();
        let mut stream = Vec::new();
        for (i, &n) in sizes.iter().enumerate() {
            let off = stream.len() as u64;
            stream.extend(message(n, 100 * i as u64, off));
        }
        let mut r = StampReader::new(Sizes::Mix(mix.sizes(3)), false);
        for c in stream.chunks_mut(7) {
            r.feed(c, 1_000, true);
        }
        assert_eq!(r.hist.len(), 6);
        assert_eq!((r.hist.min(), r.hist.max()), (500, 1_000));
    }

    #[test]
    fn restored_stamps_leave_the_pattern_for_the_verifier() {
        let mut r = StampReader::new(Sizes::Fixed(300), true);
        let mut s = message(300, 1, 0);
        s.extend(message(300, 2, 300));
        for c in s.chunks_mut(5) {
            r.feed(c, 10, true);
        }
        let mut v = sendpath_host::pattern::Verifier::new();
        v.check(&s);
        assert_eq!((v.mismatches, v.bytes_verified()), (0, 600));
    }

    #[test]
    fn a_stamp_from_the_future_is_counted_as_implausible() {
        let mut r = StampReader::new(Sizes::Fixed(8), false);
        r.feed(&mut message(8, 500, 0), 100, true);
        assert_eq!((r.hist.len(), r.implausible), (0, 1));
    }
}
