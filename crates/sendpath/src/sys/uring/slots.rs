//! The buffers and vectored requests the ring holds, and the completions still due for each.
//! A buffer goes back to its owner only once its last completion is in and the owner let go
//! of it; a vectored request's header and iovecs are reused only after its last completion.
//! This is what keeps every SQE the ring pushed pointing at live memory.

use super::submit::in_region;
use super::{LaneRequest, SendRing};
use crate::buffer::Buf;

/// One cache line per slot: a buffer the ring holds goes in with one line written. When it
/// went to the ring is kept beside ([`SendRing::held_at`]).
#[repr(align(64))]
pub(super) struct Slot {
    pub(super) buf: Buf,
    pub(super) tag: u32,
    /// Completions still expected for this slot.
    pub(super) pending: u32,
    /// The owner may still send from it (see [`SendRing::unhold`]).
    pub(super) held: bool,
    /// A slot of the driver's arena that stays here between messages ([`SendRing::park`]):
    /// released, it waits in `parked_free` for the next message written in place instead of
    /// leaving the ring.
    pub(super) parked: bool,
}

/// Where a parked slot's bytes are ([`SendRing::park`]), kept apart from its [`Slot`] so a
/// stream's lane request takes and writes the slot without reading its cache line, which the
/// kernel's last send from it left cold.
#[derive(Clone, Copy)]
pub(super) struct ParkedAt {
    pub(super) start: *mut u8,
    pub(super) size: usize,
    /// It lies in the registered part of the arena: a zero-copy request may send it by index.
    pub(super) registered: bool,
}

// SAFETY: `start` points into the arena slot held in the ring's slot of the same index; it is
// only followed by the thread that owns the ring.
unsafe impl Send for ParkedAt {}

/// A vectored request (`SENDMSG` / `SENDMSG_ZC`) over several slots: the slots it reads, and
/// the iovecs and header the kernel reads, kept until its last completion. A group's lists
/// keep their allocations from request to request.
pub(super) struct Group {
    pub(super) slots: Vec<u32>,
    pub(super) iovs: Vec<libc::iovec>,
    pub(super) hdr: Box<libc::msghdr>,
    pub(super) tag: u32,
    /// Completions still expected: the result, then the notification if it said `F_MORE`.
    pub(super) pending: u32,
    /// When it went to the ring, for one zero-copy request in [`SendClock`]'s sample.
    ///
    /// [`SendClock`]: crate::stats::SendClock
    pub(super) pushed_at: Option<u64>,
    /// A stream's request by the lane ([`SendRing::push_lane_group`]): what its completions
    /// are counted against.
    pub(super) lane: LaneRequest,
    /// The lane request's slots are its own as a whole: none is marked `in_lane` or held,
    /// none has its tag or length written, until its result hands them back to their owner
    /// or the ring counts what the kernel still holds ([`SendRing::mark_lane_slots`]).
    pub(super) whole: bool,
    /// Every slot of the lane request lies in the registered part of the arena.
    pub(super) registered: bool,
}

// SAFETY: the raw pointers in `iovs` and `hdr` point into buffers the ring's own slots hold
// (and into `iovs`); a group is only read or written by the thread that owns the ring.
unsafe impl Send for Group {}

impl Group {
    pub(super) fn new() -> Group {
        Group {
            slots: Vec::new(),
            iovs: Vec::new(),
            // SAFETY: an all-zero msghdr (no name, no iovecs, no control data) is valid.
            hdr: Box::new(unsafe { std::mem::zeroed() }),
            tag: 0,
            pending: 0,
            pushed_at: None,
            lane: LaneRequest::default(),
            whole: false,
            registered: false,
        }
    }
}

impl SendRing {
    /// Puts `buf` in a free slot, held for its owner, pushed at `now`; send from it with
    /// [`SendRing::push_slot`].
    pub(crate) fn hold(&mut self, buf: Buf, tag: u32, now: Option<u64>) -> u32 {
        let slot = match self.free.pop() {
            Some(s) => s,
            None => {
                self.slots.push(None);
                self.held_at.push(now);
                self.lane.push(LaneRequest::default());
                self.in_lane.push(false);
                (self.slots.len() - 1) as u32
            }
        };
        self.slots[slot as usize] = Some(Slot {
            buf,
            tag,
            pending: 0,
            held: true,
            parked: false,
        });
        self.held_at[slot as usize] = now;
        slot
    }

    /// Puts `buf` (a slot of the driver's arena) in a ring slot for good, held for `tag`: once
    /// released it waits in the ring for [`SendRing::reserve_parked`] instead of leaving it, so
    /// a message written in place moves no buffer. Returns the ring slot.
    pub(crate) fn park(&mut self, buf: Buf, tag: u32) -> u32 {
        let at = buf.arena_raw();
        let slot = self.hold(buf, tag, None);
        if let Some(s) = self.slots[slot as usize].as_mut() {
            s.parked = true;
        }
        if let Some((start, size)) = at {
            let none = ParkedAt {
                start: std::ptr::null_mut(),
                size: 0,
                registered: false,
            };
            if self.parked_at.len() <= slot as usize {
                self.parked_at.resize(slot as usize + 1, none);
            }
            let registered = in_region(self.arena, start as usize, size);
            self.parked_at[slot as usize] = ParkedAt {
                start,
                size,
                registered,
            };
        }
        slot
    }

    /// A parked slot the kernel has released, held for `tag` with its first `len` bytes to
    /// write (`len` at most its capacity); `None` when every parked slot is in use or `len`
    /// does not fit.
    pub(crate) fn reserve_parked(&mut self, tag: u32, len: usize) -> Option<u32> {
        let (slot, _, _) = self.take_lane_slot(len)?;
        self.hold_taken(slot, tag, len);
        Some(slot)
    }

    /// Parked slots as [`SendRing::reserve_parked`] gives them, one for each message `i` of
    /// `at`, each written by `fill(i, bytes)` and pushed onto `out` in order: taken as
    /// [`SendRing::fill_lane_slots`] takes them, then held for `tag`. Stops early when none is
    /// free. When `fill` panics, the slots this call took go back to the ring before the panic
    /// goes on.
    pub(crate) fn fill_parked(
        &mut self,
        tag: u32,
        len: usize,
        at: std::ops::Range<usize>,
        fill: &mut dyn FnMut(usize, &mut [u8]),
        out: &mut Vec<u32>,
    ) {
        let start = out.len();
        self.fill_lane_slots(len, at, fill, out);
        for &slot in &out[start..] {
            self.hold_taken(slot, tag, len);
        }
    }

    /// Parked slot `slot`, taken by [`SendRing::fill_lane_slots`] and written in its first
    /// `len` bytes, held for `tag` as [`SendRing::reserve_parked`] holds one.
    pub(super) fn hold_taken(&mut self, slot: u32, tag: u32, len: usize) {
        if let Some(s) = self.slots[slot as usize].as_mut() {
            s.buf.resize(len);
            (s.tag, s.held) = (tag, true);
        }
        self.held_at[slot as usize] = None;
    }

    /// The bytes of a held slot no request has read yet (a message being written in place);
    /// `None` for any other slot.
    pub(crate) fn unsent_bytes(&self, slot: u32) -> Option<&[u8]> {
        let s = self.slots.get(slot as usize)?.as_ref()?;
        (s.held && s.pending == 0).then(|| s.buf.as_slice())
    }

    /// The bytes of a held slot no request has read yet, to write (a message written in
    /// place); `None` for any other slot.
    pub(crate) fn unsent_bytes_mut(&mut self, slot: u32) -> Option<&mut [u8]> {
        let s = self.slots.get_mut(slot as usize)?.as_mut()?;
        (s.held && s.pending == 0).then(|| s.buf.as_mut_slice())
    }

    /// Shortens a held slot no request has read yet to `len` bytes (a longer `len` changes
    /// nothing).
    pub(crate) fn truncate_unsent(&mut self, slot: u32, len: usize) {
        let s = self.slots.get_mut(slot as usize).and_then(|s| s.as_mut());
        if let Some(s) = s.filter(|s| s.held && s.pending == 0 && len < s.buf.len()) {
            s.buf.resize(len);
        }
    }

    /// Whether `slot` holds a buffer its owner may send `range` of.
    pub(super) fn live(&self, slot: u32, range: &std::ops::Range<usize>) -> bool {
        self.slots
            .get(slot as usize)
            .and_then(|s| s.as_ref())
            .is_some_and(|s| s.held && within(range, &s.buf))
    }

    /// One more request of `tag` whose last completion has not come.
    #[inline]
    pub(super) fn request_started(&mut self, tag: u32) {
        self.busy += 1;
        bump(&mut self.tag_busy, tag, true);
    }

    /// `n` more requests of `tag` whose last completion has not come.
    #[inline]
    pub(super) fn requests_started(&mut self, tag: u32, n: usize) {
        if n > 0 {
            self.request_started(tag);
            self.busy += n - 1;
            self.tag_busy[tag as usize] += n as u32 - 1;
        }
    }

    /// A request of `tag` had its last completion.
    pub(super) fn request_ended(&mut self, tag: u32) {
        self.busy = self.busy.saturating_sub(1);
        bump(&mut self.tag_busy, tag, false);
    }

    /// The owner will send no more from `slot`: the ring lets the buffer go once its last
    /// completion is in, returning it now if that has already happened.
    pub(crate) fn unhold(&mut self, slot: u32) -> Option<Buf> {
        let s = self.slots.get_mut(slot as usize)?.as_mut()?;
        s.held = false;
        if s.pending > 0 || self.in_lane[slot as usize] {
            return None;
        }
        if s.parked {
            self.parked_free.push(slot);
            return None;
        }
        self.free.push(slot);
        self.slots[slot as usize].take().map(|s| s.buf)
    }

    /// One completion of a request on `slot` came in (`more`: another will follow). Releases
    /// the buffer after its last one if its owner let it go. Returns the slot's tag and when
    /// its buffer went to the ring; `None` for a slot not in use.
    #[inline(always)]
    pub(super) fn slot_completed(&mut self, slot: u32, more: bool) -> Option<(u32, Option<u64>)> {
        let s = self.slots.get_mut(slot as usize)?.as_mut()?;
        s.pending = s.pending.saturating_sub(1) + u32::from(more);
        let done = (s.tag, self.held_at[slot as usize]);
        if s.pending == 0 && !s.held && !self.in_lane[slot as usize] {
            let parked = s.parked;
            self.slot_done(slot, parked);
        }
        Some(done)
    }

    /// `slot` had its last completion and its owner let it go: a parked slot waits for the
    /// next message, any other's buffer is released.
    #[inline(always)]
    pub(super) fn slot_done(&mut self, slot: u32, parked: bool) {
        if parked {
            self.parked_free.push(slot);
        } else {
            self.free.push(slot);
            if let Some(s) = self.slots[slot as usize].take() {
                self.released.push((s.tag, s.buf));
            }
        }
    }

    /// One completion of vectored request `g` came in: one for each of its slots. After its
    /// last, the group is free for another request.
    pub(super) fn group_completed(&mut self, g: u32, more: bool) -> Option<(u32, Option<u64>)> {
        let group = self.groups.get_mut(g as usize).filter(|g| g.pending > 0)?;
        group.pending = group.pending - 1 + u32::from(more);
        let done = (group.tag, group.pushed_at);
        let slots = std::mem::take(&mut group.slots);
        for &slot in &slots {
            self.slot_completed(slot, more);
        }
        let group = &mut self.groups[g as usize];
        group.slots = slots;
        if group.pending == 0 {
            self.free_groups.push(g);
            self.request_ended(done.0);
        }
        Some(done)
    }

    /// Moves the buffers released since the last call, each with its tag, into `out`.
    pub(crate) fn take_released(&mut self, out: &mut Vec<(u32, Buf)>) {
        if self.released.is_empty() {
            // Most reaps release nothing (and none, in place): nothing to move.
            return;
        }
        out.append(&mut self.released);
    }

    /// Number of send requests whose last completion has not come: while it is not 0, the
    /// kernel may still read a buffer the ring holds.
    pub(crate) fn in_kernel(&self) -> usize {
        self.busy
    }

    /// Number of send requests with completions outstanding that carry `tag`, plus the accept
    /// and receive requests armed with it: while this is not 0, a completion may still name
    /// `tag`.
    pub(crate) fn in_kernel_for(&self, tag: u32) -> usize {
        self.tag_busy.get(tag as usize).map_or(0, |n| *n as usize)
    }

    /// Adds to `counts[tag]` the number of buffers carrying `tag` that the kernel may still
    /// read, for every tag below `counts.len()`: one scan of the slots for all of them (for
    /// counting what is left after a deadline, not for a loop). Marks the slots of stream lane
    /// requests one by one first ([`SendRing::mark_lane_slots`]), so the scan sees them.
    pub(crate) fn buffers_in_kernel_by_tag(&mut self, counts: &mut [u64]) {
        self.mark_lane_slots();
        for slot in 0..self.slots.len() as u32 {
            let tag = self.slots[slot as usize].as_ref().map(|s| s.tag as usize);
            if let Some(n) = tag.and_then(|t| counts.get_mut(t)) {
                *n += u64::from(self.in_use(slot));
            }
        }
    }

    /// Whether the kernel may still read `slot`'s buffer: a request on it, or a stream's
    /// lane request that marked it, awaits a completion (a lane request that owns its slots
    /// as a whole marks them in [`SendRing::mark_lane_slots`]).
    pub(super) fn in_use(&self, slot: u32) -> bool {
        let s = self.slots.get(slot as usize).and_then(|s| s.as_ref());
        s.is_some_and(|s| s.pending > 0) || self.in_lane.get(slot as usize) == Some(&true)
    }

    /// Accept and receive requests armed (multishot requests stay armed until their last CQE).
    pub(crate) fn aux_pending(&self) -> usize {
        self.aux_pending
    }

    /// Completions the kernel had to hold back because the CQ was full, so far.
    pub(crate) fn cq_overflow(&self) -> u32 {
        self.cq_overflow
    }
}

/// Whether `range` is a range of `buf`'s bytes.
pub(super) fn within(range: &std::ops::Range<usize>, buf: &Buf) -> bool {
    range.start <= range.end && range.end <= buf.len()
}

/// Counts one more (`up`) or one fewer request outstanding for `tag`.
#[inline]
pub(super) fn bump(counts: &mut Vec<u32>, tag: u32, up: bool) {
    match counts.get_mut(tag as usize) {
        Some(c) if up => *c += 1,
        Some(c) => *c = c.saturating_sub(1),
        None if up => first_of(counts, tag),
        None => {}
    }
}

/// The first request of a tag past the counts' end.
#[cold]
fn first_of(counts: &mut Vec<u32>, tag: u32) {
    counts.resize(tag as usize + 1, 0);
    counts[tag as usize] = 1;
}
