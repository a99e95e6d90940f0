//! The rows study's results file (`results.json`, layout [`SCHEMA_VERSION`](super::SCHEMA_VERSION)),
//! loaded and checked.

use crate::files::{read_bounded, MAX_RESULTS};
use crate::study::rows::{Results, SCHEMA_VERSION};
use anyhow::{bail, Context};
use std::path::Path;

/// Reads and checks a results file; says what is wrong with a foreign or damaged one.
pub fn load(path: &Path) -> anyhow::Result<Results> {
    let text = read_bounded(path, MAX_RESULTS, "sendpath results file")?;
    parse(&text, &path.display().to_string())
}

/// Checks and reads the text of a results file called `name` in errors.
pub(crate) fn parse(text: &str, name: &str) -> anyhow::Result<Results> {
    let v: serde_json::Value = serde_json::from_str(text)
        .with_context(|| format!("{name} is not valid JSON (truncated or damaged?)"))?;
    from_value(v, name)
}

/// Checks and reads the parsed JSON of a results file called `name` in errors.
pub(crate) fn from_value(v: serde_json::Value, name: &str) -> anyhow::Result<Results> {
    match v.get("schema_version").and_then(|s| s.as_u64()) {
        None => bail!(
            "{name} is not a sendpath results file (no schema_version); give the results.json that `sendpath sweep` or `sendpath stream --json` wrote"
        ),
        Some(n) if n != SCHEMA_VERSION as u64 => {
            bail!("{name} has schema_version {n}; this sendpath reads version {SCHEMA_VERSION}")
        }
        _ => {}
    }
    serde_json::from_value(v)
        .with_context(|| format!("{name} does not have the layout of a sendpath results file"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::study::rows::Row;
    use crate::window::Repeat;

    /// Results files to mutate: an empty one and one with a row.
    fn seeds() -> Vec<String> {
        let empty = include_str!("../../../tests/data/empty-results.json").to_string();
        let mut r: Results = serde_json::from_str(&empty).unwrap();
        let mut row = Row {
            size_bytes: 65536,
            ..Row::default()
        };
        row.repeats.push(Repeat {
            throughput_gbps: 10.0,
            bytes: 1 << 20,
            ..Repeat::default()
        });
        row.summarise();
        r.results.push(row);
        vec![empty, serde_json::to_string(&r).unwrap()]
    }

    #[test]
    fn a_million_generated_results_files_load_or_are_refused_in_bounded_memory() {
        let seeds = seeds();
        let seeds: Vec<&[u8]> = seeds.iter().map(|s| s.as_bytes()).collect();
        let mut rng = fastrand::Rng::with_seed(31);
        let (mut ok, mut refused, mut most) = (0u32, 0u32, 0usize);
        let mut buf = Vec::new();
        for i in 0..RUNS {
            crate::fuzz::input(&mut rng, i, &seeds, &mut buf);
            let text = String::from_utf8_lossy(&buf);
            let (loaded, peak) = crate::sys::peak_during(|| parse(&text, "f"));
            most = most.max(peak);
            assert!(
                peak <= 64 * text.len() + (64 << 10),
                "{peak} bytes held to load {} bytes",
                text.len()
            );
            match loaded {
                Ok(r) => {
                    ok += 1;
                    // What loads writes back and loads again the same.
                    let again = parse(&serde_json::to_string(&r).unwrap(), "f").unwrap();
                    assert_eq!(
                        serde_json::to_value(&again).unwrap(),
                        serde_json::to_value(&r).unwrap()
                    );
                }
                Err(_) => refused += 1,
            }
        }
        println!("results files: {RUNS} generated, {ok} loaded, {refused} refused, at most {most} bytes held");
        // The counting allocator saw the parser's allocations: the bound above is not vacuous.
        assert!(ok > 0 && refused > 0 && most > 1000);
    }

    #[test]
    fn a_million_generated_profiles_load_or_are_refused_in_bounded_memory() {
        let seed = serde_json::to_string(&sendpath::Profile::defaults()).unwrap();
        let seeds: [&[u8]; 1] = [seed.as_bytes()];
        let mut rng = fastrand::Rng::with_seed(47);
        let (mut ok, mut refused) = (0u32, 0u32);
        let mut buf = Vec::new();
        for i in 0..RUNS {
            crate::fuzz::input(&mut rng, i, &seeds, &mut buf);
            let text = String::from_utf8_lossy(&buf);
            let (loaded, peak) = crate::sys::peak_during(|| sendpath::Profile::from_json(&text));
            assert!(
                peak <= 64 * text.len() + (64 << 10),
                "{peak} bytes for {}",
                text.len()
            );
            match loaded {
                Ok(p) => {
                    ok += 1;
                    let again = sendpath::Profile::from_json(&serde_json::to_string(&p).unwrap());
                    assert_eq!(again.unwrap(), p);
                }
                Err(_) => refused += 1,
            }
        }
        println!("profiles: {RUNS} generated, {ok} loaded, {refused} refused");
        assert!(ok > 0 && refused > 0);
    }

    /// Inputs per property.
    const RUNS: u32 = 1_000_000;
}
