//! The studies, one folder each, each the same shape: `plan` (pure: flags' values to the
//! windows to measure), `run` (measure them), `results` (the typed, versioned file), `summary`
//! (Markdown and HTML, read from results only). [`presets`] is the one table of every study
//! `sweep --preset` can run.

pub mod calibrate;
pub mod http;
pub mod presets;
pub mod rows;
pub mod transfer;

/// A results file of any study, read and parsed once.
pub enum StudyFile {
    /// `results.json` of stream, rr or a sweep preset (the rows study).
    Rows(crate::study::rows::Results),
    /// `http-results.json` of the server study.
    Server(http::StudyResults),
    /// `transfer-results.json` of the file-transfer study.
    Transfer(transfer::TransferResults),
}

impl StudyFile {
    /// Which study wrote it, in words.
    pub fn study(&self) -> &'static str {
        match self {
            StudyFile::Rows(_) => "the rows study (results.json)",
            StudyFile::Server(_) => "the server study (http-results.json)",
            StudyFile::Transfer(_) => "the transfer study (transfer-results.json)",
        }
    }
}

/// Reads `path` (bounded) once and tells which study wrote it from its top-level fields; an
/// error naming the file for one that is damaged or no sendpath results file.
pub fn load_any(path: &std::path::Path) -> anyhow::Result<StudyFile> {
    use anyhow::Context;
    let name = path.display().to_string();
    let text =
        crate::files::read_bounded(path, crate::files::MAX_RESULTS, "sendpath results file")?;
    let v: serde_json::Value = serde_json::from_str(&text).with_context(|| {
        format!("{name} is not valid JSON (truncated or damaged?): give a results.json a run wrote")
    })?;
    if v.get("measurements").is_some() {
        return serde_json::from_value(v)
            .map(StudyFile::Server)
            .with_context(|| format!("{name} does not have the layout of an http-results.json"));
    }
    if v.get("settings").is_some() && v.get("rows").is_some() {
        return serde_json::from_value(v)
            .map(StudyFile::Transfer)
            .with_context(|| {
                format!("{name} does not have the layout of a transfer-results.json")
            });
    }
    rows::from_value(v, &name).map(StudyFile::Rows)
}
