//! `sendpath compare A B`: run B against run A (results files of the rows study, or the
//! directories a sweep wrote them to).

use crate::cli::CompareArgs;
use anyhow::{bail, Context};
use sendpath_lab::compare::Comparison;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

/// A results file named directly, or the one in a study's directory (results.json,
/// http-results.json or transfer-results.json, the first there).
fn results_file(p: &Path) -> PathBuf {
    if !p.is_dir() {
        return p.to_path_buf();
    }
    ["results.json", "http-results.json", "transfer-results.json"]
        .iter()
        .map(|f| p.join(f))
        .find(|f| f.exists())
        .unwrap_or_else(|| p.join("results.json"))
}

const ROWS: &str = "the rows study (results.json)";
const SERVER: &str = "the server study (http-results.json)";
const TRANSFER: &str = "the transfer study (transfer-results.json)";

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
        SERVER
    } else if v.get("settings").is_some() && v.get("rows").is_some() {
        TRANSFER
    } else {
        ROWS
    })
}

/// Loads both files as `study` and compares them.
fn comparison(study: &str, pa: &Path, pb: &Path) -> anyhow::Result<Comparison> {
    use sendpath_lab::compare as c;
    let both = |e: String| anyhow::anyhow!("{} and {}: {e}", pa.display(), pb.display());
    match study {
        ROWS => {
            let load = sendpath_lab::study::sweep::load;
            c::compare(&load(pa)?, &load(pb)?).map_err(both)
        }
        SERVER => {
            let load = |p: &Path| -> anyhow::Result<_> {
                sendpath_lab::study::http::load_http(p)?
                    .with_context(|| format!("{} is not an http-results.json", p.display()))
            };
            c::compare_http(&load(pa)?, &load(pb)?).map_err(both)
        }
        _ => c::compare_transfer(&load_transfer(pa)?, &load_transfer(pb)?).map_err(both),
    }
}

/// A transfer-results.json, read bounded.
fn load_transfer(p: &Path) -> anyhow::Result<sendpath_lab::study::transfer::TransferResults> {
    let text = sendpath_lab::files::read_bounded(
        p,
        sendpath_lab::files::MAX_RESULTS,
        "sendpath results file",
    )?;
    serde_json::from_str(&text).with_context(|| {
        format!(
            "{} does not have the layout of a transfer-results.json",
            p.display()
        )
    })
}

pub(crate) fn run(a: &CompareArgs) -> anyhow::Result<ExitCode> {
    crate::cli::check_outputs([("--out", a.out.as_deref()), ("--html", a.html.as_deref())])?;
    let (pa, pb) = (results_file(&a.a), results_file(&a.b));
    let (sa, sb) = (study_of(&pa)?, study_of(&pb)?);
    if sa != sb {
        bail!(
            "{} holds {sa} and {} {sb}: compare two runs of the same study",
            pa.display(),
            pb.display()
        );
    }
    let c = comparison(sa, &pa, &pb)?;
    if let Some(done) =
        crate::cli::dry_run(format!("compare {} with {}", pb.display(), pa.display()))
    {
        return Ok(done);
    }
    let (na, nb) = (pa.display().to_string(), pb.display().to_string());
    if let Some(path) = &a.html {
        sendpath_lab::export::write_text(path, &c.html(&na, &nb)?)?;
        eprintln!("wrote {}", path.display());
    }
    let md = c.markdown(&na, &nb);
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
