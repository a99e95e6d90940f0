//! The server study: sendpath serve against nginx under http-load and wrk.

mod load;
mod plan;
mod results;
mod run;
mod servers;
mod summary;

pub use plan::*;
pub use results::*;
pub use run::*;
pub(crate) use servers::installed;
pub use summary::*;
