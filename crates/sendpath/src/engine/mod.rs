//! The send core: an I/O-free state per connection ([`ConnState`]), the choice of operation per
//! send behind [`Choose`], and the io_uring driver that serves many connections on one ring
//! ([`UringDriver`]). The `uring` and `uring-zc` paths are a driver with one connection and a
//! [`Fixed`] choice; `sendpath stream --connections N` puts N connections on one driver.
//!
//! ```no_run
//! use sendpath::engine::{Choice, DriverConfig, UringDriver};
//!
//! let mut ring = UringDriver::new(DriverConfig { connections: 2, ..DriverConfig::default() })?;
//! let a = ring.add(std::net::TcpStream::connect("127.0.0.1:9000")?, Choice::ZeroCopy, true)?;
//! let b = ring.add(std::net::TcpStream::connect("127.0.0.1:9001")?, Choice::Copy, true)?;
//! for id in [a, b] {
//!     let mut buf = ring.take_buf(id, 65536);
//!     buf.as_mut_slice().fill(b'x');
//!     ring.push(id, buf, true).expect("room for one"); // queued; submitted by run()
//! }
//! ring.run(false)?; // one io_uring_enter for both
//! ring.finish(std::time::Duration::from_secs(2))?; // flush, then wait for notifications
//! println!("{:?}", ring.stats(a).summary());
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod choose;
mod splice;
mod state;
mod uring;

pub use choose::{chooser_for, on_ring, AdaptiveChoice, Choice, Choose, Fixed, SendContext};
pub use splice::{SpliceFailure, SpliceJob, SpliceProgress, SpliceStep};
pub use state::{ConnState, Order, Part, Payload, Pushed, SendOp, StateConfig, Submit, ZcConfig};
pub use uring::{
    stream_order, ConnId, DriverConfig, Event, RecvBuf, RecvConfig, SplicePipe, UringDriver,
};
