//! The stream and rr sweeps: points measured in interleaved rounds, one row each.

mod charts;
mod plan;
mod results;
mod run;
mod summary;
mod udp;

pub use plan::*;
pub use results::*;
pub use run::*;
pub use summary::*;
