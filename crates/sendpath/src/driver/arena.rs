//! Sending in place: one arena of memory the driver registers with the ring once, cut into
//! slots that connections write their messages into and send by index. A slot goes back to
//! the arena only after the kernel's last completion for it, as any buffer does.

use super::{Conn, UringDriver};
use crate::send::SendOp;
use crate::sys::mem::ArenaMem;
use crate::sys::uring::SendRing;
use crate::{Buf, ConnId, Error, Result};
use std::os::fd::AsFd;
use std::sync::Arc;

/// A driver's arena ([`Options::uring_arena`](crate::Options::uring_arena)): `slots` slots of
/// `slot_size` bytes (rounded up to whole pages), in one mapping the driver registers with its
/// ring, so SEND and SEND_ZC name their bytes by index and the kernel pins nothing per send.
/// New buffers ([`UringDriver::reserve`], [`UringDriver::take_buf`], a `uring` path's
/// [`SendPath::take_buf`](crate::SendPath::take_buf)) come from it while a slot is free and
/// the message fits one; the others come from the heap, counted in
/// [`ArenaCounts`](crate::ArenaCounts).
///
/// The default, 64 slots of 64 KiB, is 4 MiB: within the 8 MiB a normal user may lock
/// (`ulimit -l`). Past that limit the driver registers as much as the kernel allows, halving
/// down to one slot, sends from the rest by address, and says so in [`UringDriver::note`].
///
/// With SEND_ZC a slot comes back only with the send's notification, which the kernel posts
/// once it is done with the pages (on TCP, once the bytes are acknowledged; on loopback, once
/// the receiver has read them). So a zero-copy connection may hold as many slots as its send
/// buffer holds bytes: several MiB on a fast route. An arena smaller than that, times the
/// connections, runs dry, and the messages past it come from the heap, pinned per send,
/// counted in [`ArenaCounts::heap`](crate::ArenaCounts::heap).
///
/// ```
/// use sendpath::{ArenaConfig, Options};
/// let opts = Options { uring_arena: Some(ArenaConfig { slot_size: 4096, slots: 1024 }), ..Options::default() };
/// # let _ = opts;
/// ```
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ArenaConfig {
    /// Bytes per slot: the largest message sent in place.
    pub slot_size: usize,
    /// Number of slots, shared by every connection of the driver.
    pub slots: usize,
}

impl Default for ArenaConfig {
    fn default() -> Self {
        ArenaConfig {
            slot_size: 64 << 10,
            slots: 64,
        }
    }
}

/// Maps the arena and registers it as the ring's buffer 0 (the ring's table must be new).
/// Returns it, with a note when the kernel registered less than all of it.
pub(super) fn set_up(
    ring: &mut SendRing,
    cfg: ArenaConfig,
) -> Result<(Arc<ArenaMem>, Option<String>)> {
    let bytes = cfg.slot_size.checked_mul(cfg.slots);
    if cfg.slot_size == 0 || cfg.slots == 0 || bytes.is_none_or(|b| b > 1 << 30) {
        return Err(Error::Config(format!(
            "an arena of {} slots of {} bytes: give at least one slot of at least one byte, and at most 1 GiB in all (ArenaConfig)",
            cfg.slots, cfg.slot_size
        )));
    }
    let mem = ArenaMem::new(cfg.slot_size, cfg.slots, crate::buffer::FILL)
        .map_err(Error::sys("mmap (the arena)"))?;
    let (base, len) = mem.region();
    let (done, refused) = ring.register_arena(base, len, mem.slot_size());
    ring.set_vectored_fixed(kernel_at_least(6, 15));
    let note = refused.map(|e| {
        let mib = |n: usize| n as f64 / f64::from(1 << 20);
        format!(
            "the kernel registered {:.1} of the arena's {:.1} MiB ({e}; `ulimit -l` caps what a normal user may register): sends from the rest go by address, and the kernel pins their pages per send",
            mib(done),
            mib(len)
        )
    });
    Ok((Arc::new(mem), note))
}

/// Whether the running kernel's release is at least `major.minor`.
fn kernel_at_least(major: u32, minor: u32) -> bool {
    let uname = rustix::system::uname();
    let release = uname.release().to_string_lossy();
    let mut nums = release
        .split(|c: char| !c.is_ascii_digit())
        .map(|n| n.parse::<u32>().unwrap_or(0));
    (nums.next().unwrap_or(0), nums.next().unwrap_or(0)) >= (major, minor)
}

/// A message being written in place: `len` bytes of a slot of the driver's arena (or of a
/// heap buffer, when no slot is free or the message is larger than one), which
/// [`Reserved::commit`] queues on its connection. Dropped without committing, the slot goes
/// back. The connection's driver is borrowed until then.
///
/// ```no_run
/// # fn f(ring: &mut sendpath::UringDriver, id: sendpath::ConnId) -> sendpath::Result<()> {
/// let mut msg = ring.reserve(id, 4096)?;
/// msg.fill(b'x'); // written where the kernel will read it
/// msg.commit()?; // queued by index; submitted by the next run()
/// # Ok(()) }
/// ```
pub struct Reserved<'a> {
    driver: &'a mut UringDriver,
    id: ConnId,
    at: Place,
}

/// Where a reserved message is written.
enum Place {
    /// A slot of the arena the ring keeps (its ring slot): nothing moves when it is queued.
    Slot(u32),
    /// A heap buffer, queued as any buffer is.
    Buf(Buf),
    /// Committed, or given back.
    Gone,
}

impl std::fmt::Debug for Reserved<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Reserved")
            .field("conn", &self.id)
            .field("len", &self.len())
            .field("in_place", &matches!(self.at, Place::Slot(_)))
            .finish()
    }
}

impl Reserved<'_> {
    /// Shortens the message to `len` bytes (a longer `len` changes nothing).
    pub fn truncate(&mut self, len: usize) {
        match &mut self.at {
            Place::Slot(slot) => self.driver.ring.truncate_unsent(*slot, len),
            Place::Buf(b) if len < b.len() => b.resize(len),
            _ => {}
        }
    }

    /// Queues the message on its connection as one whole message, to be submitted by the
    /// next [`UringDriver::run`]. On an error (the connection failed or closed meanwhile)
    /// the slot goes back and nothing is sent.
    pub fn commit(mut self) -> Result<()> {
        match std::mem::replace(&mut self.at, Place::Gone) {
            Place::Slot(slot) => {
                let len = self.len_of(slot);
                self.driver.push_held(self.id, slot, len).inspect_err(|_| {
                    self.driver.ring.unhold(slot);
                })
            }
            Place::Buf(buf) => self.driver.push(self.id, buf, true).map_err(|(e, buf)| {
                self.driver.put_back(self.id, buf);
                e
            }),
            Place::Gone => Ok(()),
        }
    }

    fn len_of(&self, slot: u32) -> usize {
        self.driver.ring.unsent_bytes(slot).map_or(0, <[u8]>::len)
    }
}

impl std::ops::Deref for Reserved<'_> {
    type Target = [u8];
    fn deref(&self) -> &[u8] {
        match &self.at {
            Place::Slot(slot) => self.driver.ring.unsent_bytes(*slot).unwrap_or(&[]),
            Place::Buf(b) => b.as_slice(),
            Place::Gone => &[],
        }
    }
}

impl std::ops::DerefMut for Reserved<'_> {
    fn deref_mut(&mut self) -> &mut [u8] {
        match &mut self.at {
            Place::Slot(slot) => self.driver.ring.unsent_bytes_mut(*slot).unwrap_or(&mut []),
            Place::Buf(b) => b.as_mut_slice(),
            Place::Gone => &mut [],
        }
    }
}

impl Drop for Reserved<'_> {
    fn drop(&mut self) {
        match std::mem::replace(&mut self.at, Place::Gone) {
            // Never read by a request: the ring has it back at once.
            Place::Slot(slot) => drop(self.driver.ring.unhold(slot)),
            Place::Buf(buf) => self.driver.put_back(self.id, buf),
            Place::Gone => {}
        }
    }
}

impl UringDriver {
    /// `len` bytes to write a message into, in place: a slot of the arena when the driver has
    /// one ([`ArenaConfig`]) and the message fits, so the kernel reads the bytes where they
    /// were written and by index, and nothing moves between writing and sending.
    /// [`Reserved::commit`] queues it; a slot comes back only after the kernel's last
    /// completion for it. `WouldBlock` when the connection's queue is full (run, then reserve
    /// again), the connection's error when it failed, [`Error::UnknownConn`] for an id that
    /// names no open connection.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, id: sendpath::ConnId) -> sendpath::Result<()> {
    /// while ring.room(id) == 0 {
    ///     ring.run(true)?; // the queue is full: let the kernel take some
    /// }
    /// let mut msg = ring.reserve(id, 1400)?;
    /// msg[..5].copy_from_slice(b"hello");
    /// msg.truncate(5);
    /// msg.commit()?;
    /// # Ok(()) }
    /// ```
    pub fn reserve(&mut self, id: ConnId, len: usize) -> Result<Reserved<'_>> {
        self.open_conn_mut(id)?;
        self.conn_error(id)?;
        if self.room(id) == 0 {
            return Err(Error::sys("io_uring SEND (queue full)")(
                std::io::ErrorKind::WouldBlock.into(),
            ));
        }
        let at = self.place_for(id, len)?;
        if let Place::Slot(_) = at {
            self.conn_mut(id)?.state.count_in_place(1, false);
        }
        Ok(Reserved {
            driver: self,
            id,
            at,
        })
    }

    /// Where a message of `len` bytes for `id` (open, with room) is written: a slot of the
    /// arena held in the ring (not yet counted), else a buffer from its pool.
    fn place_for(&mut self, id: ConnId, len: usize) -> Result<Place> {
        Ok(match self.reserve_slot(id, len) {
            Some(slot) => Place::Slot(slot),
            None => Place::Buf(self.take_buf(id, len)?),
        })
    }

    /// Writes `n` messages of `len` bytes on `id`, each by `fill(i, bytes)` where
    /// [`UringDriver::reserve`] puts it, and queues each as [`Reserved::commit`] does,
    /// submitting each full batch at once and waiting for room while the queue is full
    /// ([`SendPath::send_in_place`](crate::SendPath::send_in_place)).
    pub(crate) fn send_in_place(
        &mut self,
        id: ConnId,
        n: usize,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        let (mut i, mut pushed, mut entered) = (0, 0, false);
        while i < n {
            let (went, requests, room) = self.send_lane_run(id, len, i..n, fill)?;
            if went > 0 {
                (i, pushed) = (i + went, pushed + requests);
                // A full batch in the kernel: submitted, and waited for in the same call.
                entered = room == Some(0);
                if entered {
                    self.enter_and_route(std::mem::take(&mut pushed), id)?;
                }
                continue;
            }
            if std::mem::take(&mut entered) && room == Some(0) {
                // The batch is not through yet: the lane goes on once it is.
                self.run_until(id, |d| d.lane_room(id) > 0 || !d.lane_clear(id))?;
                continue;
            }
            if self.room(id) == 0 {
                self.submit_ready(id)?;
                if self.room(id) == 0 {
                    self.run_until(id, |d| d.room(id) > 0)?;
                }
            }
            // The checks `reserve` makes, once for as many messages as there is room for.
            self.open_conn_mut(id)?;
            self.conn_error(id)?;
            let end = n.min(i + self.room(id));
            while i < end {
                // The hot path: written in parked slots and queued by index, a run at a time;
                // when none is left, the arena parks more.
                i += self.fill_parked_run(id, len, i..end, fill);
                if i == end || self.park_fresh(id, len, end - i) > 0 {
                    continue;
                }
                // No slot: a heap buffer, as `reserve` would give.
                let at = Place::Buf(self.take_buf(id, len)?);
                let mut msg = Reserved {
                    driver: self,
                    id,
                    at,
                };
                fill(i, &mut msg);
                msg.commit()?;
                i += 1;
            }
        }
        self.submit_ready(id)?;
        self.conn_error(id)
    }

    /// The lanes of [`UringDriver::send_in_place`]: with room in the kernel and nothing
    /// queued or to resend, as many of messages `at` as there is room for are written in
    /// parked slots and pushed at once, on a datagram socket each one request
    /// ([`SendRing::push_lane`](crate::sys::uring::SendRing::push_lane)), on a stream socket
    /// a full batch one vectored request ([`UringDriver::stream_lane_run`]), submitted with
    /// the next wait. Returns how many messages went and in how many requests (0 when the
    /// lane does not apply or no slot is free: the caller queues them), and the lane's room
    /// after them ([`ConnState::lane_space`](crate::send::ConnState::lane_space): `None`
    /// when the lane does not apply).
    fn send_lane_run(
        &mut self,
        id: ConnId,
        len: usize,
        at: std::ops::Range<usize>,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<(usize, usize, Option<usize>)> {
        let st = &mut self.open_conn_mut(id)?.state;
        let space = st.lane_space();
        let room = space.unwrap_or(0);
        let at = at.start..at.end.min(at.start + room);
        // A stream's messages go by the lane a full request at a time (`depth` of them, as
        // the queue's way batches them); fewer wait in the queue for the next.
        if at.is_empty() || (!st.datagrams() && at.len() < room) {
            return Ok((0, 0, space));
        }
        if !st.datagrams() {
            // In one request, by one operation: decided before any is written.
            let Some(op) = self.stream_lane_op(id, at.len(), len) else {
                return Ok((0, 0, space));
            };
            let (n, room) = self.stream_lane_run(id, len, at, fill, op);
            return Ok((n, usize::from(n > 0), room));
        }
        let mut written = std::mem::take(&mut self.written);
        self.ring
            .fill_lane_slots(len, at.clone(), fill, &mut written);
        if written.is_empty() && self.park_fresh(id, len, at.len()) > 0 {
            self.ring.fill_lane_slots(len, at, fill, &mut written);
        }
        // None written: no slot free (or a message larger than one); the caller queues them.
        let went = match written.is_empty() {
            true => 0,
            false => self.datagram_lane_run(id, &written, len),
        };
        written.clear();
        self.written = written;
        Ok((went, went, self.lane_space(id)))
    }

    /// The datagram lane: messages `written` in lane slots for `id` (`len` bytes each,
    /// [`SendRing::fill_lane_slots`](crate::sys::uring::SendRing::fill_lane_slots)) pushed one
    /// request each, a run at a time where a decision stands. When the ring refuses one, the
    /// connection fails (as for a chain) and the rest go back. Returns how many went.
    fn datagram_lane_run(&mut self, id: ConnId, written: &[u32], len: usize) -> usize {
        let Conn { sock, state, .. } = self.conns[id.index()].as_mut().expect("open");
        let before = state.zc_inflight();
        state.share_ring_cap(self.cfg.ring_zc_inflight, self.zc_inflight);
        let (mut pushed, mut again, fd) = (0, None, sock.as_fd());
        while pushed < written.len() {
            let went = match again.take() {
                // The run's decision stands: as many as it allows, with one look at the
                // submission queue (the rest, one at a time).
                Some(op) => {
                    let n = state.lane_take(op, written.len() - pushed);
                    let run = &written[pushed..pushed + n];
                    let went = self.ring.push_lane_run(fd, id.idx, run, len, op);
                    went.map(|(k, registered)| {
                        state.lane_pushed_run(k, len, op, registered);
                        k
                    })
                }
                None => {
                    let (op, _) = state.lane_op(len);
                    let went = self
                        .ring
                        .push_lane_taken(fd, id.idx, written[pushed], len, op);
                    went.map(|registered| {
                        again = state.lane_pushed(1, len, op, registered);
                        1
                    })
                }
            };
            let Ok(n) = went else {
                // The ring refused the SQE: as for a chain, the connection fails.
                state.fail(libc::EBUSY);
                break;
            };
            pushed += n;
        }
        self.zc_inflight = (self.zc_inflight + state.zc_inflight()).saturating_sub(before);
        self.ring.drop_lane_slots(&written[pushed..]);
        pushed
    }

    /// The operation of `id`'s next stream lane request of up to `n` messages of `len` bytes
    /// ([`ConnState::stream_lane_op`](crate::send::ConnState::stream_lane_op)), within the
    /// ring's zero-copy budget.
    fn stream_lane_op(&mut self, id: ConnId, n: usize, len: usize) -> Option<SendOp> {
        let state = &mut self.conns[id.index()].as_mut()?.state;
        state.share_ring_cap(self.cfg.ring_zc_inflight, self.zc_inflight);
        state.stream_lane_op(n, len)
    }

    /// The stream lane: messages `at` (indexes for `fill`, `len` bytes each) written in
    /// parked slots straight into one vectored request of `id` by `op`
    /// ([`SendRing::fill_lane_group`](crate::sys::uring::SendRing::fill_lane_group)). When
    /// the ring refuses it, the connection fails (as for a chain) and the slots go back.
    /// Returns how many went (0 when no slot is free: the caller queues them), and the lane's
    /// room after them.
    fn stream_lane_run(
        &mut self,
        id: ConnId,
        len: usize,
        at: std::ops::Range<usize>,
        fill: &mut dyn FnMut(usize, &mut [u8]),
        op: SendOp,
    ) -> (usize, Option<usize>) {
        let mut filled = self.ring.fill_lane_group(len, at.clone(), fill);
        if filled.is_none() && self.park_fresh(id, len, at.len()) > 0 {
            filled = self.ring.fill_lane_group(len, at, fill);
        }
        let Some((g, n)) = filled else {
            return (0, self.lane_space(id));
        };
        let Conn { sock, state, .. } = self.conns[id.index()].as_mut().expect("open");
        let before = state.zc_inflight();
        let went = match self.ring.push_lane_group(sock.as_fd(), id.idx, g, len, op) {
            Ok((_, registered)) => {
                let slots = self.ring.lane_group_slots(g);
                state.stream_lane_pushed(slots, len, op, registered);
                n
            }
            Err(_) => {
                state.fail(libc::EBUSY);
                0
            }
        };
        self.zc_inflight = (self.zc_inflight + state.zc_inflight()).saturating_sub(before);
        (went, state.lane_space())
    }

    /// [`ConnState::lane_room`](crate::send::ConnState::lane_room) of `id` (0 for no open
    /// connection).
    fn lane_room(&self, id: ConnId) -> usize {
        self.conn(id).map_or(0, |c| c.state.lane_room())
    }

    /// [`ConnState::lane_space`](crate::send::ConnState::lane_space) of `id` (`None` for no
    /// open connection).
    fn lane_space(&self, id: ConnId) -> Option<usize> {
        self.conn(id).ok()?.state.lane_space()
    }

    /// Whether the lane applies to `id` once the kernel has room.
    fn lane_clear(&self, id: ConnId) -> bool {
        self.conn(id)
            .is_ok_and(|c| !c.closing && c.state.lane_clear())
    }

    /// The hot path of [`UringDriver::send_in_place`]: its messages `at` (indexes for `fill`)
    /// written into parked slots and queued on `id` (open, with room for them all), in one
    /// pass over the slots and one push onto the queue. Returns how many (fewer when the
    /// parked slots run out).
    fn fill_parked_run(
        &mut self,
        id: ConnId,
        len: usize,
        at: std::ops::Range<usize>,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> usize {
        self.ring
            .fill_parked(id.idx, len, at, fill, &mut self.written);
        let st = &mut self.conns[id.index()]
            .as_mut()
            .expect("checked open by the caller")
            .state;
        let n = st.push_held_run(&self.written, len);
        // Not after the caller's check of the room; were it so, the rest go back.
        for &slot in &self.written[n..] {
            self.ring.unhold(slot);
        }
        if st.ready() {
            self.dirty.push(id.idx);
        }
        self.written.clear();
        n
    }

    /// A slot of the arena for `len` bytes, held in the ring for `id`: one the kernel has
    /// released, else one more from the arena; `None` without an arena, when it has no free
    /// slot, or when `len` is larger than a slot.
    fn reserve_slot(&mut self, id: ConnId, len: usize) -> Option<u32> {
        match self.ring.reserve_parked(id.idx, len) {
            None if self.park_fresh(id, len, 1) > 0 => self.ring.reserve_parked(id.idx, len),
            slot => slot,
        }
    }

    /// Parks up to `n` more slots of the arena in the ring, free for messages of `len` bytes
    /// for `id`; how many (0 without an arena, when it has no free slot, or when `len` is
    /// larger than a slot).
    fn park_fresh(&mut self, id: ConnId, len: usize, n: usize) -> usize {
        let Some(arena) = self.arena.as_ref().filter(|a| len <= a.slot_size()) else {
            return 0;
        };
        let mut parked = 0;
        while parked < n {
            let Some(slot) = arena.take() else { break };
            // Parked, then let go of at once: it waits in the ring for `reserve_parked`, which
            // cuts it to its message.
            let slot = self.ring.park(Buf::arena(slot), id.idx);
            self.ring.unhold(slot);
            parked += 1;
        }
        parked
    }

    /// Queues ring slot `slot` (held for `id`, written in place) as one whole message.
    fn push_held(&mut self, id: ConnId, slot: u32, len: usize) -> Result<()> {
        let st = &mut self.open_conn_mut(id)?.state;
        if st.push_held(slot, len).is_err() {
            self.conn_error(id)?;
            return Err(Error::sys("io_uring SEND (queue full)")(
                std::io::ErrorKind::WouldBlock.into(),
            ));
        }
        if st.ready() {
            self.dirty.push(id.idx);
        }
        Ok(())
    }

    /// A buffer taken for `id` and not sent goes back to its pool (a slot, to the arena).
    fn put_back(&mut self, id: ConnId, buf: Buf) {
        if let Ok(c) = self.conn_mut(id) {
            c.state.on_released(buf);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_empty_or_oversized_arena_is_refused_naming_the_setting() {
        for (slot_size, slots) in [(0, 8), (4096, 0), (1 << 20, 2048)] {
            let options = crate::Options {
                uring_arena: Some(ArenaConfig { slot_size, slots }),
                ..crate::Options::default()
            };
            let cfg = crate::DriverConfig {
                options,
                ..crate::DriverConfig::default()
            };
            match UringDriver::new(cfg) {
                Err(Error::Config(m)) => assert!(m.contains("ArenaConfig"), "{m}"),
                Err(e) => crate::test_support::skip(&format!("io_uring unavailable: {e}")),
                Ok(_) => panic!("{slot_size} x {slots} was taken"),
            }
        }
    }

    #[test]
    fn the_running_kernel_is_at_least_itself_and_not_past_far_future() {
        assert!(kernel_at_least(2, 6));
        assert!(!kernel_at_least(99, 0));
    }
}
