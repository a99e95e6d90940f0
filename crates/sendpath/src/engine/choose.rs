//! Which operation each send uses: the seam where a fixed strategy ([`Fixed`]) and the adaptive
//! sender ([`AdaptiveChoice`]) plug into [`ConnState`](super::ConnState).

use crate::policy::adaptive::{Adaptive, Decisions};

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

/// Whether the strategy runs on the io_uring driver (`uring`, `uring-zc`, `adaptive`), so
/// [`chooser_for`] has a chooser for it.
pub fn on_ring(s: crate::Strategy) -> bool {
    matches!(
        s,
        crate::Strategy::Uring | crate::Strategy::UringZc | crate::Strategy::Adaptive
    )
}

/// The chooser of a strategy on the io_uring driver: [`Fixed`] for `uring` and `uring-zc`,
/// [`AdaptiveChoice`] (SEND below the profile's crossover, SEND_ZC above) for `adaptive`;
/// `None` for paths that do not run on the driver.
pub fn chooser_for(s: crate::Strategy, opts: &crate::Options) -> Option<Box<dyn Choose>> {
    if s == crate::Strategy::Adaptive {
        let profile = opts
            .profile
            .as_deref()
            .cloned()
            .unwrap_or_else(crate::profile::Profile::defaults);
        return Some(Box::new(AdaptiveChoice(Adaptive::new(
            profile,
            opts.adaptive,
        ))));
    }
    Choice::of_strategy(s).map(|c| Box::new(Fixed(c)) as Box<dyn Choose>)
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

    /// `sends` zero-copy sends of the connection completed, `copied` of them reported copied
    /// (`IORING_NOTIF_USAGE_ZC_COPIED`).
    fn on_completions(&mut self, sends: u64, copied: u64) {
        let _ = (sends, copied);
    }

    /// The kernel refused a zero-copy send for lack of memory (SEND_ZC's `ENOMEM`).
    fn on_no_memory(&mut self) {}

    /// What the chooser decided so far; `None` for a fixed choice.
    fn decisions(&self) -> Option<Decisions> {
        None
    }

    /// The choice it makes for every send, whatever the send, if it is fixed: a connection
    /// then asks once per chain, not once per send.
    fn fixed(&self) -> Option<Choice> {
        None
    }
}

/// The adaptive sender on the io_uring driver: SEND or SEND_ZC per send, from a host profile,
/// backing off where completions come back copied and halving its cap on `ENOMEM`
/// ([`policy::adaptive`](crate::policy::adaptive)). Its route state is the connection's own.
#[derive(Debug, Clone)]
pub struct AdaptiveChoice(pub Adaptive);

impl Choose for AdaptiveChoice {
    fn choose(&mut self, cx: &SendContext) -> Choice {
        // One ring: the tier's zero-copy paths are SEND_ZC, its copying ones SEND.
        if self.0.choose(cx.len, cx.zc_inflight).avoids_send_copy() {
            Choice::ZeroCopy
        } else {
            Choice::Copy
        }
    }

    fn on_completions(&mut self, sends: u64, copied: u64) {
        self.0.on_completions(sends, copied);
    }

    fn on_no_memory(&mut self) {
        self.0.on_no_memory();
    }

    fn decisions(&self) -> Option<Decisions> {
        Some(*self.0.decisions())
    }
}

/// Always the same choice: the `uring` (copy) and `uring-zc` (zero-copy) strategies.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Fixed(pub Choice);

impl Choose for Fixed {
    fn choose(&mut self, _: &SendContext) -> Choice {
        self.0
    }

    fn fixed(&self) -> Option<Choice> {
        Some(self.0)
    }
}
