//! Which operation each send uses: the seam where a fixed strategy today and an adaptive one
//! next plug into [`ConnState`](super::ConnState).

/// The operation chosen for one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Choice {
    /// Copy the bytes into the socket (SEND).
    Copy,
    /// Ask the kernel not to copy (SEND_ZC). The in-flight cap and the kernel may still make it
    /// a copy; each such fallback is counted by reason.
    ZeroCopy,
}

impl Choice {
    /// The fixed choice of an io_uring strategy: `uring` copies, `uring-zc` asks for zero-copy;
    /// `None` for paths that do not run on the io_uring driver.
    pub fn of_strategy(s: crate::Strategy) -> Option<Choice> {
        match s {
            crate::Strategy::Uring => Some(Choice::Copy),
            crate::Strategy::UringZc => Some(Choice::ZeroCopy),
            _ => None,
        }
    }
}

/// What a chooser knows when it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SendContext {
    /// Bytes of this send.
    pub len: usize,
    /// Zero-copy sends of this connection awaiting their notification, this one excluded.
    pub zc_inflight: usize,
    /// Their bytes.
    pub zc_inflight_bytes: usize,
}

/// Picks the operation for each send. Implementations do no I/O.
pub trait Choose: Send + std::fmt::Debug {
    /// The operation for the send described by `cx`.
    fn choose(&mut self, cx: &SendContext) -> Choice;
}

/// Always the same choice: the `uring` (copy) and `uring-zc` (zero-copy) strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixed(pub Choice);

impl Choose for Fixed {
    fn choose(&mut self, _: &SendContext) -> Choice {
        self.0
    }
}
