//! Sizes and durations as people type them: `4K`, `64KiB`, `1M`, `1.5s`, `200ms`.

use std::time::Duration;

/// Parses a byte size: a number with an optional unit `K`, `KB`, `KiB`, `M`, `MB`, `MiB`, `G`,
/// `GB`, `GiB` (all powers of 1024, as iperf3 and neper read them) or `B`.
pub fn parse_size(s: &str) -> Result<usize, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num.parse().map_err(|_| {
        format!("`{s}` is not a size; use a number with an optional unit, e.g. 64, 4K, 64KiB, 1M")
    })?;
    let mult: u64 = match unit.trim().to_ascii_lowercase().as_str() {
        "" | "b" => 1,
        "k" | "kb" | "kib" => 1 << 10,
        "m" | "mb" | "mib" => 1 << 20,
        "g" | "gb" | "gib" => 1 << 30,
        u => {
            return Err(format!(
                "`{s}`: unknown size unit `{u}`; use K, KiB, M, MiB, G or GiB"
            ))
        }
    };
    let v = n * mult as f64;
    if !v.is_finite() || v > (1u64 << 50) as f64 {
        return Err(format!("`{s}`: too large (at most 1 PiB)"));
    }
    if v < 1.0 || v.fract() != 0.0 {
        return Err(format!(
            "`{s}`: a size must be a whole number of bytes, at least 1"
        ));
    }
    Ok(v as usize)
}

/// Parses a duration: a number with `s` (default), `ms`, `us` or `m`.
pub fn parse_duration(s: &str) -> Result<Duration, String> {
    let t = s.trim();
    let split = t
        .find(|c: char| !(c.is_ascii_digit() || c == '.'))
        .unwrap_or(t.len());
    let (num, unit) = t.split_at(split);
    let n: f64 = num
        .parse()
        .map_err(|_| format!("`{s}` is not a duration; use e.g. 10, 2.5s, 500ms"))?;
    let secs = match unit.trim() {
        "" | "s" => n,
        "ms" => n / 1e3,
        "us" => n / 1e6,
        "m" | "min" => n * 60.0,
        u => {
            return Err(format!(
                "`{s}`: unknown duration unit `{u}`; use s, ms, us or m"
            ))
        }
    };
    if !(0.0..=MAX_DURATION_S).contains(&secs) {
        return Err(format!(
            "`{s}`: a duration must be between 0 and 24 hours (every run stops by itself)"
        ));
    }
    Duration::try_from_secs_f64(secs).map_err(|e| format!("`{s}`: {e}"))
}

/// The longest duration accepted anywhere: one day.
const MAX_DURATION_S: f64 = 86_400.0;

/// Formats bytes with a binary unit (`64KiB`).
pub fn fmt_size(b: usize) -> String {
    for (unit, m) in [("GiB", 1usize << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)] {
        if b >= m && b.is_multiple_of(m) {
            return format!("{}{unit}", b / m);
        }
    }
    format!("{b}B")
}

/// A fraction (0..=1) as a percentage that reads 0% only when none were and 100% only when
/// all were: whole percent from 1% to 99%, one decimal outside it, "<0.1%" and ">99.9%" at
/// the ends.
pub fn percent(f: f64) -> String {
    match f * 100.0 {
        p if p <= 0.0 => "0%".into(),
        p if p < 0.1 => "<0.1%".into(),
        p if p < 1.0 => format!("{p:.1}%"),
        p if p < 99.0 => format!("{p:.0}%"),
        p if p < 99.9 => format!("{p:.1}%"),
        p if p < 100.0 => ">99.9%".into(),
        _ => "100%".into(),
    }
}

/// `4KiB` or `4KiB .. 1MiB`.
pub(crate) fn size_range(from: usize, to: usize) -> String {
    if from == to {
        fmt_size(from)
    } else {
        format!("{} .. {}", fmt_size(from), fmt_size(to))
    }
}

/// The largest value latency histograms hold: 100 s in nanoseconds.
pub const HISTOGRAM_MAX_NS: u64 = 100_000_000_000;

/// A histogram of nanosecond values from 1 ns to 100 s with 3 significant digits; larger
/// values are clamped to 100 s by `saturating_record`.
pub fn new_histogram() -> hdrhistogram::Histogram<u64> {
    hdrhistogram::Histogram::new_with_bounds(1, HISTOGRAM_MAX_NS, 3)
        .expect("valid histogram bounds")
}

/// Records `ns` (clamped to 1 ns..100 s) into a histogram from [`new_histogram`].
pub fn record_ns(h: &mut hdrhistogram::Histogram<u64>, ns: u64) {
    h.saturating_record(ns.clamp(1, HISTOGRAM_MAX_NS));
}

/// The byte a fresh message buffer is written with before the sender fills it (or does
/// not): written once, so its pages are the process's own, never the kernel's shared zero
/// page, which a send would copy from over and over.
pub const FILL: u8 = 0x5A;

/// A unit test that cannot run here says `skipped: <why>`; with `SENDPATH_REQUIRE=all` (as
/// CI sets) a skip is a failure.
#[cfg(test)]
pub(crate) fn skip(why: &str) {
    assert_ne!(
        std::env::var("SENDPATH_REQUIRE").as_deref(),
        Ok("all"),
        "cannot run here and SENDPATH_REQUIRE=all forbids skipping: {why}"
    );
    println!("skipped: {why}");
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sizes() {
        assert_eq!(parse_size("64").unwrap(), 64);
        assert_eq!(parse_size("4K").unwrap(), 4096);
        assert_eq!(parse_size("64KiB").unwrap(), 65536);
        assert_eq!(parse_size("1M").unwrap(), 1 << 20);
        assert_eq!(parse_size("1.5k").unwrap(), 1536);
        assert!(parse_size("4Q").unwrap_err().contains("unknown size unit"));
        assert!(parse_size("abc").is_err());
        assert!(parse_size("0").is_err());
        assert!(parse_size("99999999999999999999G")
            .unwrap_err()
            .contains("too large"));
        assert_eq!(fmt_size(65536), "64KiB");
        assert_eq!(fmt_size(100), "100B");
    }

    #[test]
    fn durations() {
        assert_eq!(parse_duration("2").unwrap(), Duration::from_secs(2));
        assert_eq!(parse_duration("250ms").unwrap(), Duration::from_millis(250));
        assert_eq!(parse_duration("0.2s").unwrap(), Duration::from_millis(200));
        assert!(parse_duration("2h").is_err());
        assert!(parse_duration("99999999999999999999").is_err());
        assert!(parse_duration("inf").is_err());
        assert!(parse_duration("NaN").is_err());
    }

    #[test]
    fn a_percentage_reads_none_or_all_only_when_it_is() {
        let said: Vec<_> = [0.0, 0.0002, 0.002, 0.0096, 0.5, 0.987, 0.995, 0.9996, 1.0]
            .into_iter()
            .map(percent)
            .collect();
        let want = [
            "0%", "<0.1%", "0.2%", "1.0%", "50%", "99%", "99.5%", ">99.9%", "100%",
        ];
        assert_eq!(said, want);
    }
}
