//! The lanes' completions, counted where they are read (the ring does, in
//! `sys/uring/lane.rs`): per request (a datagram, or a stream's vectored send of equal
//! messages), which of a SEND_ZC's result and notification came first; per connection, what
//! they came to, as the counts its state would have made one completion at a time
//! ([`LaneTally`], handed to the connection once per reap). A stream's `SEND` request has
//! one completion, its result, which goes to the connection as it is ([`LaneSend`]). A
//! datagram's result that sent nothing, or a stream's that sent less than all, fails the
//! request, whose slots go back to its connection. Every count is the one the connection's
//! queue makes for the same sends (`send/lane.rs` tests the two against each other); tested
//! here on simulated completions.

/// A request of a lane, by its ring slot (a datagram) or group (a stream's vectored send):
/// what its completions are counted against.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct LaneRequest {
    /// Its bytes, in all.
    len: u32,
    /// Its connection's.
    tag: u32,
    /// The messages it carries, of equal length: 1 for a datagram.
    sends: u16,
    /// A stream's: anything short of all its bytes fails it.
    stream: bool,
    zc: bool,
    registered: bool,
    /// Awaiting a completion.
    live: bool,
    /// A datagram whose slot the ring owns as a whole until its last completion: the slot's
    /// own record is not written for it ([`LaneRequest::whole`]).
    whole: bool,
    /// Its result came, with `F_MORE`: how many of its sends transmitted bytes.
    result: Option<u16>,
    /// Its notification came before its result: whether the kernel copied.
    notif: Option<bool>,
}

/// A lane request whose result reaches its connection: one that failed, or a stream's
/// `SEND` request (whose result is its one completion, so nothing is left to count).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct LaneSend {
    /// Its bytes, in all.
    pub(crate) len: usize,
    /// It went by SEND_ZC.
    pub(crate) zc: bool,
    /// Its result failed it ([`LaneRequest::fails`]): its slots are the connection's again.
    pub(crate) failed: bool,
}

/// What one connection's lane datagrams' completions came to since the connection last took
/// them: the counts its state would have made one completion at a time.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct LaneTally {
    /// Results that sent the datagram, each one datagram out of the kernel's way.
    pub(crate) sent: u64,
    /// Bytes they sent.
    pub(crate) bytes: u64,
    /// Of them, those that sent fewer bytes than the datagram had.
    pub(crate) short: u64,
    /// SEND_ZC datagrams whose last completion came, as (sends, bytes): pinned, registered.
    pub(crate) ended: [(usize, usize); 2],
    /// Notifications.
    pub(crate) notifications: u64,
    /// Datagrams that went zero-copy and sent bytes, their notification in (completions).
    pub(crate) completions: u64,
    /// Of them, those the kernel reported copied.
    pub(crate) copied: u64,
    /// Completions that matched no datagram of the lane awaiting one.
    pub(crate) unexpected: u64,
    /// How long each timed completion took (ns since its buffer went to the ring), with
    /// the sends it speaks for.
    pub(crate) ages: Vec<(u64, u64)>,
    /// In the ring's list of tallies to hand over ([`LaneTally::list`]).
    listed: bool,
}

/// What one completion did: whether it was the datagram's last, and whether its result sent
/// nothing (the slot is then its connection's again).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub(crate) struct LaneStep {
    pub(crate) last: bool,
    pub(crate) failed: bool,
}

impl LaneRequest {
    /// A datagram of `len` bytes just pushed (by SEND_ZC when `zc`, from a registered buffer
    /// when `registered`).
    pub(crate) fn new(len: usize, zc: bool, registered: bool) -> LaneRequest {
        LaneRequest {
            len: len as u32,
            tag: 0,
            sends: 1,
            stream: false,
            zc,
            registered,
            live: true,
            whole: false,
            result: None,
            notif: None,
        }
    }

    /// A stream's vectored send of `sends` messages of `len` bytes each, just pushed.
    pub(crate) fn stream(len: usize, sends: usize, zc: bool, registered: bool) -> LaneRequest {
        LaneRequest {
            len: (len * sends) as u32,
            sends: sends as u16,
            stream: true,
            ..LaneRequest::new(0, zc, registered)
        }
    }

    /// The same, of `tag`'s connection: a completion finds its tally from it.
    pub(crate) fn of(self, tag: u32) -> LaneRequest {
        LaneRequest { tag, ..self }
    }

    /// The same, its slot the ring's as a whole until its last completion: no one holds it,
    /// and the slot's own record (tag, length, completions due) is written only if its
    /// result fails it or the ring counts what the kernel still holds.
    pub(crate) fn whole(self) -> LaneRequest {
        LaneRequest {
            whole: true,
            ..self
        }
    }

    /// Whether it awaits a completion with its slot the ring's as a whole
    /// ([`LaneRequest::whole`]).
    #[inline(always)]
    pub(crate) fn is_whole(&self) -> bool {
        self.whole && self.live
    }

    /// Its slot's own record is written from now on: no longer whole.
    pub(crate) fn split(&mut self) {
        self.whole = false;
    }

    /// Its bytes, in all.
    pub(crate) fn len(&self) -> usize {
        self.len as usize
    }

    /// Its connection's tag ([`LaneRequest::of`]).
    #[inline(always)]
    pub(crate) fn tag(&self) -> u32 {
        self.tag
    }

    /// How many of its sends a result of `res` reached: all when it sent all, none when it
    /// sent nothing, else those its bytes began.
    fn transmitted(&self, res: i32) -> u16 {
        match res {
            ..=0 => 0,
            n if n as u32 >= self.len => self.sends,
            n => (n as u32).div_ceil(self.len / u32::from(self.sends).max(1)) as u16,
        }
    }

    /// What it was, for its connection, and whether a result of `res` failed it.
    pub(crate) fn send(&self, res: i32) -> LaneSend {
        LaneSend {
            len: self.len as usize,
            zc: self.zc,
            failed: self.fails(res),
        }
    }

    /// Whether a result of `res` fails it: a stream's that sent less than all (its
    /// connection settles it, as a chain, counting what it sent), a datagram's of bytes that
    /// sent nothing.
    pub(crate) fn fails(&self, res: i32) -> bool {
        let len = self.len as usize;
        match self.stream {
            true => res < 0 || res as usize != len,
            false => !(res > 0 || (res == 0 && len == 0)),
        }
    }

    /// A stream's `SEND` request: its result is its one completion, which goes to its
    /// connection as it is ([`LaneSend`]), not into a tally.
    pub(crate) fn stream_copy(&self) -> bool {
        self.stream && !self.zc
    }
}

impl LaneTally {
    /// The result of `d`: `res` bytes or `-errno`, `more` when a notification follows;
    /// `age_ns` says how long it took when it was timed, asked only when a zero-copy outcome
    /// is counted. A datagram of bytes whose result is `<= 0` failed.
    #[inline(always)]
    pub(crate) fn on_result(
        &mut self,
        d: &mut LaneRequest,
        res: i32,
        more: bool,
        age_ns: impl FnOnce() -> Option<u64>,
    ) -> LaneStep {
        if !d.live || d.result.is_some() {
            self.unexpected += 1;
            return LaneStep::default();
        }
        let transmitted = d.transmitted(res);
        let mut last = true;
        if d.zc && more {
            match d.notif {
                Some(copied) => self.outcome(transmitted, copied, age_ns),
                None => (d.result, last) = (Some(transmitted), false),
            }
        }
        if last {
            self.end(d);
        }
        let len = d.len as usize;
        let failed = d.fails(res);
        if !failed {
            self.sent += 1;
            self.bytes += res as u64;
            self.short += u64::from((res as usize) < len);
        }
        LaneStep { last, failed }
    }

    /// The notification of SEND_ZC datagram `d`, `copied` as
    /// `IORING_NOTIF_USAGE_ZC_COPIED` says; before its result it is kept for the result.
    /// `age_ns` as for [`LaneTally::on_result`].
    #[inline(always)]
    pub(crate) fn on_notification(
        &mut self,
        d: &mut LaneRequest,
        copied: bool,
        age_ns: impl FnOnce() -> Option<u64>,
    ) -> LaneStep {
        self.notifications += 1;
        if !d.live || !d.zc || d.notif.is_some() {
            self.unexpected += 1;
            return LaneStep::default();
        }
        let Some(transmitted) = d.result else {
            d.notif = Some(copied);
            return LaneStep::default();
        };
        self.end(d);
        self.outcome(transmitted, copied, age_ns);
        LaneStep {
            last: true,
            failed: false,
        }
    }

    fn end(&mut self, d: &mut LaneRequest) {
        d.live = false;
        if d.zc {
            let e = &mut self.ended[usize::from(d.registered)];
            *e = (e.0 + usize::from(d.sends), e.1 + d.len as usize);
        }
    }

    /// A zero-copy request's two completions are in: a completion for each of its sends that
    /// transmitted bytes.
    #[inline(always)]
    fn outcome(&mut self, transmitted: u16, copied: bool, age_ns: impl FnOnce() -> Option<u64>) {
        if transmitted > 0 {
            let n = u64::from(transmitted);
            self.completions += n;
            self.copied += n * u64::from(copied);
            if let Some(age) = age_ns() {
                self.ages.push((age, n));
            }
        }
    }

    /// Whether the tally was not in its ring's list of tallies to hand over; it is now.
    pub(crate) fn list(&mut self) -> bool {
        !std::mem::replace(&mut self.listed, true)
    }

    /// Empty again, out of the list (keeping its allocation).
    pub(crate) fn clear(&mut self) {
        let mut ages = std::mem::take(&mut self.ages);
        ages.clear();
        *self = LaneTally {
            ages,
            ..LaneTally::default()
        };
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn zc() -> LaneRequest {
        LaneRequest::new(100, true, true)
    }

    #[test]
    fn a_zero_copy_datagram_ends_with_its_second_completion_in_either_order() {
        let mut t = LaneTally::default();
        let (mut a, mut b) = (zc(), zc());
        let step = |last, failed| LaneStep { last, failed };
        assert_eq!(t.on_result(&mut a, 100, true, || None), step(false, false));
        assert_eq!(
            t.on_notification(&mut a, false, || Some(5)),
            step(true, false)
        );
        // The notification first: kept for the result, which ends it.
        assert_eq!(t.on_notification(&mut b, true, || None), step(false, false));
        assert_eq!(t.on_result(&mut b, 60, true, || Some(7)), step(true, false));
        assert_eq!((t.sent, t.bytes, t.short), (2, 160, 1));
        assert_eq!((t.completions, t.copied, t.notifications), (2, 1, 2));
        assert_eq!(t.ended, [(0, 0), (2, 200)]);
        assert_eq!(t.ages, [(5, 1), (7, 1)]);
        // A third completion of either is unexpected and changes nothing.
        assert_eq!(
            t.on_notification(&mut a, false, || None),
            step(false, false)
        );
        assert_eq!(t.on_result(&mut b, 100, false, || None), step(false, false));
        assert_eq!((t.unexpected, t.sent, t.completions), (2, 2, 2));
    }

    #[test]
    fn a_result_that_sent_nothing_fails_and_its_notification_still_ends_it() {
        let mut t = LaneTally::default();
        let mut d = LaneRequest::new(100, true, false);
        let failed = t.on_result(&mut d, -libc::EAGAIN, true, || None);
        assert_eq!((failed.last, failed.failed), (false, true));
        assert_eq!(
            (d.send(-libc::EAGAIN).len, d.send(-libc::EAGAIN).failed),
            (100, true)
        );
        let end = t.on_notification(&mut d, false, || Some(3));
        assert_eq!((end.last, end.failed), (true, false));
        assert_eq!((t.sent, t.completions, t.notifications), (0, 0, 1));
        assert_eq!(t.ended, [(1, 100), (0, 0)], "pinned: out of the ledger");
        assert!(t.ages.is_empty(), "no data, no completion timed");
        // A copy ends with its result; an empty datagram's 0 is no failure, another's is.
        let mut copy = LaneRequest::new(100, false, false);
        assert!(t.on_result(&mut copy, 0, false, || None).failed);
        let mut empty = LaneRequest::new(0, false, false);
        let s = t.on_result(&mut empty, 0, false, || None);
        assert!(s.last && !s.failed);
        assert_eq!((t.sent, t.ended), (1, [(1, 100), (0, 0)]));
    }

    #[test]
    fn a_stream_s_send_request_goes_to_its_connection_failed_only_when_it_sent_less_than_all() {
        let d = LaneRequest::stream(100, 4, false, false);
        assert!(d.stream_copy(), "one completion: handed over as it is");
        let failed = |res| d.send(res).failed;
        assert_eq!(
            [400, 399, 0, -libc::EPIPE].map(failed),
            [false, true, true, true]
        );
        assert_eq!(d.send(400).len, 400);
        // SEND_ZC and datagrams are counted into the tally.
        assert!(!LaneRequest::stream(100, 4, true, true).stream_copy());
        assert!(!LaneRequest::new(100, false, false).stream_copy());
    }
}
