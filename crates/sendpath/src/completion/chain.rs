//! Settling a chain of io_uring sends.
//!
//! Sends on one TCP socket must not overlap: io_uring issues SQEs in order, but a send that has
//! to wait for socket space is retried later, and a later SQE can overtake it. sendpath therefore
//! submits the sends of one socket either as one vectored request (`SENDMSG` over every queued
//! buffer) or as a chain of requests (`IOSQE_IO_LINK`), and waits for the results before
//! submitting more. When one link fails or is short, the kernel cancels the rest
//! (`-ECANCELED`); a short vectored request leaves its later buffers unsent. This module
//! decides, from the results alone, what to send next so that the byte stream stays exactly in
//! order.

/// One buffer of a chain: bytes `start..end` of the buffer in ring slot `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChainEntry {
    /// Ring slot holding the buffer.
    pub slot: u32,
    /// First byte to send.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// Sent with SEND_ZC (otherwise SEND).
    pub zc: bool,
}

/// One request of a chain: how many of the chain's entries it sent, in order, and its result.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ChainResult {
    /// Entries the request carried: 1 for a SEND, more for a vectored SENDMSG.
    pub entries: usize,
    /// The CQE `res` of the request (not of its notification): bytes sent or `-errno`.
    pub res: i32,
}

/// The outcome of one chain.
#[derive(Debug, Default, PartialEq, Eq)]
pub(crate) struct Settled {
    /// Bytes the chain put on the socket, in order.
    pub bytes_done: u64,
    /// What to send next, in order, before anything new: remainders and cancelled links.
    pub resend: Vec<ChainEntry>,
    /// Zero-copy entries whose request failed with `ENOMEM`, resent with SEND.
    pub enomem: u64,
    /// Requests that sent only part of their bytes.
    pub short: u64,
    /// A fatal errno: the connection cannot carry on.
    pub error: Option<i32>,
}

/// Decides what a chain achieved and what must be resent. `results` are the chain's requests
/// in order; together they carry every entry of `chain`, in order.
pub(crate) fn settle_chain(chain: &[ChainEntry], results: &[ChainResult]) -> Settled {
    let mut s = Settled::default();
    let mut broken = false;
    let mut at = 0;
    for r in results {
        let entries = &chain[at..(at + r.entries).min(chain.len())];
        at += r.entries;
        let want: usize = entries.iter().map(|e| e.end - e.start).sum();
        let zc = entries.first().is_some_and(|e| e.zc);
        let res = r.res;
        if !broken {
            if res >= 0 && res as usize == want {
                s.bytes_done += want as u64;
                continue;
            }
            broken = true;
            if res > 0 {
                s.short += 1;
                s.bytes_done += res as u64;
                resend_after(entries, res as usize, &mut s.resend);
            } else if res == 0 && want > 0 {
                // The peer closed, or the socket was shut down: nothing more will go through.
                s.error = Some(libc::EPIPE);
                return s;
            } else {
                match -res {
                    libc::ECANCELED | libc::EINTR | libc::EAGAIN => s.resend.extend(entries),
                    libc::ENOMEM if zc => by_copy(entries, &mut s),
                    errno => {
                        s.error = Some(errno);
                        return s;
                    }
                }
            }
        } else if res == -libc::ENOMEM && zc {
            // A SEND_ZC that failed to be prepared (its pages could not be charged to the
            // locked-memory limit) fails the links before it with ECANCELED: it goes by copy
            // on the resend, or the chain would fail the same way for ever.
            by_copy(entries, &mut s);
        } else if res < 0 && !matches!(-res, libc::ECANCELED | libc::EINTR | libc::EAGAIN) {
            // A link the kernel refused to prepare (EINVAL, EFAULT) fails the links before it
            // with ECANCELED: resending would fail the same way for ever.
            s.error = Some(-res);
            return s;
        } else if res >= 0 && res as usize == want {
            // A link ran although an earlier one failed: its bytes overtook the earlier ones.
            s.error = Some(libc::EIO);
            return s;
        } else {
            s.resend.extend(entries);
        }
    }
    s
}

/// Queues what a request that sent `done` bytes of `entries` left: the rest of the entry it
/// stopped in, then every later entry whole.
fn resend_after(entries: &[ChainEntry], mut done: usize, resend: &mut Vec<ChainEntry>) {
    for e in entries {
        let len = e.end - e.start;
        if done >= len {
            done -= len;
            continue;
        }
        resend.push(ChainEntry {
            start: e.start + done,
            ..*e
        });
        done = 0;
    }
}

/// A zero-copy request the kernel could not pin memory for: its entries go again by copy.
fn by_copy(entries: &[ChainEntry], s: &mut Settled) {
    s.enomem += entries.len() as u64;
    s.resend
        .extend(entries.iter().map(|e| ChainEntry { zc: false, ..*e }));
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_zc_that_failed_after_cancelled_links_goes_by_copy() {
        // io_uring fails a chain whose later link could not be prepared (ENOMEM past the
        // locked-memory limit) by cancelling the links before it.
        let c = [e(0, 10, true), e(1, 10, true), e(2, 10, true)];
        let s = settle(&c, &[-libc::ECANCELED, -libc::ECANCELED, -libc::ENOMEM]);
        assert_eq!(s.enomem, 1);
        assert_eq!(s.error, None);
        assert_eq!(s.resend.len(), 3);
        assert!(
            s.resend[0].zc && s.resend[1].zc && !s.resend[2].zc,
            "{:?}",
            s.resend
        );
    }

    #[test]
    fn a_link_refused_after_cancelled_links_ends_the_connection() {
        // A link the kernel could not prepare (EINVAL) cancels the links before it; sending
        // them all again would be refused the same way, round after round.
        let c = [e(0, 10, false), e(1, 10, false), e(2, 10, false)];
        let s = settle(&c, &[-libc::ECANCELED, -libc::ECANCELED, -libc::EINVAL]);
        assert_eq!(s.error, Some(libc::EINVAL));
    }

    /// Results of a chain of one-entry requests (linked SENDs).
    fn settle(chain: &[ChainEntry], res: &[i32]) -> Settled {
        let r: Vec<ChainResult> = res
            .iter()
            .map(|&res| ChainResult { entries: 1, res })
            .collect();
        settle_chain(chain, &r)
    }

    fn e(slot: u32, len: usize, zc: bool) -> ChainEntry {
        ChainEntry {
            slot,
            start: 0,
            end: len,
            zc,
        }
    }

    #[test]
    fn all_complete() {
        let c = [e(0, 10, true), e(1, 20, true)];
        let s = settle(&c, &[10, 20]);
        assert_eq!(s.bytes_done, 30);
        assert!(s.resend.is_empty());
        assert_eq!(s.error, None);
    }

    #[test]
    fn short_send_resends_remainder_then_cancelled_links() {
        let c = [e(0, 10, false), e(1, 20, false), e(2, 5, false)];
        let s = settle(&c, &[10, 7, -libc::ECANCELED]);
        assert_eq!(s.bytes_done, 17);
        assert_eq!(s.short, 1);
        assert_eq!(
            s.resend,
            vec![
                ChainEntry {
                    slot: 1,
                    start: 7,
                    end: 20,
                    zc: false
                },
                e(2, 5, false)
            ]
        );
    }

    #[test]
    fn enomem_falls_back_to_copy_for_that_link_only() {
        let c = [e(0, 10, true), e(1, 10, true)];
        let s = settle(&c, &[-libc::ENOMEM, -libc::ECANCELED]);
        assert_eq!(s.enomem, 1);
        assert_eq!(s.resend, vec![e(0, 10, false), e(1, 10, true)]);
    }

    #[test]
    fn fatal_error_stops() {
        let c = [e(0, 10, false), e(1, 10, false)];
        let s = settle(&c, &[-libc::ECONNRESET, -libc::ECANCELED]);
        assert_eq!(s.error, Some(libc::ECONNRESET));
        let s = settle(&c, &[0, -libc::ECANCELED]);
        assert_eq!(s.error, Some(libc::EPIPE));
    }

    #[test]
    fn overtaking_link_is_an_error() {
        let c = [e(0, 10, false), e(1, 10, false)];
        let s = settle(&c, &[-libc::EAGAIN, 10]);
        assert_eq!(s.error, Some(libc::EIO));
    }

    #[test]
    fn a_short_vectored_send_resends_the_rest_of_its_entry_then_the_entries_after() {
        // One SENDMSG over three buffers of 10, 20 and 5 bytes sent 17: the first whole, 7 of
        // the second.
        let c = [e(0, 10, false), e(1, 20, false), e(2, 5, false)];
        let s = settle_chain(
            &c,
            &[ChainResult {
                entries: 3,
                res: 17,
            }],
        );
        assert_eq!((s.bytes_done, s.short), (17, 1));
        let mut rest = e(1, 20, false);
        rest.start = 7;
        assert_eq!(s.resend, vec![rest, e(2, 5, false)]);
        // Cut exactly at an entry's end: the entries after it go whole.
        let s = settle_chain(
            &c,
            &[ChainResult {
                entries: 3,
                res: 30,
            }],
        );
        assert_eq!((s.bytes_done, s.short), (30, 1));
        assert_eq!(s.resend, vec![e(2, 5, false)]);
    }

    #[test]
    fn vectored_requests_in_a_chain_settle_in_order() {
        // Two zero-copy buffers in one SENDMSG_ZC linked to two copied ones in a SENDMSG (the
        // in-flight cap sent the last two by copy); the first failed with ENOMEM.
        let c = [
            e(0, 10, true),
            e(1, 10, true),
            e(2, 10, false),
            e(3, 10, false),
        ];
        let r = [
            ChainResult {
                entries: 2,
                res: -libc::ENOMEM,
            },
            ChainResult {
                entries: 2,
                res: -libc::ECANCELED,
            },
        ];
        let s = settle_chain(&c, &r);
        assert_eq!((s.enomem, s.bytes_done, s.error), (2, 0, None));
        let zc: Vec<bool> = s.resend.iter().map(|e| e.zc).collect();
        assert_eq!(zc, [false, false, false, false], "all four again, by copy");
        let r = [
            ChainResult {
                entries: 2,
                res: 20,
            },
            ChainResult {
                entries: 2,
                res: 20,
            },
        ];
        assert_eq!(settle_chain(&c, &r).bytes_done, 40);
    }
}
