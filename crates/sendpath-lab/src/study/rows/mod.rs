//! The rows study: `stream`, `rr` and the sweep presets of rows. Points measured in
//! interleaved rounds, one [`Row`] each, in one [`Results`]; its exporters ([`export`]) and the
//! paired-round analysis behind its recommendation ([`analysis`]).

pub mod analysis;
mod charts;
mod copies;
pub mod export;
mod load;
mod plan;
mod results;
mod run;
mod summary;
mod udp;
mod warnings;

pub use load::*;
pub use plan::*;
pub use results::*;
pub use run::*;
pub use summary::*;
