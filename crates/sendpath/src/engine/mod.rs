//! The send core: an I/O-free state per connection ([`ConnState`]), the choice of operation per
//! send behind [`Choose`], and the io_uring driver that serves many connections on one ring
//! ([`UringDriver`]). The `uring` and `uring-zc` paths are a driver with one connection and a
//! [`Fixed`] choice; `sendpath stream --connections N` puts N connections on one driver.

mod choose;
mod state;
mod uring;

pub use choose::{Choice, Choose, Fixed, SendContext};
pub use state::{ConnState, Payload, Pushed, SendOp, StateConfig, Submit, ZcConfig};
pub use uring::{ConnId, DriverConfig, UringDriver};
