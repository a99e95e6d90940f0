//! The adaptive sender's decisions, free of I/O: which path each send takes, when a route stops
//! using zero-copy and when it tries again, and how many zero-copy sends may await completion.
//!
//! - **Tiers** come from a [`Profile`]: copy below the crossover this
//!   host measured, zero-copy above it; file data goes by `sendfile`.
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

use crate::profile::{Profile, TierPath};
use serde::{Deserialize, Serialize};

/// The path of one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pick {
    /// Copy the bytes into the socket.
    Copy,
    /// Ask the kernel not to copy (MSG_ZEROCOPY or SEND_ZC).
    ZeroCopy,
    /// File data: `sendfile`.
    File,
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
}

impl Default for AdaptiveConfig {
    /// 4 copied completions; back-off 256 sends doubling up to 2^20; cap 256 (the per-worker
    /// cap of the io_uring server study) down to 1, +1 per 64 good completions.
    fn default() -> Self {
        AdaptiveConfig {
            copied_limit: 4,
            backoff_first_sends: 256,
            backoff_max_sends: 1 << 20,
            cap_max: 256,
            cap_min: 1,
            grow_after: 64,
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
pub struct Adaptive {
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
    last: Option<Pick>,
    counts: Decisions,
}

impl Adaptive {
    /// A sender deciding from `profile`.
    pub fn new(profile: Profile, cfg: AdaptiveConfig) -> Adaptive {
        let cap = cfg.cap_max.max(cfg.cap_min).max(1);
        Adaptive {
            profile,
            cfg,
            copied_run: 0,
            backoff_left: 0,
            level: 0,
            cap,
            good: 0,
            last: None,
            counts: Decisions {
                cap,
                ..Decisions::default()
            },
        }
    }

    /// The profile it decides from.
    pub fn profile(&self) -> &Profile {
        &self.profile
    }

    /// The path for a memory send of `len` bytes, with `zc_inflight` zero-copy sends of this
    /// sender awaiting completion.
    pub fn choose(&mut self, len: usize, zc_inflight: usize) -> Pick {
        let pick = if self.profile.tier(len) == TierPath::Copy {
            self.counts.copy_sends += 1;
            Pick::Copy
        } else if self.backoff_left > 0 {
            self.backoff_left -= 1;
            if self.backoff_left == 0 {
                self.counts.retries += 1;
            }
            self.counts.backoff_copies += 1;
            Pick::Copy
        } else if zc_inflight >= self.cap {
            self.counts.cap_copies += 1;
            Pick::Copy
        } else {
            self.counts.zerocopy_sends += 1;
            Pick::ZeroCopy
        };
        self.switch_to(pick);
        pick
    }

    /// File data: always `sendfile`, counted.
    pub fn choose_file(&mut self) -> Pick {
        self.counts.file_sends += 1;
        self.switch_to(Pick::File);
        Pick::File
    }

    fn switch_to(&mut self, pick: Pick) {
        if self.last.is_some_and(|l| l != pick) {
            self.counts.switches += 1;
        }
        self.last = Some(pick);
    }

    /// `sends` zero-copy sends completed, `copied` of them reported copied by the kernel.
    pub fn on_completions(&mut self, sends: u64, copied: u64) {
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
        if self.profile.zerocopy_measured_copied {
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
    pub fn on_no_memory(&mut self) {
        self.cap = (self.cap / 2).max(self.cfg.cap_min).max(1);
        self.good = 0;
        self.counts.cap_halvings += 1;
        self.counts.cap = self.cap;
    }

    /// The in-flight cap now.
    pub fn cap(&self) -> usize {
        self.cap
    }

    /// Whether the route is backed off from zero-copy now.
    pub fn backed_off(&self) -> bool {
        self.backoff_left > 0
    }

    /// What it decided so far.
    pub fn decisions(&self) -> &Decisions {
        &self.counts
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::{Profile, Tier, TierPath};
    use std::collections::VecDeque;

    const K: usize = 1024;

    /// Copy below 64 KiB, zero-copy from there; `copied_ok` as measured on a copying route.
    fn profile(copied_ok: bool) -> Profile {
        let mut p = Profile::defaults();
        p.tiers = vec![
            Tier {
                from_bytes: 0,
                path: TierPath::Copy,
            },
            Tier {
                from_bytes: 64 * K,
                path: TierPath::ZeroCopy,
            },
        ];
        p.zerocopy_measured_copied = copied_ok;
        p
    }

    /// A simulated kernel: each zero-copy send completes `delay` sends later, copied or not.
    struct Kernel {
        delay: usize,
        copied: bool,
        inflight: VecDeque<()>,
    }

    impl Kernel {
        /// One send of `len` through `a`; returns its pick.
        fn send(&mut self, a: &mut Adaptive, len: usize) -> Pick {
            let pick = a.choose(len, self.inflight.len());
            if pick == Pick::ZeroCopy {
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
    fn sizes_below_the_crossover_copy_and_above_go_zero_copy() {
        let mut a = Adaptive::new(profile(false), AdaptiveConfig::default());
        let mut k = Kernel {
            delay: 3,
            copied: false,
            inflight: VecDeque::new(),
        };
        for _ in 0..1000 {
            assert_eq!(k.send(&mut a, 4 * K), Pick::Copy);
            assert_eq!(k.send(&mut a, 256 * K), Pick::ZeroCopy);
        }
        let d = a.decisions();
        assert_eq!((d.copy_sends, d.zerocopy_sends), (1000, 1000));
        assert_eq!(d.backoffs, 0, "non-copied completions keep zero-copy");
        assert_eq!(d.switches, 1999);
    }

    #[test]
    fn copied_completions_make_it_fall_back_within_the_promised_sends_and_retry_later() {
        let cfg = AdaptiveConfig::default();
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
            if k.send(&mut a, M) == Pick::ZeroCopy {
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
        while k.send(&mut a, M) == Pick::Copy {
            copies += 1;
        }
        assert_eq!(copies, cfg.backoff_first_sends);
        assert_eq!(a.decisions().retries, 1);
        // The try fails too (still copied): the second wait is twice as long.
        let mut second = 0;
        let mut n = 0;
        while n < 100_000 {
            n += 1;
            if k.send(&mut a, M) == Pick::Copy {
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
        let cfg = AdaptiveConfig::default();
        let mut a = Adaptive::new(profile(false), cfg);
        let mut k = Kernel {
            delay: 2,
            copied: true,
            inflight: VecDeque::new(),
        };
        while k.send(&mut a, M) == Pick::ZeroCopy {}
        assert!(a.backed_off());
        k.copied = false; // say, the route now leaves through a NIC
        for _ in 0..cfg.backoff_first_sends + 1000 {
            k.send(&mut a, M);
        }
        assert!(!a.backed_off());
        assert_eq!(a.decisions().backoffs, 1);
        assert_eq!(a.decisions().retries, 1);
        assert_eq!(k.send(&mut a, M), Pick::ZeroCopy);
    }

    #[test]
    fn a_profile_measured_on_a_copying_route_keeps_zero_copy_where_it_won() {
        let mut a = Adaptive::new(profile(true), AdaptiveConfig::default());
        let mut k = Kernel {
            delay: 4,
            copied: true,
            inflight: VecDeque::new(),
        };
        for _ in 0..5000 {
            assert_eq!(k.send(&mut a, M), Pick::ZeroCopy);
        }
        assert_eq!(a.decisions().backoffs, 0);
    }

    #[test]
    fn no_memory_halves_the_cap_which_then_recovers() {
        let cfg = AdaptiveConfig::default();
        let mut a = Adaptive::new(profile(false), cfg);
        assert_eq!(a.cap(), 256);
        a.on_no_memory();
        assert_eq!(a.cap(), 128);
        a.on_no_memory();
        a.on_no_memory();
        assert_eq!(a.cap(), 32);
        assert_eq!(a.decisions().cap_halvings, 3);
        // The cap is enforced: with 32 in flight a zero-copy-sized send copies.
        assert_eq!(a.choose(M, 32), Pick::Copy);
        assert_eq!(a.decisions().cap_copies, 1);
        assert_eq!(a.choose(M, 31), Pick::ZeroCopy);
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
    fn file_data_goes_by_sendfile_and_merging_adds_counts() {
        let mut a = Adaptive::new(profile(false), AdaptiveConfig::default());
        assert_eq!(a.choose_file(), Pick::File);
        assert_eq!(a.choose(100, 0), Pick::Copy);
        let mut d = *a.decisions();
        let mut b = Adaptive::new(profile(false), AdaptiveConfig::default());
        b.on_no_memory();
        d.merge(b.decisions());
        assert_eq!((d.file_sends, d.copy_sends, d.switches), (1, 1, 1));
        assert_eq!(d.cap, 128, "the smaller cap");
    }
}
