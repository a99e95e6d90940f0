//! I/O-free completion bookkeeping. The send paths feed these types with what the kernel said
//! (error-queue ranges, io_uring CQEs) and a clock; the types decide which buffers are free and
//! what to count. Unit-tested on simulated notifications.

mod chain;
mod held;
mod send_zc;
mod zerocopy;

pub use chain::{settle_chain, ChainEntry, ChainResult, Settled};
pub use held::{HeldMessages, HeldRelease};
pub use send_zc::{NotifOutcome, SendZcLedger};
pub use zerocopy::{RangeCounts, ZcNotification, ZcTracker};
