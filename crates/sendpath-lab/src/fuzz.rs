//! Test-only: inputs for the property tests of the parsers (the agent's protocol, results
//! files, host profiles): mutations of valid inputs and random bytes from a seeded generator.

/// Bytes JSON is made of, and a few that it is not.
pub(crate) const JSON_BYTES: &[u8] = b"{}[]\":,0123456789-+.eEtrufalsn \\u\x00\xff\n";

/// Input `i` of a run: every fourth random bytes, the others a `seed` with 1 to 3 edits
/// (a byte removed, inserted or replaced, or a run of digits inserted).
pub(crate) fn input(rng: &mut fastrand::Rng, i: u32, seeds: &[&[u8]], out: &mut Vec<u8>) {
    out.clear();
    if i % 4 == 3 {
        let n = rng.usize(0..64);
        out.extend((0..n).map(|_| rng.u8(..)));
        return;
    }
    out.extend_from_slice(seeds[rng.usize(0..seeds.len())]);
    for _ in 0..rng.usize(1..4) {
        let at = rng.usize(0..=out.len());
        let b = JSON_BYTES[rng.usize(0..JSON_BYTES.len())];
        match rng.u8(0..4) {
            0 if at < out.len() => {
                out.remove(at);
            }
            1 => out.insert(at, b),
            2 if at < out.len() => out[at] = b,
            _ => {
                let n = rng.usize(0..3000);
                out.splice(at..at, std::iter::repeat_n(b'9', n));
            }
        }
    }
}
