//! Submitting a connection's next chain: which buffers go in it (what the last chain left,
//! then queued ones), which operation each send takes, and how the requests are grouped and
//! linked; each request the driver pushed is recorded for its completions.

use super::{
    Choice, ConnState, InFlight, Order, Part, Payload, Queued, SendContext, SendOp, MAX_IOV,
};
use crate::buffer::Buf;
use crate::completion::ChainEntry;
use crate::policy::{self, InflightLimits, ZcDecision};
use std::collections::VecDeque;

/// One request the driver must push, in order.
#[derive(Debug)]
pub(crate) struct Submit<'a> {
    /// The buffers it sends, in order: one for a `SEND` or `SEND_ZC`; several for a vectored
    /// `SENDMSG` or `SENDMSG_ZC` (with `op` `Send` or `SendZc`).
    pub(crate) parts: &'a mut [Part],
    /// The connection's queued buffers: each [`Payload::New`] part, in order, is the one at
    /// the front. The driver takes exactly those.
    pub(crate) queue: &'a mut VecDeque<Buf>,
    /// SEND or SEND_ZC.
    pub(crate) op: SendOp,
    /// Link to the next request (`IOSQE_IO_LINK`); false on the chain's last.
    pub(crate) link: bool,
}

/// What the driver did with a [`Submit`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Pushed {
    /// The request id its completions carry.
    pub(crate) req: u64,
    /// The request sends from registered (fixed) buffers.
    pub(crate) registered: bool,
}

impl ConnState {
    /// Submits the next chain when [`ConnState::ready`]: first what the last chain left, then
    /// queued buffers, at most `depth` of them, as the order says: one vectored request per
    /// run of buffers with one operation, or one request per buffer. Call it after absorbing
    /// every completion that is ready: a zero-copy choice that finds the in-flight cap full
    /// then goes by copy (an `inflight_cap` fallback). `push` puts one request in the ring; an
    /// error from it ends the chain early (the driver treats it as fatal for the connection).
    /// Returns how many requests were pushed.
    pub(crate) fn submit_chain<E>(
        &mut self,
        mut push: impl FnMut(Submit<'_>) -> Result<Pushed, E>,
    ) -> Result<usize, E> {
        if !self.ready() {
            return Ok(0);
        }
        if self.datagrams {
            return self.submit_datagrams(&mut push);
        }
        let taken = self.gather_parts();
        let mut parts = std::mem::take(&mut self.parts);
        let mut queue = std::mem::take(&mut self.queue);
        let pushed = self.push_requests(&mut parts, &mut queue, &mut push);
        parts.clear();
        self.parts = parts;
        self.queue = queue;
        // Every part was pushed or abandoned: the queued entries it came from are done.
        self.queued.drain(..taken);
        self.part_zc.clear();
        self.resend.clear();
        if self.queued.is_empty() {
            self.flushing = false;
        }
        pushed
    }

    /// The chain's buffers into `parts` (and whether each goes zero-copy into `part_zc`):
    /// what the last chain left, then what is queued (buffers stay in the queue until the
    /// driver takes them). Returns how many queued entries the parts took.
    fn gather_parts(&mut self) -> usize {
        let n = (self.resend.len() + self.queued.len()).min(self.cfg.depth.max(self.resend.len()));
        self.deciding = (0, 0);
        for e in &self.resend {
            self.parts.push(Part {
                payload: Payload::Held(e.slot),
                range: e.start..e.end,
            });
            self.part_zc.push(e.zc);
        }
        // A fixed choice of copy needs no decision per send.
        let copy = self.chooser.fixed() == Some(Choice::Copy);
        let taken = n - self.resend.len();
        let mut bufs = 0;
        for i in 0..taken {
            let (payload, len) = match self.queued[i] {
                Queued::Buf => {
                    bufs += 1;
                    (Payload::New, self.queue[bufs - 1].len())
                }
                Queued::Held { slot, len } => (Payload::Held(slot), len),
            };
            let zc = !copy && self.decide(len);
            self.parts.push(Part {
                payload,
                range: 0..len,
            });
            self.part_zc.push(zc);
        }
        taken
    }

    /// Pushes `parts` as the order groups them, linking each request to the next.
    fn push_requests<E>(
        &mut self,
        parts: &mut [Part],
        queue: &mut VecDeque<Buf>,
        push: &mut impl FnMut(Submit<'_>) -> Result<Pushed, E>,
    ) -> Result<usize, E> {
        let (mut at, mut requests) = (0, 0);
        while at < parts.len() {
            let end = self.request_end(at);
            let zc = self.part_zc[at];
            let op = self.send_op(zc);
            let link = self.cfg.order != Order::Unlinked && end < parts.len();
            let submit = Submit {
                parts: &mut parts[at..end],
                queue,
                op,
                link,
            };
            match push(submit) {
                Ok(p) => self.record(&parts[at..end], zc, p),
                Err(e) => {
                    self.abandon(&mut parts[at..], queue);
                    return Err(e);
                }
            }
            at = end;
            requests += 1;
        }
        Ok(requests)
    }

    /// Parts the driver could not push (the connection then fails): their held slots are let
    /// go of and their new buffers go back to the pool, as [`ConnState::fail`] does with a
    /// queue.
    pub(super) fn abandon(&mut self, parts: &mut [Part], queue: &mut VecDeque<Buf>) {
        for p in parts {
            match p.payload {
                Payload::New => self.pool.put_all(queue.pop_front()),
                Payload::Held(slot) => self.unheld.push(slot),
            }
        }
    }

    /// One past the last part of the request that starts at part `at`.
    fn request_end(&self, at: usize) -> usize {
        let zc = &self.part_zc;
        let mut end = at + 1;
        if self.cfg.order == Order::Vectored {
            while end < zc.len() && end - at < MAX_IOV && zc[end] == zc[at] {
                end += 1;
            }
        }
        end
    }

    /// Records a request the driver pushed: its buffers join the chain in the kernel.
    fn record(&mut self, parts: &[Part], zc: bool, p: Pushed) {
        let mut bytes = 0;
        for part in parts {
            let Payload::Held(slot) = part.payload else {
                unreachable!("the driver puts every new buffer it pushes in a slot");
            };
            bytes += part.range.len();
            self.chain.push(ChainEntry {
                slot,
                start: part.range.start,
                end: part.range.end,
                zc,
            });
        }
        let n = parts.len();
        self.count_requests(1, n, zc, p.registered);
        if zc {
            self.ledger.submitted_sends(p.req, bytes, n, p.registered);
        }
        self.requests.push(InFlight {
            req: p.req,
            entries: n,
            bytes,
            res: None,
        });
    }

    /// SEND_ZC for a zero-copy send where the kernel has it, else SEND.
    pub(super) fn send_op(&self, zc: bool) -> SendOp {
        match (zc, self.cfg.zc) {
            (true, Some(z)) => SendOp::SendZc {
                report_usage: z.report_usage,
            },
            _ => SendOp::Send,
        }
    }

    /// Counts `requests` requests the driver pushed, of `sends` sends in all (its caller puts
    /// zero-copy ones in the SEND_ZC ledger).
    #[inline]
    pub(super) fn count_requests(
        &mut self,
        requests: usize,
        sends: usize,
        zc: bool,
        registered: bool,
    ) {
        let (requests, sends, r) = (requests as u64, sends as u64, u64::from(registered));
        self.stats.calls += requests;
        if let Some(a) = &mut self.stats.arena {
            a.registered_requests += requests * r;
        }
        if zc {
            self.stats.zerocopy.attempts += sends;
            self.stats.zerocopy.registered += sends * r;
        }
    }

    /// Whether a new send of `len` bytes goes zero-copy, counting a fallback when the chooser
    /// asked for zero-copy and it cannot be.
    /// The cap counts the zero-copy sends in flight that pinned their pages (not those from
    /// registered buffers) and those chosen earlier in this chain.
    pub(super) fn decide(&mut self, len: usize) -> bool {
        let (pinned, pinned_bytes) = self.ledger.pinned();
        let cx = SendContext {
            len,
            zc_inflight: pinned + self.deciding.0,
            zc_inflight_bytes: pinned_bytes + self.deciding.1,
        };
        let choice = self.chooser.choose(&cx);
        self.chooser.copy_decisions(&mut self.stats.decisions);
        if choice == Choice::Copy {
            return false;
        }
        if self.cfg.zc.is_some() && self.zc_budget == 0 {
            self.stats
                .zerocopy
                .fallbacks
                .count(policy::FallbackReason::InflightCap);
            return false;
        }
        let limits = self
            .cfg
            .zc
            .map_or_else(InflightLimits::default, |z| z.limits);
        match policy::admit(
            self.cfg.zc.is_some(),
            limits,
            cx.zc_inflight,
            cx.zc_inflight_bytes,
            len,
            true,
        ) {
            ZcDecision::ZeroCopy => {
                self.zc_budget = self.zc_budget.saturating_sub(1);
                self.deciding.0 += 1;
                self.deciding.1 += len;
                true
            }
            ZcDecision::Copy(r) => {
                self.stats.zerocopy.fallbacks.count(r);
                false
            }
            ZcDecision::ReapThenRetry => unreachable!("admit with reaped=true never asks to reap"),
        }
    }
}
