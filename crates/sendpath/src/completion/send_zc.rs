//! io_uring SEND_ZC accounting, per request.
//!
//! A SEND_ZC request posts a result CQE (bytes sent or `-errno`) and, when that CQE carries
//! `IORING_CQE_F_MORE`, a notification CQE once the kernel has released the buffer. Even a
//! request that failed (`-ECANCELED` in a broken link chain, `-ENOMEM`, `-ECONNRESET`) may be
//! followed by a notification. Only a request that transmitted bytes says anything about
//! zero-copy: its notification is a completion, copied when `IORING_NOTIF_USAGE_ZC_COPIED` is
//! set. The notification of a request that sent nothing releases the buffer and counts nothing
//! (its fallback, if any, is counted where the failure is handled, once).
//!
//! Requests are keyed by the id the ring gave them, not by buffer: the remainder of a short send
//! is a new request on the same buffer and has a notification of its own.

use std::collections::{HashMap, VecDeque};
use std::hash::{BuildHasherDefault, Hasher};

/// Hashes request ids (distinct 64-bit numbers the driver makes) by one multiplication:
/// the ledger looks an id up four times per send, and the default SipHash cost ~20 ns each.
#[derive(Debug, Default)]
struct ReqHasher(u64);

impl Hasher for ReqHasher {
    fn finish(&self) -> u64 {
        self.0
    }

    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }

    fn write_u64(&mut self, n: u64) {
        // A multiplication spreads the low bits of `n` upwards; folding the high half back
        // down makes the low bits (the table's index) depend on every bit too (ids differ
        // mostly in their high half, a request counter).
        let x = (self.0 ^ n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        self.0 = x ^ (x >> 29);
    }
}

/// A map from request ids.
type ReqMap<V> = HashMap<u64, V, BuildHasherDefault<ReqHasher>>;

/// Entries of [`ReqTable`]'s array.
const NEAR: usize = 64;

/// Request ids to their state: an array indexed by an id's low bits (its ring slot or group,
/// distinct among one connection's requests in flight as a rule), and a map for an id whose
/// place is taken. One array look per id, where a map costs a hash and a probe (about 70
/// instructions an insert). The array is made at the first insert: a connection that never
/// sends zero-copy keeps none.
#[derive(Debug)]
struct ReqTable<V> {
    near: Vec<Option<(u64, V)>>,
    far: ReqMap<V>,
    len: usize,
}

impl<V> Default for ReqTable<V> {
    fn default() -> Self {
        ReqTable {
            near: Vec::new(),
            far: ReqMap::default(),
            len: 0,
        }
    }
}

impl<V> ReqTable<V> {
    /// The place of `req` in the array: its slot or group index, a group apart from a slot.
    #[inline]
    fn at(req: u64) -> usize {
        (req as usize ^ (req >> 57) as usize) & (NEAR - 1)
    }

    fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Puts `v` for `req`; false when `req` was there already (its value is replaced).
    #[inline]
    fn insert(&mut self, req: u64, v: V) -> bool {
        if self.near.is_empty() {
            self.near.resize_with(NEAR, || None);
        }
        let e = &mut self.near[Self::at(req)];
        let new = match e {
            Some((r, old)) if *r == req => {
                *old = v;
                false
            }
            None if self.far.is_empty() || !self.far.contains_key(&req) => {
                *e = Some((req, v));
                true
            }
            _ => self.far.insert(req, v).is_none(),
        };
        self.len += usize::from(new);
        new
    }

    #[inline]
    fn get_mut(&mut self, req: u64) -> Option<&mut V> {
        match self.near.get_mut(Self::at(req)) {
            Some(Some((r, v))) if *r == req => Some(v),
            _ if self.far.is_empty() => None,
            _ => self.far.get_mut(&req),
        }
    }

    #[inline]
    fn remove(&mut self, req: u64) -> Option<V> {
        let v = match self.near.get_mut(Self::at(req)) {
            Some(e) if e.as_ref().is_some_and(|(r, _)| *r == req) => e.take().map(|(_, v)| v),
            _ if self.far.is_empty() => None,
            _ => self.far.remove(&req),
        };
        self.len -= usize::from(v.is_some());
        v
    }
}

/// What a notification meant.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum NotifOutcome {
    /// The request transmitted bytes; `copied` is the kernel's usage report.
    Completion {
        /// `IORING_NOTIF_USAGE_ZC_COPIED` was set.
        copied: bool,
        /// The sends (buffers) the request carried: one, or several for a vectored
        /// `SENDMSG_ZC`; one notification speaks for all of them.
        sends: usize,
    },
    /// The request sent nothing (failed or cancelled): nothing to count.
    NoData,
    /// No request of this id awaits a notification.
    Unexpected,
}

#[derive(Debug, Clone, Copy)]
struct Request {
    bytes: usize,
    sends: usize,
    /// From registered buffers: no page pinned per send.
    registered: bool,
    /// `None` until the result CQE arrives; then whether it transmitted bytes.
    transmitted: Option<bool>,
}

/// A datagram's request whose result came with `F_MORE`: its notification is due.
#[derive(Debug, Clone, Copy)]
struct Due {
    req: u64,
    bytes: u32,
    transmitted: bool,
    registered: bool,
}

/// Per-request SEND_ZC state: in flight from submission to notification (or to a result without
/// `F_MORE`).
///
/// A datagram's request has no entry until its result: its sender keeps it in flight until
/// then and matches the result itself ([`SendZcLedger::submitted_unkeyed`]). From its result
/// it waits in `due`, in the order results came, which is the order notifications come as a
/// rule: one look at the front ends it, where a table entry is made, looked up and taken.
#[derive(Debug, Default)]
pub(crate) struct SendZcLedger {
    requests: ReqTable<Request>,
    /// Datagrams' requests whose notification is due, oldest result first.
    due: VecDeque<Due>,
    /// Notifications that arrived before their request's result, by request id.
    early: ReqMap<bool>,
    bytes: usize,
    sends: usize,
    /// Of those, the sends and bytes from registered buffers.
    registered: (usize, usize),
}

impl SendZcLedger {
    /// An empty ledger.
    pub(crate) fn new() -> SendZcLedger {
        SendZcLedger::default()
    }

    /// A SEND_ZC request of `bytes` bytes was submitted with id `req`.
    #[cfg(test)]
    pub(crate) fn submitted(&mut self, req: u64, bytes: usize) {
        self.submitted_sends(req, bytes, 1, false);
    }

    /// A request carrying `sends` buffers, `bytes` in all, was submitted with id `req` (a
    /// vectored `SENDMSG_ZC`: one result and one notification for every buffer); `registered`
    /// when they are registered buffers.
    pub(crate) fn submitted_sends(
        &mut self,
        req: u64,
        bytes: usize,
        sends: usize,
        registered: bool,
    ) {
        let r = Request {
            bytes,
            sends,
            registered,
            transmitted: None,
        };
        if self.requests.insert(req, r) {
            self.count(sends, bytes, registered, true);
        }
    }

    /// `sends` and `bytes` more in flight (`up`), or fewer.
    #[inline]
    fn count(&mut self, sends: usize, bytes: usize, registered: bool, up: bool) {
        let r = usize::from(registered);
        if up {
            (self.sends, self.bytes) = (self.sends + sends, self.bytes + bytes);
            self.registered.0 += sends * r;
            self.registered.1 += bytes * r;
        } else {
            (self.sends, self.bytes) = (self.sends - sends, self.bytes - bytes);
            self.registered.0 -= sends * r;
            self.registered.1 -= bytes * r;
        }
    }

    /// `sends` sends of `bytes` in all went in SEND_ZC requests that get no entry (from
    /// registered buffers or not): datagrams, one each, with none until their result
    /// ([`SendZcLedger::on_datagram_result`]), and the lanes' requests, whose completions their
    /// sender matches itself ([`SendZcLedger::unkeyed_ended`]). In flight.
    #[inline]
    pub(crate) fn submitted_unkeyed(&mut self, sends: usize, bytes: usize, registered: bool) {
        self.count(sends, bytes, registered, true);
    }

    /// `sends` sends of `bytes` in all that went in SEND_ZC requests with no entry ended
    /// (their last completion came) where their sender matched their completions itself.
    #[inline]
    pub(crate) fn unkeyed_ended(&mut self, sends: usize, bytes: usize, registered: bool) {
        self.count(sends, bytes, registered, false);
    }

    /// The result CQE of a datagram's request `req` of `bytes`, as submitted (see
    /// [`SendZcLedger::on_result`]): with `F_MORE` its notification is due; without, it ends.
    /// Returns the outcome of a notification that had arrived first, if one had.
    #[inline]
    pub(crate) fn on_datagram_result(
        &mut self,
        req: u64,
        res: i32,
        more: bool,
        (bytes, registered): (usize, bool),
    ) -> Option<NotifOutcome> {
        let transmitted = res > 0;
        // Notifications before their result are not seen from the kernel: no lookup for none.
        if let Some(copied) = self.early_notification(req) {
            self.count(1, bytes, registered, false);
            return Some(Self::outcome(transmitted, copied, 1));
        }
        if more {
            self.due.push_back(Due {
                req,
                bytes: bytes as u32,
                transmitted,
                registered,
            });
        } else {
            self.count(1, bytes, registered, false);
        }
        None
    }

    /// A notification for a datagram's request `req` still awaiting its result (its sender
    /// knows it is in flight): kept for the result, which settles it.
    pub(crate) fn notified_early(&mut self, req: u64, copied: bool) {
        self.early.insert(req, copied);
    }

    /// Of the sends `req` carried, only the first `sends` transmitted bytes (a short vectored
    /// request; the rest go again in a request of their own): its notification speaks for
    /// those. Call it before the request's result.
    pub(crate) fn transmitted_sends(&mut self, req: u64, sends: usize) {
        if let Some(r) = self.requests.get_mut(req) {
            let sends = sends.min(r.sends);
            let (untransmitted, registered) = (r.sends - sends, r.registered);
            r.sends = sends;
            self.count(untransmitted, 0, registered, false);
        }
    }

    /// The result CQE of `req`: `res` bytes sent or `-errno`; `more` is `IORING_CQE_F_MORE`.
    /// Returns the outcome of a notification that had arrived first, if one had.
    #[inline]
    pub(crate) fn on_result(&mut self, req: u64, res: i32, more: bool) -> Option<NotifOutcome> {
        if self.requests.is_empty() && self.early.is_empty() {
            // No SEND_ZC in flight (every request of a copying path): nothing to look up.
            return None;
        }
        self.on_zc_result(req, res, more)
    }

    /// [`SendZcLedger::on_result`] with SEND_ZC requests in flight.
    fn on_zc_result(&mut self, req: u64, res: i32, more: bool) -> Option<NotifOutcome> {
        let transmitted = res > 0;
        if !more {
            self.forget(req);
            return None;
        }
        // Notifications before their result are not seen from the kernel: no lookup for none.
        if let Some(copied) = self.early_notification(req) {
            let sends = self.forget(req);
            return Some(Self::outcome(transmitted, copied, sends));
        }
        if let Some(r) = self.requests.get_mut(req) {
            r.transmitted = Some(transmitted);
        }
        None
    }

    /// The notification CQE of `req`; `copied` is `IORING_NOTIF_USAGE_ZC_COPIED` in its `res`.
    #[inline]
    pub(crate) fn on_notification(&mut self, req: u64, copied: bool) -> NotifOutcome {
        if let Some(d) = self.due_datagram(req) {
            self.count(1, d.bytes as usize, d.registered, false);
            return Self::outcome(d.transmitted, copied, 1);
        }
        // After its result, as a rule: the request ends here, in one lookup.
        let Some(r) = self.requests.remove(req) else {
            return NotifOutcome::Unexpected;
        };
        let Some(transmitted) = r.transmitted else {
            // Before its result (not seen from the kernel, but cheap to get right).
            self.requests.insert(req, r);
            self.early.insert(req, copied);
            return NotifOutcome::NoData;
        };
        let sends = self.release(r);
        Self::outcome(transmitted, copied, sends)
    }

    /// The datagram's request `req` whose notification is due, taken out: the oldest, as a
    /// rule, looked at before any search.
    #[inline]
    fn due_datagram(&mut self, req: u64) -> Option<Due> {
        match self.due.front() {
            Some(d) if d.req == req => self.due.pop_front(),
            None => None,
            Some(_) => {
                let i = self.due.iter().position(|d| d.req == req)?;
                self.due.remove(i)
            }
        }
    }

    /// The notification of `req` that came before its result, if one did.
    fn early_notification(&mut self, req: u64) -> Option<bool> {
        match self.early.is_empty() {
            true => None,
            false => self.early.remove(&req),
        }
    }

    /// What a notification says of a request of `sends` sends: a completion when it
    /// transmitted bytes.
    fn outcome(transmitted: bool, copied: bool, sends: usize) -> NotifOutcome {
        if transmitted {
            NotifOutcome::Completion { copied, sends }
        } else {
            NotifOutcome::NoData
        }
    }

    /// Ends `req`; returns how many sends it carried (0 if it was not in flight).
    fn forget(&mut self, req: u64) -> usize {
        self.requests.remove(req).map_or(0, |r| self.release(r))
    }

    /// Takes a request that ended (out of the map) off the in-flight counts; returns how many
    /// sends it carried.
    fn release(&mut self, r: Request) -> usize {
        self.count(r.sends, r.bytes, r.registered, false);
        r.sends
    }

    /// Sends of the SEND_ZC requests submitted and not yet finished (no result yet, or a
    /// notification due): a vectored request counts each buffer it carries.
    pub(crate) fn inflight(&self) -> usize {
        self.sends
    }

    /// Bytes of those requests.
    #[cfg(test)]
    pub(crate) fn inflight_bytes(&self) -> usize {
        self.bytes
    }

    /// Sends and bytes in flight from buffers that are not registered: what the kernel pins
    /// page by page, for each send, and charges to the user's locked memory. A registered
    /// buffer was pinned and charged once, when it was registered; how many of its sends are
    /// in flight is bounded by the slots of its arena.
    pub(crate) fn pinned(&self) -> (usize, usize) {
        (
            self.sends - self.registered.0,
            self.bytes - self.registered.1,
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use NotifOutcome::*;

    #[test]
    fn ids_that_share_a_place_in_the_table_are_each_found_once() {
        let mut t = ReqTable::default();
        // Three requests on one ring slot (a send and the resends of its rest), and one on
        // a group with the same index: each its own entry.
        let ids = [1 << 32 | 5, 2 << 32 | 5, 3 << 32 | 5, 1 << 32 | 1 << 62 | 5];
        for (i, &id) in ids.iter().enumerate() {
            assert!(t.insert(id, i));
        }
        assert!(
            !t.insert(ids[2], 20),
            "there already: replaced, not counted twice"
        );
        assert_eq!(t.len, 4);
        assert_eq!(t.remove(ids[0]), Some(0));
        // The array's place is free now; an id kept in the map is not put there a second time.
        assert!(!t.insert(ids[1], 10));
        assert_eq!(t.len, 3);
        assert_eq!(t.get_mut(ids[1]).copied(), Some(10));
        assert_eq!(t.remove(ids[1]), Some(10));
        assert_eq!(t.remove(ids[1]), None);
        assert_eq!(t.remove(ids[2]), Some(20));
        assert_eq!(t.remove(ids[3]), Some(3));
        assert!(t.is_empty());
        assert_eq!(t.get_mut(ids[3]), None);
    }

    #[test]
    fn each_result_and_notification_finds_its_own_request_in_any_order() {
        let mut l = SendZcLedger::new();
        let sent = Completion {
            copied: false,
            sends: 1,
        };
        for req in 1..=3 {
            l.submitted(req, 10);
        }
        assert_eq!(l.on_result(1, 10, true), None);
        assert_eq!(l.on_notification(1, false), sent);
        l.submitted(4, 10);
        // Request 2 sent nothing: its notification must not count, whichever entry is near.
        assert_eq!(l.on_result(2, -libc::ECANCELED, true), None);
        assert_eq!(l.on_result(3, 10, true), None);
        assert_eq!(l.on_notification(3, false), sent);
        assert_eq!(l.on_result(4, 10, true), None);
        assert_eq!(l.on_notification(4, false), sent);
        assert_eq!(l.on_notification(2, false), NoData);
        assert_eq!((l.inflight(), l.inflight_bytes()), (0, 0));
        assert_eq!(l.on_notification(3, false), Unexpected);
        // Results in order, notifications in another.
        for req in 10..16 {
            l.submitted(req, 10);
        }
        for req in 10..16 {
            assert_eq!(
                l.on_result(req, if req == 13 { -libc::ENOMEM } else { 10 }, true),
                None
            );
        }
        for req in [14, 10, 15, 13, 11, 12] {
            let want = if req == 13 { NoData } else { sent };
            assert_eq!(l.on_notification(req, false), want, "request {req}");
        }
        assert_eq!((l.inflight(), l.inflight_bytes()), (0, 0));
    }

    #[test]
    fn only_requests_that_sent_bytes_count_as_completions() {
        let mut l = SendZcLedger::new();
        for req in 1..=4 {
            l.submitted(req, 100);
        }
        assert_eq!(l.inflight(), 4);
        l.on_result(1, 100, true); // sent
        l.on_result(2, -libc::ENOMEM, true); // fell back: counted once, elsewhere
        l.on_result(3, -libc::ECANCELED, true); // cancelled link
        l.on_result(4, 40, true); // short: sent 40 bytes
        assert_eq!(
            l.on_notification(1, true),
            Completion {
                copied: true,
                sends: 1
            }
        );
        assert_eq!(
            l.on_notification(2, true),
            NoData,
            "ENOMEM is not a copied completion"
        );
        assert_eq!(l.on_notification(3, true), NoData);
        assert_eq!(
            l.on_notification(4, false),
            Completion {
                copied: false,
                sends: 1
            }
        );
        assert_eq!(l.inflight(), 0);
        assert_eq!(l.inflight_bytes(), 0);
        assert_eq!(l.on_notification(4, false), Unexpected);
    }

    #[test]
    fn in_flight_counts_every_request_on_a_buffer() {
        // A short send and its remainder are two requests on one buffer: both in flight until
        // both notifications are back.
        let mut l = SendZcLedger::new();
        l.submitted(10, 100);
        l.on_result(10, 30, true);
        l.submitted(11, 70);
        assert_eq!((l.inflight(), l.inflight_bytes()), (2, 170));
        l.on_result(11, 70, true);
        assert_eq!(
            l.on_notification(11, true),
            Completion {
                copied: true,
                sends: 1
            }
        );
        assert_eq!((l.inflight(), l.inflight_bytes()), (1, 100));
        assert_eq!(
            l.on_notification(10, true),
            Completion {
                copied: true,
                sends: 1
            }
        );
        assert_eq!(l.inflight(), 0);
    }

    #[test]
    fn a_result_without_more_ends_the_request() {
        let mut l = SendZcLedger::new();
        l.submitted(1, 5);
        assert_eq!(l.on_result(1, -libc::EINVAL, false), None);
        assert_eq!(l.inflight(), 0);
        assert_eq!(l.on_notification(1, false), Unexpected);
    }

    #[test]
    fn a_notification_before_its_result_is_settled_by_the_result() {
        let mut l = SendZcLedger::new();
        l.submitted(7, 5);
        assert_eq!(l.on_notification(7, true), NoData);
        assert_eq!(l.inflight(), 1);
        assert_eq!(
            l.on_result(7, 5, true),
            Some(Completion {
                copied: true,
                sends: 1
            })
        );
        assert_eq!(l.inflight(), 0);
    }

    #[test]
    fn a_datagram_is_in_flight_from_its_submission_to_its_notification_in_any_order() {
        let mut l = SendZcLedger::new();
        let sent = |copied| Completion { copied, sends: 1 };
        for _ in 1..=4 {
            l.submitted_unkeyed(1, 100, false);
        }
        assert_eq!((l.inflight(), l.inflight_bytes()), (4, 400));
        assert_eq!(l.on_datagram_result(1, 100, true, (100, false)), None);
        assert_eq!(
            l.on_datagram_result(2, -libc::ENOMEM, true, (100, false)),
            None
        );
        assert_eq!(l.on_datagram_result(3, 100, true, (100, false)), None);
        // No notification follows a result without F_MORE: it ends there.
        assert_eq!(
            l.on_datagram_result(4, -libc::EINVAL, false, (100, false)),
            None
        );
        assert_eq!((l.inflight(), l.inflight_bytes()), (3, 300));
        // Out of the order the results came: each found, once.
        assert_eq!(l.on_notification(3, true), sent(true));
        assert_eq!(l.on_notification(2, true), NoData, "sent nothing");
        assert_eq!(l.on_notification(1, false), sent(false));
        assert_eq!(l.on_notification(1, false), Unexpected);
        assert_eq!((l.inflight(), l.inflight_bytes()), (0, 0));
        // Before its result (its sender knows it is in flight): settled by the result.
        l.submitted_unkeyed(1, 50, false);
        l.notified_early(5, true);
        assert_eq!(
            l.on_datagram_result(5, 50, true, (50, false)),
            Some(sent(true))
        );
        assert_eq!((l.inflight(), l.inflight_bytes()), (0, 0));
        assert_eq!(l.on_notification(5, true), Unexpected);
    }

    #[test]
    fn sends_from_registered_buffers_are_in_flight_and_not_pinned() {
        let mut l = SendZcLedger::new();
        l.submitted_sends(1, 800, 8, true);
        l.submitted_sends(2, 100, 1, false);
        l.submitted_unkeyed(1, 50, true);
        assert_eq!((l.inflight(), l.inflight_bytes()), (10, 950));
        assert_eq!(l.pinned(), (1, 100));
        // A short vectored request: its unsent buffers leave both counts.
        l.transmitted_sends(1, 5);
        assert_eq!((l.inflight(), l.pinned()), (7, (1, 100)));
        l.on_result(1, 500, true);
        l.on_result(2, 100, true);
        assert_eq!(l.on_datagram_result(3, 50, true, (50, true)), None);
        l.on_notification(1, false);
        l.on_notification(3, false);
        assert_eq!((l.inflight(), l.pinned()), (1, (1, 100)));
        l.on_notification(2, false);
        assert_eq!(
            (l.inflight(), l.inflight_bytes(), l.pinned()),
            (0, 0, (0, 0))
        );
    }

    #[test]
    fn datagrams_and_keyed_requests_share_the_counts_and_keep_their_own_entries() {
        let mut l = SendZcLedger::new();
        l.submitted(7, 10);
        l.submitted_unkeyed(1, 20, false);
        assert_eq!(l.on_datagram_result(8, 20, true, (20, false)), None);
        assert_eq!(l.on_result(7, 10, true), None);
        assert_eq!((l.inflight(), l.inflight_bytes()), (2, 30));
        let sent = Completion {
            copied: false,
            sends: 1,
        };
        assert_eq!(l.on_notification(7, false), sent);
        assert_eq!(l.on_notification(8, false), sent);
        assert_eq!((l.inflight(), l.inflight_bytes()), (0, 0));
    }

    #[test]
    fn a_vectored_request_counts_each_of_its_sends_until_its_one_notification() {
        let mut l = SendZcLedger::new();
        l.submitted_sends(3, 8 * 100, 8, false);
        l.submitted(4, 100);
        assert_eq!((l.inflight(), l.inflight_bytes()), (9, 900));
        assert_eq!(l.on_result(3, 800, true), None);
        assert_eq!(l.inflight(), 9, "in flight until the notification");
        let c = l.on_notification(3, true);
        assert_eq!(
            c,
            Completion {
                copied: true,
                sends: 8
            }
        );
        assert_eq!((l.inflight(), l.inflight_bytes()), (1, 100));
        // A short one speaks for the sends it transmitted.
        l.submitted_sends(6, 300, 3, false);
        l.transmitted_sends(6, 2);
        assert_eq!(l.inflight(), 3);
        l.on_result(6, 150, true);
        assert_eq!(
            l.on_notification(6, false),
            Completion {
                copied: false,
                sends: 2
            }
        );
        // A vectored request that failed speaks for none of its sends.
        l.submitted_sends(5, 300, 3, false);
        l.on_result(5, -libc::ECANCELED, true);
        assert_eq!(l.on_notification(5, false), NoData);
        assert_eq!(l.inflight(), 1);
    }
}
