//! I/O-free completion bookkeeping. The send paths feed these types with what the kernel said
//! (error-queue ranges, io_uring CQEs) and a clock; the types decide which buffers are free and
//! what to count. Unit-tested on simulated notifications.

mod chain;
mod held;
mod lane;
mod send_zc;
pub(crate) mod zerocopy;

pub(crate) use chain::{settle_chain, ChainEntry, ChainResult};
pub(crate) use held::HeldMessages;
pub(crate) use lane::{LaneRequest, LaneSend, LaneStep, LaneTally};
pub(crate) use send_zc::{NotifOutcome, SendZcLedger};
pub(crate) use zerocopy::ZcNotification;
