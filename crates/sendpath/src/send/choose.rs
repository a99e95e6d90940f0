//! Which operation each send on the ring uses: the one place where a strategy becomes an
//! operation ([`Chooser::for_strategy`]), and the per-send choice a connection's state asks of
//! it ([`Chooser::choose`]).

use crate::policy::adaptive::{Adaptive, Decisions};
use crate::{Options, Strategy};

/// The operation chosen for one send.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Choice {
    /// Copy the bytes into the socket (SEND).
    Copy,
    /// Ask the kernel not to copy (SEND_ZC). The in-flight cap and the kernel may still make it
    /// a copy; each such fallback is counted by reason.
    ZeroCopy,
}

/// What a chooser knows when it picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct SendContext {
    /// Bytes of this send.
    pub(crate) len: usize,
    /// Zero-copy sends of this connection awaiting their notification that pinned their pages
    /// (not from registered buffers), this one excluded.
    pub(crate) zc_inflight: usize,
    /// Their bytes.
    pub(crate) zc_inflight_bytes: usize,
}

/// How a connection on the ring picks SEND or SEND_ZC for each send. No I/O.
#[derive(Debug, Clone)]
pub(crate) enum Chooser {
    /// Always the same: `uring` copies, `uring-zc` asks for zero-copy.
    Fixed(Choice),
    /// The adaptive sender's decisions: SEND_ZC where the profile's tier for the size is a
    /// zero-copy path and the route, the run and the cap allow it
    /// ([`policy::adaptive`](crate::policy::adaptive)).
    Adaptive(Box<Adaptive>),
}

impl Chooser {
    /// The chooser of `strategy` on the ring: `uring` copies, `uring-zc` asks for zero-copy,
    /// `adaptive` decides per send from `opts.profile` (the documented defaults without one).
    /// `None` for the paths that do not run on the ring. Every place that needs to know how a
    /// strategy sends on the ring asks this.
    pub(crate) fn for_strategy(strategy: Strategy, opts: &Options) -> Option<Chooser> {
        match strategy {
            Strategy::Uring => Some(Chooser::Fixed(Choice::Copy)),
            Strategy::UringZc => Some(Chooser::Fixed(Choice::ZeroCopy)),
            Strategy::Adaptive => Some(Chooser::Adaptive(Box::new(Adaptive::new(
                opts.profile.as_deref().cloned().unwrap_or_default(),
                opts.adaptive,
            )))),
            _ => None,
        }
    }

    /// Whether any send may go zero-copy (what decides registered buffers and the order).
    pub(crate) fn may_zero_copy(&self) -> bool {
        !matches!(self, Chooser::Fixed(Choice::Copy))
    }

    /// The operation for the send described by `cx`.
    #[inline]
    pub(crate) fn choose(&mut self, cx: &SendContext) -> Choice {
        match self {
            Chooser::Fixed(c) => *c,
            // One ring: the tier's zero-copy paths are SEND_ZC, its copying ones SEND.
            Chooser::Adaptive(a) => match a.choose(cx.len, cx.zc_inflight).avoids_send_copy() {
                true => Choice::ZeroCopy,
                false => Choice::Copy,
            },
        }
    }

    /// `sends` zero-copy sends of the connection completed, `copied` of them reported copied
    /// (`IORING_NOTIF_USAGE_ZC_COPIED`).
    pub(crate) fn on_completions(&mut self, sends: u64, copied: u64) {
        if let Chooser::Adaptive(a) = self {
            a.on_completions(sends, copied);
        }
    }

    /// The kernel refused a zero-copy send for lack of memory (SEND_ZC's `ENOMEM`).
    pub(crate) fn on_no_memory(&mut self) {
        if let Chooser::Adaptive(a) = self {
            a.on_no_memory();
        }
    }

    /// Writes what the chooser decided so far into `out`; a fixed choice, which decides
    /// nothing, writes nothing (per send, the copy of a `None` cost 13 instructions).
    #[inline]
    pub(crate) fn copy_decisions(&self, out: &mut Option<Decisions>) {
        if let Chooser::Adaptive(a) = self {
            *out = Some(*a.decisions());
        }
    }

    /// The choice it makes for every send, if it is fixed: a connection then asks once per
    /// chain, not once per send.
    pub(crate) fn fixed(&self) -> Option<Choice> {
        match self {
            Chooser::Fixed(c) => Some(*c),
            Chooser::Adaptive(_) => None,
        }
    }

    /// The adaptive decisions, for the path that sends some of its sizes off the ring and
    /// must decide them with the same state.
    pub(crate) fn adaptive_mut(&mut self) -> Option<&mut Adaptive> {
        match self {
            Chooser::Adaptive(a) => Some(a),
            Chooser::Fixed(_) => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_ring_strategy_has_its_chooser_and_no_other_strategy_has_one() {
        let o = Options::default();
        for s in Strategy::ALL {
            let c = Chooser::for_strategy(s, &o);
            match s {
                Strategy::Uring => assert_eq!(c.unwrap().fixed(), Some(Choice::Copy)),
                Strategy::UringZc => assert_eq!(c.unwrap().fixed(), Some(Choice::ZeroCopy)),
                Strategy::Adaptive => {
                    let c = c.unwrap();
                    let mut d = None;
                    c.copy_decisions(&mut d);
                    assert!(c.fixed().is_none() && c.may_zero_copy() && d.is_some());
                }
                _ => assert!(c.is_none(), "{s}"),
            }
        }
        assert!(!Chooser::Fixed(Choice::Copy).may_zero_copy());
    }
}
