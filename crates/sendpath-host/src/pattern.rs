//! The verifiable byte stream every send-path test uses: the byte at stream offset `o` is
//! `(o % 251) as u8`. 251 is prime, so no power-of-two chunking lines up with the period, and a
//! byte that arrives at the wrong offset (reordering, duplication, a rewritten buffer) is caught.

use std::sync::OnceLock;

/// Period of the pattern.
pub const PERIOD: u64 = 251;
const TABLE_SPAN: usize = 64 * 1024;

/// The byte at stream offset `o`.
pub fn byte_at(o: u64) -> u8 {
    (o % PERIOD) as u8
}

fn table() -> &'static [u8] {
    static T: OnceLock<Vec<u8>> = OnceLock::new();
    T.get_or_init(|| {
        (0..TABLE_SPAN as u64 + PERIOD)
            .map(byte_at)
            .collect::<Vec<u8>>()
    })
}

/// Fills `buf` with the pattern as it stands at stream offset `offset`.
pub fn fill(buf: &mut [u8], offset: u64) {
    let t = table();
    let mut o = offset;
    for chunk in buf.chunks_mut(TABLE_SPAN) {
        let start = (o % PERIOD) as usize;
        chunk.copy_from_slice(&t[start..start + chunk.len()]);
        o += chunk.len() as u64;
    }
}

/// Checks received bytes against the pattern, in stream order.
#[derive(Debug, Default, Clone)]
pub struct Verifier {
    /// Stream offset of the next byte.
    pub offset: u64,
    /// Bytes that differed from the pattern.
    pub mismatches: u64,
    /// Offset of the first wrong byte.
    pub first_mismatch: Option<u64>,
}

impl Verifier {
    /// A verifier at offset 0.
    pub fn new() -> Verifier {
        Verifier::default()
    }

    /// Checks `data`, which continues the stream.
    pub fn check(&mut self, data: &[u8]) {
        let t = table();
        for chunk in data.chunks(TABLE_SPAN) {
            let start = (self.offset % PERIOD) as usize;
            let want = &t[start..start + chunk.len()];
            if chunk != want {
                for (i, (a, b)) in chunk.iter().zip(want).enumerate() {
                    if a != b {
                        self.mismatches += 1;
                        self.first_mismatch.get_or_insert(self.offset + i as u64);
                    }
                }
            }
            self.offset += chunk.len() as u64;
        }
    }

    /// Bytes checked so far.
    pub fn bytes_verified(&self) -> u64 {
        self.offset
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fill_matches_definition_across_chunks() {
        let mut b = vec![0u8; 200_000];
        fill(&mut b, 1234);
        for (i, &x) in b.iter().enumerate() {
            assert_eq!(x, byte_at(1234 + i as u64));
        }
    }

    #[test]
    fn verifier_accepts_pattern_in_pieces_and_flags_errors() {
        let mut b = vec![0u8; 10_000];
        fill(&mut b, 0);
        let mut v = Verifier::new();
        v.check(&b[..3]);
        v.check(&b[3..]);
        assert_eq!((v.mismatches, v.bytes_verified()), (0, 10_000));
        let mut c = vec![0u8; 100];
        fill(&mut c, 10_000);
        c[42] ^= 0xff;
        v.check(&c);
        assert_eq!(v.mismatches, 1);
        assert_eq!(v.first_mismatch, Some(10_042));
    }
}
