//! Calibration: which of the adaptive sender's paths (`copy`, `msg-zerocopy`, `uring`,
//! `uring-zc`) wins at each message size on a route, measured in interleaved rounds and turned
//! into a checked [`Profile`].
//!
//! Each round measures every path at every size once, in an order shuffled per round with
//! the paths of a size back to back (the host drifts in phases of tens of seconds: what is
//! compared should run close together). Each path is paired with `copy` by round; a size takes
//! the path that beat `copy` in more than half of its rounds by the largest median ratio above
//! 1.03 ([`Measurement::winner`]), else `copy`. Sizes where the rounds leave the winner in
//! doubt get tie-break rounds before the profile is made.
//!
//! The plan and the rule are here; the measuring of one window is the caller's
//! ([`Calibration::run`]) or this module's own, over connections the caller makes
//! ([`Calibration::over`]).

use crate::profile::{HeadToHead, Measurement, PathMeasurement, Profile, ProfileEnvironment};
use crate::{Error, Options, Result, Socket, Strategy};
use std::time::{Duration, Instant};

/// The margin by which a path must beat `copy` to take a tier: 3%.
const MARGIN: f64 = 0.03;

/// One window to measure: `path` sending messages of `size` bytes, in `round`.
///
/// ```
/// let w = sendpath::Window { round: 0, size: 4096, path: sendpath::Strategy::Uring };
/// # let _ = w;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Window {
    /// The round (from 0); tie-break rounds follow the planned ones.
    pub round: u32,
    /// Message size, bytes.
    pub size: usize,
    /// The path.
    pub path: Strategy,
}

/// What one window measured.
///
/// ```
/// let r = sendpath::WindowResult { gbps: 12.5, copied_fraction: Some(1.0) };
/// # let _ = r;
/// ```
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct WindowResult {
    /// Payload throughput, Gbit/s.
    pub gbps: f64,
    /// Fraction of the window's zero-copy completions the kernel reported copied; `None`
    /// when it had none.
    pub copied_fraction: Option<f64>,
}

/// A calibration: the sizes, the rounds, and where it ran. [`Calibration::run`] measures
/// with the caller's measurement of a window; [`Calibration::over`] with this library's own
/// sender, on connections the caller makes (whose peers must read and discard).
///
/// ```no_run
/// use sendpath::{Calibration, Socket};
/// use std::net::{TcpListener, TcpStream};
/// use std::time::Duration;
///
/// let listener = TcpListener::bind("127.0.0.1:0")?;
/// let addr = listener.local_addr()?;
/// std::thread::spawn(move || {
///     for s in listener.incoming().flatten() {
///         std::thread::spawn(move || std::io::copy(&mut &s, &mut std::io::sink()));
///     }
/// });
/// let cal = Calibration { sizes: vec![256, 4096, 65536], ..Calibration::new("loopback") };
/// let profile = cal.over(|| TcpStream::connect(addr).map(Socket::from), Duration::from_millis(300))?;
/// println!("tiers: {}", profile.describe_tiers().join(", "));
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Calibration {
    /// Message sizes, bytes.
    pub sizes: Vec<usize>,
    /// Rounds: every path at every size once each.
    pub rounds: u32,
    /// Extra rounds at the sizes the rounds left in doubt (0: none).
    pub tiebreak_rounds: u32,
    /// Seeds the order of each round.
    pub seed: u64,
    /// The route, in words, as the profile records it (`loopback`, `udp blackhole`).
    pub route: String,
    /// What each path is opened with (registered buffers, say); the paths are the
    /// [`Profile::TIER_PATHS`].
    pub options: Options,
    /// The command that ran it, as the profile records it.
    pub command_line: Vec<String>,
}

impl Calibration {
    /// 256 B to 1 MiB in powers of four, 8 rounds and 4 tie-break rounds, on `route`.
    ///
    /// ```
    /// let c = sendpath::Calibration::new("loopback");
    /// assert_eq!(c.rounds, 8);
    /// ```
    pub fn new(route: &str) -> Calibration {
        Calibration {
            sizes: vec![
                256,
                1 << 10,
                4 << 10,
                16 << 10,
                64 << 10,
                256 << 10,
                1 << 20,
            ],
            rounds: 8,
            tiebreak_rounds: 4,
            seed: 1,
            route: route.into(),
            options: Options::default(),
            command_line: Vec::new(),
        }
    }

    /// Measures every window with `measure`, round by round, then tie-break rounds where the
    /// winner is in doubt, and makes the profile. `measure` returns `Ok(None)` to stop (the
    /// run was interrupted: no profile, `Ok(None)` here); its error ends the calibration.
    ///
    /// ```
    /// use sendpath::{Calibration, Strategy, WindowResult};
    /// // A host where uring-zc is 1.5x copy from 64 KiB, and the rest tie.
    /// let cal = Calibration { sizes: vec![4096, 65536], rounds: 6, ..Calibration::new("sim") };
    /// let profile = cal.run(|w| {
    ///     let gbps = if w.path == Strategy::UringZc && w.size >= 65536 { 15.0 } else { 10.0 };
    ///     Ok::<_, std::convert::Infallible>(Some(WindowResult { gbps, copied_fraction: None }))
    /// }).unwrap().unwrap();
    /// assert_eq!(profile.tier(4096), Strategy::Copy);
    /// assert_eq!(profile.tier(65536), Strategy::UringZc);
    /// ```
    pub fn run<E>(
        &self,
        mut measure: impl FnMut(&Window) -> std::result::Result<Option<WindowResult>, E>,
    ) -> std::result::Result<Option<Profile>, E> {
        let mut samples = Vec::new();
        if !self.rounds_of(&self.sizes, 0..self.rounds, &mut samples, &mut measure)? {
            return Ok(None);
        }
        let doubt = contested(&measurements(&samples));
        let more = self.rounds..self.rounds + self.tiebreak_rounds;
        if !doubt.is_empty() && !self.rounds_of(&doubt, more, &mut samples, &mut measure)? {
            return Ok(None);
        }
        Ok(Some(self.profile(&samples)))
    }

    /// Every window of `sizes` in `rounds`, each round in its shuffled order; false when
    /// `measure` stopped the run.
    fn rounds_of<E>(
        &self,
        sizes: &[usize],
        rounds: std::ops::Range<u32>,
        samples: &mut Vec<(Window, WindowResult)>,
        measure: &mut impl FnMut(&Window) -> std::result::Result<Option<WindowResult>, E>,
    ) -> std::result::Result<bool, E> {
        for round in rounds {
            for w in windows(sizes, self.seed, round) {
                match measure(&w)? {
                    Some(r) => samples.push((w, r)),
                    None => return Ok(false),
                }
            }
        }
        Ok(true)
    }

    /// [`Calibration::run`] with this library's sender: each window opens its path on a new
    /// connection from `connect` and sends messages of its size for `window` (after a warm-up
    /// of a fifth of it), counting the bytes the socket accepted. The peer must read and
    /// discard (or be a route that drops, like a connected UDP socket out of a dead link).
    pub fn over(
        &self,
        mut connect: impl FnMut() -> std::io::Result<Socket>,
        window: Duration,
    ) -> Result<Profile> {
        let r = self.run(|w| {
            let sock = connect().map_err(Error::sys("connect (calibration route)"))?;
            measure_window(w, sock, &self.options, window).map(Some)
        })?;
        Ok(r.expect("the library's measurement never stops a calibration"))
    }

    /// The profile of these samples.
    fn profile(&self, samples: &[(Window, WindowResult)]) -> Profile {
        let uname = rustix::system::uname();
        let cpuinfo = std::fs::read_to_string("/proc/cpuinfo").unwrap_or_default();
        let cpu = cpuinfo
            .lines()
            .find_map(|l| l.strip_prefix("model name"))
            .and_then(|l| l.split_once(':'))
            .map_or("unknown".into(), |(_, v)| v.trim().to_string());
        let env = ProfileEnvironment {
            kernel: uname.release().to_string_lossy().into_owned(),
            cpu,
            cpus: std::thread::available_parallelism().map_or(1, |n| n.get()),
            route: self.route.clone(),
            paths: Profile::TIER_PATHS.map(Strategy::name).join(", "),
            created_unix_s: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_secs()),
            sendpath_version: env!("CARGO_PKG_VERSION").into(),
            command_line: self.command_line.clone(),
        };
        Profile::from_measurements(measurements(samples), MARGIN, env)
    }
}

/// The windows of one round at `sizes`: sizes in a shuffled order, and the paths of each size
/// back to back in a shuffled order of their own.
fn windows(sizes: &[usize], seed: u64, round: u32) -> Vec<Window> {
    let mut rng =
        fastrand::Rng::with_seed(seed ^ u64::from(round).wrapping_mul(0x9E37_79B9_7F4A_7C15));
    let mut sizes = sizes.to_vec();
    rng.shuffle(&mut sizes);
    let mut out = Vec::new();
    for size in sizes {
        let mut paths = Profile::TIER_PATHS;
        rng.shuffle(&mut paths);
        out.extend(paths.map(|path| Window { round, size, path }));
    }
    out
}

/// One window with this library's sender: `w.path` on `sock`, sending `w.size`-byte messages
/// in batches for a warm-up, then for `window`, timed.
fn measure_window(
    w: &Window,
    sock: Socket,
    opts: &Options,
    window: Duration,
) -> Result<WindowResult> {
    let mut path = crate::open(w.path, sock, opts)?;
    let mut batch = Vec::with_capacity(16);
    let mut send_for = |d: Duration| -> Result<(u64, Duration)> {
        let start = Instant::now();
        let before = path.stats().bytes;
        while start.elapsed() < d {
            batch.extend((0..16).map(|_| path.take_buf(w.size)));
            path.send_bufs(&mut batch)?;
        }
        Ok((path.stats().bytes - before, start.elapsed()))
    };
    send_for(window / 5)?;
    let (bytes, took) = send_for(window)?;
    let stats = path.close(Duration::from_secs(2))?;
    Ok(WindowResult {
        gbps: bytes as f64 * 8.0 / took.as_secs_f64() / 1e9,
        copied_fraction: stats.copied_fraction(),
    })
}

/// Every path against copy at each size of `samples`, paired by round.
fn measurements(samples: &[(Window, WindowResult)]) -> Vec<Measurement> {
    let mut sizes: Vec<usize> = samples.iter().map(|(w, _)| w.size).collect();
    sizes.sort_unstable();
    sizes.dedup();
    let mut out = Vec::new();
    for size in sizes {
        let mut paths = Vec::new();
        let mut rounds = 0;
        for path in Profile::TIER_PATHS {
            let ratios = ratios(samples, size, path, Strategy::Copy);
            if ratios.is_empty() {
                continue;
            }
            rounds = rounds.max(ratios.len() as u32);
            let of = |p: Strategy| {
                samples
                    .iter()
                    .filter(move |(w, _)| w.size == size && w.path == p)
            };
            let gbps: Vec<f64> = of(path).map(|(_, r)| r.gbps).collect();
            let copied: Vec<f64> = of(path).filter_map(|(_, r)| r.copied_fraction).collect();
            let (lo, hi) = min_max(&ratios);
            paths.push(PathMeasurement {
                path,
                gbps: median(&gbps),
                ratio_median: median(&ratios),
                ratio_min: lo,
                ratio_max: hi,
                wins: ratios.iter().filter(|&&v| v > 1.0).count() as u32,
                copied_fraction: (!copied.is_empty()).then(|| median(&copied)),
            });
        }
        if paths.len() > 1 {
            out.push(Measurement {
                size_bytes: size,
                rounds,
                paths,
                head_to_head: head_to_head(samples, size),
            });
        }
    }
    out
}

/// The per-round ratios `a` / `b` at `size`, over the rounds both ran in.
fn ratios(samples: &[(Window, WindowResult)], size: usize, a: Strategy, b: Strategy) -> Vec<f64> {
    let at = |p: Strategy, round: u32| {
        samples
            .iter()
            .find(|(w, _)| w.size == size && w.path == p && w.round == round)
            .map(|(_, r)| r.gbps)
    };
    samples
        .iter()
        .filter(|(w, _)| w.size == size && w.path == a)
        .filter_map(|(w, r)| {
            let base = at(b, w.round)?;
            (base > 0.0).then(|| r.gbps / base)
        })
        .collect()
}

/// The paths other than copy at `size` paired with each other by round, each pair both ways
/// (the median of the ratios b / a is not exactly the reciprocal of that of a / b).
fn head_to_head(samples: &[(Window, WindowResult)], size: usize) -> Vec<HeadToHead> {
    let others = Profile::TIER_PATHS
        .into_iter()
        .filter(|&p| p != Strategy::Copy);
    let mut out = Vec::new();
    for a in others.clone() {
        for b in others.clone().filter(|&b| b != a) {
            let r = ratios(samples, size, a, b);
            if !r.is_empty() {
                out.push(HeadToHead {
                    path: a,
                    over: b,
                    rounds: r.len() as u32,
                    wins: r.iter().filter(|&&v| v > 1.0).count() as u32,
                    ratio_median: median(&r),
                });
            }
        }
    }
    out
}

/// The sizes whose winner is in doubt, which get tie-break rounds:
/// - a path took the size from copy (faster in more than half of the rounds, by a median
///   above 1.03) but not in a clear majority of them (the sign test at 5%: 6 of 6, 7 of 8,
///   10 of 12...), so the rounds do not yet say it beats copy; or
/// - two or more paths beat copy, and the two with the largest ratios to copy were not told
///   apart when paired with each other (neither was faster in a clear majority).
fn contested(measurements: &[Measurement]) -> Vec<usize> {
    let clear = |n: u32, wins: u32| clear_majority(n as usize).is_some_and(|k| wins as usize >= k);
    measurements
        .iter()
        .filter(|m| {
            let winner = m.winner(MARGIN);
            let over_copy = winner != Strategy::Copy
                && m.paths
                    .iter()
                    .find(|p| p.path == winner)
                    .is_some_and(|p| !clear(m.rounds, p.wins));
            let c = m.candidates(MARGIN);
            let between = match c.as_slice() {
                [a, b, ..] => m
                    .pair(a.path, b.path)
                    .is_none_or(|(n, w, _)| !clear(n, w) && !clear(n, n - w)),
                _ => false,
            };
            over_copy || between
        })
        .map(|m| m.size_bytes)
        .collect()
}

/// The fewest wins of `n` paired rounds that a one-sided sign test at 5% calls a clear
/// majority (`None` when even `n` of `n` is not: fewer than 5 rounds).
pub(crate) fn clear_majority(n: usize) -> Option<usize> {
    // P(X >= k) for X ~ Binomial(n, 1/2), from the top down.
    let mut tail = 0.0;
    let mut choose = 1.0; // C(n, k), starting at k = n
    let total = 2f64.powi(n as i32);
    let mut best = None;
    for k in (0..=n).rev() {
        if k < n {
            choose = choose * (k + 1) as f64 / (n - k) as f64;
        }
        tail += choose / total;
        if tail <= 0.05 {
            best = Some(k);
        } else {
            break;
        }
    }
    best
}

fn median(v: &[f64]) -> f64 {
    let mut s = v.to_vec();
    s.sort_by(f64::total_cmp);
    match s.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => s[n / 2],
        n => (s[n / 2 - 1] + s[n / 2]) / 2.0,
    }
}

fn min_max(v: &[f64]) -> (f64, f64) {
    let lo = v.iter().copied().fold(f64::INFINITY, f64::min);
    let hi = v.iter().copied().fold(f64::NEG_INFINITY, f64::max);
    (lo, hi)
}

#[cfg(test)]
mod tests {
    use super::*;
    use Strategy::{Copy, MsgZerocopy, Uring, UringZc};

    /// A simulated host: `gbps(path, size, round)`.
    fn calibrate(
        cal: &Calibration,
        gbps: impl Fn(Strategy, usize, u32) -> f64,
    ) -> (Profile, Vec<Window>) {
        let mut seen = Vec::new();
        let p = cal
            .run(|w| {
                seen.push(*w);
                Ok::<_, ()>(Some(WindowResult {
                    gbps: gbps(w.path, w.size, w.round),
                    copied_fraction: (w.path.avoids_send_copy()).then_some(1.0),
                }))
            })
            .unwrap()
            .unwrap();
        (p, seen)
    }

    #[test]
    fn every_round_measures_every_path_at_every_size_with_a_size_s_paths_back_to_back() {
        let cal = Calibration {
            sizes: vec![256, 65536],
            rounds: 3,
            tiebreak_rounds: 0,
            ..Calibration::new("sim")
        };
        let (_, seen) = calibrate(&cal, |_, _, _| 10.0);
        assert_eq!(seen.len(), 3 * 2 * 4);
        for round in seen.chunks(8) {
            assert!(round
                .chunks(4)
                .all(|s| s.iter().all(|w| w.size == s[0].size)));
        }
        let orders: Vec<Vec<Strategy>> = seen
            .chunks(4)
            .map(|c| c.iter().map(|w| w.path).collect())
            .collect();
        assert!(
            orders.windows(2).any(|w| w[0] != w[1]),
            "shuffled: {orders:?}"
        );
    }

    #[test]
    fn a_path_that_wins_clearly_takes_its_sizes_and_the_profile_records_the_copy() {
        let cal = Calibration {
            sizes: vec![256, 4096, 65536],
            rounds: 8,
            ..Calibration::new("sim")
        };
        let (p, seen) = calibrate(&cal, |path, size, _| match (path, size) {
            (Uring, 256) => 20.0,
            (UringZc, 65536) => 15.0,
            (MsgZerocopy, 65536) => 12.0,
            _ => 10.0,
        });
        assert_eq!(seen.len(), 8 * 3 * 4, "clear winners: no tie-break rounds");
        assert_eq!(
            (p.tier(256), p.tier(4096), p.tier(65536)),
            (Uring, Copy, UringZc)
        );
        assert!(p.zerocopy_measured_copied(), "uring-zc won while copied");
        assert_eq!(p.environment().unwrap().route, "sim");
        let back = Profile::from_json(&p.to_json()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn a_winner_in_doubt_gets_tie_break_rounds_at_its_size_only() {
        let cal = Calibration {
            sizes: vec![4096, 65536],
            rounds: 8,
            tiebreak_rounds: 4,
            ..Calibration::new("sim")
        };
        // At 64 KiB msg-zerocopy wins 5 of 8 planned rounds (not a clear majority), then all.
        let (p, seen) = calibrate(&cal, |path, size, round| match (path, size) {
            (MsgZerocopy, 65536) if round < 8 && round % 3 == 0 => 9.0,
            (MsgZerocopy, 65536) => 12.0,
            _ => 10.0,
        });
        let extra: Vec<&Window> = seen.iter().filter(|w| w.round >= 8).collect();
        assert_eq!(extra.len(), 4 * 4);
        assert!(extra.iter().all(|w| w.size == 65536));
        assert_eq!(p.tier(65536), MsgZerocopy);
    }

    #[test]
    fn a_stopped_run_makes_no_profile() {
        let cal = Calibration::new("sim");
        let mut n = 0;
        let r = cal.run(|_| {
            n += 1;
            Ok::<_, ()>((n < 5).then_some(WindowResult {
                gbps: 1.0,
                copied_fraction: None,
            }))
        });
        assert_eq!(r, Ok(None));
    }

    #[test]
    fn clear_majority_is_a_one_sided_sign_test_at_5_percent() {
        let k: Vec<Option<usize>> = (1..=10).map(clear_majority).collect();
        let want = [
            None,
            None,
            None,
            None,
            Some(5),
            Some(6),
            Some(7),
            Some(7),
            Some(8),
            Some(9),
        ];
        assert_eq!(k, want);
    }
}
