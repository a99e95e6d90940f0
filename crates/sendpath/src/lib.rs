//! # sendpath
//!
//! Every Linux send path behind one interface, with an honest account of what the kernel did.
//!
//! | name | what it does |
//! |---|---|
//! | `copy` | `send()` from one contiguous buffer |
//! | `serialize` | the message's fields copied into one buffer, then `send()` (two copies) |
//! | `gather` | `sendmsg()` with one iovec per field (one copy) |
//! | `msg-zerocopy` | `sendmsg(MSG_ZEROCOPY)`, completions read from the error queue |
//! | `uring` | io_uring `SEND` with `MSG_WAITALL`, a chain of requests in flight |
//! | `uring-zc` | io_uring `SEND_ZC`, two-phase completions, usage reporting |
//! | `read-send` | `read()` a file chunk into a buffer, then `send()` |
//! | `mmap-send` | `send()` straight from a mapping of the file |
//! | `sendfile` | `sendfile()` file to socket |
//! | `splice` | file to pipe to socket with `splice()` |
//! | `uring-splice` | file to pipe to socket with linked io_uring `SPLICE` pairs |
//! | `vmsplice` | user pages into a pipe with `vmsplice()`, spliced to the socket |
//! | `adaptive` | per send, the path this host measured fastest at its size (`copy`, `msg-zerocopy`, `uring`, `uring-zc`; `sendfile()` for file data) |
//!
//! ## Quick start
//!
//! ```no_run
//! use sendpath::{open, Options, Strategy};
//! use std::time::Duration;
//!
//! let sock = std::net::TcpStream::connect("127.0.0.1:9000")?;
//! let mut path = open(Strategy::MsgZerocopy, sock, &Options::default())?;
//! for _ in 0..1000 {
//!     let mut buf = path.take_buf(65536); // a buffer the kernel has released, or a new one
//!     buf.as_mut_slice().fill(b'x');
//!     path.send_buf(buf)?; // moved in: no safe code can touch it until the kernel is done
//! }
//! let stats = path.close(Duration::from_secs(2))?; // every completion in, or an error
//! println!("copied {:?}, fallbacks {:?}", stats.copied_fraction(), stats.zerocopy.fallbacks);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! ## What a server uses
//!
//! - **One socket, any path**: [`open`] a [`Strategy`] with [`Options`] on a connected
//!   [`Socket`] and get a [`SendPath`]: [`Buf`]s from [`SendPath::take_buf`] (or
//!   [`SharedPool`]) sent with [`SendPath::send_buf`], messages of several fields or file
//!   ranges with [`Msg`] and [`FileRange`].
//! - **Many connections on one thread**: a [`UringDriver`] ([`DriverConfig`]) with a
//!   [`ConnId`] per connection, and, for a server, accept and receive on the same ring
//!   ([`Event`], [`RecvBuf`], [`RecvConfig`]).
//! - **What happened**: [`SendStats`] per path or connection (what the kernel reported copied,
//!   every fallback by reason, the adaptive sender's [`Decisions`]), and an [`Error`] that
//!   names the system call, the errno and what to do.
//! - **Which path, from measurement**: the adaptive sender decides from a [`Profile`], which
//!   [`Calibration`] measures on a route the caller supplies; [`probe`] says what the kernel
//!   lets each path do.
//!
//! Buffers handed to a path come back only when the kernel has released them: a zero-copy
//! send's buffer after its completion notification, on every outcome, errors included. A
//! path or driver closed with a deadline reports buffers the kernel still held as an error
//! ([`Error::Leaked`]); one dropped without closing never blocks for long, and counts what it
//! had to leak in [`leaked_on_drop`].
#![deny(unsafe_code)]
#![warn(missing_docs)]

#[cfg(feature = "tokio")]
mod aio;
mod buffer;
mod completion;
mod driver;
mod error;
mod policy;
mod probe;
mod profile;
mod send;
mod socket;
mod stats;
mod strategy;
#[allow(unsafe_code)]
mod sys;

#[cfg(feature = "tokio")]
pub use aio::AsyncSender;
pub use buffer::{Buf, SharedPool};
pub use driver::{
    ArenaConfig, ConnId, DriverConfig, Event, RecvBuf, RecvConfig, Reserved, UringDriver,
};
pub use error::Error;
pub use policy::adaptive::{AdaptiveConfig, Decisions};
pub use policy::InflightLimits;
pub use probe::{probe, Capabilities, IoUringProbe, MsgZerocopyProbe};
pub use profile::calibrate::{Calibration, Window, WindowResult};
pub use profile::{
    HeadToHead, Measurement, PathMeasurement, Profile, ProfileEnvironment, ProfileOrigin, Tier,
};
pub use send::Order;
pub use socket::Socket;
pub use stats::{
    leaked_on_drop, ArenaCounts, Fallbacks, LatencySummaryNs, SendStats, SendStatsSummary,
    ZerocopyCounts,
};
pub use strategy::{open, DataCopy, FileRange, Msg, Options, SendPath, Source, Strategy};
pub use sys::uring::RingSetup;

/// The library's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;

#[cfg(test)]
mod test_support {
    /// Skips a test that cannot run here: prints `skipped: REASON`, or fails when
    /// `SENDPATH_REQUIRE=all` (which `.ci/run` sets), as the integration tests' `skip` does.
    pub(crate) fn skip(reason: &str) {
        if std::env::var("SENDPATH_REQUIRE").as_deref() == Ok("all") {
            panic!("cannot run here and SENDPATH_REQUIRE=all forbids skipping: {reason}");
        }
        println!("skipped: {reason}");
    }
}

/// The Rust in README.md and docs/usage.md, compiled as doctests so it cannot drift from the
/// API.
#[cfg(doctest)]
#[doc = include_str!("../../../README.md")]
#[doc = include_str!("../../../docs/usage.md")]
struct DocsCompile;
