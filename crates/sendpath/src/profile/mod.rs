//! A host profile: which send path won at which message size on this host, measured by a
//! [`Calibration`](calibrate::Calibration) (`sendpath calibrate` runs one) among `copy`,
//! `msg-zerocopy`, `uring` and `uring-zc`. The adaptive sender decides from it.
//!
//! Profiles are JSON with a `schema_version`; a file of another version is refused with a
//! message that says to re-run `sendpath calibrate`. Without a profile, [`Profile::defaults`]
//! applies: `copy` below 64 KiB (a published break-even for MSG_ZEROCOPY), `msg-zerocopy` from
//! 64 KiB, expecting the kernel not to copy (so on a route that copies, the sender backs off).
//!
//! Where the active profile lives ([`Profile::active_path`]): `$SENDPATH_PROFILE`, else
//! `$XDG_CONFIG_HOME/sendpath/profile.json`, else `$HOME/.config/sendpath/profile.json`.

pub(crate) mod calibrate;

use crate::{Error, Result, Strategy};
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// The profile format this version reads and writes.
const PROFILE_SCHEMA_VERSION: u32 = 1;

/// The paths a tier may name: the memory paths the adaptive sender runs.
const TIER_PATHS: [Strategy; 4] = [
    Strategy::Copy,
    Strategy::MsgZerocopy,
    Strategy::Uring,
    Strategy::UringZc,
];

/// Messages from `from_bytes` up to the next tier's `from_bytes` take `path`.
///
/// ```
/// use sendpath::{Profile, Strategy, Tier};
/// let p = Profile::from_tiers(vec![
///     Tier { from_bytes: 0, path: Strategy::Copy },
///     Tier { from_bytes: 16384, path: Strategy::UringZc },
/// ], false)?;
/// assert_eq!(p.tier(65536), Strategy::UringZc);
/// # Ok::<(), sendpath::Error>(())
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Tier {
    /// Smallest message size of the tier, bytes.
    pub from_bytes: usize,
    /// The path its messages take: one of [`Profile::TIER_PATHS`].
    pub path: Strategy,
}

/// Where a profile came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProfileOrigin {
    /// The documented defaults (no profile file).
    Defaults,
    /// Measured by `sendpath calibrate`.
    Calibrated,
}

/// One path at one size, against `copy` at that size in the same rounds.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct PathMeasurement {
    /// The path.
    pub path: Strategy,
    /// Median throughput, Gbit/s.
    pub gbps: f64,
    /// Median of the per-round ratios path / copy (1 for copy itself).
    pub ratio_median: f64,
    /// Smallest per-round ratio.
    pub ratio_min: f64,
    /// Largest per-round ratio.
    pub ratio_max: f64,
    /// Rounds it was faster than copy in.
    pub wins: u32,
    /// Fraction of its zero-copy completions the kernel reported copied; null when it had none.
    pub copied_fraction: Option<f64>,
}

/// Two paths other than copy at one size, paired with each other by round.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct HeadToHead {
    /// The first path.
    pub path: Strategy,
    /// The path it is compared with.
    pub over: Strategy,
    /// Rounds both ran in.
    pub rounds: u32,
    /// Rounds `path` was faster in.
    pub wins: u32,
    /// Median of the per-round ratios path / over.
    pub ratio_median: f64,
}

/// One size `sendpath calibrate` measured: every path, paired with copy by round.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Measurement {
    /// Message size, bytes.
    pub size_bytes: usize,
    /// Paired rounds.
    pub rounds: u32,
    /// The paths, copy first.
    pub paths: Vec<PathMeasurement>,
    /// The paths other than copy paired with each other (profiles written before these were
    /// measured have none).
    #[serde(default)]
    pub head_to_head: Vec<HeadToHead>,
}

impl Measurement {
    /// The paths that beat copy at this size: median ratio to copy above 1 + `margin`, and
    /// faster than copy in more than half the rounds; by descending median ratio.
    pub fn candidates(&self, margin: f64) -> Vec<&PathMeasurement> {
        let mut c: Vec<&PathMeasurement> = self
            .paths
            .iter()
            .filter(|p| p.path != Strategy::Copy)
            .filter(|p| p.ratio_median > 1.0 + margin && 2 * p.wins > self.rounds)
            .collect();
        c.sort_by(|a, b| b.ratio_median.total_cmp(&a.ratio_median));
        c
    }

    /// `a` and `b` paired with each other: (rounds, rounds `a` was faster in, median a / b).
    /// When only the entry of `b` over `a` is there, its wins are turned round and its median
    /// inverted (exact for an odd number of rounds).
    pub fn pair(&self, a: Strategy, b: Strategy) -> Option<(u32, u32, f64)> {
        let entry = |x, y| {
            self.head_to_head
                .iter()
                .find(|h| (h.path, h.over) == (x, y))
        };
        match (entry(a, b), entry(b, a)) {
            (Some(h), _) => Some((h.rounds, h.wins, h.ratio_median)),
            (None, Some(h)) => Some((h.rounds, h.rounds - h.wins, 1.0 / h.ratio_median)),
            (None, None) => None,
        }
    }

    /// The path that wins at this size, among the [`candidates`](Self::candidates) (else
    /// copy): the first, by median ratio to copy, that no other candidate was faster than in
    /// more than half of their paired rounds. Two paths that both beat copy are ordered by
    /// pairing them with each other, which is more exact than comparing their two ratios to
    /// copy. When every candidate lost to another (a cycle), or nothing was paired, the
    /// largest median ratio to copy wins.
    pub fn winner(&self, margin: f64) -> Strategy {
        let c = self.candidates(margin);
        let beaten = |p: Strategy| {
            c.iter()
                .filter(|q| q.path != p)
                .any(|q| self.pair(q.path, p).is_some_and(|(n, w, _)| 2 * w > n))
        };
        c.iter()
            .find(|p| !beaten(p.path))
            .or(c.first())
            .map_or(Strategy::Copy, |p| p.path)
    }
}

/// Where and how a profile was measured.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ProfileEnvironment {
    /// `uname -r`.
    pub kernel: String,
    /// CPU model.
    pub cpu: String,
    /// CPUs the calibration could run on.
    pub cpus: usize,
    /// The route measured (`loopback`).
    pub route: String,
    /// The paths compared (`copy, msg-zerocopy, uring, uring-zc`).
    pub paths: String,
    /// Seconds since the epoch when it was written.
    pub created_unix_s: u64,
    /// sendpath's version.
    pub sendpath_version: String,
    /// The command that made it.
    pub command_line: Vec<String>,
}

/// A host profile: the path the adaptive sender takes at each message size, and what it was
/// measured from. Made only checked: [`Profile::defaults`], [`Profile::from_tiers`],
/// [`Profile::load`] / [`Profile::from_json`], or a [`Calibration`](crate::Calibration).
///
/// ```no_run
/// use sendpath::{open, Options, Profile, Strategy};
/// let (profile, _file) = Profile::load_active()?; // the defaults when no profile exists
/// println!("tiers: {}", profile.describe_tiers().join(", "));
/// let opts = Options { profile: Some(std::sync::Arc::new(profile)), ..Options::default() };
/// let mut path = open(Strategy::Adaptive, std::net::TcpStream::connect("127.0.0.1:9000")?, &opts)?;
/// # let _ = path;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Profile {
    /// [`PROFILE_SCHEMA_VERSION`].
    schema_version: u32,
    /// Defaults or measured.
    origin: ProfileOrigin,
    /// The tiers, by ascending `from_bytes`, the first from 0.
    tiers: Vec<Tier>,
    /// The zero-copy tiers were measured on a route where the kernel copied zero-copy sends
    /// (loopback, a veth pair): they won *including* that copy, so copied completions are
    /// expected and do not make the sender back off. False for the defaults, which assume a
    /// route that delivers zero-copy.
    zerocopy_measured_copied: bool,
    /// The crossover: the smallest size sent by a zero-copy path; null when no tier is.
    crossover_bytes: Option<usize>,
    /// What was measured; empty for the defaults.
    measurements: Vec<Measurement>,
    /// Where; null for the defaults.
    environment: Option<ProfileEnvironment>,
}

/// The defaults' crossover: 64 KiB, a published break-even for MSG_ZEROCOPY.
const DEFAULT_CROSSOVER_BYTES: usize = 64 << 10;

impl Default for Profile {
    /// [`Profile::defaults`].
    fn default() -> Profile {
        Profile::defaults()
    }
}

impl Profile {
    /// The paths a tier may name: the memory paths the adaptive sender runs.
    pub const TIER_PATHS: [Strategy; 4] = TIER_PATHS;

    /// The profile format this version reads and writes.
    pub const SCHEMA_VERSION: u32 = PROFILE_SCHEMA_VERSION;

    /// `copy` below 64 KiB, `msg-zerocopy` from 64 KiB, expecting non-copied completions.
    ///
    /// ```
    /// let d = sendpath::Profile::defaults();
    /// assert_eq!(d.crossover_bytes(), Some(65536));
    /// ```
    pub fn defaults() -> Profile {
        let tiers = vec![
            Tier {
                from_bytes: 0,
                path: Strategy::Copy,
            },
            Tier {
                from_bytes: DEFAULT_CROSSOVER_BYTES,
                path: Strategy::MsgZerocopy,
            },
        ];
        Profile {
            schema_version: PROFILE_SCHEMA_VERSION,
            origin: ProfileOrigin::Defaults,
            crossover_bytes: crossover(&tiers),
            tiers,
            zerocopy_measured_copied: false,
            measurements: Vec::new(),
            environment: None,
        }
    }

    /// A profile from what `calibrate` measured: each size's tier is its
    /// [`Measurement::winner`] (copy unless another path beat it in more than half of the
    /// paired rounds and by more than `margin`, 0.03 for 3%, in the median ratio; a choice must
    /// be made at every size, so this is the better-estimate rule, not the report's stricter
    /// "beats", which may leave a comparison undecided). Tier bounds sit at the geometric mean
    /// of neighbouring measured sizes.
    pub(crate) fn from_measurements(
        mut measurements: Vec<Measurement>,
        margin: f64,
        environment: ProfileEnvironment,
    ) -> Profile {
        measurements.sort_by_key(|m| m.size_bytes);
        let mut tiers: Vec<Tier> = Vec::new();
        let mut prev: Option<usize> = None;
        let mut copied = false;
        for m in &measurements {
            let path = m.winner(margin);
            if path.avoids_send_copy() {
                copied |= m
                    .paths
                    .iter()
                    .find(|p| p.path == path)
                    .and_then(|p| p.copied_fraction)
                    .is_some_and(|f| f >= 0.5);
            }
            let from = match prev {
                None => 0,
                Some(p) => ((p as f64) * (m.size_bytes as f64)).sqrt().round() as usize,
            };
            prev = Some(m.size_bytes);
            if tiers.last().map(|t| t.path) != Some(path) {
                tiers.push(Tier {
                    from_bytes: from,
                    path,
                });
            }
        }
        if tiers.is_empty() {
            tiers.push(Tier {
                from_bytes: 0,
                path: Strategy::Copy,
            });
        }
        Profile {
            schema_version: PROFILE_SCHEMA_VERSION,
            origin: ProfileOrigin::Calibrated,
            crossover_bytes: crossover(&tiers),
            tiers,
            zerocopy_measured_copied: copied,
            measurements,
            environment: Some(environment),
        }
    }

    /// A profile of the given tiers (a tier's path is one of [`Profile::TIER_PATHS`]; tiers
    /// ascend from 0 bytes); `zerocopy_measured_copied` when the zero-copy tiers won on a
    /// route where the kernel copies them (so copied completions do not make the sender back
    /// off). Refused, saying why, when the tiers are not that.
    ///
    /// ```
    /// use sendpath::{Profile, Strategy, Tier};
    /// let bad = Profile::from_tiers(vec![Tier { from_bytes: 0, path: Strategy::Sendfile }], false);
    /// assert!(bad.unwrap_err().to_string().contains("sendfile"));
    /// ```
    pub fn from_tiers(tiers: Vec<Tier>, zerocopy_measured_copied: bool) -> Result<Profile> {
        let p = Profile {
            schema_version: PROFILE_SCHEMA_VERSION,
            origin: ProfileOrigin::Defaults,
            crossover_bytes: crossover(&tiers),
            tiers,
            zerocopy_measured_copied,
            measurements: Vec::new(),
            environment: None,
        };
        p.check().map_err(Error::Profile)?;
        Ok(p)
    }

    /// Whether the tiers are ones the adaptive sender runs: ascending from 0 bytes, each a
    /// [`Profile::TIER_PATHS`] path; the error says what is wrong.
    fn check(&self) -> std::result::Result<(), String> {
        if self.tiers.first().map(|t| t.from_bytes) != Some(0)
            || self
                .tiers
                .windows(2)
                .any(|w| w[0].from_bytes >= w[1].from_bytes)
        {
            return Err("tiers must start at 0 bytes and ascend".into());
        }
        if let Some(t) = self.tiers.iter().find(|t| !TIER_PATHS.contains(&t.path)) {
            return Err(format!(
                "a tier names {}, which the adaptive sender does not run (copy, msg-zerocopy, uring, uring-zc)",
                t.path
            ));
        }
        Ok(())
    }

    /// Where it came from: the defaults, or a calibration.
    pub fn origin(&self) -> ProfileOrigin {
        self.origin
    }

    /// The tiers, by ascending size, the first from 0 bytes.
    pub fn tiers(&self) -> &[Tier] {
        &self.tiers
    }

    /// Whether the zero-copy tiers were measured on a route where the kernel copied them (a
    /// local receiver): they won including that copy, so copied completions are expected.
    pub fn zerocopy_measured_copied(&self) -> bool {
        self.zerocopy_measured_copied
    }

    /// The smallest size sent by a zero-copy path; `None` when no tier is one.
    pub fn crossover_bytes(&self) -> Option<usize> {
        self.crossover_bytes
    }

    /// What a calibration measured, one entry per size; empty for the defaults.
    pub fn measurements(&self) -> &[Measurement] {
        &self.measurements
    }

    /// Where and how it was measured; `None` for the defaults.
    pub fn environment(&self) -> Option<&ProfileEnvironment> {
        self.environment.as_ref()
    }

    /// The path for a message of `len` bytes.
    ///
    /// ```
    /// let d = sendpath::Profile::defaults();
    /// assert_eq!(d.tier(100), sendpath::Strategy::Copy);
    /// ```
    pub fn tier(&self, len: usize) -> Strategy {
        self.tiers
            .iter()
            .rev()
            .find(|t| t.from_bytes <= len)
            .map_or(Strategy::Copy, |t| t.path)
    }

    /// Parses and checks a profile: its version, and tiers ascending from 0.
    pub fn from_json(text: &str) -> Result<Profile> {
        let bad = |why: String| Error::Profile(why);
        let v: serde_json::Value = serde_json::from_str(text)
            .map_err(|e| bad(format!("not a sendpath profile (invalid JSON: {e})")))?;
        match v.get("schema_version").and_then(|s| s.as_u64()) {
            Some(n) if n == u64::from(PROFILE_SCHEMA_VERSION) => {}
            Some(n) => {
                return Err(bad(format!(
                "profile schema_version {n}, this sendpath reads {PROFILE_SCHEMA_VERSION}: re-run `sendpath calibrate`"
            )))
            }
            None => return Err(bad("not a sendpath profile (no schema_version)".into())),
        }
        let mut p: Profile = serde_json::from_value(v).map_err(|e| {
            bad(format!(
                "malformed profile: {e}; re-run `sendpath calibrate`"
            ))
        })?;
        p.check().map_err(|why| {
            bad(format!(
                "malformed profile: {why}; re-run `sendpath calibrate`"
            ))
        })?;
        // What follows from the tiers is taken from them, not from the file.
        p.crossover_bytes = crossover(&p.tiers);
        Ok(p)
    }

    /// The profile as pretty JSON.
    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a profile is plain data")
    }

    /// Reads the profile at `path`: a regular file of at most 1 MiB (a FIFO, a device or a
    /// larger file is refused at once, saying so).
    ///
    /// ```no_run
    /// let p = sendpath::Profile::load(std::path::Path::new("profile.json"))?;
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn load(path: &Path) -> Result<Profile> {
        let text = read_small(path)?;
        Profile::from_json(&text).map_err(|e| Error::Profile(format!("{}: {e}", path.display())))
    }

    /// Writes the profile to `path`, creating its directory.
    pub fn save(&self, path: &Path) -> Result<()> {
        if let Some(dir) = path.parent().filter(|d| !d.as_os_str().is_empty()) {
            std::fs::create_dir_all(dir).map_err(Error::sys("mkdir(profile directory)"))?;
        }
        std::fs::write(path, self.to_json() + "\n").map_err(Error::sys("write(profile)"))
    }

    /// Where the active profile lives (see the module docs); `None` when neither
    /// `$SENDPATH_PROFILE`, `$XDG_CONFIG_HOME` nor `$HOME` is set.
    pub fn active_path() -> Option<PathBuf> {
        let var = |k: &str| std::env::var_os(k).filter(|v| !v.is_empty());
        if let Some(p) = var("SENDPATH_PROFILE") {
            return Some(PathBuf::from(p));
        }
        let config = var("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| var("HOME").map(|h| PathBuf::from(h).join(".config")))?;
        Some(config.join("sendpath").join("profile.json"))
    }

    /// The active profile and the file it came from: the file at [`Profile::active_path`]
    /// when there is one, else the defaults (`None`). A file that exists but cannot be read
    /// or is not a valid profile is an error, never silently replaced by the defaults.
    pub fn load_active() -> Result<(Profile, Option<PathBuf>)> {
        match Profile::active_path() {
            Some(p) if p.exists() => Ok((Profile::load(&p)?, Some(p))),
            _ => Ok((Profile::defaults(), None)),
        }
    }

    /// One line per tier, for people: `0 B.. copy`, `32 KiB.. uring-zc`.
    pub fn describe_tiers(&self) -> Vec<String> {
        self.tiers
            .iter()
            .map(|t| format!("{}.. {}", human_bytes(t.from_bytes), t.path))
            .collect()
    }
}

fn crossover(tiers: &[Tier]) -> Option<usize> {
    tiers
        .iter()
        .find(|t| t.path.avoids_send_copy())
        .map(|t| t.from_bytes)
}

/// `65536` as `64 KiB`, `1000` as `1000 B`.
fn human_bytes(n: usize) -> String {
    match n {
        n if n >= 1 << 20 && n % (1 << 20) == 0 => format!("{} MiB", n >> 20),
        n if n >= 1 << 10 && n % (1 << 10) == 0 => format!("{} KiB", n >> 10),
        n => format!("{n} B"),
    }
}

/// The largest profile read.
const MAX_PROFILE: u64 = 1 << 20;

/// The text of a profile file: a regular file of at most [`MAX_PROFILE`] bytes.
fn read_small(path: &Path) -> Result<String> {
    use std::io::Read;
    let meta = std::fs::metadata(path).map_err(Error::sys("stat(profile)"))?;
    if !meta.file_type().is_file() {
        return Err(Error::Profile(format!(
            "{} is not a regular file (a FIFO, a device or a directory): give a profile.json",
            path.display()
        )));
    }
    let too_big = || {
        Error::Profile(format!(
            "{} is larger than 1 MiB: not a sendpath profile",
            path.display()
        ))
    };
    if meta.len() > MAX_PROFILE {
        return Err(too_big());
    }
    let f = std::fs::File::open(path).map_err(Error::sys("open(profile)"))?;
    let mut text = String::new();
    f.take(MAX_PROFILE + 1)
        .read_to_string(&mut text)
        .map_err(Error::sys("read(profile)"))?;
    if text.len() as u64 > MAX_PROFILE {
        return Err(too_big());
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A size where copy ran at 8 Gbit/s and each other path at `ratio` x that, winning
    /// `wins` of 8 rounds.
    fn m(size: usize, others: &[(Strategy, f64, u32)], copied: Option<f64>) -> Measurement {
        let one = |path, ratio: f64, wins| PathMeasurement {
            path,
            gbps: 8.0 * ratio,
            ratio_median: ratio,
            ratio_min: ratio - 0.125,
            ratio_max: ratio + 0.125,
            wins,
            copied_fraction: if path == Strategy::Copy || path == Strategy::Uring {
                None
            } else {
                copied
            },
        };
        let mut paths = vec![one(Strategy::Copy, 1.0, 0)];
        paths.extend(others.iter().map(|&(p, r, w)| one(p, r, w)));
        Measurement {
            size_bytes: size,
            rounds: 8,
            paths,
            head_to_head: Vec::new(),
        }
    }

    fn env() -> ProfileEnvironment {
        ProfileEnvironment {
            kernel: "6.18".into(),
            cpu: "test".into(),
            cpus: 2,
            route: "loopback".into(),
            paths: "copy, msg-zerocopy, uring, uring-zc".into(),
            created_unix_s: 1,
            sendpath_version: "0".into(),
            command_line: vec![],
        }
    }

    use Strategy::{Copy, MsgZerocopy, Uring, UringZc};

    #[test]
    fn tiers_follow_the_rounds_won_and_bounds_sit_between_measured_sizes() {
        let p = Profile::from_measurements(
            vec![
                m(
                    1 << 20,
                    &[(MsgZerocopy, 0.875, 1), (Uring, 0.875, 2)],
                    Some(1.0),
                ),
                m(256, &[(MsgZerocopy, 0.5, 0), (Uring, 0.875, 1)], Some(1.0)),
                // Both zero-copy paths win; the larger median ratio takes the tier.
                m(
                    64 << 10,
                    &[(MsgZerocopy, 1.125, 8), (UringZc, 1.25, 7)],
                    Some(1.0),
                ),
                // Won every round, but by less than 3%.
                m(16 << 10, &[(MsgZerocopy, 1.02, 8)], Some(1.0)),
                // By enough, but in only half the rounds.
                m(256 << 10, &[(Uring, 1.25, 4)], Some(1.0)),
            ],
            0.03,
            env(),
        );
        assert_eq!(p.crossover_bytes, Some(32 << 10), "between 16 and 64 KiB");
        assert_eq!(p.tier(100), Copy);
        assert_eq!(p.tier(16 << 10), Copy);
        assert_eq!(p.tier(64 << 10), UringZc);
        assert_eq!(p.tier(256 << 10), Copy);
        assert_eq!(p.tier(1 << 20), Copy);
        assert!(p.zerocopy_measured_copied, "it won while copied");
        assert_eq!(p.describe_tiers()[1], "32 KiB.. uring-zc");
        let back = Profile::from_json(&p.to_json()).unwrap();
        assert_eq!(back, p);
    }

    #[test]
    fn two_paths_that_beat_copy_are_ordered_by_pairing_them() {
        let mut x = m(
            64 << 10,
            &[(MsgZerocopy, 1.22, 8), (UringZc, 1.19, 8), (Uring, 1.01, 5)],
            Some(1.0),
        );
        assert_eq!(
            x.winner(0.03),
            MsgZerocopy,
            "unpaired: the larger ratio to copy"
        );
        let h = |path, over, wins| HeadToHead {
            path,
            over,
            rounds: 12,
            wins,
            ratio_median: 1.0,
        };
        x.head_to_head = vec![h(MsgZerocopy, UringZc, 3), h(MsgZerocopy, Uring, 12)];
        assert_eq!(x.pair(UringZc, MsgZerocopy).map(|p| p.1), Some(9));
        let mut both = x.clone();
        both.head_to_head.push(HeadToHead {
            ratio_median: 1.05,
            ..h(UringZc, MsgZerocopy, 9)
        });
        assert_eq!(
            both.pair(UringZc, MsgZerocopy),
            Some((12, 9, 1.05)),
            "the entry measured this way round, not the other one inverted"
        );
        assert_eq!(
            x.winner(0.03),
            UringZc,
            "faster than msg-zerocopy in 9 of 12"
        );
        x.head_to_head[0].wins = 6;
        assert_eq!(
            x.winner(0.03),
            MsgZerocopy,
            "6 of 12 is not a majority either way"
        );
        // uring beat both head to head, but did not beat copy: it is no candidate.
        x.head_to_head = vec![h(Uring, MsgZerocopy, 12), h(Uring, UringZc, 12)];
        assert_eq!(x.winner(0.03), MsgZerocopy);
        let back: Measurement =
            serde_json::from_str(r#"{"size_bytes": 1, "rounds": 1, "paths": []}"#).unwrap();
        assert!(back.head_to_head.is_empty(), "older profiles still read");
    }

    #[test]
    fn defaults_and_foreign_files() {
        let d = Profile::defaults();
        assert_eq!(d.tier(64 << 10), MsgZerocopy);
        assert_eq!(d.tier((64 << 10) - 1), Copy);
        assert!(!d.zerocopy_measured_copied);
        let e = Profile::from_json("{\"schema_version\": 99}").unwrap_err();
        assert!(e.to_string().contains("re-run `sendpath calibrate`"), "{e}");
        let e = Profile::from_json("[1,2").unwrap_err();
        assert!(e.to_string().contains("invalid JSON"), "{e}");
        let mut bad = d.clone();
        bad.tiers.reverse();
        let e = Profile::from_json(&bad.to_json()).unwrap_err();
        assert!(e.to_string().contains("ascend"), "{e}");
        let mut bad = d.clone();
        bad.tiers[1].path = Strategy::Sendfile;
        let e = Profile::from_json(&bad.to_json()).unwrap_err();
        assert!(e.to_string().contains("sendfile"), "{e}");
    }

    #[test]
    fn save_and_load_round_trip() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("a/b/profile.json");
        let p =
            Profile::from_measurements(vec![m(64 << 10, &[(Uring, 1.25, 8)], None)], 0.03, env());
        p.save(&path).unwrap();
        assert_eq!(Profile::load(&path).unwrap(), p);
        assert_eq!(p.tier(1), Uring);
        assert!(!p.zerocopy_measured_copied, "no zero-copy tier");
    }

    #[test]
    fn a_device_or_an_oversized_file_is_refused_at_once() {
        let dir = tempfile::tempdir().unwrap();
        let zero = dir.path().join("profile.json");
        std::os::unix::fs::symlink("/dev/zero", &zero).unwrap();
        let e = Profile::load(&zero).unwrap_err();
        assert!(e.to_string().contains("not a regular file"), "{e}");
        let big = dir.path().join("big.json");
        std::fs::write(&big, vec![b' '; (MAX_PROFILE + 1) as usize]).unwrap();
        let e = Profile::load(&big).unwrap_err();
        assert!(e.to_string().contains("larger than 1 MiB"), "{e}");
    }
}
