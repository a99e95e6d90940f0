//! The datagrams of a UDP stream (`stream --proto udp`). Every datagram, and every segment of a
//! GSO send (which the kernel cuts into datagrams of the segment size), starts with its
//! sequence number, 8 bytes little-endian, so the receiver counts what was lost and what came
//! out of order; with verification the rest of the datagram is the pattern from offset `seq`
//! (so a datagram whose header and body disagree is caught). Plain data: no sockets here.

use serde::{Deserialize, Serialize};

/// Bytes of the sequence number at the start of every datagram.
pub const HEADER: usize = 8;

/// The largest UDP payload over IPv4 (65535 minus the IP and UDP headers); a send above it
/// fails with `EMSGSIZE`, with or without segmentation.
pub const MAX_PAYLOAD: usize = 65_507;

/// The transport a stream runs on.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Protocol {
    /// One TCP connection per sender (or several on a ring).
    #[default]
    Tcp,
    /// One connected UDP socket per sender; each send is one datagram, or with GSO one
    /// super-datagram cut into segments.
    Udp,
}

impl Protocol {
    /// The stable name, as in results and flags.
    pub fn name(self) -> &'static str {
        match self {
            Protocol::Tcp => "tcp",
            Protocol::Udp => "udp",
        }
    }
}

impl std::str::FromStr for Protocol {
    type Err = String;
    fn from_str(s: &str) -> Result<Protocol, String> {
        match s {
            "tcp" => Ok(Protocol::Tcp),
            "udp" => Ok(Protocol::Udp),
            _ => Err(format!("`{s}` is not a protocol: use tcp or udp")),
        }
    }
}

/// The datagrams a send of `len` bytes becomes with segments of `seg` bytes (the last one
/// shorter).
pub fn segments(len: usize, seg: usize) -> u64 {
    len.div_ceil(seg.max(1)) as u64
}

/// The most datagrams this kernel cuts one `UDP_SEGMENT` send into (`UDP_MAX_SEGMENTS`: 64
/// on older kernels, 128 on newer), found by sending 64, 128 and 256 small segments to a
/// socket of this process on loopback; `None` when that cannot be done here.
pub fn max_gso_segments() -> Option<usize> {
    use std::os::fd::AsFd;
    let rx = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
    let tx = std::net::UdpSocket::bind("127.0.0.1:0").ok()?;
    tx.connect(rx.local_addr().ok()?).ok()?;
    sendpath_host::socket::set_udp_segment(tx.as_fd(), HEADER as u16).ok()?;
    let mut most = None;
    for n in [64, 128, 256] {
        if tx.send(&vec![0u8; n * HEADER]).is_err() {
            break;
        }
        most = Some(n);
    }
    most
}

/// Writes the sequence numbers of the datagrams `buf` is cut into (`seg` bytes each), from
/// `first`; with `fill`, the pattern after each header. Returns the number of datagrams.
/// Segments shorter than the header get the header's first bytes only (plans refuse them).
#[inline]
pub fn stamp(buf: &mut [u8], seg: usize, first: u64, fill: bool) -> u64 {
    // One datagram with room for its header and no pattern (a speed run without GSO): one
    // store, the cost of a sequence number and nothing of the loop's.
    if !fill && buf.len() >= HEADER && buf.len() <= seg {
        buf[..HEADER].copy_from_slice(&first.to_le_bytes());
        return 1;
    }
    stamp_segments(buf, seg, first, fill)
}

/// [`stamp`], one segment at a time.
#[inline(never)]
fn stamp_segments(buf: &mut [u8], seg: usize, first: u64, fill: bool) -> u64 {
    let mut seq = first;
    for d in buf.chunks_mut(seg.max(1)) {
        let h = d.len().min(HEADER);
        d[..h].copy_from_slice(&seq.to_le_bytes()[..h]);
        if fill && d.len() > HEADER {
            sendpath_host::pattern::fill(&mut d[HEADER..], seq);
        }
        seq += 1;
    }
    seq - first
}

/// What a receiver counted of the datagrams it read.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Tally {
    /// Datagrams read.
    pub datagrams: u64,
    /// Their bytes.
    pub bytes: u64,
    /// Datagrams whose sequence number was below one already seen (late or duplicated).
    pub reordered: u64,
    /// Bytes checked against the pattern.
    pub verified: u64,
    /// Bytes that differed from it, and datagrams too short to hold a header.
    pub mismatches: u64,
    /// One past the highest sequence number seen.
    next: u64,
}

impl Tally {
    /// Counts a datagram of `len` bytes whose first bytes are `head` (all of it when
    /// verifying, at least the header otherwise).
    pub fn on_datagram(&mut self, head: &[u8], len: usize, verify: bool) {
        self.datagrams += 1;
        self.bytes += len as u64;
        if len < HEADER || head.len() < HEADER {
            self.mismatches += 1;
            return;
        }
        let seq = u64::from_le_bytes(head[..HEADER].try_into().expect("8 bytes"));
        if seq < self.next {
            self.reordered += 1;
        }
        self.next = self.next.max(seq.saturating_add(1));
        if verify {
            let body = &head[HEADER..len.min(head.len())];
            let mut v = sendpath_host::pattern::Verifier {
                offset: seq,
                ..Default::default()
            };
            v.check(body);
            self.verified += len as u64;
            self.mismatches += v.mismatches;
        }
    }

    /// Adds another receiver's counts (each sender has its own sequence).
    pub fn merge(&mut self, o: &Tally) {
        self.datagrams += o.datagrams;
        self.bytes += o.bytes;
        self.reordered += o.reordered;
        self.verified += o.verified;
        self.mismatches += o.mismatches;
        self.next += o.next;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn datagrams(len: usize, seg: usize, first: u64) -> Vec<Vec<u8>> {
        let mut buf = vec![0u8; len];
        assert_eq!(stamp(&mut buf, seg, first, true), segments(len, seg));
        buf.chunks(seg).map(<[u8]>::to_vec).collect()
    }

    #[test]
    fn a_speed_run_s_datagram_carries_its_number_as_every_segment_does() {
        // One segment, no pattern: the header alone is written, as the loop would write it.
        for (len, seg) in [
            (8, 8),
            (1400, 1400),
            (1400, 65_507),
            (9, 8),
            (4, 4),
            (0, 1400),
        ] {
            let (mut fast, mut each) = (vec![0xa5u8; len], vec![0xa5u8; len]);
            let n = stamp(&mut fast, seg, 41, false);
            let mut seq = 41u64;
            for d in each.chunks_mut(seg) {
                let h = d.len().min(HEADER);
                d[..h].copy_from_slice(&seq.to_le_bytes()[..h]);
                seq += 1;
            }
            assert_eq!(
                (n, &fast),
                (seq - 41, &each),
                "{len} bytes in segments of {seg}"
            );
        }
    }

    #[test]
    fn every_segment_carries_its_number_and_verifies() {
        let mut t = Tally::default();
        // 64000 bytes in 1400-byte segments: 45 full ones and one of 1000.
        let ds = datagrams(64_000, 1400, 0);
        assert_eq!(ds.len(), 46);
        assert_eq!(ds[45].len(), 1000);
        for d in &ds {
            t.on_datagram(d, d.len(), true);
        }
        for d in &datagrams(64_000, 1400, 46) {
            t.on_datagram(d, d.len(), true);
        }
        assert_eq!((t.datagrams, t.bytes, t.reordered), (92, 128_000, 0));
        assert_eq!((t.verified, t.mismatches), (128_000, 0));
    }

    #[test]
    fn loss_reordering_and_corruption_are_counted() {
        let ds = datagrams(10 * 100, 100, 0);
        let mut t = Tally::default();
        // 3 is lost, 5 comes after 6, 8 is corrupted, 9 is too short to hold a header.
        for i in [0, 1, 2, 4, 6, 5, 7] {
            t.on_datagram(&ds[i], 100, true);
        }
        let mut bad = ds[8].clone();
        bad[50] ^= 1;
        t.on_datagram(&bad, 100, true);
        t.on_datagram(&ds[9][..4], 4, true);
        assert_eq!(t.datagrams, 9);
        assert_eq!(t.reordered, 1);
        assert_eq!(t.mismatches, 2);
        // Sent 10, read 9: one lost, as the sender's count against this tally says.
        assert_eq!(10 - t.datagrams, 1);
    }

    #[test]
    fn a_header_and_body_that_disagree_are_caught() {
        let mut d = datagrams(200, 200, 7).remove(0);
        d[..HEADER].copy_from_slice(&8u64.to_le_bytes());
        let mut t = Tally::default();
        t.on_datagram(&d, 200, true);
        assert!(t.mismatches > 0);
    }

    #[test]
    fn without_verification_only_the_header_is_read() {
        let ds = datagrams(3 * 64, 64, 0);
        let mut t = Tally::default();
        for d in ds.iter().rev() {
            t.on_datagram(&d[..HEADER], 64, false);
        }
        assert_eq!(
            (t.datagrams, t.bytes, t.reordered, t.verified),
            (3, 192, 2, 0)
        );
    }
}
