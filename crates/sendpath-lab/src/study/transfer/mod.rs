//! The file-transfer study: read+send against sendfile and the other file paths.

mod run;

pub use run::*;
