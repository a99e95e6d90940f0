//! `sendpath compare A B`: run B against run A (results files of the rows study, or the
//! directories a sweep wrote them to).

use crate::cli::CompareArgs;
use anyhow::{bail, Context};
use sendpath_lab::compare::compare;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A results file named directly, or the `results.json` in a sweep's directory.
fn results_file(p: &Path) -> PathBuf {
    match p.is_dir() {
        true => p.join("results.json"),
        false => p.to_path_buf(),
    }
}

/// Which study wrote the file at `p`, from its top-level fields; an error for a file that is
/// no sendpath results file.
fn study_of(p: &Path) -> anyhow::Result<&'static str> {
    let text = sendpath_lab::files::read_bounded(
        p,
        sendpath_lab::files::MAX_RESULTS,
        "sendpath results file",
    )?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| {
        format!(
            "{} is not valid JSON (truncated or damaged?): give a results.json a run wrote",
            p.display()
        )
    })?;
    Ok(if v.get("measurements").is_some() {
        "the server study (http-results.json)"
    } else if v.get("settings").is_some() && v.get("rows").is_some() {
        "the transfer study (transfer-results.json)"
    } else {
        "rows"
    })
}

pub(crate) fn run(a: &CompareArgs) -> anyhow::Result<ExitCode> {
    let (pa, pb) = (results_file(&a.a), results_file(&a.b));
    let (sa, sb) = (study_of(&pa)?, study_of(&pb)?);
    if sa != sb {
        bail!(
            "{} holds {sa} and {} {sb}: compare two runs of the same study",
            pa.display(),
            pb.display()
        );
    }
    if sa != "rows" {
        bail!("{} holds {sa}: compare reads the rows study's results.json (stream, rr, sweep presets); server and transfer studies cannot be compared yet", pa.display());
    }
    let ra = sendpath_lab::study::sweep::load(&pa)?;
    let rb = sendpath_lab::study::sweep::load(&pb)?;
    if let Some(done) =
        crate::cli::dry_run(format!("compare {} with {}", pb.display(), pa.display()))
    {
        return Ok(done);
    }
    let c = compare(&ra, &rb)
        .map_err(|e| anyhow::anyhow!("{} and {}: {e}", pa.display(), pb.display()))?;
    let md = c.markdown(&pa.display().to_string(), &pb.display().to_string());
    if let Some(path) = &a.out {
        sendpath_lab::export::write_text(path, &md)?;
        eprintln!("wrote {}", path.display());
    } else {
        sendpath_lab::export::write_text(Path::new("-"), &md)?;
    }
    let Some(t) = a.threshold else {
        return Ok(ExitCode::SUCCESS);
    };
    let slower = c.regressions(t);
    if slower.is_empty() {
        eprintln!("no point slower than A by more than {:.1}%", t * 100.0);
        return Ok(ExitCode::SUCCESS);
    }
    for p in &slower {
        eprintln!(
            "slower: {} at {:.3}x A ({:.3}..{:.3})",
            p.label,
            p.ratio,
            p.interval.map_or(f64::NAN, |i| i.0),
            p.interval.map_or(f64::NAN, |i| i.1)
        );
    }
    eprintln!(
        "{} point(s) slower than A by more than {:.1}% (--threshold)",
        slower.len(),
        t * 100.0
    );
    Ok(ExitCode::from(1))
}
