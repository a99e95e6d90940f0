//! The file-transfer study: whole files sent with read+send against sendfile and the other
//! file paths, timed from open() to the receiver's acknowledgement.

mod plan;
mod results;
mod run;
mod summary;

pub use plan::*;
pub use results::*;
pub use run::*;
pub use summary::*;
