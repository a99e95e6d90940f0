//! The server study: sendpath serve against nginx under http-load and wrk.

mod plan;
mod results;
mod run;
mod summary;

pub use plan::*;
pub use results::*;
pub use run::*;
pub use summary::*;
