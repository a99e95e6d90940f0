//! `sendpath compare A B`: run B against run A (two results files of one study, or the
//! directories holding them).

use crate::cli::CompareArgs;
use anyhow::bail;
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

/// Compares the two runs, which must be of one study.
fn comparison(pa: &Path, pb: &Path) -> anyhow::Result<Comparison> {
    use sendpath_lab::compare as c;
    use sendpath_lab::study::{load_any, StudyFile};
    let both = |e: String| anyhow::anyhow!("{} and {}: {e}", pa.display(), pb.display());
    match (load_any(pa)?, load_any(pb)?) {
        (StudyFile::Rows(a), StudyFile::Rows(b)) => c::compare(&a, &b).map_err(both),
        (StudyFile::Server(a), StudyFile::Server(b)) => c::compare_http(&a, &b).map_err(both),
        (StudyFile::Transfer(a), StudyFile::Transfer(b)) => {
            c::compare_transfer(&a, &b).map_err(both)
        }
        (a, b) => bail!(
            "{} holds {} and {} {}: compare two runs of the same study",
            pa.display(),
            a.study(),
            pb.display(),
            b.study()
        ),
    }
}

pub(crate) fn run(a: &CompareArgs) -> anyhow::Result<ExitCode> {
    crate::cli::check_outputs([("--out", a.out.as_deref()), ("--html", a.html.as_deref())])?;
    let (pa, pb) = (results_file(&a.a), results_file(&a.b));
    let c = comparison(&pa, &pb)?;
    if let Some(done) =
        crate::cli::dry_run(format!("compare {} with {}", pb.display(), pa.display()))
    {
        return Ok(done);
    }
    let (na, nb) = (pa.display().to_string(), pb.display().to_string());
    if let Some(path) = &a.html {
        sendpath_lab::files::write_text(path, &c.html(&na, &nb)?)?;
        eprintln!("wrote {}", path.display());
    }
    let md = c.markdown(&na, &nb);
    if let Some(path) = &a.out {
        sendpath_lab::files::write_text(path, &md)?;
        eprintln!("wrote {}", path.display());
    } else {
        sendpath_lab::files::write_text(Path::new("-"), &md)?;
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
