//! A datagram socket's sends: each datagram is a request of its own, settled by its own
//! result. Datagrams need no order between sends and go whole or not at all, so nothing of a
//! stream's chain applies: up to `depth` datagrams are in the kernel at once, and each result
//! lets its slot go (or resends that one datagram) without waiting for the others. One
//! datagram's failure says nothing about the next: a later datagram that went is counted, not
//! taken for bytes that overtook.

use super::{ConnState, Part, Payload, Pushed, Queued, Submit};
use crate::completion::ChainEntry;

/// A datagram in the kernel: its request, slot and length, whether it went zero-copy and
/// from a registered buffer.
#[derive(Debug, Clone, Copy)]
pub(super) struct InKernel {
    req: u64,
    slot: u32,
    len: u32,
    zc: bool,
    registered: bool,
}

impl ConnState {
    /// [`ConnState::submit_chain`] on a datagram socket: what is to be resent, then queued
    /// datagrams, each one unlinked request, until `depth` are in the kernel.
    pub(super) fn submit_datagrams<E>(
        &mut self,
        push: &mut impl FnMut(Submit<'_>) -> Result<Pushed, E>,
    ) -> Result<usize, E> {
        let room = self.cfg.depth.saturating_sub(self.datagrams_in_kernel());
        let copy = self.chooser.fixed() == Some(super::Choice::Copy);
        let mut pushed = 0;
        while pushed < room {
            let (part, zc) = if !self.resend.is_empty() {
                let e = self.resend.remove(0);
                let payload = Payload::Held(e.slot);
                (
                    Part {
                        payload,
                        range: e.start..e.end,
                    },
                    e.zc,
                )
            } else if let Some(q) = self.queued.pop_front() {
                let (payload, len) = match q {
                    Queued::Buf => (Payload::New, self.queue[0].len()),
                    Queued::Held { slot, len } => (Payload::Held(slot), len),
                };
                let zc = !copy && self.decide(len);
                (
                    Part {
                        payload,
                        range: 0..len,
                    },
                    zc,
                )
            } else {
                break;
            };
            self.push_datagram(part, zc, push)?;
            pushed += 1;
        }
        if self.queued.is_empty() {
            self.flushing = false;
        }
        Ok(pushed)
    }

    /// Pushes one datagram and records it; when the driver cannot, its buffer is let go of
    /// (the driver then fails the connection).
    fn push_datagram<E>(
        &mut self,
        part: Part,
        zc: bool,
        push: &mut impl FnMut(Submit<'_>) -> Result<Pushed, E>,
    ) -> Result<(), E> {
        let op = self.send_op(zc);
        let len = part.range.len();
        let mut parts = [part];
        let submit = Submit {
            parts: &mut parts,
            queue: &mut self.queue,
            op,
            link: false,
        };
        let p = match push(submit) {
            Ok(p) => p,
            Err(e) => {
                let mut queue = std::mem::take(&mut self.queue);
                self.abandon(&mut parts, &mut queue);
                self.queue = queue;
                return Err(e);
            }
        };
        let Payload::Held(slot) = parts[0].payload else {
            unreachable!("the driver puts every new buffer it pushes in a slot");
        };
        self.count_unkeyed(1, 1, len, zc, p.registered);
        self.in_kernel.push_back(InKernel {
            req: p.req,
            slot,
            len: len as u32,
            zc,
            registered: p.registered,
        });
        Ok(())
    }

    /// [`ConnState::on_result`] on a datagram socket: the datagram of `req` went (its slot is
    /// let go of), or is resent (interrupted or cancelled; by copy after a SEND_ZC's
    /// `ENOMEM`), or its error ends the connection. A SEND_ZC datagram goes to the ledger
    /// here, from which its notification ends it.
    pub(super) fn on_datagram_result(
        &mut self,
        req: u64,
        res: i32,
        more: bool,
        age_ns: Option<u64>,
    ) {
        // The oldest, as results come as a rule: looked at before any search (a search of the
        // deque costs about 20 instructions more), and taken without a shift.
        let at = match self.in_kernel.front() {
            Some(d) if d.req == req => Some(0),
            _ => self.in_kernel.iter().position(|d| d.req == req),
        };
        let taken = match at {
            Some(0) => self.in_kernel.pop_front(),
            i => i.and_then(|i| self.in_kernel.remove(i)),
        };
        let Some(d) = taken else {
            self.stats.zerocopy.unexpected += 1;
            return;
        };
        let len = d.len as usize;
        if d.zc {
            let early = self
                .ledger
                .on_datagram_result(req, res, more, (len, d.registered));
            if early.is_some() {
                self.count_notif(early, age_ns);
            }
        }
        if res > 0 || (res == 0 && len == 0) {
            // A datagram goes whole; a count short of it is counted, and its rest not sent
            // (it would be a datagram of its own).
            self.stats.bytes += res as u64;
            self.stats.short_sends += u64::from((res as usize) < len);
            self.unheld.push(d.slot);
            return;
        }
        self.datagram_failed(d.slot, len, d.zc, res);
    }

    /// A datagram of `len` bytes in held `slot` sent nothing (`res`: 0 or `-errno`): resent
    /// (interrupted or cancelled; by copy after a SEND_ZC's `ENOMEM`), or its error ends the
    /// connection and the slot is let go of.
    pub(super) fn datagram_failed(&mut self, slot: u32, len: usize, zc: bool, res: i32) {
        let whole = ChainEntry {
            slot,
            start: 0,
            end: len,
            zc,
        };
        match -res {
            libc::ECANCELED | libc::EINTR | libc::EAGAIN if self.error.is_none() => {
                self.resend.push(whole);
            }
            libc::ENOMEM if zc && self.error.is_none() => {
                self.count_no_memory(1);
                self.resend.push(ChainEntry { zc: false, ..whole });
            }
            errno => {
                self.unheld.push(slot);
                if self.error.is_none() {
                    self.fail(if res == 0 { libc::EPIPE } else { errno });
                }
            }
        }
    }

    /// Counts `n` sends of `len` bytes each the driver pushed in `requests` requests that
    /// no key follows (`zc`: as SEND_ZC): datagrams, the queue's or the lane's, and a
    /// stream's lane requests.
    #[inline]
    pub(super) fn count_unkeyed(
        &mut self,
        requests: usize,
        n: usize,
        len: usize,
        zc: bool,
        registered: bool,
    ) {
        self.count_requests(requests, n, zc, registered);
        if zc {
            self.ledger.submitted_unkeyed(n, n * len, registered);
        }
        // In the ledger now: no longer a choice of this batch (`decide` counts both).
        self.deciding = (0, 0);
    }

    /// Datagrams awaiting their result, the queue's and the lane's.
    pub(super) fn datagrams_in_kernel(&self) -> usize {
        self.in_kernel.len() + self.lane_in_kernel
    }

    /// Whether `req` is a SEND_ZC datagram still awaiting its result (a notification that
    /// came first is kept for it).
    pub(super) fn datagram_awaits_result(&self, req: u64) -> bool {
        self.datagrams && self.in_kernel.iter().any(|d| d.req == req && d.zc)
    }
}

#[cfg(test)]
pub(super) mod tests {
    use super::super::tests::{fill, state, Kernel};
    use super::super::{Choice, SendOp};

    /// A connection state of `depth` on a datagram socket.
    pub(in crate::send) fn datagrams(depth: usize, zc: bool, choice: Choice) -> super::ConnState {
        let mut st = state(depth, zc, choice);
        st.set_datagrams();
        st
    }

    #[test]
    fn a_datagram_that_failed_does_not_stop_the_next_and_enomem_resends_it_by_copy() {
        let mut k = Kernel::new(1);
        let mut st = datagrams(3, true, Choice::ZeroCopy);
        fill(&mut st, 3, 100);
        let c = k.submit(&mut st);
        assert_eq!(c.len(), 3);
        assert!(c.iter().all(|x| !x.4), "unlinked");
        st.on_result(c[0].1, -libc::ENOMEM, true, None);
        st.on_result(c[1].1, 100, true, None);
        st.on_result(c[2].1, -libc::EAGAIN, true, None);
        for x in &c {
            st.on_notification(x.1, false, None);
        }
        assert_eq!(
            st.error(),
            None,
            "a later datagram that went is no overtaking"
        );
        assert_eq!(st.stats().bytes, 100);
        assert_eq!(st.stats().zerocopy.fallbacks.enomem, 1);
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        assert_eq!(
            un,
            [c[1].0],
            "the one that went is let go; the others are resent"
        );
        let r = k.submit(&mut st);
        let mut resent: Vec<_> = r.iter().map(|x| (x.0, x.3)).collect();
        resent.sort_by_key(|x| x.0);
        let zc = SendOp::SendZc { report_usage: true };
        assert_eq!(resent, [(c[0].0, SendOp::Send), (c[2].0, zc)]);
        for x in &r {
            st.on_result(x.1, 100, x.3 == zc, None);
        }
        st.on_notification(r.iter().find(|x| x.3 == zc).unwrap().1, false, None);
        assert_eq!(st.stats().bytes, 300);
        assert!(st.is_flushed());
        assert_eq!(st.zc_inflight(), 0);
        assert_eq!(st.stats().zerocopy.completions, 2);
    }

    #[test]
    fn a_notification_before_its_datagram_s_result_is_counted_once_at_the_result() {
        let mut k = Kernel::new(1);
        let mut st = datagrams(2, true, Choice::ZeroCopy);
        fill(&mut st, 2, 100);
        let c = k.submit(&mut st);
        assert_eq!(st.zc_inflight(), 2);
        st.on_notification(c[1].1, true, None);
        assert_eq!(st.stats().zerocopy.completions, 0, "not before its result");
        st.on_result(c[0].1, 100, true, None);
        st.on_result(c[1].1, 100, true, None);
        assert_eq!(
            (st.stats().zerocopy.completions, st.stats().zerocopy.copied),
            (1, 1)
        );
        assert_eq!(st.zc_inflight(), 1, "the first's notification is due");
        st.on_notification(c[0].1, false, None);
        // A notification for no datagram (one already ended, or a copying one) is counted.
        st.on_notification(c[1].1, false, None);
        let z = &st.stats().zerocopy;
        assert_eq!((z.completions, z.copied, z.unexpected), (2, 1, 1));
        assert_eq!(st.zc_inflight(), 0);
    }

    #[test]
    fn registered_datagrams_are_not_held_to_the_inflight_cap() {
        // max_sends is 4; 6 datagrams in flight.
        for registered in [false, true] {
            let mut k = Kernel::new(1);
            k.registered = registered;
            let mut st = datagrams(6, true, Choice::ZeroCopy);
            fill(&mut st, 6, 100);
            let c = k.submit(&mut st);
            let zc = c.iter().filter(|x| x.3 != SendOp::Send).count();
            assert_eq!(zc, if registered { 6 } else { 4 });
            for x in &c {
                st.on_result(x.1, 100, x.3 != SendOp::Send, None);
            }
            assert_eq!(st.zc_inflight(), zc, "notifications due");
            for x in c.iter().filter(|x| x.3 != SendOp::Send) {
                st.on_notification(x.1, false, None);
            }
            assert_eq!(st.zc_inflight(), 0);
            assert_eq!(st.stats().zerocopy.completions, zc as u64);
        }
    }

    #[test]
    fn datagrams_stay_depth_in_the_kernel_and_each_result_makes_room_for_one() {
        let mut k = Kernel::new(1);
        let mut st = datagrams(2, false, Choice::Copy);
        fill(&mut st, 2, 10);
        let c = k.submit(&mut st);
        assert_eq!(c.len(), 2);
        fill(&mut st, 2, 10);
        assert!(!st.ready(), "two in the kernel already");
        // Results in any order: the second's makes room for one more.
        st.on_result(c[1].1, 10, false, None);
        assert!(st.ready());
        let r = k.submit(&mut st);
        assert_eq!(r.len(), 1);
        assert_eq!(st.room(), 1);
        st.on_result(c[0].1, 10, false, None);
        st.on_result(r[0].1, 10, false, None);
        st.request_flush();
        let last = k.submit(&mut st);
        st.on_result(last[0].1, 10, false, None);
        assert_eq!(st.stats().bytes, 40);
        assert_eq!(st.stats().calls, 4);
        assert!(st.is_flushed());
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        un.sort_unstable();
        assert_eq!(un, [0, 1, 2, 3], "every slot let go, once");
    }

    #[test]
    fn a_datagram_s_error_ends_the_connection_and_every_slot_goes() {
        let mut k = Kernel::new(1);
        let mut st = datagrams(2, false, Choice::Copy);
        fill(&mut st, 2, 10);
        let c = k.submit(&mut st);
        fill(&mut st, 1, 10);
        st.on_result(c[0].1, -libc::ECONNREFUSED, false, None);
        assert_eq!(st.error(), Some(libc::ECONNREFUSED));
        assert!(!st.ready());
        // The other datagram in the kernel is counted when its result comes, and let go.
        st.on_result(c[1].1, 10, false, None);
        st.on_result(c[1].1, 10, false, None);
        assert_eq!(st.stats().bytes, 10);
        assert_eq!(
            st.stats().zerocopy.unexpected,
            1,
            "a result for no datagram"
        );
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        un.sort_unstable();
        assert_eq!(un, [c[0].0, c[1].0]);
        assert!(st.is_flushed());
    }
}
