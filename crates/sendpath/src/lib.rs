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
//! | `vmsplice` | user pages into a pipe with `vmsplice()`, spliced to the socket |
//! | `adaptive` | per send, the path this host measured fastest at its size (`copy`, `msg-zerocopy`, `uring`, `uring-zc`; `sendfile()` for file data) |
//!
//! Buffers given to a path are moved in and come back (through [`SendPath::take_buf`]) only
//! when the kernel has released them. Zero-copy paths count how many of their sends the kernel
//! copied anyway, and every fallback to copying, by reason ([`metrics::SendStats`]).
//!
//! ```no_run
//! use sendpath::{open, Options, Strategy};
//! use std::time::Duration;
//!
//! let sock = std::net::TcpStream::connect("127.0.0.1:9000")?;
//! let mut path = open(Strategy::MsgZerocopy, sock, &Options::default())?;
//! let mut buf = path.take_buf(65536); // a buffer the kernel has released
//! buf.as_mut_slice().fill(b'x');
//! path.send_buf(buf)?; // moved in: no safe code can touch it now (several: Msg::Fields)
//! let mut batch: Vec<_> = (0..16).map(|_| path.take_buf(4096)).collect();
//! path.send_bufs(&mut batch)?; // 16 messages, the loop inside the path
//! path.finish(Duration::from_secs(2))?; // wait for every completion (bounded)
//! let s = path.stats().summary();
//! println!("copied {:?}, fallbacks {:?}", s.copied_fraction, s.fallbacks);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! The adaptive sender decides from a host profile that `sendpath calibrate` measured
//! ([`profile::Profile`]; the documented defaults when there is none), stops using zero-copy
//! on a route where the kernel copies (when the profile expected it not to) and tries again
//! later, and counts every decision ([`policy::adaptive::Decisions`]). A runnable version is
//! `examples/adaptive.rs`.
//!
//! ```no_run
//! use sendpath::profile::Profile;
//! use sendpath::{open, Options, Strategy};
//! use std::sync::Arc;
//!
//! let (profile, _file) = Profile::load_active()?; // the defaults when no profile exists
//! let opts = Options { profile: Some(Arc::new(profile)), ..Options::default() };
//! let sock = std::net::TcpStream::connect("127.0.0.1:9000")?;
//! let mut path = open(Strategy::Adaptive, sock, &opts)?;
//! for len in [88, 4096, 1 << 20] {
//!     let mut buf = path.take_buf(len);
//!     buf.as_mut_slice().fill(b'x');
//!     path.send_buf(buf)?; // copy or zero-copy, by the profile's tier for `len`
//! }
//! path.finish(std::time::Duration::from_secs(2))?;
//! println!("{:?}", path.stats().decisions); // sends per path, switches, back-offs
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
#![deny(unsafe_code)]
#![warn(missing_docs)]

pub mod buffer;
pub mod completion;
pub mod engine;
mod error;
pub mod metrics;
pub mod policy;
pub mod probe;
pub mod profile;
mod socket;
pub mod strategy;
#[allow(unsafe_code)]
mod sys;

pub use buffer::Buf;
pub use error::Error;
pub use metrics::SendStats;
pub use probe::{probe, Capabilities, IoUringProbe, MsgZerocopyProbe};
pub use socket::Socket;
pub use strategy::{open, DataCopy, FileRange, Msg, Options, SendPath, Source, Strategy};

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
