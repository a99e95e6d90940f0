//! Settling a linked chain of io_uring sends.
//!
//! Sends on one TCP socket must not overlap: io_uring issues SQEs in order, but a send that has
//! to wait for socket space is retried later, and a later SQE can overtake it. sendpath therefore
//! submits the sends of one socket as a chain (`IOSQE_IO_LINK`) and waits for the chain's
//! results before submitting more. When one link fails or is short, the kernel cancels the rest
//! (`-ECANCELED`); this module decides, from the results alone, what to send next so that the
//! byte stream stays exactly in order.

/// One send of a chain: bytes `start..end` of the buffer in ring slot `slot`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ChainEntry {
    /// Ring slot holding the buffer.
    pub slot: u32,
    /// First byte to send.
    pub start: usize,
    /// One past the last byte.
    pub end: usize,
    /// Sent with SEND_ZC (otherwise SEND).
    pub zc: bool,
}

/// The outcome of one chain.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Settled {
    /// Bytes the chain put on the socket, in order.
    pub bytes_done: u64,
    /// What to send next, in order, before anything new: remainders and cancelled links.
    pub resend: Vec<ChainEntry>,
    /// SEND_ZC links that failed with `ENOMEM` and are resent with SEND.
    pub enomem: u64,
    /// Links that sent only part of their bytes.
    pub short: u64,
    /// A fatal errno: the connection cannot carry on.
    pub error: Option<i32>,
}

/// Decides what a chain achieved and what must be resent. `results[i]` is the CQE `res` of
/// `chain[i]`'s request (not of its notification).
pub fn settle_chain(chain: &[ChainEntry], results: &[i32]) -> Settled {
    let mut s = Settled::default();
    let mut broken = false;
    for (e, &res) in chain.iter().zip(results) {
        let want = e.end - e.start;
        if !broken {
            if res >= 0 && res as usize == want {
                s.bytes_done += want as u64;
                continue;
            }
            broken = true;
            if res > 0 {
                s.short += 1;
                s.bytes_done += res as u64;
                s.resend.push(ChainEntry {
                    start: e.start + res as usize,
                    ..*e
                });
            } else if res == 0 && want > 0 {
                // The peer closed, or the socket was shut down: nothing more will go through.
                s.error = Some(libc::EPIPE);
                return s;
            } else {
                match -res {
                    libc::ECANCELED | libc::EINTR | libc::EAGAIN => s.resend.push(*e),
                    libc::ENOMEM if e.zc => {
                        s.enomem += 1;
                        s.resend.push(ChainEntry { zc: false, ..*e });
                    }
                    errno => {
                        s.error = Some(errno);
                        return s;
                    }
                }
            }
        } else if res == -libc::ENOMEM && e.zc {
            // A SEND_ZC that failed to be prepared (its pages could not be charged to the
            // locked-memory limit) fails the links before it with ECANCELED: it goes by copy
            // on the resend, or the chain would fail the same way for ever.
            s.enomem += 1;
            s.resend.push(ChainEntry { zc: false, ..*e });
        } else if res == -libc::ECANCELED {
            s.resend.push(*e);
        } else if res >= 0 && res as usize == want {
            // A link ran although an earlier one failed: its bytes overtook the earlier ones.
            s.error = Some(libc::EIO);
            return s;
        } else {
            s.resend.push(*e);
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_send_zc_that_failed_after_cancelled_links_goes_by_copy() {
        // io_uring fails a chain whose later link could not be prepared (ENOMEM past the
        // locked-memory limit) by cancelling the links before it.
        let c = [e(0, 10, true), e(1, 10, true), e(2, 10, true)];
        let s = settle_chain(&c, &[-libc::ECANCELED, -libc::ECANCELED, -libc::ENOMEM]);
        assert_eq!(s.enomem, 1);
        assert_eq!(s.error, None);
        assert_eq!(s.resend.len(), 3);
        assert!(
            s.resend[0].zc && s.resend[1].zc && !s.resend[2].zc,
            "{:?}",
            s.resend
        );
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
        let s = settle_chain(&c, &[10, 20]);
        assert_eq!(s.bytes_done, 30);
        assert!(s.resend.is_empty());
        assert_eq!(s.error, None);
    }

    #[test]
    fn short_send_resends_remainder_then_cancelled_links() {
        let c = [e(0, 10, false), e(1, 20, false), e(2, 5, false)];
        let s = settle_chain(&c, &[10, 7, -libc::ECANCELED]);
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
        let s = settle_chain(&c, &[-libc::ENOMEM, -libc::ECANCELED]);
        assert_eq!(s.enomem, 1);
        assert_eq!(s.resend, vec![e(0, 10, false), e(1, 10, true)]);
    }

    #[test]
    fn fatal_error_stops() {
        let c = [e(0, 10, false), e(1, 10, false)];
        let s = settle_chain(&c, &[-libc::ECONNRESET, -libc::ECANCELED]);
        assert_eq!(s.error, Some(libc::ECONNRESET));
        let s = settle_chain(&c, &[0, -libc::ECANCELED]);
        assert_eq!(s.error, Some(libc::EPIPE));
    }

    #[test]
    fn overtaking_link_is_an_error() {
        let c = [e(0, 10, false), e(1, 10, false)];
        let s = settle_chain(&c, &[-libc::EAGAIN, 10]);
        assert_eq!(s.error, Some(libc::EIO));
    }
}
