//! An io_uring used for socket sends. The ring owns every buffer it has been handed until the
//! kernel has posted the last completion that refers to it (the result CQE, and for SEND_ZC the
//! notification CQE when the result carried `IORING_CQE_F_MORE`), and the iovecs and header of
//! every vectored request until its last completion, so the `unsafe` contract of pushing an SQE
//! that points at user memory is kept here and nowhere else.

//!
//! - `mod.rs`: the ring (setup, entering the kernel, reaping completions, teardown);
//! - `slots.rs`: the buffers and vectored requests the ring holds, and which completions are
//!   still due for each: what keeps every SQE pointing at live memory;
//! - `submit.rs`: send requests (`SEND`, `SEND_ZC`, vectored `SENDMSG`, `SENDMSG_ZC`) and the
//!   registered-buffer table;
//! - `aux.rs`: requests that are not sends (multishot accept and receive, splice, cancel);
//! - `lane.rs`: datagrams pushed past their connection's queue, whose completions the ring
//!   counts into the connection's tally (`completion/lane.rs`).

mod aux;
mod lane;
mod slots;
mod stream_lane;
mod submit;

use crate::completion::{LaneRequest, LaneSend, LaneTally};
pub(crate) use aux::{AuxCqe, AuxOp};
use slots::{Group, Slot};
use submit::FixedTable;

use super::bufring::RecvBufs;
use crate::buffer::Buf;
use io_uring::{cqueue, opcode, types, IoUring, Probe};
use std::io;
use std::mem::MaybeUninit;
use std::ops::Range;
#[cfg(feature = "tokio")]
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// `IORING_SEND_ZC_REPORT_USAGE` from `<linux/io_uring.h>` (kernel 6.2).
pub(crate) const IORING_SEND_ZC_REPORT_USAGE: u16 = 1 << 3;
/// `IORING_ENTER_GETEVENTS` from `<linux/io_uring.h>`.
const IORING_ENTER_GETEVENTS: u32 = 1 << 0;
/// `IORING_NOTIF_USAGE_ZC_COPIED` from `<linux/io_uring.h>`: set in a notification's `res` when
/// the kernel copied the data after all.
pub(crate) const IORING_NOTIF_USAGE_ZC_COPIED: u32 = 1 << 31;

/// The send operation of one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum SendOp {
    /// `IORING_OP_SEND` with `MSG_WAITALL`.
    Send,
    /// `IORING_OP_SEND_ZC` with `MSG_WAITALL`, optionally asking for usage reporting.
    SendZc {
        /// Set `IORING_SEND_ZC_REPORT_USAGE`, so notifications say whether the kernel copied.
        report_usage: bool,
    },
}

/// The buffer of a request to submit.
#[derive(Debug)]
pub(crate) enum Payload {
    /// A buffer the kernel does not hold yet: the next one at the front of the request's
    /// request's queue, which the driver takes from there and hands to the ring.
    New,
    /// The buffer in this ring slot, which the ring still holds (the rest of a short send, or a
    /// link the kernel cancelled).
    Held(u32),
}

/// Bytes of one buffer that a request sends.
#[derive(Debug)]
pub(crate) struct Part {
    /// The buffer. The driver replaces a [`Payload::New`] with the [`Payload::Held`] slot it
    /// put the buffer in.
    pub(crate) payload: Payload,
    /// Which bytes of it.
    pub(crate) range: Range<usize>,
}

/// The send operation of a request, as the ring's functions name it.
pub(crate) use SendOp as Op;

/// Which of the send-related opcodes this kernel's io_uring supports (`IORING_REGISTER_PROBE`).
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct OpSupport {
    /// `IORING_OP_SEND`.
    pub(crate) send: bool,
    /// `IORING_OP_SENDMSG`.
    pub(crate) sendmsg: bool,
    /// `IORING_OP_SEND_ZC`.
    pub(crate) send_zc: bool,
    /// `IORING_OP_SENDMSG_ZC`.
    pub(crate) sendmsg_zc: bool,
    /// `IORING_OP_SPLICE`.
    pub(crate) splice: bool,
}

/// One completion, decoded.
#[derive(Debug)]
pub(crate) struct Cqe {
    /// The tag the request's buffers were pushed with (the driver's connection index).
    pub(crate) tag: u32,
    /// The request this completion belongs to (as returned by [`SendRing::push_slot`] or
    /// [`SendRing::push_vectored`]); a buffer can carry several requests (a short send's
    /// remainder is a new one).
    pub(crate) req: u64,
    /// `true` for a SEND_ZC notification (`IORING_CQE_F_NOTIF`), `false` for a request result.
    pub(crate) notif: bool,
    /// The CQE's `res`: bytes sent or `-errno` for a result; usage bits for a notification.
    pub(crate) res: i32,
    /// `IORING_CQE_F_MORE` on a result: a notification will follow.
    pub(crate) more: bool,
    /// Nanoseconds since the request's buffer went to the ring (for a vectored request,
    /// since it was pushed), read for a notification and for a result a notification follows
    /// (what a zero-copy outcome is timed from), when the request was one of the timed ones
    /// ([`SendRing::clock`]); `None` otherwise.
    pub(crate) age_ns: Option<u64>,
    /// A lane request's result that failed it (its slot, in the low half of `req`, or its
    /// slots, held for the connection again), or the result of a stream's `SEND` request by
    /// the lane: what it was ([`LaneSend`]). The lane's other completions are counted into
    /// [`LaneTally`] instead.
    pub(crate) lane: Option<LaneSend>,
}

/// Bit 63 of `user_data` marks a request that is not a send (accept, receive, cancel); send
/// request ids keep it clear.
pub(super) const AUX: u64 = 1 << 63;

/// Nanoseconds on `clock` since `at`, for a completion that is timed (`timed`: a notification,
/// or a result a notification follows) of a request that was; `now` is read once per reap.
#[inline(always)]
fn age_ns(
    clock: &crate::stats::SendClock,
    now: &mut Option<u64>,
    timed: bool,
    at: Option<u64>,
) -> Option<u64> {
    match (timed, at) {
        (true, Some(at)) => Some(now.get_or_insert_with(|| clock.now_ns()).saturating_sub(at)),
        _ => None,
    }
}

/// Completions [`SendRing::reap_with`] copies out of the ring at a time.
const REAP_CHUNK: usize = 32;
/// Bit 62 marks a vectored send: the low half of `user_data` is then its [`Group`], not a slot.
const GROUP: u64 = 1 << 62;
/// Bit 61 marks a datagram pushed by [`SendRing::push_lane`], which its owner no longer holds.
const LANE: u64 = 1 << 61;

/// How a ring was set up.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RingSetup {
    /// `IORING_SETUP_SINGLE_ISSUER | IORING_SETUP_DEFER_TASKRUN` (kernel 6.1): completion work
    /// runs only when the one submitting thread asks for completions. With
    /// `IORING_SETUP_TASKRUN_FLAG`, so the ring says when such work is waiting.
    SingleIssuerDeferTaskrun,
    /// `IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG` (kernel 5.19).
    CoopTaskrun,
    /// No setup flags.
    Plain,
}

impl RingSetup {
    /// A short name for notes and results.
    pub fn name(self) -> &'static str {
        match self {
            RingSetup::SingleIssuerDeferTaskrun => "single_issuer+defer_taskrun",
            RingSetup::CoopTaskrun => "coop_taskrun",
            RingSetup::Plain => "plain",
        }
    }
}

/// A ring plus the buffers its in-flight sends point at.
pub(crate) struct SendRing {
    ring: IoUring,
    setup: RingSetup,
    /// Created disabled (`IORING_SETUP_R_DISABLED`): the first thread that submits enables it
    /// and becomes its single issuer.
    enabled: bool,
    slots: Vec<Option<Slot>>,
    /// When each slot's buffer went to the ring (ns on `clock`), for the sampled ones.
    held_at: Vec<Option<u64>>,
    /// The lane's datagram in each slot ([`SendRing::push_lane`]).
    lane: Vec<LaneRequest>,
    /// Slots a stream's lane request reads, counted on its group from when
    /// [`SendRing::fill_lane_group`] takes them.
    in_lane: Vec<bool>,
    /// Per tag, what its lane datagrams' completions came to ([`SendRing::take_lane_tallies`]),
    /// and the tags whose tally has something.
    lane_tallies: Vec<LaneTally>,
    lane_listed: Vec<u32>,
    /// Times one zero-copy push in [`crate::stats::SendClock`]'s sample.
    clock: crate::stats::SendClock,
    free: Vec<u32>,
    /// Parked slots (arena slots that stay in the ring) the kernel has released, and where
    /// each parked slot's bytes are.
    parked_free: Vec<u32>,
    parked_at: Vec<slots::ParkedAt>,
    /// Vectored requests, in flight or free for reuse (`free_groups`).
    groups: Vec<Group>,
    free_groups: Vec<u32>,
    /// Buffers whose last completion came in since the last [`SendRing::take_released`],
    /// with their tags.
    released: Vec<(u32, Buf)>,
    /// Registered-buffer table: (address, length) per index, when one was registered.
    fixed: Option<FixedTable>,
    /// Why registering buffers stopped, when the kernel refused (memlock, for one).
    fixed_error: Option<io::Error>,
    /// The registered part of the driver's arena (first byte, length): table entry 0.
    arena: Option<(usize, usize)>,
    /// Vectored zero-copy sends whose iovecs all lie in the arena go by index (`SENDMSG_ZC`
    /// with registered iovecs, Linux 6.15).
    vectored_fixed: bool,
    /// Requests pushed so far: the high half of each request id.
    requests: u32,
    /// Slots with completions outstanding.
    busy: usize,
    /// Per tag (connection): slots with completions outstanding plus receives armed.
    tag_busy: Vec<u32>,
    /// Accept, receive and cancel requests whose last completion has not come.
    aux_pending: usize,
    aux: Vec<AuxCqe>,
    recv: Option<RecvBufs>,
    /// Completions the kernel could not post because the CQ was full (`IORING_FEAT_NODROP`
    /// keeps them and posts them later), as the ring's overflow counter reads.
    cq_overflow: u32,
}

impl SendRing {
    /// `io_uring_setup(sq_entries, {cq_entries, flags})`, see io_uring_setup(2). Asks for
    /// SINGLE_ISSUER and DEFER_TASKRUN (created disabled, enabled by the first thread that
    /// submits), then COOP_TASKRUN, then no flags, taking the first the kernel accepts.
    /// `SENDPATH_URING_SETUP=coop` or `=plain` starts further down that list, to compare.
    pub(crate) fn new(sq_entries: u32, cq_entries: u32) -> io::Result<SendRing> {
        SendRing::new_from(sq_entries, cq_entries, RingSetup::SingleIssuerDeferTaskrun)
    }

    /// [`SendRing::new`], starting the list at `first`.
    pub(crate) fn new_from(
        sq_entries: u32,
        cq_entries: u32,
        first: RingSetup,
    ) -> io::Result<SendRing> {
        let sq = sq_entries.next_power_of_two().max(8);
        let cq = cq_entries.next_power_of_two().max(2 * sq);
        let mut last = None;
        let all = [
            RingSetup::SingleIssuerDeferTaskrun,
            RingSetup::CoopTaskrun,
            RingSetup::Plain,
        ];
        let skip = match std::env::var("SENDPATH_URING_SETUP").as_deref() {
            Ok("coop") => 1,
            Ok("plain") => 2,
            _ => 0,
        };
        let skip = skip.max(all.iter().position(|s| *s == first).unwrap_or(0));
        for setup in all.into_iter().skip(skip) {
            let mut b = IoUring::builder();
            b.setup_cqsize(cq);
            match setup {
                RingSetup::SingleIssuerDeferTaskrun => {
                    b.setup_single_issuer()
                        .setup_defer_taskrun()
                        .setup_taskrun_flag()
                        .setup_r_disabled();
                }
                RingSetup::CoopTaskrun => {
                    b.setup_coop_taskrun().setup_taskrun_flag();
                }
                RingSetup::Plain => {}
            }
            match b.build(sq) {
                Ok(ring) => {
                    return Ok(SendRing {
                        ring,
                        setup,
                        enabled: setup != RingSetup::SingleIssuerDeferTaskrun,
                        slots: Vec::new(),
                        held_at: Vec::new(),
                        lane: Vec::new(),
                        in_lane: Vec::new(),
                        lane_tallies: Vec::new(),
                        lane_listed: Vec::new(),
                        clock: crate::stats::SendClock::new(),
                        free: Vec::new(),
                        parked_free: Vec::new(),
                        parked_at: Vec::new(),
                        groups: Vec::new(),
                        free_groups: Vec::new(),
                        released: Vec::new(),
                        fixed: None,
                        fixed_error: None,
                        arena: None,
                        vectored_fixed: false,
                        requests: 0,
                        busy: 0,
                        tag_busy: Vec::new(),
                        aux_pending: 0,
                        aux: Vec::new(),
                        recv: None,
                        cq_overflow: 0,
                    })
                }
                Err(e) if e.raw_os_error() == Some(libc::EINVAL) => last = Some(e),
                Err(e) => return Err(e),
            }
        }
        Err(last.unwrap_or_else(|| io::Error::from_raw_os_error(libc::EINVAL)))
    }

    /// How the ring was set up.
    pub(crate) fn setup(&self) -> RingSetup {
        self.setup
    }

    /// A duplicate of the ring's descriptor, which polls readable when completions wait (for a
    /// reactor to poll: `dup(2)` of the ring fd names the same ring).
    #[cfg(feature = "tokio")]
    pub(crate) fn dup_fd(&self) -> io::Result<OwnedFd> {
        use std::os::fd::{AsRawFd, BorrowedFd};
        // SAFETY: the ring's descriptor is open while `self.ring` lives, which outlasts this
        // borrow (it ends with the dup below).
        let fd = unsafe { BorrowedFd::borrow_raw(self.ring.as_raw_fd()) };
        fd.try_clone_to_owned()
    }

    /// `io_uring_register(IORING_REGISTER_ENABLE_RINGS)` the first time: the calling thread
    /// becomes the ring's single issuer.
    pub(super) fn enable(&mut self) -> io::Result<()> {
        if !self.enabled {
            self.ring.submitter().register_enable_rings()?;
            self.enabled = true;
        }
        Ok(())
    }

    /// Why registered buffers are not used, when the kernel refused them.
    pub(crate) fn fixed_error(&self) -> Option<&io::Error> {
        self.fixed_error.as_ref()
    }

    /// `io_uring_register(IORING_REGISTER_PROBE)`: which send opcodes exist here.
    /// See io_uring_register(2).
    pub(crate) fn probe(&self) -> io::Result<OpSupport> {
        let mut p = Probe::new();
        self.ring.submitter().register_probe(&mut p)?;
        Ok(OpSupport {
            send: p.is_supported(opcode::Send::CODE),
            sendmsg: p.is_supported(opcode::SendMsg::CODE),
            send_zc: p.is_supported(opcode::SendZc::CODE),
            sendmsg_zc: p.is_supported(opcode::SendMsgZc::CODE),
            splice: p.is_supported(opcode::Splice::CODE),
        })
    }

    /// `io_uring_enter(to_submit, min_complete = want, IORING_ENTER_GETEVENTS)`.
    pub(crate) fn submit_and_wait(&mut self, want: usize) -> io::Result<usize> {
        self.enable()?;
        loop {
            match self.ring.submit_and_wait(want) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// `io_uring_enter(to_submit)` without waiting. On a DEFER_TASKRUN ring it always passes
    /// `IORING_ENTER_GETEVENTS` (with `min_complete` 0), so the deferred work of this very
    /// submission runs in the same call: the next link of a chain is such work, and without it
    /// a chain would advance one link per syscall. Elsewhere GETEVENTS is passed when the ring
    /// says deferred work is waiting.
    pub(crate) fn submit(&mut self) -> io::Result<usize> {
        self.enable()?;
        loop {
            let r = if self.setup == RingSetup::SingleIssuerDeferTaskrun {
                let n = self.ring.submission().len() as u32;
                // SAFETY: no extended argument is passed (`None`, size 0), so the kernel reads
                // nothing but the rings, which `IoUring` keeps mapped.
                unsafe {
                    self.ring.submitter().enter::<libc::sigset_t>(
                        n,
                        0,
                        IORING_ENTER_GETEVENTS,
                        None,
                    )
                }
            } else {
                self.ring.submit()
            };
            match r {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                other => return other,
            }
        }
    }

    /// Whether entering the kernel would do anything: SQEs to submit, deferred completion work
    /// to run (`IORING_SQ_TASKRUN`), or completions held back by a full CQ.
    pub(crate) fn needs_enter(&mut self) -> bool {
        let mut sq = self.ring.submission();
        sq.sync();
        !sq.is_empty() || sq.taskrun() || sq.cq_overflow() || !self.enabled
    }

    /// Whether deferred completion work is waiting for the next enter with GETEVENTS.
    pub(crate) fn taskrun_pending(&mut self) -> bool {
        let mut sq = self.ring.submission();
        sq.sync();
        sq.taskrun()
    }

    /// Runs the deferred completion work waiting on the ring (submitting what is queued first),
    /// without waiting for more: as much as the CQ has room for, in one `io_uring_enter`. A
    /// plain enter runs a bounded batch (20 items on Linux 6.13 and later); one that asks for
    /// `n` completions runs up to `n`, and with a zero timeout returns once it has run them
    /// (`ETIME` when fewer than `n` came, which is no error here).
    pub(crate) fn run_deferred_work(&mut self) -> io::Result<()> {
        let room = {
            let cq = self.ring.completion();
            cq.capacity() - cq.len()
        };
        self.wait_batch(room.max(1), Duration::ZERO, Duration::ZERO)
            .map(drop)
    }

    /// Waits up to `timeout` for at least one completion (submitting what is queued first).
    /// Returns false when the time ran out.
    pub(crate) fn wait_for(&mut self, timeout: Duration) -> io::Result<bool> {
        self.wait_batch(1, Duration::ZERO, timeout)
    }

    /// Waits up to `timeout` for `want` completions, but once `min_wait` has passed returns as
    /// soon as there is at least one (`IORING_FEAT_MIN_TIMEOUT`, Linux 6.12; a zero `min_wait`
    /// is what older kernels take): fewer, fuller wake-ups for a loop over many connections.
    /// Returns false when the time ran out.
    pub(crate) fn wait_batch(
        &mut self,
        want: usize,
        min_wait: Duration,
        timeout: Duration,
    ) -> io::Result<bool> {
        self.enable()?;
        let ts = types::Timespec::from(timeout);
        let usec = u32::try_from(min_wait.as_micros()).unwrap_or(u32::MAX);
        let args = types::SubmitArgs::new().timespec(&ts).min_wait_usec(usec);
        match self.ring.submitter().submit_with_args(want, &args) {
            Ok(_) => Ok(true),
            Err(e) if e.raw_os_error() == Some(libc::ETIME) => Ok(false),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => Ok(true),
            Err(e) => Err(e),
        }
    }

    /// Whether the kernel takes a batch wait's minimum (`IORING_FEAT_MIN_TIMEOUT`).
    pub(crate) fn has_min_wait(&self) -> bool {
        self.ring.params().is_feature_min_timeout()
    }

    /// Moves every available completion into `out`, releasing buffers whose last completion
    /// has arrived. Returns how many completions there were (accepts and receives included).
    pub(crate) fn reap(&mut self, out: &mut Vec<Cqe>) -> usize {
        self.reap_with(|c| out.push(c))
    }

    /// [`SendRing::reap`], handing each completion to `to` as it is read (the driver routes it
    /// to its connection there, with no list in between).
    #[inline]
    pub(crate) fn reap_with(&mut self, mut to: impl FnMut(Cqe)) -> usize {
        let mut now = None;
        // Not zeroed: most calls find nothing, and zeroing 512 bytes cost more than the reap.
        let mut chunk = [MaybeUninit::<(u64, i32, u32)>::uninit(); REAP_CHUNK];
        let mut total = 0;
        loop {
            // Copied out a chunk at a time (routing them needs the ring's slots, which the
            // completion queue's borrow would hold); the queue's head moves past each chunk.
            let mut cq = self.ring.completion();
            self.cq_overflow = cq.overflow();
            let mut n = 0;
            // The chunk first: at its end, `zip` stops before taking one more from the queue.
            for (e, c) in chunk.iter_mut().zip(&mut cq) {
                e.write((c.user_data(), c.result(), c.flags()));
                n += 1;
            }
            drop(cq);
            if n == 0 {
                // Most passes look more often than completions come: no clock reading for none.
                return total;
            }
            total += n;
            for e in &chunk[..n] {
                // SAFETY: the loop above wrote the first `n` entries.
                let (req, res, flags) = unsafe { e.assume_init() };
                self.route(req, res, flags, &mut now, &mut to);
            }
            if n < REAP_CHUNK {
                return total;
            }
        }
    }

    /// One reaped completion: counted against its slot or group, and to `to` as a [`Cqe`]
    /// unless it is an accept's or a receive's.
    #[inline(always)]
    fn route(
        &mut self,
        req: u64,
        res: i32,
        flags: u32,
        now: &mut Option<u64>,
        to: &mut impl FnMut(Cqe),
    ) {
        if req & AUX != 0 {
            self.reap_aux(req, res, flags);
            return;
        }
        match (req & LANE != 0, req & GROUP != 0) {
            (true, false) => return self.route_lane(req, res, flags, now, to),
            (true, true) => return self.route_lane_group(req, res, flags, now, to),
            _ => {}
        }
        let notif = cqueue::notif(flags);
        let more = !notif && cqueue::more(flags);
        let done = if req & GROUP != 0 {
            self.group_completed(req as u32, more)
        } else {
            let done = self.slot_completed(req as u32, more);
            if let (Some((tag, _)), false) = (done, more) {
                self.request_ended(tag);
            }
            done
        };
        let Some((tag, pushed_at)) = done else {
            return;
        };
        to(Cqe {
            tag,
            req,
            notif,
            res,
            more,
            lane: None,
            age_ns: age_ns(&self.clock, now, notif || more, pushed_at),
        });
    }

    /// Waits up to `timeout` until the kernel holds no buffer, moving completions into `out`.
    /// Returns how many buffers it still holds afterwards.
    pub(crate) fn drain(&mut self, timeout: Duration, out: &mut Vec<Cqe>) -> usize {
        let deadline = Instant::now() + timeout;
        while self.in_kernel() > 0 && Instant::now() < deadline {
            if self.wait_for(Duration::from_millis(10)).is_err() {
                break;
            }
            self.reap(out);
        }
        self.in_kernel()
    }
}

impl Drop for SendRing {
    /// Frees nothing the kernel may still read: multishot receives that did not end keep
    /// their provided buffers mapped for good, and buffers and vectored requests with
    /// completions still due are leaked. (The driver shuts the ring down first, with a
    /// bounded grace.)
    fn drop(&mut self) {
        self.shut_down(Duration::ZERO);
        if let Some(r) = self.recv.take() {
            if self.aux_pending > 0 || r.unregister(&self.ring).is_err() {
                std::mem::forget(r);
            }
        }
        self.mark_lane_slots();
        for slot in 0..self.slots.len() {
            if self.in_use(slot as u32) {
                std::mem::forget(self.slots[slot].take());
            }
        }
        for g in self.groups.drain(..) {
            if g.pending > 0 {
                std::mem::forget(g);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slot_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<Option<Slot>>(), 64);
    }

    /// A ring of `sq` entries and a UDP socket connected to itself; `None` (skipped) without
    /// io_uring.
    fn ring_and_socket(sq: u32) -> Option<(SendRing, std::net::UdpSocket)> {
        let Ok(ring) = SendRing::new(sq, 2 * sq) else {
            crate::test_support::skip("io_uring setup failed (kernel or seccomp)");
            return None;
        };
        let sock = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.connect(sock.local_addr().unwrap()).unwrap();
        Some((ring, sock))
    }

    #[test]
    fn a_send_from_a_slot_not_held_or_past_its_bytes_is_refused_and_nothing_goes() {
        let Some((mut ring, sock)) = ring_and_socket(8) else {
            return;
        };
        let fd = std::os::fd::AsFd::as_fd(&sock);
        let slot = ring.hold(Buf::filled(10, 7), 3, None);
        let refused = |r: io::Result<(u64, bool)>| r.unwrap_err().raw_os_error();
        let badslt = Some(libc::EBADSLT);
        assert_eq!(
            refused(ring.push_slot(fd, slot, 4..11, Op::Send, false)),
            badslt
        );
        #[allow(clippy::reversed_empty_ranges)]
        let backwards = 6..4;
        assert_eq!(
            refused(ring.push_slot(fd, slot, backwards, Op::Send, false)),
            badslt
        );
        assert_eq!(
            refused(ring.push_slot(fd, slot + 1, 0..1, Op::Send, false)),
            badslt
        );
        assert_eq!(ring.in_kernel(), 0, "nothing was queued");
        assert!(ring.unhold(slot).is_some(), "its buffer comes back whole");
        assert_eq!(
            refused(ring.push_slot(fd, slot, 0..10, Op::Send, false)),
            badslt
        );
        // A parked slot let go of stays in the ring, not held: no send from it either.
        let parked = ring.park(Buf::filled(10, 7), 3);
        assert!(ring.unhold(parked).is_none(), "it waits in the ring");
        assert_eq!(
            refused(ring.push_slot(fd, parked, 0..10, Op::Send, false)),
            badslt
        );
        assert_eq!(ring.in_kernel(), 0);
    }

    #[test]
    fn a_lane_datagram_s_slot_goes_with_its_completion_unless_it_sent_nothing() {
        let Some((mut ring, sock)) = ring_and_socket(8) else {
            return;
        };
        let fd = std::os::fd::AsFd::as_fd(&sock);
        // Not connected: its send fails (EDESTADDRREQ).
        let lone = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let (sent, failed) = (
            ring.hold(Buf::filled(10, 7), 3, None),
            ring.hold(Buf::filled(10, 8), 3, None),
        );
        ring.push_lane(fd, sent, 10, Op::Send).unwrap();
        ring.push_lane(std::os::fd::AsFd::as_fd(&lone), failed, 10, Op::Send)
            .unwrap();
        ring.submit_and_wait(2).unwrap();
        let mut out = Vec::new();
        assert_eq!(ring.reap(&mut out), 2);
        // Only the one that sent nothing goes to its owner; the other is counted for tag 3.
        let got: Vec<_> = out.iter().map(|c| (c.req as u32, c.res, c.lane)).collect();
        let what = LaneSend {
            len: 10,
            zc: false,
            failed: true,
        };
        assert_eq!(got, [(failed, -libc::EDESTADDRREQ, Some(what))]);
        let mut tallies = Vec::new();
        ring.take_lane_tallies(|tag, t| tallies.push((tag, t.sent, t.bytes)));
        assert_eq!(tallies, [(3, 1, 10)]);
        assert!(!ring.has_lane_tallies(), "taken, and started again");
        let mut released = Vec::new();
        ring.take_released(&mut released);
        let back: Vec<_> = released
            .iter()
            .map(|(tag, b)| (*tag, b.as_slice()[0]))
            .collect();
        assert_eq!(
            back,
            [(3, 7)],
            "the one that went is let go of at its completion"
        );
        // The one that sent nothing is its owner's again: sent from the same slot, let go.
        ring.push_slot(fd, failed, 0..10, Op::Send, false).unwrap();
        ring.submit_and_wait(1).unwrap();
        assert_eq!(ring.reap(&mut out), 1);
        assert_eq!(out.last().map(|c| (c.res, c.lane)), Some((10, None)));
        assert_eq!(ring.unhold(failed).map(|b| b.as_slice()[0]), Some(8));
        assert_eq!(ring.in_kernel(), 0);
    }

    #[test]
    fn a_reap_of_more_completions_than_one_chunk_routes_every_one() {
        let Some((mut ring, sock)) = ring_and_socket(64) else {
            return;
        };
        let fd = std::os::fd::AsFd::as_fd(&sock);
        let n = REAP_CHUNK + REAP_CHUNK / 2;
        let mut reqs: Vec<u64> = (0..n)
            .map(|i| {
                let slot = ring.hold(Buf::filled(8, i as u8), 1, None);
                ring.push_slot(fd, slot, 0..8, Op::Send, false).unwrap().0
            })
            .collect();
        ring.submit_and_wait(n).unwrap();
        let mut out = Vec::new();
        assert_eq!(ring.reap(&mut out), n);
        let mut got: Vec<u64> = out.iter().map(|c| c.req).collect();
        got.sort_unstable();
        reqs.sort_unstable();
        assert_eq!(got, reqs, "each request's completion, once");
        assert!(out.iter().all(|c| c.res == 8 && !c.more));
        assert_eq!(ring.in_kernel(), 0);
    }
}
