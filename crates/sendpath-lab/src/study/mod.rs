//! The studies, one folder each, each the same shape: `plan` (pure: flags' values to the
//! windows to measure), `run` (measure them), `results` (the typed, versioned file), `summary`
//! (Markdown and HTML, read from results only). [`presets`] is the one table of every study
//! `sweep --preset` can run.

pub mod http;
pub mod presets;
pub mod sweep;
pub mod transfer;
