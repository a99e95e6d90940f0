//! The I/O-free send state of one connection on io_uring.
//!
//! [`ConnState`] holds everything that decides how a connection's bytes reach the kernel, and
//! nothing that talks to it: the queue of buffers the application handed in, which buffers the
//! kernel holds, the chain of requests in flight, the SEND_ZC ledger (results and notifications
//! per request), the in-flight limits and the counters. A driver asks it what to submit
//! ([`ConnState::submit_chain`]) and feeds it what the kernel answered ([`ConnState::on_result`],
//! [`ConnState::on_notification`], [`ConnState::on_released`]); it is unit-tested on simulated
//! completions.
//!
//! Byte order on a stream socket: io_uring may let a later SEND overtake an earlier one that
//! had to wait for socket space. So each connection has at most one chain in the kernel, and
//! while it runs the application fills the next one (up to `depth` queued buffers). A chain is
//! one vectored request over its buffers ([`Order::Vectored`]: `SENDMSG` or `SENDMSG_ZC`, the
//! fastest ordered way measured here) or one request per buffer linked with `IOSQE_IO_LINK`
//! ([`Order::Linked`]). A chain goes in when the queue is full (so sends are batched `depth` to
//! a syscall, as small messages need), when something must be resent, or when the application
//! asked for a flush.
//!
//! A datagram socket has no chain: each datagram is a request of its own, up to `depth` in the
//! kernel, settled by its own result (`datagram.rs`).

mod choose;
mod datagram;
mod lane;
mod submit;

use crate::buffer::{Buf, BufPool};
use crate::completion::{settle_chain, ChainEntry, ChainResult, NotifOutcome, SendZcLedger};
use crate::policy::InflightLimits;
use crate::stats::SendStats;
pub(crate) use crate::sys::uring::{Part, Payload, SendOp};
pub(crate) use choose::{Choice, Chooser, SendContext};
use std::collections::VecDeque;
pub(crate) use submit::{Pushed, Submit};

/// How the requests of a chain keep a connection's bytes in order on io_uring: the fastest
/// the kernel has by default (vectored, else linked), or what
/// [`Options::uring_order`](crate::Options::uring_order) asks. What a connection used is in
/// its [`SendStats::uring_order`](crate::SendStats::uring_order).
///
/// ```
/// let o = sendpath::Options { uring_order: Some(sendpath::Order::Linked), ..Default::default() };
/// assert_eq!(o.uring_order.unwrap().name(), "linked");
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Order {
    /// One vectored request over the chain's buffers: `IORING_OP_SENDMSG`, or `SENDMSG_ZC`
    /// when they go zero-copy. Buffers of the chain that go by another operation (past the
    /// zero-copy cap, say) form a request of their own, linked to the one before.
    Vectored,
    /// One `SEND` or `SEND_ZC` per buffer, linked with `IOSQE_IO_LINK`.
    Linked,
    /// One request per buffer, unlinked: datagrams, each a message of its own that goes
    /// whole or not at all, need no order between sends (the kernel then issues each without
    /// waiting for the one before). Each is settled by its own result: one that failed is
    /// resent or ends the connection, and never holds back the others.
    Unlinked,
}

impl Order {
    /// `vectored`, `linked` or `unlinked`, as rows record it.
    pub fn name(self) -> &'static str {
        match self {
            Order::Vectored => "vectored",
            Order::Linked => "linked",
            Order::Unlinked => "unlinked",
        }
    }
}

/// The most buffers one vectored request carries (`UIO_MAXIOV`).
const MAX_IOV: usize = 1024;

/// How a connection may use SEND_ZC; absent when the kernel lacks it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ZcConfig {
    /// Cap on SEND_ZC requests (and bytes) awaiting their notification.
    pub(crate) limits: InflightLimits,
    /// Ask for usage reporting.
    pub(crate) report_usage: bool,
}

/// Settings of one connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct StateConfig {
    /// Requests per chain, and buffers queued behind the chain in flight.
    pub(crate) depth: usize,
    /// SEND_ZC settings; `None` when the kernel has no SEND_ZC (a zero-copy choice is then an
    /// `unsupported` fallback).
    pub(crate) zc: Option<ZcConfig>,
    /// How a chain keeps the order of a stream's bytes; a datagram socket's is
    /// [`Order::Unlinked`] whatever this says ([`ConnState::set_datagrams`]).
    pub(crate) order: Order,
}

/// A request of the chain in the kernel: its id, how many of the chain's entries it carries,
/// and its result once it has come.
#[derive(Debug, Clone, Copy)]
struct InFlight {
    req: u64,
    entries: usize,
    bytes: usize,
    res: Option<i32>,
}

/// What is queued next, in order: a buffer of `queue`, or a slot the ring already holds (a
/// message written in place, [`ConnState::push_held`]).
#[derive(Debug, Clone, Copy)]
enum Queued {
    Buf,
    Held { slot: u32, len: usize },
}

/// The I/O-free state of one connection. See the module docs.
#[derive(Debug)]
pub(crate) struct ConnState {
    cfg: StateConfig,
    chooser: Chooser,
    /// What was handed in and not yet submitted, in order.
    queued: VecDeque<Queued>,
    /// The buffers among it ([`Queued::Buf`]), in order.
    queue: VecDeque<Buf>,
    /// What the last chain left to send, first in line.
    resend: Vec<ChainEntry>,
    /// The chain in the kernel: its buffers, and its requests with their results.
    chain: Vec<ChainEntry>,
    requests: Vec<InFlight>,
    /// Requests of the chain whose result has come, and where the next is likely to be
    /// (results come in order as a rule): settling a chain of `n` takes `n` steps, not `n²`.
    results_in: usize,
    next_result: usize,
    /// The results of the chain being settled (a list kept between chains).
    settled: Vec<ChainResult>,
    /// The chain being submitted: its buffers and whether each goes zero-copy (lists kept
    /// between chains).
    parts: Vec<Part>,
    part_zc: Vec<bool>,
    /// Zero-copy sends (and bytes) chosen for the chain being submitted, not yet in the
    /// ledger.
    deciding: (usize, usize),
    ledger: SendZcLedger,
    pool: BufPool,
    stats: SendStats,
    /// Slots the state no longer needs (sent in full, or abandoned after an error); the ring
    /// releases each once its last completion is in. Drained by the driver.
    unheld: Vec<u32>,
    /// Submit what is queued without waiting for a full batch, until the queue is empty.
    flushing: bool,
    /// Sends on a datagram socket ([`ConnState::set_datagrams`]), and its datagrams in the
    /// kernel, oldest first (a datagram socket has no chain: see `datagram.rs`).
    datagrams: bool,
    in_kernel: VecDeque<datagram::InKernel>,
    /// Requests written in place that went past the queue (see `lane.rs`) awaiting their
    /// result: datagrams, or on a stream socket its one vectored send, whose slots
    /// `lane_group` keeps.
    lane_in_kernel: usize,
    lane_group: lane::LaneGroup,
    error: Option<i32>,
    /// Zero-copy sends the ring still allows (its cap over every connection, see
    /// [`ConnState::set_zc_budget`]).
    zc_budget: usize,
}

impl ConnState {
    /// A new connection state choosing its operation per send with `chooser`.
    pub(crate) fn new(cfg: StateConfig, chooser: Chooser) -> ConnState {
        let mut stats = SendStats {
            uring_order: Some(cfg.order),
            ..SendStats::default()
        };
        stats.zerocopy.copied_known = cfg.zc.is_none_or(|z| z.report_usage);
        ConnState {
            cfg: StateConfig {
                depth: cfg.depth.max(1),
                ..cfg
            },
            chooser,
            queued: VecDeque::new(),
            queue: VecDeque::new(),
            resend: Vec::new(),
            chain: Vec::new(),
            requests: Vec::new(),
            results_in: 0,
            next_result: 0,
            settled: Vec::new(),
            parts: Vec::new(),
            part_zc: Vec::new(),
            deciding: (0, 0),
            ledger: SendZcLedger::new(),
            pool: BufPool::new(),
            stats,
            unheld: Vec::new(),
            flushing: false,
            datagrams: false,
            in_kernel: VecDeque::new(),
            lane_in_kernel: 0,
            lane_group: lane::LaneGroup::default(),
            error: None,
            zc_budget: usize::MAX,
        }
    }

    /// The settings.
    pub(crate) fn config(&self) -> StateConfig {
        self.cfg
    }

    /// How many more buffers [`ConnState::push`] takes now (0 after an error).
    pub(crate) fn room(&self) -> usize {
        if self.error.is_some() {
            return 0;
        }
        self.cfg.depth.saturating_sub(self.queued.len())
    }

    /// Queues `buf` to send after everything before it; `end_of_message` counts a message.
    /// Gives the buffer back when there is no room.
    pub(crate) fn push(&mut self, buf: Buf, end_of_message: bool) -> Result<(), Buf> {
        if !self.enqueue(Queued::Buf, end_of_message) {
            return Err(buf);
        }
        self.queue.push_back(buf);
        Ok(())
    }

    /// Queues the first `len` bytes of ring slot `slot`, which the ring holds for this
    /// connection and no request has read (a message written in place), as
    /// [`ConnState::push`] queues a buffer, as one whole message. Gives the slot back when
    /// there is no room.
    pub(crate) fn push_held(&mut self, slot: u32, len: usize) -> Result<(), u32> {
        match self.enqueue(Queued::Held { slot, len }, true) {
            true => Ok(()),
            false => Err(slot),
        }
    }

    /// Queues the first `len` bytes of each of `slots` as [`ConnState::push_held`] does, in
    /// order, counting each a slot of the arena; returns how many it took (the rest, past the
    /// room, stay the caller's).
    pub(crate) fn push_held_run(&mut self, slots: &[u32], len: usize) -> usize {
        let n = slots.len().min(self.room());
        let run = slots[..n].iter().map(|&slot| Queued::Held { slot, len });
        self.queued.extend(run);
        self.count_in_place(n, true);
        n
    }

    /// Queues `q` when there is room, counting a message when it ends one; false when full.
    fn enqueue(&mut self, q: Queued, end_of_message: bool) -> bool {
        if self.room() == 0 {
            return false;
        }
        if end_of_message {
            self.stats.sends += 1;
        }
        self.queued.push_back(q);
        true
    }

    /// Counts `n` slots of the arena handed out for messages written in place, and as many
    /// sends when they are `sent` (queued or pushed) now.
    #[inline]
    pub(crate) fn count_in_place(&mut self, n: usize, sent: bool) {
        if sent {
            self.stats.sends += n as u64;
        }
        if let Some(a) = &mut self.stats.arena {
            a.slots += n as u64;
        }
    }

    /// Queues buffers from `bufs`, each a message, as [`ConnState::push`] would one at a time,
    /// until the queue is full or `bufs` runs out; returns how many it took.
    pub(crate) fn push_from(&mut self, bufs: &mut impl Iterator<Item = Buf>) -> usize {
        let before = self.queue.len();
        self.queue.extend(bufs.take(self.room()));
        let n = self.queue.len() - before;
        self.queued.extend(std::iter::repeat_n(Queued::Buf, n));
        self.stats.sends += n as u64;
        n
    }

    /// A buffer of `len` bytes to fill: one the kernel has released, or a new one.
    pub(crate) fn take_buf(&mut self, len: usize) -> Buf {
        let b = self.pool.take(len);
        if let Some(a) = &mut self.stats.arena {
            match b.is_arena() {
                true => a.slots += 1,
                false => a.heap += 1,
            }
        }
        b
    }

    /// Takes new buffers from `arena` (slots of a driver's registered arena) before the heap.
    pub(crate) fn use_arena(&mut self, arena: std::sync::Arc<crate::buffer::ArenaMem>) {
        self.pool.use_arena(arena);
        self.stats.arena = Some(crate::stats::ArenaCounts::default());
    }

    /// Buffers ready for reuse.
    pub(crate) fn free_bufs(&self) -> usize {
        self.pool.free_len()
    }

    /// Asks for what is queued to go in without waiting for a full batch (until the queue is
    /// empty again).
    pub(crate) fn request_flush(&mut self) {
        self.flushing = true;
    }

    /// Sends on a datagram socket: requests go unlinked (see [`Order::Unlinked`]).
    pub(crate) fn set_datagrams(&mut self) {
        self.datagrams = true;
        self.cfg.order = Order::Unlinked;
        self.stats.uring_order = Some(Order::Unlinked);
    }

    /// Whether this connection sends datagrams, each request one.
    pub(crate) fn datagrams(&self) -> bool {
        self.datagrams
    }

    /// Whether [`ConnState::submit_chain`] would submit now: no chain in flight (on a datagram
    /// socket, fewer than `depth` datagrams), no error, and something to resend, a full queue,
    /// or a flush asked for.
    pub(crate) fn ready(&self) -> bool {
        if self.datagrams {
            return self.datagrams_in_kernel() < self.cfg.depth && self.has_batch();
        }
        !self.chain_in_flight() && self.has_batch()
    }

    /// No error, and something to resend, a full queue, or a flush asked for.
    #[inline]
    fn has_batch(&self) -> bool {
        self.error.is_none()
            && (!self.resend.is_empty()
                || self.queued.len() >= self.cfg.depth
                || (self.flushing && !self.queued.is_empty()))
    }

    /// Whether a chain (or a datagram) is in the kernel.
    pub(crate) fn chain_in_flight(&self) -> bool {
        !self.chain.is_empty() || self.datagrams_in_kernel() > 0
    }

    /// Whether every byte handed in has been accepted by the socket (nothing queued, nothing
    /// in flight, nothing to resend). Notifications may still be due.
    pub(crate) fn is_flushed(&self) -> bool {
        self.queued.is_empty() && self.resend.is_empty() && !self.chain_in_flight()
    }

    /// SEND_ZC requests awaiting their result or notification.
    pub(crate) fn zc_inflight(&self) -> usize {
        self.ledger.inflight()
    }

    /// How many more zero-copy sends the driver allows this connection in the next chain (what
    /// is left of a cap shared by every connection of a ring); past it a zero-copy choice goes
    /// by copy, counted as an `inflight_cap` fallback.
    pub(crate) fn set_zc_budget(&mut self, n: usize) {
        self.zc_budget = n;
    }

    /// [`ConnState::set_zc_budget`] from the ring's cap (`None`: no cap, nothing changes) and
    /// the zero-copy sends in flight on the whole ring.
    #[inline]
    pub(crate) fn share_ring_cap(&mut self, cap: Option<usize>, ring_inflight: usize) {
        if let Some(cap) = cap {
            self.set_zc_budget(cap.saturating_sub(ring_inflight));
        }
    }

    /// The errno that ended the connection, if one did.
    pub(crate) fn error(&self) -> Option<i32> {
        self.error
    }

    /// The chooser, for a path that decides some of its sends off the ring with it.
    pub(crate) fn chooser_mut(&mut self) -> &mut Chooser {
        &mut self.chooser
    }

    /// The counters.
    pub(crate) fn stats(&self) -> &SendStats {
        &self.stats
    }

    /// Ends the connection with `errno` (the driver could not submit): queued buffers go back
    /// to the pool; what the kernel holds is let go of as its completions come in.
    pub(crate) fn fail(&mut self, errno: i32) {
        self.error.get_or_insert(errno);
        self.drop_queued();
        self.unheld.extend(self.resend.drain(..).map(|e| e.slot));
    }

    /// Lets go of everything queued: buffers back to the pool, held slots to the ring.
    fn drop_queued(&mut self) {
        self.pool.put_all(self.queue.drain(..));
        for q in self.queued.drain(..) {
            if let Queued::Held { slot, .. } = q {
                self.unheld.push(slot);
            }
        }
    }

    /// Counts a buffer the driver could not get back from the kernel in time.
    pub(crate) fn count_leaked(&mut self, n: u64) {
        self.stats.leaked_buffers += n;
    }

    /// Whether the state let go of slots since the last [`ConnState::drain_unheld`].
    pub(crate) fn has_unheld(&self) -> bool {
        !self.unheld.is_empty()
    }

    /// Slots the state let go of since the last call.
    pub(crate) fn drain_unheld(&mut self, out: &mut Vec<u32>) {
        // The driver's list is empty as a rule: the two lists trade places, no bytes move.
        if out.is_empty() {
            std::mem::swap(out, &mut self.unheld);
        } else {
            out.append(&mut self.unheld);
        }
    }

    /// The result CQE of request `req`: `res` bytes or `-errno`, `more` when a notification
    /// follows. `age_ns` is the time since the request's buffer went to the ring.
    pub(crate) fn on_result(&mut self, req: u64, res: i32, more: bool, age_ns: Option<u64>) {
        if self.datagrams {
            return self.on_datagram_result(req, res, more, age_ns);
        }
        let i = self.find_request(req);
        if let Some(i) = i.filter(|&i| res > 0 && (res as usize) < self.requests[i].bytes) {
            self.count_transmitted(i, res as usize);
        }
        let early = self.ledger.on_result(req, res, more);
        self.count_notif(early, age_ns);
        let Some(i) = i else {
            self.stats.zerocopy.unexpected += 1;
            return;
        };
        self.requests[i].res = Some(res);
        (self.results_in, self.next_result) = (self.results_in + 1, i + 1);
        if self.results_in == self.requests.len() {
            self.settle();
        }
    }

    /// The chain's request `req` still awaiting its result: looked for where the last
    /// result's successor is, then everywhere.
    fn find_request(&self, req: u64) -> Option<usize> {
        let waiting = |r: &InFlight| r.req == req && r.res.is_none();
        match self.requests.get(self.next_result) {
            Some(r) if waiting(r) => Some(self.next_result),
            _ => self.requests.iter().position(waiting),
        }
    }

    /// Request `i` sent `done` bytes, fewer than it carried: if that leaves some of its buffers
    /// unsent (a short vectored request), its notification speaks only for those it reached.
    fn count_transmitted(&mut self, i: usize, mut done: usize) {
        let at: usize = self.requests[..i].iter().map(|r| r.entries).sum();
        let r = self.requests[i];
        let mut reached = 0;
        for e in &self.chain[at..at + r.entries] {
            if done == 0 {
                break;
            }
            reached += 1;
            done = done.saturating_sub(e.end - e.start);
        }
        if reached < r.entries && r.entries > 1 {
            self.ledger.transmitted_sends(r.req, reached);
        }
    }

    /// The notification CQE of `req`; `copied` is `IORING_NOTIF_USAGE_ZC_COPIED`.
    pub(crate) fn on_notification(&mut self, req: u64, copied: bool, age_ns: Option<u64>) {
        self.stats.zerocopy.notifications += 1;
        let mut outcome = self.ledger.on_notification(req, copied);
        if outcome == NotifOutcome::Unexpected && self.datagram_awaits_result(req) {
            self.ledger.notified_early(req, copied);
            outcome = NotifOutcome::NoData;
        }
        self.count_notif(Some(outcome), age_ns);
    }

    /// A buffer the ring released (its last completion is in): back to the pool.
    pub(crate) fn on_released(&mut self, buf: Buf) {
        self.pool.put(buf);
    }

    /// `sends` zero-copy sends completed, `copied` of them reported copied.
    fn count_completions(&mut self, sends: u64, copied: u64) {
        self.stats.zerocopy.completions += sends;
        self.stats.zerocopy.copied += copied;
        self.chooser.on_completions(sends, copied);
        self.chooser.copy_decisions(&mut self.stats.decisions);
    }

    fn count_notif(&mut self, outcome: Option<NotifOutcome>, age_ns: Option<u64>) {
        match outcome {
            Some(NotifOutcome::Completion { copied, sends }) => {
                let n = sends as u64;
                self.count_completions(n, if copied { n } else { 0 });
                if let Some(age) = age_ns {
                    crate::stats::record_ns_n(&mut self.stats.completion_latency_ns, age, n);
                }
            }
            Some(NotifOutcome::Unexpected) => self.stats.zerocopy.unexpected += 1,
            Some(NotifOutcome::NoData) | None => {}
        }
    }

    /// Every request of the chain has its result: count, and keep what must be resent. The
    /// chain's and the results' lists are kept for the next chain (no allocation per chain).
    /// Once per chain: kept out of [`ConnState::on_result`], which runs once per request.
    #[inline(never)]
    fn settle(&mut self) {
        (self.results_in, self.next_result) = (0, 0);
        let full = |r: &InFlight| r.res.is_some_and(|n| n >= 0 && n as usize == r.bytes);
        if self.requests.iter().all(full) {
            // Every request sent all it carried, as a rule: what `settle_chain` would find,
            // without building its list: the bytes count, nothing to resend, every slot goes.
            self.stats.bytes += self.requests.drain(..).map(|r| r.bytes as u64).sum::<u64>();
            self.unheld.extend(self.chain.drain(..).map(|e| e.slot));
            return;
        }
        let mut results = std::mem::take(&mut self.settled);
        results.clear();
        results.extend(self.requests.drain(..).map(|r| ChainResult {
            entries: r.entries,
            res: r.res.unwrap_or(0),
        }));
        let mut chain = std::mem::take(&mut self.chain);
        self.settle_links(&chain, &results);
        chain.clear();
        self.chain = chain;
        self.settled = results;
    }

    /// `n` SEND_ZC sends the kernel could not pin memory for (`ENOMEM`), resent by copy:
    /// counted as fallbacks, and told to the chooser (which halves its cap).
    fn count_no_memory(&mut self, n: u64) {
        self.stats.zerocopy.fallbacks.enomem += n;
        self.chooser.on_no_memory();
        self.chooser.copy_decisions(&mut self.stats.decisions);
    }

    fn settle_links(&mut self, chain: &[ChainEntry], results: &[ChainResult]) {
        let s = settle_chain(chain, results);
        self.stats.bytes += s.bytes_done;
        self.stats.short_sends += s.short;
        if s.enomem > 0 {
            self.count_no_memory(s.enomem);
        }
        if let Some(errno) = s.error {
            self.error = Some(errno);
            self.unheld.extend(chain.iter().map(|e| e.slot));
            self.drop_queued();
            return;
        }
        if s.resend.is_empty() {
            // The chain went in full, as a rule: every slot goes, in one pass.
            self.unheld.extend(chain.iter().map(|e| e.slot));
        } else {
            let kept = |e: &&ChainEntry| !s.resend.iter().any(|r| r.slot == e.slot);
            self.unheld
                .extend(chain.iter().filter(kept).map(|e| e.slot));
        }
        self.resend = s.resend;
        if self.error.is_some() {
            // Failed while the chain ran: nothing more goes on this connection.
            self.unheld.extend(self.resend.drain(..).map(|e| e.slot));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ops::Range;

    /// A simulated ring: slots hold buffers, request ids count up from `first_req` (to cross
    /// the 32-bit wrap), and every push is recorded.
    pub(super) struct Kernel {
        next_slot: u32,
        next_req: u64,
        log: Vec<(u32, u64, Range<usize>, SendOp, bool)>,
        /// Every push is from registered buffers.
        pub(super) registered: bool,
    }

    impl Kernel {
        pub(super) fn new(first_req: u64) -> Kernel {
            Kernel {
                next_slot: 0,
                next_req: first_req,
                log: Vec::new(),
                registered: false,
            }
        }

        fn push(&mut self, s: Submit<'_>) -> Result<Pushed, ()> {
            let req = self.next_req;
            for part in s.parts.iter_mut() {
                let slot = match part.payload {
                    Payload::New => {
                        s.queue.pop_front().expect("a queued buffer per new part");
                        self.next_slot += 1;
                        self.next_slot - 1
                    }
                    Payload::Held(slot) => slot,
                };
                part.payload = Payload::Held(slot);
                self.log.push((slot, req, part.range.clone(), s.op, s.link));
            }
            self.next_req = self.next_req.wrapping_add(1 << 32) | u64::from(self.next_slot);
            Ok(Pushed {
                req,
                registered: self.registered,
            })
        }

        pub(super) fn submit(
            &mut self,
            st: &mut ConnState,
        ) -> Vec<(u32, u64, Range<usize>, SendOp, bool)> {
            let from = self.log.len();
            st.submit_chain(|s| self.push(s)).unwrap();
            self.log[from..].to_vec()
        }
    }

    pub(super) fn state(depth: usize, zc: bool, choice: Choice) -> ConnState {
        ConnState::new(
            StateConfig {
                depth,
                zc: zc.then_some(ZcConfig {
                    limits: InflightLimits {
                        max_sends: 4,
                        max_bytes: 1 << 20,
                    },
                    report_usage: true,
                }),
                order: Order::Linked,
            },
            Chooser::Fixed(choice),
        )
    }

    pub(super) fn fill(st: &mut ConnState, n: usize, len: usize) {
        for _ in 0..n {
            let b = st.take_buf(len);
            st.push(b, true).unwrap();
        }
    }

    /// Runs `chains` chains of `depth` sends of `len` bytes through `st`, every SEND_ZC result
    /// followed by its notification (copied as `copied`); returns each chain's operations.
    fn run_chains(
        st: &mut ConnState,
        k: &mut Kernel,
        chains: usize,
        depth: usize,
        len: usize,
        copied: bool,
    ) -> Vec<Vec<SendOp>> {
        let mut ops = Vec::new();
        for _ in 0..chains {
            fill(st, depth, len);
            let c = k.submit(st);
            for x in &c {
                let zc = matches!(x.3, SendOp::SendZc { .. });
                st.on_result(x.1, len as i32, zc, None);
                if zc {
                    st.on_notification(x.1, copied, None);
                }
            }
            ops.push(c.iter().map(|x| x.3).collect());
        }
        ops
    }

    #[test]
    fn adaptive_on_the_ring_stops_send_zc_after_copied_notifications_and_tries_again() {
        use crate::policy::adaptive::{Adaptive, AdaptiveConfig};
        use crate::profile::Profile;
        let cfg = AdaptiveConfig {
            backoff_first_sends: 8,
            run_min: 0,
            ..AdaptiveConfig::default()
        };
        // A connection of depth 2 whose choices are `profile`'s.
        let adaptive = |profile: Profile| {
            let chooser = Chooser::Adaptive(Box::new(Adaptive::new(profile, cfg)));
            let zc = ZcConfig {
                limits: InflightLimits::default(),
                report_usage: true,
            };
            ConnState::new(
                StateConfig {
                    depth: 2,
                    zc: Some(zc),
                    order: Order::Linked,
                },
                chooser,
            )
        };
        let mut st = adaptive(Profile::defaults());
        let mut k = Kernel::new(1);
        let zc = SendOp::SendZc { report_usage: true };
        // 64 KiB and up is a zero-copy tier in the defaults; the kernel copies every one.
        let ops = run_chains(&mut st, &mut k, 8, 2, 65536, true);
        assert_eq!(ops[0], [zc, zc]);
        assert_eq!(ops[1], [zc, zc], "4 copied notifications are the limit");
        assert_eq!(ops[2], [SendOp::Send, SendOp::Send], "then SEND");
        assert_eq!(ops[6], [zc, zc], "8 sends later it tried SEND_ZC again");
        assert_eq!(ops[7], [zc, zc]);
        let d = st.stats().decisions.expect("adaptive counts");
        assert_eq!((d.backoffs, d.retries), (2, 1), "the try was copied too");
        assert_eq!((d.zerocopy_sends, d.backoff_copies), (8, 8));
        // Below the crossover, SEND whatever the route does.
        let ops = run_chains(&mut st, &mut k, 2, 2, 4096, false);
        assert!(ops.iter().flatten().all(|o| *o == SendOp::Send));

        // ENOMEM halves the cap (a profile that expects copies, so no back-off interferes).
        let profile = Profile::from_tiers(Profile::defaults().tiers().to_vec(), true).unwrap();
        let mut st = adaptive(profile);
        fill(&mut st, 2, 1 << 20);
        let c = k.submit(&mut st);
        assert_eq!(c[0].3, zc);
        st.on_result(c[0].1, -libc::ENOMEM, false, None);
        st.on_result(c[1].1, -libc::ECANCELED, false, None);
        let d = st.stats().decisions.unwrap();
        assert_eq!((d.cap_halvings, d.cap), (1, cfg.cap_max / 2));
        assert_eq!(st.stats().zerocopy.fallbacks.enomem, 1);
    }

    #[test]
    fn a_datagram_socket_s_requests_go_unlinked() {
        let mut st = state(3, false, Choice::Copy);
        let links = |st: &mut ConnState| {
            let mut l = Vec::new();
            st.submit_chain(|s: Submit<'_>| -> Result<Pushed, ()> {
                l.push(s.link);
                for (i, p) in s.parts.iter_mut().enumerate() {
                    s.queue.pop_front();
                    p.payload = Payload::Held(i as u32);
                }
                Ok(Pushed {
                    req: l.len() as u64,
                    registered: false,
                })
            })
            .unwrap();
            l
        };
        for _ in 0..3 {
            st.push(Buf::from(vec![0u8; 10]), true).unwrap();
        }
        assert_eq!(
            links(&mut st),
            [true, true, false],
            "a stream's chain is linked"
        );
        let mut dg = state(3, false, Choice::Copy);
        dg.set_datagrams();
        for _ in 0..3 {
            dg.push(Buf::from(vec![0u8; 10]), true).unwrap();
        }
        assert_eq!(links(&mut dg), [false, false, false]);
    }

    #[test]
    fn a_fixed_copy_choice_copies_every_send_in_one_vectored_request() {
        let mut k = Kernel::new(1);
        let cfg = StateConfig {
            order: Order::Vectored,
            ..state(4, true, Choice::Copy).config()
        };
        let mut st = ConnState::new(cfg, Chooser::Fixed(Choice::Copy));
        fill(&mut st, 4, 100);
        let c = k.submit(&mut st);
        assert_eq!(c.len(), 4, "four buffers");
        assert!(c.iter().all(|x| x.3 == SendOp::Send && x.1 == c[0].1));
        assert_eq!(
            (
                st.stats().zerocopy.attempts,
                st.stats().zerocopy.fallbacks.total()
            ),
            (0, 0)
        );
        assert!(st.queue.is_empty(), "the driver took every queued buffer");
    }

    #[test]
    fn one_chain_at_a_time_and_the_queue_refills_behind_it() {
        let mut k = Kernel::new(1);
        let mut st = state(3, false, Choice::Copy);
        fill(&mut st, 3, 10);
        assert_eq!(st.room(), 0);
        let c = k.submit(&mut st);
        assert_eq!(c.len(), 3);
        assert_eq!(
            c.iter().map(|x| x.4).collect::<Vec<_>>(),
            [true, true, false]
        );
        // While the chain runs, the application fills the next one; no second chain goes in.
        fill(&mut st, 3, 10);
        assert!(k.submit(&mut st).is_empty());
        // Results in any order settle the chain once all are in.
        for i in [2, 0, 1] {
            st.on_result(c[i].1, 10, false, None);
        }
        assert!(!st.chain_in_flight());
        assert_eq!(st.stats().bytes, 30);
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        un.sort();
        assert_eq!(un, [0, 1, 2]);
        assert_eq!(k.submit(&mut st).len(), 3);
        assert_eq!(st.stats().sends, 6);
    }

    #[test]
    fn a_partial_queue_waits_for_a_full_batch_or_a_flush() {
        let mut k = Kernel::new(1);
        let mut st = state(4, false, Choice::Copy);
        fill(&mut st, 3, 10);
        assert!(!st.ready());
        assert!(k.submit(&mut st).is_empty(), "small sends are batched");
        st.request_flush();
        assert_eq!(k.submit(&mut st).len(), 3);
        // The flush ends with the queue: the next partial batch waits again.
        let c = k.log.clone();
        for x in &c {
            st.on_result(x.1, 10, false, None);
        }
        fill(&mut st, 1, 10);
        assert!(!st.ready());
    }

    #[test]
    fn a_short_send_resends_its_rest_and_the_cancelled_links_first() {
        let mut k = Kernel::new(1);
        let mut st = state(3, false, Choice::Copy);
        fill(&mut st, 3, 10);
        let c = k.submit(&mut st);
        fill(&mut st, 1, 10);
        st.on_result(c[0].1, 4, false, None);
        st.on_result(c[1].1, -libc::ECANCELED, false, None);
        st.on_result(c[2].1, -libc::ECANCELED, false, None);
        assert_eq!(st.stats().short_sends, 1);
        assert_eq!(st.stats().bytes, 4);
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        assert!(un.is_empty(), "every slot is resent, none let go");
        let r = k.submit(&mut st);
        // Same slots, in the same order, the rest of the first; the queued buffer waits for
        // the next chain since depth is 3.
        assert_eq!(
            r.iter().map(|x| (x.0, x.2.clone())).collect::<Vec<_>>(),
            [(0, 4..10), (1, 0..10), (2, 0..10)]
        );
        assert!(st.room() < 3);
    }

    #[test]
    fn enomem_resends_by_copy_and_counts_once() {
        let mut k = Kernel::new(1);
        let mut st = state(2, true, Choice::ZeroCopy);
        fill(&mut st, 2, 100);
        let c = k.submit(&mut st);
        assert!(c
            .iter()
            .all(|x| x.3 == SendOp::SendZc { report_usage: true }));
        st.on_result(c[0].1, -libc::ENOMEM, true, None);
        st.on_result(c[1].1, -libc::ECANCELED, true, None);
        st.on_notification(c[0].1, false, None);
        st.on_notification(c[1].1, false, None);
        assert_eq!(st.stats().zerocopy.fallbacks.enomem, 1);
        assert_eq!(
            st.stats().zerocopy.completions,
            0,
            "nothing was sent zero-copy"
        );
        let r = k.submit(&mut st);
        assert_eq!(r[0].3, SendOp::Send);
        assert_eq!(r[1].3, SendOp::SendZc { report_usage: true });
        st.on_result(r[0].1, 100, false, None);
        st.on_result(r[1].1, 100, true, None);
        st.on_notification(r[1].1, true, Some(5));
        assert_eq!(st.stats().bytes, 200);
        assert_eq!(
            (st.stats().zerocopy.completions, st.stats().zerocopy.copied),
            (1, 1)
        );
        assert_eq!(st.zc_inflight(), 0);
    }

    #[test]
    fn copied_flags_and_late_notifications_in_any_order_across_the_id_wrap() {
        // Request ids start just below the 32-bit wrap of their high half.
        let mut k = Kernel::new(u64::from(u32::MAX) << 32);
        let mut st = state(4, true, Choice::ZeroCopy);
        fill(&mut st, 4, 8);
        let c = k.submit(&mut st);
        assert!(c.iter().any(|x| x.1 >> 32 == 0), "the ids wrapped");
        for x in &c {
            st.on_result(x.1, 8, true, None);
        }
        assert_eq!(st.zc_inflight(), 4, "notifications still due");
        for (i, x) in c.iter().enumerate().rev() {
            st.on_notification(x.1, i % 2 == 0, None);
        }
        assert_eq!(st.zc_inflight(), 0);
        assert_eq!(
            (st.stats().zerocopy.completions, st.stats().zerocopy.copied),
            (4, 2)
        );
        assert_eq!(st.stats().zerocopy.unexpected, 0);
        st.on_notification(c[0].1, true, None);
        assert_eq!(st.stats().zerocopy.unexpected, 1);
    }

    #[test]
    fn the_inflight_cap_sends_by_copy_and_counts_it() {
        let mut k = Kernel::new(1);
        let mut st = state(6, true, Choice::ZeroCopy);
        fill(&mut st, 6, 8);
        let c = k.submit(&mut st);
        let zc = c.iter().filter(|x| x.3 != SendOp::Send).count();
        assert_eq!(zc, 4, "max_sends is 4");
        assert_eq!(st.stats().zerocopy.fallbacks.inflight_cap, 2);
    }

    #[test]
    fn sends_from_registered_buffers_are_not_held_to_the_inflight_cap() {
        // max_sends is 4: a second chain of 4 while the first's notifications are due.
        for registered in [false, true] {
            let mut k = Kernel::new(1);
            k.registered = registered;
            let mut st = state(4, true, Choice::ZeroCopy);
            fill(&mut st, 4, 8);
            let first = k.submit(&mut st);
            for x in &first {
                st.on_result(x.1, 8, true, None);
            }
            fill(&mut st, 4, 8);
            let second = k.submit(&mut st);
            let zc = second.iter().filter(|x| x.3 != SendOp::Send).count();
            let capped = st.stats().zerocopy.fallbacks.inflight_cap;
            if registered {
                assert_eq!((zc, capped), (4, 0), "nothing pinned per send");
                assert_eq!(st.zc_inflight(), 8, "still in flight, for the ring's cap");
            } else {
                assert_eq!((zc, capped), (0, 4), "four pinned sends fill the cap");
            }
            for x in first.iter().chain(&second).filter(|x| x.3 != SendOp::Send) {
                if second.contains(x) {
                    st.on_result(x.1, 8, true, None);
                }
                st.on_notification(x.1, false, None);
            }
            assert_eq!(st.zc_inflight(), 0);
        }
    }

    #[test]
    fn slots_written_in_place_go_between_buffers_in_the_order_they_came_then_back() {
        let mut k = Kernel::new(1);
        let mut st = state(3, false, Choice::Copy);
        let b = st.take_buf(10);
        st.push(b, true).unwrap();
        st.push_held(100, 20).unwrap();
        let b = st.take_buf(30);
        st.push(b, true).unwrap();
        assert_eq!(
            st.push_held(101, 5),
            Err(101),
            "no room: the slot comes back"
        );
        let c = k.submit(&mut st);
        let sent: Vec<_> = c.iter().map(|x| (x.0, x.2.clone())).collect();
        assert_eq!(sent, [(0, 0..10), (100, 0..20), (1, 0..30)]);
        // The slot's request is short: its rest goes first in the next chain, the link after
        // it was cancelled and goes whole.
        st.on_result(c[0].1, 10, false, None);
        st.on_result(c[1].1, 5, false, None);
        st.on_result(c[2].1, -libc::ECANCELED, false, None);
        let mut unheld = Vec::new();
        st.drain_unheld(&mut unheld);
        assert_eq!(unheld, [0], "only what went whole is let go");
        let c = k.submit(&mut st);
        let resent: Vec<_> = c.iter().map(|x| (x.0, x.2.clone())).collect();
        assert_eq!(resent, [(100, 5..20), (1, 0..30)]);
        for x in &c {
            st.on_result(x.1, x.2.len() as i32, false, None);
        }
        st.drain_unheld(&mut unheld);
        assert_eq!(unheld, [0, 100, 1]);
        assert_eq!((st.stats().bytes, st.stats().sends), (60, 3));
        assert!(st.is_flushed());
    }

    #[test]
    fn a_run_of_slots_written_in_place_is_queued_in_order_up_to_the_room() {
        let mut k = Kernel::new(1);
        let mut st = state(4, false, Choice::Copy);
        let arena = crate::buffer::ArenaMem::new(4096, 1, crate::buffer::FILL).unwrap();
        st.use_arena(std::sync::Arc::new(arena));
        let b = st.take_buf(1 << 20); // larger than a slot: from the heap
        st.push(b, true).unwrap();
        assert_eq!(st.push_held_run(&[7, 8, 9, 10], 50), 3, "room for 3");
        assert_eq!(st.room(), 0);
        let c = k.submit(&mut st);
        let sent: Vec<_> = c.iter().map(|x| (x.0, x.2.clone())).collect();
        assert_eq!(sent, [(0, 0..1 << 20), (7, 0..50), (8, 0..50), (9, 0..50)]);
        assert_eq!(st.stats().sends, 4);
        assert_eq!(st.stats().arena.map(|a| a.slots), Some(3));
    }

    #[test]
    fn a_failed_connection_lets_its_queued_slots_go_to_the_ring() {
        let mut st = state(4, false, Choice::Copy);
        st.push_held(7, 100).unwrap();
        let b = st.take_buf(10);
        st.push(b, true).unwrap();
        st.push_held(8, 100).unwrap();
        st.fail(libc::ECONNRESET);
        let mut unheld = Vec::new();
        st.drain_unheld(&mut unheld);
        assert_eq!(unheld, [7, 8], "the ring releases the slots");
        assert_eq!(st.free_bufs(), 1, "the buffer is back in the pool");
        assert_eq!(st.room(), 0);
        assert_eq!(st.push_held(9, 1), Err(9));
    }

    #[test]
    fn zero_copy_without_send_zc_is_an_unsupported_fallback() {
        let mut k = Kernel::new(1);
        let mut st = state(2, false, Choice::ZeroCopy);
        fill(&mut st, 2, 8);
        let c = k.submit(&mut st);
        assert!(c.iter().all(|x| x.3 == SendOp::Send));
        assert_eq!(st.stats().zerocopy.fallbacks.unsupported, 2);
        assert_eq!(st.stats().zerocopy.attempts, 0);
    }

    #[test]
    fn a_reset_ends_the_connection_and_lets_every_buffer_go() {
        let mut k = Kernel::new(1);
        let mut st = state(2, false, Choice::Copy);
        fill(&mut st, 2, 8);
        let c = k.submit(&mut st);
        fill(&mut st, 1, 8);
        st.on_result(c[0].1, -libc::ECONNRESET, false, None);
        st.on_result(c[1].1, -libc::ECANCELED, false, None);
        assert_eq!(st.error(), Some(libc::ECONNRESET));
        assert_eq!(st.room(), 0);
        assert!(st.push(Buf::zeroed(1), true).is_err());
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        assert_eq!(un.len(), 2);
        assert_eq!(st.free_bufs(), 1, "the queued buffer is back in the pool");
        assert!(k.submit(&mut st).is_empty());
    }

    #[test]
    fn a_result_for_no_link_is_counted_not_trusted() {
        let mut st = state(2, false, Choice::Copy);
        st.on_result(9, 10, false, None);
        assert_eq!(st.stats().zerocopy.unexpected, 1);
        assert_eq!(st.stats().bytes, 0);
    }

    /// Only the timed notifications (one zero-copy request in the ring's sample) are in the
    /// latency histogram; every notification still completes its sends.
    #[test]
    fn an_untimed_notification_completes_its_sends_without_a_latency() {
        let mut k = Kernel::new(1);
        let mut st = vectored(2, true, Choice::ZeroCopy);
        for age in [None, Some(5)] {
            fill(&mut st, 2, 100);
            let c = k.submit(&mut st);
            st.on_result(c[0].1, 200, true, age);
            st.on_notification(c[0].1, false, age);
        }
        let s = st.stats();
        assert_eq!(s.zerocopy.completions, 4);
        assert_eq!(
            s.completion_latency_ns.len(),
            2,
            "the timed request's two sends"
        );
    }

    fn vectored(depth: usize, zc: bool, choice: Choice) -> ConnState {
        let mut st = state(depth, zc, choice);
        st.cfg.order = Order::Vectored;
        st
    }

    #[test]
    fn a_vectored_chain_is_one_request_and_its_notification_completes_every_send() {
        let mut k = Kernel::new(1);
        let mut st = vectored(4, true, Choice::ZeroCopy);
        fill(&mut st, 4, 100);
        let c = k.submit(&mut st);
        assert_eq!(c.len(), 4);
        assert!(c.iter().all(|x| x.1 == c[0].1), "one request: {c:?}");
        assert!(c.iter().all(|x| !x.4), "nothing to link to");
        assert_eq!(st.zc_inflight(), 4, "each buffer counts against the cap");
        st.on_result(c[0].1, 400, true, None);
        assert_eq!((st.stats().bytes, st.zc_inflight()), (400, 4));
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        assert_eq!(un, [0, 1, 2, 3]);
        st.on_notification(c[0].1, true, Some(7));
        let s = st.stats();
        assert_eq!(
            (
                s.zerocopy.attempts,
                s.zerocopy.completions,
                s.zerocopy.copied
            ),
            (4, 4, 4)
        );
        assert_eq!(s.completion_latency_ns.len(), 4);
        assert_eq!(st.zc_inflight(), 0);
        // A datagram socket's sends stay one per request, unlinked.
        let mut dg = vectored(3, false, Choice::Copy);
        dg.set_datagrams();
        fill(&mut dg, 3, 10);
        let c = k.submit(&mut dg);
        assert!(c[0].1 != c[1].1 && c[1].1 != c[2].1 && c.iter().all(|x| !x.4));
    }

    #[test]
    fn a_short_vectored_send_resends_the_rest_in_order_and_lets_the_sent_buffers_go() {
        let mut k = Kernel::new(1);
        let mut st = vectored(4, false, Choice::Copy);
        fill(&mut st, 4, 10);
        let c = k.submit(&mut st);
        fill(&mut st, 2, 10);
        st.on_result(c[0].1, 15, false, None);
        assert_eq!((st.stats().bytes, st.stats().short_sends), (15, 1));
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        assert_eq!(un, [0], "only the first buffer went whole");
        // The rest first, in one request with as many queued buffers as the depth allows.
        let r = k.submit(&mut st);
        let got: Vec<_> = r.iter().map(|x| (x.0, x.2.clone())).collect();
        assert_eq!(got, [(1, 5..10), (2, 0..10), (3, 0..10), (4, 0..10)]);
        assert!(r.iter().all(|x| x.1 == r[0].1));
        st.on_result(r[0].1, 35, false, None);
        assert_eq!(st.stats().bytes, 50);
        assert!(!st.chain_in_flight());
    }

    #[test]
    fn a_short_vectored_zero_copy_send_completes_the_sends_it_reached() {
        let mut k = Kernel::new(1);
        let mut st = vectored(4, true, Choice::ZeroCopy);
        fill(&mut st, 4, 10);
        let c = k.submit(&mut st);
        st.on_result(c[0].1, 15, true, None);
        st.on_notification(c[0].1, false, None);
        assert_eq!(
            st.stats().zerocopy.completions,
            2,
            "two buffers reached, one in part"
        );
        let r = k.submit(&mut st);
        assert_eq!(r.len(), 3);
        st.on_result(r[0].1, 25, true, None);
        st.on_notification(r[0].1, false, None);
        // The buffer cut in two is in both requests, as a short SEND_ZC and its rest are.
        assert_eq!(st.stats().zerocopy.completions, 5);
        assert_eq!((st.stats().bytes, st.zc_inflight()), (40, 0));
    }

    #[test]
    fn a_vectored_chain_links_its_zero_copy_run_to_the_run_past_the_cap() {
        let mut k = Kernel::new(1);
        let mut st = vectored(6, true, Choice::ZeroCopy);
        fill(&mut st, 6, 8);
        let c = k.submit(&mut st);
        let zc = SendOp::SendZc { report_usage: true };
        let ops: Vec<_> = c.iter().map(|x| (x.3, x.4)).collect();
        let first = (zc, true);
        let second = (SendOp::Send, false);
        assert_eq!(ops, [first, first, first, first, second, second]);
        assert!(c[..4].iter().all(|x| x.1 == c[0].1) && c[4].1 == c[5].1 && c[0].1 != c[4].1);
        assert_eq!(
            st.stats().zerocopy.fallbacks.inflight_cap,
            2,
            "max_sends is 4"
        );
        // The zero-copy request could not pin its pages: all six go again, by copy, in one.
        st.on_result(c[0].1, -libc::ENOMEM, false, None);
        st.on_result(c[4].1, -libc::ECANCELED, false, None);
        assert_eq!(st.stats().zerocopy.fallbacks.enomem, 4);
        let r = k.submit(&mut st);
        assert!(r.iter().all(|x| x.1 == r[0].1 && x.3 == SendOp::Send));
        assert_eq!(r.len(), 6);
    }

    /// Submits `st`'s chain on `k`, whose ring takes the first request and refuses the next.
    fn submit_refusing_after_one(st: &mut ConnState, k: &mut Kernel) -> Result<usize, ()> {
        let mut pushes = 0;
        st.submit_chain(|s| {
            pushes += 1;
            if pushes > 1 {
                return Err(());
            }
            k.push(s)
        })
    }

    #[test]
    fn a_chain_the_driver_cannot_push_lets_its_slots_go_and_its_buffers_back() {
        let mut k = Kernel::new(1);
        let mut st = state(3, false, Choice::Copy);
        fill(&mut st, 3, 10);
        let c = k.submit(&mut st);
        st.on_result(c[0].1, 4, false, None);
        st.on_result(c[1].1, -libc::ECANCELED, false, None);
        st.on_result(c[2].1, -libc::ECANCELED, false, None);
        // The resend's first request goes in; the ring refuses the second.
        assert!(submit_refusing_after_one(&mut st, &mut k).is_err());
        st.fail(libc::EBUSY);
        let mut un = Vec::new();
        st.drain_unheld(&mut un);
        assert_eq!(un, [1, 2], "the slots not pushed; slot 0 is in the kernel");
        st.on_result(k.log.last().unwrap().1, 6, false, None);
        st.drain_unheld(&mut un);
        assert_eq!(un, [1, 2, 0]);
        // A new buffer not pushed goes back to the pool.
        let mut st = state(2, false, Choice::Copy);
        fill(&mut st, 2, 10);
        assert!(submit_refusing_after_one(&mut st, &mut k).is_err());
        assert_eq!(st.free_bufs(), 1);
    }
}
