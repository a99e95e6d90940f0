//! The adaptive sender's decisions, free of I/O: which path each send takes, when a route stops
//! using zero-copy and when it tries again, and how many zero-copy sends may await completion.
//!
//! - **Tiers** come from a [`Profile`]: the path (`copy`, `msg-zerocopy`, `uring`,
//!   `uring-zc`) this host measured fastest at each size; file data goes by `sendfile`.
//! - **Runs**: a zero-copy tier is used only once [`AdaptiveConfig::run_min`] sends in a row
//!   were in zero-copy tiers. Zero-copy won in streams of one size; interleaved with copied
//!   sends it lost (measured on loopback: 256 B, 4 KiB and 64 KiB drawn at random, 64 KiB by
//!   MSG_ZEROCOPY, ran at 0.70x of copying everything; 4 KiB and 64 KiB in bursts of 32 of a
//!   size, at 0.90x; bursts of 256 and 2048 at 1.03x and 1.06x). The losses are measured;
//!   their likely cause is that the kernel does not put copied and zero-copy bytes in one
//!   packet, so every switch starts a new one.
//! - **Copied completions**: a profile made where the kernel delivers zero-copy expects
//!   non-copied completions. When they come back copied (a route that delivers locally), the
//!   measured gain is not there: after [`AdaptiveConfig::copied_limit`] copied completions in a
//!   row the route stops using zero-copy, sends by copy for a while, then tries again; each
//!   failed try doubles the wait (counted in sends, so an idle route costs nothing). A profile
//!   whose zero-copy tiers were measured *while* the kernel copied
//!   ([`Profile::zerocopy_measured_copied`](crate::profile::Profile::zerocopy_measured_copied))
//!   already includes that copy, so copied completions are expected and change nothing.
//! - **In-flight cap**: halves on `ENOMEM` or `ENOBUFS`, grows back by one every
//!   [`AdaptiveConfig::grow_after`] completions without error.
//!
//! Every decision is counted in [`Decisions`].

use crate::profile::Profile;
use crate::Strategy;
use serde::{Deserialize, Serialize};

/// The copying path a zero-copy path falls back to: `uring` for `uring-zc` (same driver),
/// `copy` otherwise.
pub(crate) fn copy_of(path: Strategy) -> Strategy {
    match path {
        Strategy::UringZc | Strategy::Uring => Strategy::Uring,
        _ => Strategy::Copy,
    }
}

/// Tunables of the adaptive sender.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AdaptiveConfig {
    /// Copied completions in a row after which the route stops using zero-copy.
    pub copied_limit: u64,
    /// Zero-copy-sized sends that go by copy after the first back-off; each further back-off
    /// without a non-copied completion in between doubles it.
    pub backoff_first_sends: u64,
    /// The longest back-off, in sends.
    pub backoff_max_sends: u64,
    /// Largest in-flight cap (zero-copy sends awaiting completion), and the starting one.
    pub cap_max: usize,
    /// Smallest in-flight cap the halving reaches.
    pub cap_min: usize,
    /// Completions without error per step of growth of the cap (+1).
    pub grow_after: u64,
    /// Sends in a row in zero-copy tiers before zero-copy is used (the first `run_min` of a
    /// run go by copy); 0 uses it at once.
    #[serde(default)]
    pub run_min: u64,
}

impl Default for AdaptiveConfig {
    /// 4 copied completions; back-off 256 sends doubling up to 2^20; cap 256 (the per-worker
    /// cap measured best for an io_uring HTTP server) down to 1, +1 per 64 good completions;
    /// runs of 64.
    fn default() -> Self {
        AdaptiveConfig {
            copied_limit: 4,
            backoff_first_sends: 256,
            backoff_max_sends: 1 << 20,
            cap_max: 256,
            cap_min: 1,
            grow_after: 64,
            run_min: 64,
        }
    }
}

/// Every decision of an adaptive sender, counted.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Decisions {
    /// Sends that went by copy because their size is in a copy tier.
    pub copy_sends: u64,
    /// Sends that went zero-copy.
    pub zerocopy_sends: u64,
    /// Zero-copy-sized sends that went by copy because they began a run (the first
    /// `run_min` of a run).
    #[serde(default)]
    pub run_copies: u64,
    /// File data sent with `sendfile`.
    pub file_sends: u64,
    /// Zero-copy-sized sends that went by copy because the route was backed off.
    pub backoff_copies: u64,
    /// Zero-copy-sized sends that went by copy because the in-flight cap was full.
    pub cap_copies: u64,
    /// Sends whose path differs from the previous send's.
    pub switches: u64,
    /// Times the route stopped using zero-copy after copied completions.
    pub backoffs: u64,
    /// Times it tried zero-copy again after a back-off.
    pub retries: u64,
    /// Times the in-flight cap was halved (ENOMEM or ENOBUFS).
    pub cap_halvings: u64,
    /// The in-flight cap now (the smallest, over merged senders).
    pub cap: usize,
}

impl Decisions {
    /// Adds another sender's counts; the cap becomes the smaller of the two.
    pub fn merge(&mut self, o: &Decisions) {
        self.copy_sends += o.copy_sends;
        self.zerocopy_sends += o.zerocopy_sends;
        self.run_copies += o.run_copies;
        self.file_sends += o.file_sends;
        self.backoff_copies += o.backoff_copies;
        self.cap_copies += o.cap_copies;
        self.switches += o.switches;
        self.backoffs += o.backoffs;
        self.retries += o.retries;
        self.cap_halvings += o.cap_halvings;
        self.cap = if self.cap == 0 {
            o.cap
        } else {
            self.cap.min(o.cap)
        };
    }
}

/// The adaptive decisions of one sender (one route). See the module docs.
#[derive(Debug, Clone)]
pub(crate) struct Adaptive {
    profile: Profile,
    cfg: AdaptiveConfig,
    /// Copied completions in a row.
    copied_run: u64,
    /// Zero-copy-sized sends still to go by copy before the next try.
    backoff_left: u64,
    /// Back-offs since the last non-copied completion (the exponent of the next one).
    level: u32,
    cap: usize,
    /// Completions without error since the cap last changed.
    good: u64,
    last: Option<Strategy>,
    /// Sends in a row in zero-copy tiers, this one included.
    run: u64,
    counts: Decisions,
    /// The last size looked up and its tier (a stream of one size looks up once).
    memo: (usize, Strategy),
}

impl Adaptive {
    /// A sender deciding from `profile`.
    pub(crate) fn new(profile: Profile, cfg: AdaptiveConfig) -> Adaptive {
        let cap = cfg.cap_max.max(cfg.cap_min).max(1);
        let memo = (usize::MAX, profile.tier(usize::MAX));
        Adaptive {
            memo,
            profile,
            cfg,
            copied_run: 0,
            backoff_left: 0,
            level: 0,
            cap,
            good: 0,
            last: None,
            run: 0,
            counts: Decisions {
                cap,
                ..Decisions::default()
            },
        }
    }

    /// The path for a memory send of `len` bytes (one of the profile's tier paths, or the
    /// copying path of a zero-copy one), with `zc_inflight` zero-copy sends of this sender
    /// awaiting completion (on the ring, those that pinned their pages).
    #[inline]
    pub(crate) fn choose(&mut self, len: usize, zc_inflight: usize) -> Strategy {
        let tier = self.tier(len);
        let pick = if !tier.avoids_send_copy() {
            self.run = 0;
            self.counts.copy_sends += 1;
            tier
        } else {
            self.run += 1;
            if self.run <= self.cfg.run_min {
                self.counts.run_copies += 1;
                copy_of(tier)
            } else if self.backoff_left > 0 {
                self.backoff_left -= 1;
                if self.backoff_left == 0 {
                    self.counts.retries += 1;
                }
                self.counts.backoff_copies += 1;
                copy_of(tier)
            } else if zc_inflight >= self.cap {
                self.counts.cap_copies += 1;
                copy_of(tier)
            } else {
                self.counts.zerocopy_sends += 1;
                tier
            }
        };
        self.switch_to(pick);
        pick
    }

    /// Counts `n` more sends of a size whose tier is `copy`, each after a `copy` pick: what
    /// `choose` would have counted for each of them (the caller's fast path for a run of them).
    pub(crate) fn count_copies(&mut self, n: u64) {
        if n > 0 {
            debug_assert_eq!(self.last, Some(Strategy::Copy));
            self.run = 0;
            self.counts.copy_sends += n;
        }
    }

    /// The profile's tier for `len` bytes, remembered for the last size asked.
    #[inline]
    pub(crate) fn tier(&mut self, len: usize) -> Strategy {
        if self.memo.0 != len {
            self.memo = (len, self.profile.tier(len));
        }
        self.memo.1
    }

    /// File data: always `sendfile`, counted.
    pub(crate) fn choose_file(&mut self) -> Strategy {
        self.counts.file_sends += 1;
        self.run = 0;
        self.switch_to(Strategy::Sendfile);
        Strategy::Sendfile
    }

    #[inline]
    fn switch_to(&mut self, pick: Strategy) {
        if self.last.is_some_and(|l| l != pick) {
            self.counts.switches += 1;
        }
        self.last = Some(pick);
    }

    /// `sends` zero-copy sends completed, `copied` of them reported copied by the kernel.
    pub(crate) fn on_completions(&mut self, sends: u64, copied: u64) {
        if sends == 0 {
            return;
        }
        self.good += sends;
        while self.good >= self.cfg.grow_after && self.cap < self.cfg.cap_max {
            self.good -= self.cfg.grow_after;
            self.cap += 1;
        }
        if self.cap >= self.cfg.cap_max {
            self.good = 0;
        }
        self.counts.cap = self.cap;
        if self.profile.zerocopy_measured_copied() {
            return;
        }
        if copied < sends {
            // Some went without a copy: the route delivers zero-copy.
            self.copied_run = 0;
            self.level = 0;
        } else {
            self.copied_run += copied;
        }
        if self.copied_run >= self.cfg.copied_limit && self.backoff_left == 0 {
            let wait = self
                .cfg
                .backoff_first_sends
                .saturating_mul(1u64 << self.level.min(40))
                .min(self.cfg.backoff_max_sends)
                .max(1);
            self.backoff_left = wait;
            self.level += 1;
            self.copied_run = 0;
            self.counts.backoffs += 1;
        }
    }

    /// The kernel refused a zero-copy send for lack of memory (`ENOMEM` from SEND_ZC,
    /// `ENOBUFS` from MSG_ZEROCOPY): halve the in-flight cap.
    pub(crate) fn on_no_memory(&mut self) {
        self.cap = (self.cap / 2).max(self.cfg.cap_min).max(1);
        self.good = 0;
        self.counts.cap_halvings += 1;
        self.counts.cap = self.cap;
    }

    /// The in-flight cap now.
    #[cfg(test)]
    pub(crate) fn cap(&self) -> usize {
        self.cap
    }

    /// Whether the route is backed off from zero-copy now.
    #[cfg(test)]
    pub(crate) fn backed_off(&self) -> bool {
        self.backoff_left > 0
    }

    /// What it decided so far.
    pub(crate) fn decisions(&self) -> &Decisions {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Profile, Tier};
    use std::collections::VecDeque;
    use Strategy::{Copy, MsgZerocopy};

    const K: usize = 1024;

    /// The defaults without the run rule (tested on its own below).
    fn no_runs() -> AdaptiveConfig {
        AdaptiveConfig {
            run_min: 0,
            ..AdaptiveConfig::default()
        }
    }

    /// Copy below 64 KiB, zero-copy from there; `copied_ok` as measured on a copying route.
    fn profile(copied_ok: bool) -> Profile {
        tiers(&[(0, Copy), (64 * K, MsgZerocopy)], copied_ok)
    }

    /// A profile of `(from_bytes, path)` tiers.
    fn tiers(t: &[(usize, Strategy)], copied_ok: bool) -> Profile {
        let t = t
            .iter()
            .map(|&(from_bytes, path)| Tier { from_bytes, path });
        Profile::from_tiers(t.collect(), copied_ok).unwrap()
    }

    /// A simulated kernel: each zero-copy send completes `delay` sends later, copied or not.
    struct Kernel {
        delay: usize,
        copied: bool,
        inflight: VecDeque<()>,
    }

    impl Kernel {
        /// One send of `len` through `a`; returns its pick.
        fn send(&mut self, a: &mut Adaptive, len: usize) -> Strategy {
            let pick = a.choose(len, self.inflight.len());
            if pick == MsgZerocopy {
                self.inflight.push_back(());
            }
            while self.inflight.len() > self.delay {
                self.inflight.pop_front();
                a.on_completions(1, u64::from(self.copied));
            }
            pick
        }
    }

    #[test]
    fn a_run_of_copies_counted_at_once_is_counted_as_chosen_one_by_one() {
        let mut one_by_one = Adaptive::new(profile(false), no_runs());
        let mut at_once = Adaptive::new(profile(false), no_runs());
        for a in [&mut one_by_one, &mut at_once] {
            assert_eq!(a.choose(100 * K, 0), MsgZerocopy);
            assert_eq!(a.choose(300, 0), Copy);
        }
        for _ in 0..5 {
            one_by_one.choose(300, 0);
        }
        at_once.count_copies(5);
        at_once.count_copies(0);
        assert_eq!(one_by_one.decisions(), at_once.decisions());
        assert_eq!(at_once.decisions().copy_sends, 6);
        assert_eq!(at_once.decisions().switches, 1);
    }

    #[test]
    fn sizes_below_the_crossover_copy_and_above_go_zero_copy() {
        let mut a = Adaptive::new(profile(false), no_runs());
        let mut k = Kernel {
            delay: 3,
            copied: false,
            inflight: VecDeque::new(),
        };
        for _ in 0..1000 {
            assert_eq!(k.send(&mut a, 4 * K), Copy);
            assert_eq!(k.send(&mut a, 256 * K), MsgZerocopy);
        }
        let d = a.decisions();
        assert_eq!((d.copy_sends, d.zerocopy_sends), (1000, 1000));
        assert_eq!(d.backoffs, 0, "non-copied completions keep zero-copy");
        assert_eq!(d.switches, 1999);
    }

    #[test]
    fn zero_copy_waits_for_a_run_and_interleaved_sizes_copy() {
        let cfg = AdaptiveConfig::default();
        let mut a = Adaptive::new(profile(true), cfg);
        let mut k = Kernel {
            delay: 3,
            copied: true,
            inflight: VecDeque::new(),
        };
        // Interleaved with small sends, no run forms: all by copy.
        for _ in 0..500 {
            assert_eq!(k.send(&mut a, 100), Copy);
            assert_eq!(k.send(&mut a, M), Copy);
        }
        assert_eq!(a.decisions().run_copies, 500);
        assert_eq!(a.decisions().zerocopy_sends, 0);
        // A run: the first run_min by copy, then zero-copy.
        k.send(&mut a, 100);
        let picks: Vec<Strategy> = (0..cfg.run_min + 20).map(|_| k.send(&mut a, M)).collect();
        let n = cfg.run_min as usize;
        assert!(picks[..n].iter().all(|p| *p == Copy), "{picks:?}");
        assert!(picks[n..].iter().all(|p| *p == MsgZerocopy), "{picks:?}");
        // A uring-zc tier falls back to uring (the same driver).
        let p = tiers(&[(0, Copy), (64 * K, Strategy::UringZc)], true);
        let mut a = Adaptive::new(p, cfg);
        assert_eq!(a.choose(M, 0), Strategy::Uring);
    }

    #[test]
    fn copied_completions_make_it_fall_back_within_the_promised_sends_and_retry_later() {
        let cfg = no_runs();
        let delay = 5;
        let mut a = Adaptive::new(profile(false), cfg);
        let mut k = Kernel {
            delay,
            copied: true,
            inflight: VecDeque::new(),
        };
        // The promise: at most `copied_limit` copied completions, plus the sends in flight
        // when they come, go zero-copy.
        let mut zc = 0;
        let mut first_copy = None;
        for i in 0..10_000 {
            if k.send(&mut a, M) == MsgZerocopy {
                zc += 1;
            } else {
                first_copy.get_or_insert(i);
                break;
            }
        }
        assert_eq!(first_copy, Some(cfg.copied_limit as usize + delay));
        assert_eq!(zc, cfg.copied_limit as usize + delay);
        assert_eq!(a.decisions().backoffs, 1);
        // Backed off: the next backoff_first_sends go by copy, then it tries again.
        let mut copies = 1;
        while k.send(&mut a, M) == Copy {
            copies += 1;
        }
        assert_eq!(copies, cfg.backoff_first_sends);
        assert_eq!(a.decisions().retries, 1);
        // The try fails too (still copied): the second wait is twice as long.
        let mut second = 0;
        let mut n = 0;
        while n < 100_000 {
            n += 1;
            if k.send(&mut a, M) == Copy {
                second += 1;
            } else if second > 0 {
                break;
            }
        }
        assert_eq!(a.decisions().backoffs, 2);
        assert_eq!(second, 2 * cfg.backoff_first_sends);
    }

    const M: usize = 1 << 20;

    #[test]
    fn a_route_that_stops_copying_gets_zero_copy_back_at_the_next_try() {
        let cfg = no_runs();
        let mut a = Adaptive::new(profile(false), cfg);
        let mut k = Kernel {
            delay: 2,
            copied: true,
            inflight: VecDeque::new(),
        };
        while k.send(&mut a, M) == MsgZerocopy {}
        assert!(a.backed_off());
        k.copied = false; // say, the route now leaves through a NIC
        for _ in 0..cfg.backoff_first_sends + 1000 {
            k.send(&mut a, M);
        }
        assert!(!a.backed_off());
        assert_eq!(a.decisions().backoffs, 1);
        assert_eq!(a.decisions().retries, 1);
        assert_eq!(k.send(&mut a, M), MsgZerocopy);
    }

    #[test]
    fn a_profile_measured_on_a_copying_route_keeps_zero_copy_where_it_won() {
        let mut a = Adaptive::new(profile(true), no_runs());
        let mut k = Kernel {
            delay: 4,
            copied: true,
            inflight: VecDeque::new(),
        };
        for _ in 0..5000 {
            assert_eq!(k.send(&mut a, M), MsgZerocopy);
        }
        assert_eq!(a.decisions().backoffs, 0);
    }

    #[test]
    fn no_memory_halves_the_cap_which_then_recovers() {
        let cfg = no_runs();
        let mut a = Adaptive::new(profile(false), cfg);
        assert_eq!(a.cap(), 256);
        a.on_no_memory();
        assert_eq!(a.cap(), 128);
        a.on_no_memory();
        a.on_no_memory();
        assert_eq!(a.cap(), 32);
        assert_eq!(a.decisions().cap_halvings, 3);
        // The cap is enforced: with 32 in flight a zero-copy-sized send copies.
        assert_eq!(a.choose(M, 32), Copy);
        assert_eq!(a.decisions().cap_copies, 1);
        assert_eq!(a.choose(M, 31), MsgZerocopy);
        // Growth: +1 per grow_after good completions, back to the maximum and no further.
        a.on_completions(cfg.grow_after * 10, 0);
        assert_eq!(a.cap(), 42);
        a.on_completions(cfg.grow_after * 1000, 0);
        assert_eq!(a.cap(), 256);
        assert_eq!(a.decisions().cap, 256);
        for _ in 0..20 {
            a.on_no_memory();
        }
        assert_eq!(a.cap(), cfg.cap_min, "never below the minimum");
    }

    #[test]
    fn the_remembered_tier_follows_every_change_of_size() {
        let p = tiers(
            &[(0, Copy), (64 * K, MsgZerocopy), (1 << 20, Strategy::Uring)],
            false,
        );
        let sizes = [
            usize::MAX,
            100,
            100,
            64 * K - 1,
            64 * K,
            M - 1,
            M,
            100,
            usize::MAX,
        ];
        let mut a = Adaptive::new(p.clone(), no_runs());
        for len in sizes {
            assert_eq!(a.tier(len), p.tier(len), "{len} B");
        }
    }

    #[test]
    fn file_data_goes_by_sendfile_and_merging_adds_counts() {
        let mut a = Adaptive::new(profile(false), no_runs());
        assert_eq!(a.choose_file(), Strategy::Sendfile);
        assert_eq!(a.choose(100, 0), Copy);
        let mut d = *a.decisions();
        let mut b = Adaptive::new(profile(false), no_runs());
        b.on_no_memory();
        d.merge(b.decisions());
        assert_eq!((d.file_sends, d.copy_sends, d.switches), (1, 1, 1));
        assert_eq!(d.cap, 128, "the smaller cap");
    }
}
