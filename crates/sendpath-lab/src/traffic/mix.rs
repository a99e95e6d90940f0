//! Message-size mixes (`--size-mix 88:70,4K:20,1M:10`) and how message buffers are allocated
//! (`--alloc pool|fresh`).

use crate::units::{fmt_size, parse_size};
use serde::{Deserialize, Serialize};

/// Sizes with integer weights; messages draw their size from it in a sequence fixed by a seed,
/// so every path of a comparison sends the same sizes in the same order. With a burst above 1,
/// each drawn size is sent that many times in a row (`4K:90,64K:10/32`: bursts of 32), as when
/// a large transfer goes out in chunks between small messages.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SizeMix {
    /// `(size in bytes, weight)`, as given.
    pub parts: Vec<(usize, u32)>,
    /// Messages per drawn size (1: every message drawn on its own).
    #[serde(default = "one")]
    pub burst: u32,
}

fn one() -> u32 {
    1
}

impl SizeMix {
    /// Parses `SIZE:WEIGHT,...[/BURST]` (sizes with units, weights positive whole numbers, an
    /// optional burst length) with every size within `1..=max`.
    pub fn parse(s: &str, max: usize) -> Result<SizeMix, String> {
        let (s, burst) = match s.rsplit_once('/') {
            None => (s, 1),
            Some((mix, b)) => match b.trim().parse::<u32>() {
                Ok(n) if (1..=1_000_000).contains(&n) => (mix, n),
                _ => {
                    return Err(format!(
                        "`/{b}`: the burst after `/` is how many messages share a drawn size, from 1 to 1000000"
                    ))
                }
            },
        };
        let mut parts = Vec::new();
        for item in s.split(',').filter(|x| !x.trim().is_empty()) {
            let (size, weight) = item.trim().split_once(':').ok_or_else(|| {
                format!("`{item}`: a part of a size mix is SIZE:WEIGHT, e.g. 4K:20")
            })?;
            let size = parse_size(size.trim())?;
            if size == 0 || size > max {
                return Err(format!(
                    "`{item}`: sizes in a mix must be between 1 B and {}",
                    fmt_size(max)
                ));
            }
            let weight: u32 = match weight.trim().parse() {
                Ok(w) if w > 0 && w <= 1_000_000 => w,
                _ => {
                    return Err(format!(
                        "`{item}`: the weight must be a whole number from 1 to 1000000"
                    ))
                }
            };
            parts.push((size, weight));
        }
        if parts.is_empty() {
            return Err("an empty size mix: give SIZE:WEIGHT pairs, e.g. 88:70,4K:20,1M:10".into());
        }
        Ok(SizeMix { parts, burst })
    }

    /// Canonical text (`88:70,4K:20,1M:10`), as recorded in results.
    pub fn name(&self) -> String {
        self.parts
            .iter()
            .map(|(s, w)| {
                let f = fmt_size(*s);
                let short = f
                    .strip_suffix("iB")
                    .or_else(|| f.strip_suffix('B'))
                    .unwrap_or(&f);
                format!("{short}:{w}")
            })
            .collect::<Vec<_>>()
            .join(",")
            + &match self.burst {
                1 => String::new(),
                b => format!("/{b}"),
            }
    }

    /// Mean message size, bytes (weighted).
    pub fn mean(&self) -> f64 {
        let w: u64 = self.parts.iter().map(|p| u64::from(p.1)).sum();
        let b: f64 = self.parts.iter().map(|p| p.0 as f64 * f64::from(p.1)).sum();
        b / w as f64
    }

    /// The largest size.
    pub fn max(&self) -> usize {
        self.parts.iter().map(|p| p.0).max().unwrap_or(0)
    }

    /// The sizes of messages, in the order seed `seed` fixes.
    pub(crate) fn sizes(&self, seed: u64) -> MixSizes {
        MixSizes {
            parts: self.parts.clone(),
            total: self.parts.iter().map(|p| u64::from(p.1)).sum(),
            state: seed ^ 0x9E37_79B9_7F4A_7C15,
            burst: self.burst.max(1),
            left: 0,
            current: 0,
        }
    }
}

/// An endless sequence of sizes drawn from a [`SizeMix`] (splitmix64).
#[derive(Debug, Clone)]
pub(crate) struct MixSizes {
    parts: Vec<(usize, u32)>,
    total: u64,
    state: u64,
    burst: u32,
    /// Messages of the current burst still to come.
    left: u32,
    current: usize,
}

impl Iterator for MixSizes {
    type Item = usize;
    fn next(&mut self) -> Option<usize> {
        if self.left == 0 {
            self.current = self.draw();
            self.left = self.burst;
        }
        self.left -= 1;
        Some(self.current)
    }
}

impl MixSizes {
    fn draw(&mut self) -> usize {
        self.state = self.state.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.state;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^= z >> 31;
        let mut pick = z % self.total;
        for &(size, w) in &self.parts {
            if pick < u64::from(w) {
                return size;
            }
            pick -= u64::from(w);
        }
        self.parts.last().map_or(1, |p| p.0)
    }
}

/// Bursts: messages sent back to back, then the sender idle for a gap (`--burst 1000/5ms`),
/// as a server answering bursts of requests does; a pool then grows in the burst and sits
/// unused in the gap.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct Burst {
    /// Messages per burst.
    pub messages: u32,
    /// Idle time after each burst, microseconds.
    pub gap_us: u64,
}

impl Burst {
    /// Parses `MESSAGES/GAP` (`1000/5ms`): 1 to 1000000 messages, a gap of 1 us to 10 s.
    pub fn parse(s: &str) -> Result<Burst, String> {
        let (n, gap) = s.split_once('/').ok_or_else(|| {
            format!("`{s}`: a burst is MESSAGES/GAP, e.g. 1000/5ms (1000 messages back to back, then 5 ms idle)")
        })?;
        let messages = match n.trim().parse::<u32>() {
            Ok(0) => {
                return Err(format!(
                    "`{s}`: a burst of 0 messages never sends; give 1 to 1000000"
                ))
            }
            Ok(m) if m <= 1_000_000 => m,
            _ => {
                return Err(format!(
                    "`{s}`: the messages per burst are a whole number from 1 to 1000000"
                ))
            }
        };
        let gap =
            crate::units::parse_duration(gap.trim()).map_err(|e| format!("`{s}`: the gap: {e}"))?;
        let gap_us = gap.as_micros() as u64;
        if !(1..=10_000_000).contains(&gap_us) {
            return Err(format!(
                "`{s}`: the gap between bursts must be from 1us to 10s"
            ));
        }
        Ok(Burst { messages, gap_us })
    }

    /// Canonical text (`1000/5ms`), as recorded in results.
    pub fn name(&self) -> String {
        let g = self.gap_us;
        let gap = if g.is_multiple_of(1_000_000) {
            format!("{}s", g / 1_000_000)
        } else if g.is_multiple_of(1000) {
            format!("{}ms", g / 1000)
        } else {
            format!("{g}us")
        };
        format!("{}/{gap}", self.messages)
    }

    /// The idle gap.
    pub fn gap(&self) -> std::time::Duration {
        std::time::Duration::from_micros(self.gap_us)
    }
}

/// Where memory paths get each message's buffers.
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize,
)]
#[serde(rename_all = "snake_case")]
pub enum Alloc {
    /// Reuse buffers the path has released (`take_buf`): no allocation in a steady loop.
    #[default]
    Pool,
    /// Allocate and fill a new buffer per message, freed once the kernel released it.
    Fresh,
    /// One pool for every sender thread, behind a lock: a buffer released on one thread may
    /// be taken next by another (the Net.ZMQ study's pool).
    Shared,
}

impl Alloc {
    /// Every mode, in the order `--help` lists them.
    pub const ALL: [Alloc; 3] = [Alloc::Pool, Alloc::Fresh, Alloc::Shared];

    /// The stable name.
    pub fn name(self) -> &'static str {
        match self {
            Alloc::Pool => "pool",
            Alloc::Fresh => "fresh",
            Alloc::Shared => "shared",
        }
    }
}

impl std::str::FromStr for Alloc {
    type Err = String;
    fn from_str(s: &str) -> Result<Alloc, String> {
        Alloc::ALL
            .into_iter()
            .find(|a| a.name() == s)
            .ok_or_else(|| format!("`{s}` is not an allocation mode: use pool, fresh or shared"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_parses_names_itself_and_refuses_one_that_never_sends() {
        let b = Burst::parse("1000/5ms").unwrap();
        assert_eq!(
            (b.messages, b.gap_us, b.name()),
            (1000, 5000, "1000/5ms".to_string())
        );
        assert_eq!(Burst::parse("8/250us").unwrap().name(), "8/250us");
        assert!(Burst::parse("0/5ms").unwrap_err().contains("never sends"));
        assert!(Burst::parse("10").unwrap_err().contains("MESSAGES/GAP"));
        assert!(Burst::parse("10/0s").unwrap_err().contains("1us to 10s"));
        assert!(Burst::parse("10/fast").is_err());
    }

    #[test]
    fn a_mix_parses_draws_its_weights_and_repeats_by_seed() {
        let m = SizeMix::parse("88:70,4K:20,1M:10", 1 << 30).unwrap();
        assert_eq!(m.parts, vec![(88, 70), (4096, 20), (1 << 20, 10)]);
        assert_eq!(m.burst, 1);
        assert_eq!(m.name(), "88:70,4K:20,1M:10");
        assert!((m.mean() - (88.0 * 0.7 + 4096.0 * 0.2 + 1048576.0 * 0.1)).abs() < 1e-6);
        let n = 100_000;
        let drawn: Vec<usize> = m.sizes(3).take(n).collect();
        let share = |s: usize| drawn.iter().filter(|&&x| x == s).count() as f64 / n as f64;
        assert!((share(88) - 0.7).abs() < 0.01, "{}", share(88));
        assert!((share(4096) - 0.2).abs() < 0.01);
        assert!((share(1 << 20) - 0.1).abs() < 0.01);
        assert_eq!(drawn[..50], m.sizes(3).take(50).collect::<Vec<_>>()[..]);
        assert_ne!(drawn[..50], m.sizes(4).take(50).collect::<Vec<_>>()[..]);
        // Bursts: each drawn size repeats, and the shares stay.
        let b = SizeMix::parse("4K:90,64K:10/32", 1 << 30).unwrap();
        assert_eq!((b.burst, b.name()), (32, "4K:90,64K:10/32".to_string()));
        let drawn: Vec<usize> = b.sizes(1).take(32 * 10_000).collect();
        assert!(drawn.chunks(32).all(|c| c.iter().all(|&x| x == c[0])));
        let big = drawn.iter().filter(|&&x| x == 65536).count() as f64 / drawn.len() as f64;
        assert!((big - 0.1).abs() < 0.015, "{big}");
    }

    #[test]
    fn bad_mixes_say_what_a_mix_is() {
        for (bad, says) in [
            ("", "empty size mix"),
            ("4K", "SIZE:WEIGHT"),
            ("4K:0", "weight"),
            ("4K:x", "weight"),
            ("0:5", "at least 1"),
            ("2G:1", "between"),
            ("zz:1", "zz"),
            ("4K:1/0", "burst"),
            ("4K:1/x", "burst"),
        ] {
            let e = SizeMix::parse(bad, 1 << 30).unwrap_err();
            assert!(e.contains(says), "{bad}: {e}");
        }
        assert_eq!("fresh".parse::<Alloc>(), Ok(Alloc::Fresh));
        assert_eq!("shared".parse::<Alloc>(), Ok(Alloc::Shared));
        assert!("heap"
            .parse::<Alloc>()
            .unwrap_err()
            .contains("pool, fresh or shared"));
    }
}
