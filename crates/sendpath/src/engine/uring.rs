//! The io_uring driver: one ring serving many connections, each with its own
//! [`ConnState`]. The driver does the I/O (pushing SQEs, entering the kernel, reaping CQEs) and
//! routes each completion to its connection's state by the tag its buffer was pushed with.
//!
//! A connection's next chain goes in as soon as its previous chain's last result is reaped, in
//! the same pass, so the kernel always has work while the application fills buffers. One
//! `io_uring_enter` submits the chains of every connection that is ready.
//!
//! A server also accepts and receives on the same ring: [`UringDriver::listen`] (multishot
//! accept), [`UringDriver::add_receiving`] (multishot receive into the ring's provided
//! buffers), with what happened handed to the owner as [`Event`]s, and [`UringDriver::close`]
//! to end a connection, whose id ([`ConnId`], with a generation) is reused only after
//! [`Event::Closed`].

use super::state::{ConnState, Order, Payload, Pushed, StateConfig, Submit, ZcConfig};
use super::{Choice, Fixed};
use crate::policy::InflightLimits;
use crate::sys::uring::{
    AuxCqe, AuxOp, Cqe, OpSupport, RingSetup, SendRing, IORING_NOTIF_USAGE_ZC_COPIED,
};
use crate::{Buf, Error, Result, SendStats, Socket};
use std::os::fd::AsFd;
use std::time::{Duration, Instant};

/// A connection of a driver: its index (connections are numbered from 0 in the order they
/// were added, and the index of one that is gone is handed out again) and a generation, so an
/// id kept past [`Event::Closed`] never names the connection that reuses its index.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct ConnId {
    idx: u32,
    gen: u32,
}

impl ConnId {
    /// The index: small and dense, for tables kept by the owner.
    pub fn index(self) -> usize {
        self.idx as usize
    }
}

/// Settings of a driver.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DriverConfig {
    /// Connections the ring is sized for (more can be added; the queues then wrap sooner).
    pub connections: usize,
    /// Requests per chain per connection (`--uring-depth`).
    pub depth: usize,
    /// Cap on SEND_ZC requests awaiting notification, per connection.
    pub inflight: InflightLimits,
    /// Register zero-copy buffers with the ring (fixed buffers).
    pub fixed_buffers: bool,
    /// Cap on SEND_ZC requests awaiting notification over all connections of the ring (a
    /// server worker's cap); a zero-copy send past it goes by copy, counted as `inflight_cap`.
    pub ring_zc_inflight: Option<usize>,
    /// How a stream connection's queued sends keep their order; `None` for the fastest the
    /// kernel has (see [`UringDriver::order`]).
    pub order: Option<Order>,
}

impl Default for DriverConfig {
    fn default() -> Self {
        DriverConfig {
            connections: 1,
            depth: 8,
            inflight: InflightLimits::default(),
            fixed_buffers: false,
            ring_zc_inflight: None,
            order: None,
        }
    }
}

impl DriverConfig {
    /// The driver settings the send-path options ask for, for `connections` connections that
    /// send with `choice` (registered buffers only serve zero-copy sends).
    pub fn from_options(opts: &crate::Options, connections: usize, choice: Choice) -> DriverConfig {
        DriverConfig {
            connections,
            depth: opts.uring_depth,
            inflight: opts.inflight,
            fixed_buffers: opts.uring_fixed_buffers && choice == Choice::ZeroCopy,
            ring_zc_inflight: None,
            order: opts.uring_order,
        }
    }
}

/// Receive buffers for connections that receive on the ring ([`UringDriver::listen`],
/// [`UringDriver::add_receiving`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecvConfig {
    /// Provided buffers (a power of two, at most 32768).
    pub buffers: u16,
    /// Bytes per buffer: the most one receive completion carries.
    pub size: usize,
}

impl Default for RecvConfig {
    fn default() -> Self {
        RecvConfig {
            buffers: 1024,
            size: 4096,
        }
    }
}

/// Bytes a receive completion handed over, in one of the ring's provided buffers. Read them
/// with [`UringDriver::received`], then give the buffer back with [`UringDriver::recycle`]: the
/// kernel cannot receive into it until then.
#[derive(Debug, PartialEq, Eq)]
pub struct RecvBuf {
    id: u16,
    len: usize,
}

impl RecvBuf {
    /// Bytes received.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether nothing was received (never handed out: end of file is [`Event::RecvEnded`]).
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }
}

/// Something the ring did besides sending, for the owner's event loop.
#[derive(Debug)]
pub enum Event {
    /// The listener accepted a connection (not yet added).
    Accepted(Socket),
    /// An accept failed (`EMFILE`, say); the listener stays armed.
    AcceptFailed(std::io::Error),
    /// Bytes arrived on a connection.
    Received {
        /// The connection.
        conn: ConnId,
        /// The bytes.
        buf: RecvBuf,
    },
    /// A connection's receiving ended: `None` at end of file, else the error.
    RecvEnded {
        /// The connection.
        conn: ConnId,
        /// The error, when it was not end of file.
        error: Option<std::io::Error>,
    },
    /// A connection given to [`UringDriver::close`] is gone: its socket is closed, no
    /// completion names it any more, and its id may be handed out again.
    Closed(ConnId),
    /// A splice of [`UringDriver::splice`] completed: `into_pipe` for the file-to-pipe half,
    /// `res` bytes moved or `-errno` (`-ECANCELED` for the pipe-to-socket half when the first
    /// half moved fewer bytes than asked).
    Spliced {
        /// The connection.
        conn: ConnId,
        /// Which half.
        into_pipe: bool,
        /// Bytes moved, or `-errno`.
        res: i32,
    },
}

/// A pipe a connection splices a file through ([`UringDriver::splice`]).
#[derive(Debug)]
pub struct SplicePipe {
    /// The read end.
    pub read: std::os::fd::OwnedFd,
    /// The write end.
    pub write: std::os::fd::OwnedFd,
}

/// The tag of the listener's accepts (connections are numbered from 0).
const LISTENER: u32 = u32::MAX;

struct Conn {
    sock: Socket,
    state: ConnState,
    /// Given to [`UringDriver::close`]; gone once no completion can name it.
    closing: bool,
}

/// One ring, many connections. See the module docs.
pub struct UringDriver {
    ring: SendRing,
    cfg: DriverConfig,
    conns: Vec<Option<Conn>>,
    /// The generation of each index (bumped when the index is handed out again).
    gens: Vec<u32>,
    free_ids: Vec<u32>,
    closing: Vec<u32>,
    listener: Option<Socket>,
    events: Vec<Event>,
    aux: Vec<AuxCqe>,
    /// Receives to arm again (their provided buffers ran out), and whether accept must be.
    rearm: Vec<u32>,
    rearm_accept: bool,
    /// SEND_ZC requests awaiting notification over every connection.
    zc_inflight: usize,
    /// The counters of connections that are gone.
    closed_stats: SendStats,
    cqes: Vec<Cqe>,
    /// Buffers the ring released, with their connections' indexes (a list kept between
    /// passes).
    released: Vec<(u32, Buf)>,
    unheld: Vec<u32>,
    /// Connections with a chain that may be ready to go.
    dirty: Vec<u32>,
    /// Connections whose queue gained room since [`UringDriver::take_writable`] last ran.
    writable: Vec<ConnId>,
    ops: OpSupport,
    usage_reporting: bool,
    note: Option<String>,
    /// How timed waits batch completions ([`UringDriver::batch_waits`]).
    batch: Option<BatchWait>,
}

/// Completions handled between two waits from which the next wait may hold out for a batch:
/// a request answered at a time is two (its receive and its send).
const BATCH_FROM: usize = 4;

/// How [`UringDriver::run_for`] batches its waits ([`UringDriver::batch_waits`]). When the
/// loop handled `BATCH_FROM` or more completions since its last wait, completions come faster
/// than it wakes: the next wait asks for as many (at most `max`) and gives up on the rest once
/// `min_wait` has passed and at least one has come. Otherwise it wakes at the first. A loaded
/// loop thus sleeps and wakes less often per completion; a loop answering one request at a
/// time pays nothing, one in between up to `min_wait` per wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct BatchWait {
    max: usize,
    min_wait: Duration,
    /// Completions reaped since the last wait began.
    seen: usize,
}

impl BatchWait {
    /// Completions the next wait asks for (1: wake at the first).
    fn want(&self) -> usize {
        if self.seen < BATCH_FROM {
            1
        } else {
            self.seen.min(self.max).max(1)
        }
    }

    /// A wait begins: what it asks for and how long it may hold out for more than one (zero
    /// when it asks for one); counting starts again.
    fn start(&mut self) -> (usize, Duration) {
        let want = self.want();
        self.seen = 0;
        (
            want,
            if want > 1 {
                self.min_wait
            } else {
                Duration::ZERO
            },
        )
    }
}

impl std::fmt::Debug for UringDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringDriver")
            .field("connections", &self.conns.len())
            .field("setup", &self.ring.setup())
            .finish()
    }
}

impl UringDriver {
    /// A ring for `cfg.connections` connections. Probes which send operations the kernel has.
    pub fn new(cfg: DriverConfig) -> Result<UringDriver> {
        let depth = cfg.depth.max(1);
        let conns = cfg.connections.max(1);
        let sq = (depth * conns).clamp(8, 4096);
        let cq = (depth + cfg.inflight.max_sends) * conns * 2;
        let mut ring = SendRing::new(sq as u32, cq.clamp(16, 1 << 16) as u32)
            .map_err(Error::sys("io_uring_setup"))?;
        let ops = ring
            .probe()
            .map_err(Error::sys("io_uring_register(PROBE)"))?;
        let usage_reporting = ops.send_zc && crate::probe::send_zc_report_usage_supported();
        let mut note = None;
        if cfg.order == Some(Order::Vectored)
            && order_for(cfg.order, ops, cfg.fixed_buffers) != Order::Vectored
        {
            note = Some(
                "vectored sends need SENDMSG and SENDMSG_ZC and no registered buffers: sending linked chains".into(),
            );
        }
        if cfg.fixed_buffers {
            let table = ((cfg.inflight.max_sends + 2 * depth) * conns).min(1 << 14) as u32;
            if let Err(e) = ring.enable_fixed_buffers(table) {
                note = Some(format!(
                    "registering fixed buffers failed ({e}): sending from unregistered buffers"
                ));
            }
        }
        Ok(UringDriver {
            ring,
            cfg: DriverConfig { depth, ..cfg },
            conns: Vec::new(),
            gens: Vec::new(),
            free_ids: Vec::new(),
            closing: Vec::new(),
            listener: None,
            events: Vec::new(),
            aux: Vec::new(),
            rearm: Vec::new(),
            rearm_accept: false,
            zc_inflight: 0,
            closed_stats: SendStats::default(),
            cqes: Vec::new(),
            released: Vec::new(),
            unheld: Vec::new(),
            dirty: Vec::new(),
            writable: Vec::new(),
            ops,
            usage_reporting,
            note,
            batch: None,
        })
    }

    /// Which send operations the kernel has.
    pub fn ops(&self) -> OpSupport {
        self.ops
    }

    /// How the ring was set up (SINGLE_ISSUER and DEFER_TASKRUN where the kernel has them).
    pub fn setup(&self) -> RingSetup {
        self.ring.setup()
    }

    /// Why the driver runs other than asked (fixed buffers refused), if it does.
    pub fn note(&self) -> Option<String> {
        match (self.ring.fixed_error(), &self.note) {
            (Some(e), None) => Some(format!(
                "the kernel refused to register a buffer ({e}): the rest are sent unregistered"
            )),
            (_, n) => n.clone(),
        }
    }

    /// The state settings for a connection sending by copy (`Choice::Copy`) or zero-copy,
    /// with usage reporting when `report_usage` and the kernel has it.
    pub fn state_config(&self, report_usage: bool) -> StateConfig {
        StateConfig {
            depth: self.cfg.depth,
            zc: self.ops.send_zc.then_some(ZcConfig {
                limits: self.cfg.inflight,
                report_usage: report_usage && self.usage_reporting,
            }),
            order: self.order(),
        }
    }

    /// How a stream connection's sends keep their order: as [`DriverConfig::order`] asks, or
    /// by default vectored (`SENDMSG` and `SENDMSG_ZC` over a chain's buffers, measured
    /// fastest here: docs/results.md). Linked where the kernel lacks either opcode, and with
    /// registered buffers (the driver sends from those with SEND_ZC, one buffer a request).
    pub fn order(&self) -> Order {
        order_for(self.cfg.order, self.ops, self.cfg.fixed_buffers)
    }

    /// Adds a connection with a fixed choice of operation. The socket is put in blocking mode
    /// (io_uring waits for socket space itself).
    pub fn add(
        &mut self,
        sock: impl Into<Socket>,
        choice: Choice,
        report_usage: bool,
    ) -> Result<ConnId> {
        let state = ConnState::new(self.state_config(report_usage), Box::new(Fixed(choice)));
        self.add_with(sock, state)
    }

    /// Adds a connection with a state of the caller's making (its own chooser). Ids of
    /// connections that are gone ([`Event::Closed`]) are handed out again.
    pub fn add_with(&mut self, sock: impl Into<Socket>, mut state: ConnState) -> Result<ConnId> {
        let sock: Socket = sock.into();
        sock.set_blocking()
            .map_err(Error::sys("fcntl(O_NONBLOCK)"))?;
        if crate::sys::socket::is_datagram(sock.as_fd()) {
            state.set_datagrams();
        }
        let conn = Conn {
            sock,
            state,
            closing: false,
        };
        let id = match self.free_ids.pop() {
            Some(id) => {
                self.conns[id as usize] = Some(conn);
                self.gens[id as usize] = self.gens[id as usize].wrapping_add(1);
                id
            }
            None => {
                let id = u32::try_from(self.conns.len())
                    .ok()
                    .filter(|&id| id != LISTENER)
                    .ok_or_else(|| {
                        Error::Config("more than 2^32 - 1 connections on one ring".into())
                    })?;
                self.conns.push(Some(conn));
                self.gens.push(0);
                id
            }
        };
        self.writable.push(self.id_of(id));
        Ok(self.id_of(id))
    }

    /// The current id of index `idx`.
    fn id_of(&self, idx: u32) -> ConnId {
        ConnId {
            idx,
            gen: self.gens.get(idx as usize).copied().unwrap_or(0),
        }
    }

    /// The id of the connection at index `i`, if one is there (for a loop over a table kept by
    /// index).
    pub fn conn_at(&self, i: usize) -> Option<ConnId> {
        let idx = u32::try_from(i).ok()?;
        self.conns.get(i)?.as_ref()?;
        Some(self.id_of(idx))
    }

    /// Whether `id` names the connection now at its index.
    fn current(&self, id: ConnId) -> bool {
        self.gens.get(id.index()) == Some(&id.gen)
    }

    /// Adds a connection that also receives on the ring: a multishot receive into the ring's
    /// provided buffers (see [`UringDriver::provide_recv_buffers`]) reports what arrives as
    /// [`Event::Received`].
    pub fn add_receiving(&mut self, sock: impl Into<Socket>, state: ConnState) -> Result<ConnId> {
        let id = self.add_with(sock, state)?;
        let c = self.conns[id.index()].as_ref().expect("just added");
        if let Err(e) = self.ring.push_recv_multi(c.sock.as_fd(), id.idx) {
            self.close(id);
            return Err(Error::sys("io_uring RECV (multishot)")(e));
        }
        Ok(id)
    }

    /// Registers `cfg.buffers` provided buffers of `cfg.size` bytes with the ring, for
    /// connections that receive on it. Once per driver.
    pub fn provide_recv_buffers(&mut self, cfg: RecvConfig) -> Result<()> {
        self.ring
            .provide_recv_buffers(cfg.buffers, cfg.size)
            .map_err(Error::sys("io_uring_register(PBUF_RING)"))
    }

    /// Accepts connections from `listener` on the ring (multishot accept): each comes back as
    /// [`Event::Accepted`]. The driver keeps the listener open while it runs.
    pub fn listen(&mut self, listener: impl Into<Socket>) -> Result<()> {
        let l: Socket = listener.into();
        self.ring
            .push_accept_multi(l.as_fd(), LISTENER)
            .map_err(Error::sys("io_uring ACCEPT (multishot)"))?;
        self.listener = Some(l);
        Ok(())
    }

    /// The bytes a receive handed over.
    pub fn received(&self, buf: &RecvBuf) -> &[u8] {
        self.ring.recv_bytes(buf.id, buf.len).unwrap_or(&[])
    }

    /// Gives a receive buffer back to the kernel.
    pub fn recycle(&mut self, buf: RecvBuf) {
        self.ring.recycle(buf.id);
    }

    /// Sends `len` bytes of `file` from `offset` to `id`'s socket through `pipe`, which must be
    /// empty but for `in_pipe` bytes already written to it: one linked pair of
    /// `IORING_OP_SPLICE` (file to pipe, then `in_pipe + len` bytes pipe to socket), or with
    /// `len` 0 only the second. Nothing else may be sent on `id` until both
    /// [`Event::Spliced`] are in; the caller keeps `file` and `pipe` open until then (a closed
    /// connection's events come before its [`Event::Closed`]).
    pub fn splice(
        &mut self,
        id: ConnId,
        file: std::os::fd::BorrowedFd<'_>,
        offset: u64,
        len: u32,
        pipe: &SplicePipe,
        in_pipe: u32,
    ) -> Result<()> {
        if !self.is_open(id) {
            return Err(Error::Config(
                "splice on a connection that is closing".into(),
            ));
        }
        let c = self.conns[id.index()].as_ref().expect("open");
        self.ring
            .push_splice(
                file,
                offset,
                len,
                pipe.write.as_fd(),
                pipe.read.as_fd(),
                c.sock.as_fd(),
                in_pipe + len,
                id.idx,
            )
            .map_err(Error::sys("io_uring SPLICE"))
    }

    /// Moves the events since the last call into `out`.
    pub fn take_events(&mut self, out: &mut Vec<Event>) {
        out.append(&mut self.events);
    }

    /// Ends a connection: shuts its socket down and cancels what it has in the kernel. Its id
    /// stays taken until no completion can name it; then the socket is closed and
    /// [`Event::Closed`] says so. What it had queued is dropped; its counters join
    /// [`UringDriver::total_stats`].
    pub fn close(&mut self, id: ConnId) {
        if !self.current(id) {
            return;
        }
        let Some(c) = self.conns.get_mut(id.index()).and_then(|c| c.as_mut()) else {
            return;
        };
        if c.closing {
            return;
        }
        c.closing = true;
        let _ = c.sock.shutdown(std::net::Shutdown::Both);
        if self.ring.in_kernel_for(id.idx) > 0 {
            // A SEND waiting for room, or an armed receive, ends with -ECANCELED.
            let _ = self.ring.push_cancel_fd(c.sock.as_fd(), id.idx);
        }
        c.state.fail(libc::ECONNABORTED);
        self.closing.push(id.idx);
    }

    /// Whether `id` is a connection of this driver that is not closing.
    pub fn is_open(&self, id: ConnId) -> bool {
        self.current(id)
            && self
                .conns
                .get(id.index())
                .and_then(|c| c.as_ref())
                .is_some_and(|c| !c.closing)
    }

    /// Connections open now (added and not yet gone).
    pub fn open_connections(&self) -> usize {
        self.conns.len() - self.free_ids.len()
    }

    /// The counters of every connection, those gone included.
    pub fn total_stats(&self) -> SendStats {
        let mut t = self.closed_stats.clone();
        for c in self.conns.iter().flatten() {
            t.merge(c.state.stats());
        }
        t
    }

    /// Completions the kernel held back because the CQ was full, so far.
    pub fn cq_overflows(&self) -> u64 {
        u64::from(self.ring.cq_overflow())
    }

    fn conn(&self, id: ConnId) -> &Conn {
        assert!(self.current(id), "a ConnId of a connection that is gone");
        self.conns[id.index()]
            .as_ref()
            .expect("a ConnId of a connection that is gone")
    }

    fn conn_mut(&mut self, id: ConnId) -> &mut Conn {
        assert!(self.current(id), "a ConnId of a connection that is gone");
        self.conns[id.index()]
            .as_mut()
            .expect("a ConnId of a connection that is gone")
    }

    /// Connections added and not gone (ids may have gaps after closes).
    pub fn len(&self) -> usize {
        self.open_connections()
    }

    /// Whether no connection is open.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The socket of `id`. Panics for a connection that is gone.
    pub fn socket(&self, id: ConnId) -> &Socket {
        &self.conn(id).sock
    }

    /// The state of `id`. Panics for a connection that is gone.
    pub fn state(&self, id: ConnId) -> &ConnState {
        &self.conn(id).state
    }

    /// The counters of `id`. Panics for a connection that is gone.
    pub fn stats(&self, id: ConnId) -> &SendStats {
        self.conn(id).state.stats()
    }

    /// A buffer of `len` bytes for `id` to fill: one the kernel has released, or a new one.
    pub fn take_buf(&mut self, id: ConnId, len: usize) -> Buf {
        self.conn_mut(id).state.take_buf(len)
    }

    /// Registers `buf` with the ring (fixed buffers on, and room in the table), so zero-copy
    /// sends of it, and of every [`Buf::share`] of it made afterwards, use the registration.
    pub fn register(&mut self, buf: &mut Buf) -> bool {
        self.ring.register(buf)
    }

    /// How many buffers `id` takes now.
    pub fn room(&self, id: ConnId) -> usize {
        self.conn(id).state.room()
    }

    /// Queues `buf` on `id`, after everything queued before it. A full queue becomes a chain
    /// when the connection has none in flight (pushed and submitted by the next
    /// [`UringDriver::run`]); a partial one waits for more, or for [`UringDriver::flush`].
    /// Gives the buffer back when the queue is full.
    pub fn push(&mut self, id: ConnId, buf: Buf, end_of_message: bool) -> Result<(), Buf> {
        let st = &mut self.conn_mut(id).state;
        st.push(buf, end_of_message)?;
        if st.ready() {
            self.dirty.push(id.idx);
        }
        Ok(())
    }

    /// Lets what is queued on `id` go without waiting for a full batch; submitted by the next
    /// [`UringDriver::run`].
    pub fn request_flush(&mut self, id: ConnId) {
        let st = &mut self.conn_mut(id).state;
        st.request_flush();
        if st.ready() {
            self.dirty.push(id.idx);
        }
    }

    /// Pushes the next chain of every connection that has one ready; returns how many requests
    /// were pushed.
    fn start_chains(&mut self) -> usize {
        let mut total = 0;
        let mut dirty = std::mem::take(&mut self.dirty);
        dirty.sort_unstable();
        dirty.dedup();
        for id in dirty.drain(..) {
            let Some(Conn { sock, state, .. }) = self.conns[id as usize].as_mut() else {
                continue;
            };
            let ring = &mut self.ring;
            let fd = sock.as_fd();
            let before = state.zc_inflight();
            if let Some(cap) = self.cfg.ring_zc_inflight {
                state.set_zc_budget(cap.saturating_sub(self.zc_inflight));
            }
            let pushed = state.submit_chain(|s| push_request(ring, fd, s, id));
            self.zc_inflight = (self.zc_inflight + state.zc_inflight()).saturating_sub(before);
            total += pushed.as_ref().map_or(0, |n| *n);
            if pushed.is_err() {
                // The ring refused the SQE (it is full of work that cannot be submitted):
                // nothing more can go on this connection.
                state.fail(libc::EBUSY);
            }
            // Room was made, or the connection failed: either way its owner should look.
            if pushed.is_ok_and(|n| n > 0) || state.error().is_some() {
                let c = ConnId {
                    idx: id,
                    gen: self.gens[id as usize],
                };
                // One entry per burst: an owner that never takes them (one connection
                // driven by wait_room and flush) must not grow the list per chain.
                if self.writable.last() != Some(&c) {
                    self.writable.push(c);
                }
            }
        }
        self.dirty = dirty;
        total
    }

    /// Routes the reaped completions to their connections.
    fn dispatch(&mut self) {
        self.ring.take_released(&mut self.released);
        for (tag, b) in self.released.drain(..) {
            if let Some(c) = self.conns.get_mut(tag as usize).and_then(|c| c.as_mut()) {
                c.state.on_released(b);
            }
        }
        self.dispatch_aux();
        for c in self.cqes.drain(..) {
            let Some(conn) = self.conns.get_mut(c.tag as usize).and_then(|c| c.as_mut()) else {
                continue;
            };
            let st = &mut conn.state;
            let before = st.zc_inflight();
            if c.notif {
                let copied = (c.res as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0;
                st.on_notification(c.req, copied, c.age_ns);
            } else {
                let (was, failed) = (st.chain_in_flight(), st.error().is_some());
                st.on_result(c.req, c.res, c.more, c.age_ns);
                if was && st.ready() {
                    self.dirty.push(c.tag);
                }
                if !failed && st.error().is_some() {
                    // Its owner should look: the connection is over.
                    self.writable.push(ConnId {
                        idx: c.tag,
                        gen: self.gens[c.tag as usize],
                    });
                }
            }
            st.drain_unheld(&mut self.unheld);
            for slot in self.unheld.drain(..) {
                if let Some(b) = self.ring.unhold(slot) {
                    st.on_released(b);
                }
            }
            self.zc_inflight = (self.zc_inflight + st.zc_inflight()).saturating_sub(before);
        }
        self.sweep_closed();
    }

    /// Turns accept and receive completions into events.
    fn dispatch_aux(&mut self) {
        let mut aux = std::mem::take(&mut self.aux);
        self.ring.take_aux(&mut aux);
        for a in aux.drain(..) {
            match a.op {
                AuxOp::Accept => {
                    if let Some(fd) = a.fd {
                        self.events.push(Event::Accepted(Socket::from(fd)));
                    } else if a.res < 0 {
                        self.events
                            .push(Event::AcceptFailed(std::io::Error::from_raw_os_error(
                                -a.res,
                            )));
                    }
                    if !a.more && self.listener.is_some() {
                        self.rearm_accept = true;
                    }
                }
                AuxOp::Recv => {
                    let id = self.id_of(a.tag);
                    let open = self.is_open(id);
                    match (a.buf, a.res) {
                        (Some(b), n) if n > 0 && open => self.events.push(Event::Received {
                            conn: id,
                            buf: RecvBuf {
                                id: b,
                                len: n as usize,
                            },
                        }),
                        (Some(b), _) => self.ring.recycle(b),
                        (None, _) => {}
                    }
                    if !a.more && open {
                        if a.res == -libc::ENOBUFS {
                            self.rearm.push(a.tag);
                        } else if a.res <= 0 {
                            let error =
                                (a.res < 0).then(|| std::io::Error::from_raw_os_error(-a.res));
                            self.events.push(Event::RecvEnded { conn: id, error });
                        } else {
                            // A multishot receive can end after data (the kernel's choice):
                            // arm it again.
                            self.rearm.push(a.tag);
                        }
                    }
                }
                AuxOp::SpliceIn | AuxOp::SpliceOut => {
                    let id = self.id_of(a.tag);
                    if self.is_open(id) {
                        self.events.push(Event::Spliced {
                            conn: id,
                            into_pipe: a.op == AuxOp::SpliceIn,
                            res: a.res,
                        });
                    }
                }
                AuxOp::Cancel => {}
            }
        }
        self.aux = aux;
    }

    /// Arms again the accept and the receives that ended for want of buffers.
    fn rearm(&mut self) {
        if std::mem::take(&mut self.rearm_accept) {
            if let Some(l) = &self.listener {
                if let Err(e) = self.ring.push_accept_multi(l.as_fd(), LISTENER) {
                    self.events.push(Event::AcceptFailed(e));
                }
            }
        }
        for tag in std::mem::take(&mut self.rearm) {
            let Some(c) = self.conns.get(tag as usize).and_then(|c| c.as_ref()) else {
                continue;
            };
            if c.closing {
                continue;
            }
            if let Err(e) = self.ring.push_recv_multi(c.sock.as_fd(), tag) {
                self.events.push(Event::RecvEnded {
                    conn: self.id_of(tag),
                    error: Some(e),
                });
            }
        }
    }

    /// Moves the completions in the CQ into `cqes`, counting them for [`BatchWait`].
    fn reap(&mut self) {
        let n = self.ring.reap(&mut self.cqes);
        if let Some(b) = &mut self.batch {
            b.seen += n;
        }
    }

    /// Lets go of closing connections that no completion can name any more.
    fn sweep_closed(&mut self) {
        let mut i = 0;
        while i < self.closing.len() {
            let id = self.closing[i];
            if self.ring.in_kernel_for(id) > 0 {
                i += 1;
                continue;
            }
            self.closing.swap_remove(i);
            if let Some(c) = self.conns[id as usize].take() {
                self.closed_stats.merge(c.state.stats());
                self.zc_inflight = self.zc_inflight.saturating_sub(c.state.zc_inflight());
            }
            self.free_ids.push(id);
            self.events.push(Event::Closed(self.id_of(id)));
        }
    }

    /// One pass: routes the completions already in the CQ, enters the kernel to wait for at
    /// least one more only when `wait`, nothing became ready and something is in the kernel,
    /// then pushes and submits the chains that are ready (entering only when there is something
    /// to submit or deferred work to run). Chains are built only right after reaping, so zero-copy
    /// decisions see the latest notifications. Connection errors are left in each state
    /// ([`ConnState::error`]); an error here is the ring's own.
    pub fn run(&mut self, wait: bool) -> Result<()> {
        self.pass(wait.then_some(None))
    }

    /// [`UringDriver::run`], waiting at most `timeout` for a completion: for loops that must
    /// also check a clock or a stop flag.
    pub fn run_for(&mut self, timeout: Duration) -> Result<()> {
        self.pass(Some(Some(timeout)))
    }

    /// Whether the kernel lets a wait hold out for a batch for a bounded time
    /// (`IORING_FEAT_MIN_TIMEOUT`, Linux 6.12), which [`UringDriver::batch_waits`] needs.
    pub fn has_min_wait(&self) -> bool {
        self.ring.has_min_wait()
    }

    /// Lets [`UringDriver::run_for`] hold out for a batch of up to `max` completions, for at
    /// most `min_wait` once one has come, whenever the loop handled several since its last
    /// wait (see `BatchWait`): fewer and fuller wake-ups under load, for up to `min_wait` of
    /// added latency per wait below it; a loop answering one request at a time still wakes at
    /// the first completion. May be called before every pass (the count is kept). Returns
    /// false, and changes nothing, without [`UringDriver::has_min_wait`].
    pub fn batch_waits(&mut self, max: usize, min_wait: Duration) -> bool {
        if !self.has_min_wait() {
            return false;
        }
        let seen = self.batch.map_or(0, |b| b.seen);
        self.batch = (max > 1 && !min_wait.is_zero()).then_some(BatchWait {
            max,
            min_wait,
            seen,
        });
        true
    }

    /// `wait`: `None` no wait, `Some(None)` until a completion, `Some(Some(t))` at most `t`.
    /// What is already in the CQ is routed first; the pass waits only when that made nothing
    /// ready to submit, so a chain that completed while the caller filled the next one costs no
    /// extra syscall.
    fn pass(&mut self, wait: Option<Option<Duration>>) -> Result<()> {
        self.reap();
        self.dispatch();
        self.run_deferred()?;
        let armed = self.ring.in_kernel() > 0 || self.ring.aux_pending() > 0;
        // Events already in hand (a request received, room made) are the owner's to act on
        // now: waiting would delay them by the whole timeout.
        let idle = self.dirty.is_empty()
            && self.rearm.is_empty()
            && !self.rearm_accept
            && self.events.is_empty()
            && self.writable.is_empty();
        if idle && armed {
            match wait {
                Some(None) => {
                    self.ring
                        .submit_and_wait(1)
                        .map_err(Error::sys("io_uring_enter"))?;
                }
                Some(Some(t)) => {
                    let (want, min_wait) = self
                        .batch
                        .as_mut()
                        .map_or((1, Duration::ZERO), BatchWait::start);
                    self.ring
                        .wait_batch(want, min_wait, t)
                        .map_err(Error::sys("io_uring_enter"))?;
                }
                None => {}
            }
            self.reap();
            self.dispatch();
            self.run_deferred()?;
        }
        self.rearm();
        if !self.dirty.is_empty() || self.ring.needs_enter() {
            self.start_chains();
            self.ring.submit().map_err(Error::sys("io_uring_enter"))?;
            self.reap();
            self.dispatch();
        }
        Ok(())
    }

    /// A DEFER_TASKRUN ring runs a bounded batch of deferred completions per enter; run the
    /// rest before deciding, or lagging notifications fill the zero-copy in-flight cap.
    fn run_deferred(&mut self) -> Result<()> {
        for _ in 0..8 {
            if !self.ring.taskrun_pending() {
                break;
            }
            self.ring.submit().map_err(Error::sys("io_uring_enter"))?;
            self.reap();
            self.dispatch();
        }
        Ok(())
    }

    /// Pushes and submits the chains that are ready (full queues, flushes, resends), after
    /// routing the completions already in the CQ, and waits in the same syscall until as many
    /// completions as requests pushed have come (their results, or earlier notifications): a
    /// chain on a DEFER_TASKRUN ring advances only while its thread is in the kernel, so this
    /// runs the batch through in one `io_uring_enter`. No syscall when nothing is ready. What a
    /// one-connection sender calls after queueing; loops over many connections use
    /// [`UringDriver::run`], which does not wait for a batch.
    pub fn submit_ready(&mut self) -> Result<()> {
        if self.dirty.is_empty() {
            return Ok(());
        }
        self.reap();
        self.dispatch();
        let n = self.start_chains();
        self.enter_and_route(n)
    }

    /// Submits what is queued and waits in the same `io_uring_enter` until `n` more completions
    /// have come, then routes them: for a caller that knows how many its requests make (a
    /// linked `SPLICE` pair: two), one syscall and one sleep instead of a [`UringDriver::run`]
    /// per completion.
    pub fn submit_and_wait_for(&mut self, n: usize) -> Result<()> {
        self.reap();
        self.dispatch();
        self.enter_and_route(n)
    }

    /// One `io_uring_enter` that submits and waits for `n` completions, then routes them.
    fn enter_and_route(&mut self, n: usize) -> Result<()> {
        self.ring
            .submit_and_wait(n)
            .map_err(Error::sys("io_uring_enter"))?;
        self.reap();
        self.dispatch();
        Ok(())
    }

    /// Queues a message's buffers on `id` in order, the last one ending the message, waiting
    /// for room whenever the connection's queue is full; `fields` comes back empty, for the
    /// next message.
    pub fn push_message(&mut self, id: ConnId, fields: &mut Vec<Buf>) -> Result<()> {
        let n = fields.len();
        for (i, b) in fields.drain(..).enumerate() {
            self.push_waiting(id, b, i + 1 == n)?;
        }
        Ok(())
    }

    /// Queues `buf` on `id` as [`UringDriver::push`] does, waiting for room while the
    /// connection's queue is full.
    pub fn push_waiting(&mut self, id: ConnId, mut buf: Buf, end_of_message: bool) -> Result<()> {
        loop {
            match self.push(id, buf, end_of_message) {
                Ok(()) => return Ok(()),
                Err(back) => {
                    buf = back;
                    self.wait_room(id)?;
                }
            }
        }
    }

    /// Queues each of `bufs` on `id` as its own message, in order, as [`UringDriver::push_waiting`]
    /// and [`UringDriver::submit_ready`] would one buffer at a time, but filling the queue in
    /// one step; leaves `bufs` empty. On an error the buffers not yet queued are dropped.
    pub fn push_bufs(&mut self, id: ConnId, bufs: &mut Vec<Buf>) -> Result<()> {
        let mut left = bufs.drain(..);
        loop {
            let st = &mut self.conn_mut(id).state;
            let took = st.push_from(&mut left);
            if st.ready() {
                self.dirty.push(id.idx);
            }
            self.submit_ready()?;
            if left.len() == 0 {
                return Ok(());
            }
            if took == 0 {
                self.wait_room(id)?;
            }
        }
    }

    /// Moves into `out` the connections whose queue gained room (or that failed) since the last
    /// call, so a loop over thousands of connections visits only those.
    pub fn take_writable(&mut self, out: &mut Vec<ConnId>) {
        out.append(&mut self.writable);
    }

    /// Runs until `id` has room for a buffer or has failed.
    pub fn wait_room(&mut self, id: ConnId) -> Result<()> {
        self.run_until(id, |d| d.room(id) > 0)
    }

    /// Runs until every byte queued on `id` is on the socket.
    pub fn flush(&mut self, id: ConnId) -> Result<()> {
        self.request_flush(id);
        self.run_until(id, |d| d.conn(id).state.is_flushed())
    }

    /// Runs, waiting in the kernel, until `done` or `id` failed. Room made on connections is
    /// news for the owner's next [`UringDriver::take_writable`], not a reason to stop waiting:
    /// it is set aside during the wait (else a pass would never wait, and the caller would
    /// spin until the kernel released what it holds) and handed back after.
    fn run_until(&mut self, id: ConnId, done: impl Fn(&UringDriver) -> bool) -> Result<()> {
        let mut parked = Vec::new();
        let r = (|| {
            while !done(self) && self.conn(id).state.error().is_none() {
                parked.append(&mut self.writable);
                parked.dedup();
                self.run(true)?;
            }
            Ok(())
        })();
        parked.append(&mut self.writable);
        parked.dedup();
        self.writable = parked;
        r?;
        self.conn_error(id)
    }

    /// The error that ended `id`, as a library error.
    pub fn conn_error(&self, id: ConnId) -> Result<()> {
        let st = &self.conn(id).state;
        match st.error() {
            None => Ok(()),
            Some(errno) => {
                let e = std::io::Error::from_raw_os_error(errno);
                Err(if errno == libc::EIO {
                    Error::Chain(e)
                } else if st.config().zc.is_some() && st.stats().zc_attempts > 0 {
                    Error::sys("io_uring SEND_ZC")(e)
                } else {
                    Error::sys("io_uring SEND")(e)
                })
            }
        }
    }

    /// Flushes every connection (those that failed are skipped), then waits up to `timeout`
    /// for every notification. Buffers the kernel still holds after that are leaked, never
    /// reused, and counted in each connection's [`SendStats::leaked_buffers`].
    pub fn finish(&mut self, timeout: Duration) -> Result<()> {
        let deadline = Instant::now() + timeout;
        for i in 0..self.conns.len() {
            if self.conns[i].is_some() {
                self.request_flush(self.id_of(i as u32));
            }
        }
        loop {
            let pending = self
                .conns
                .iter()
                .flatten()
                .any(|c| c.state.error().is_none() && !c.state.is_flushed());
            if !pending || Instant::now() >= deadline {
                break;
            }
            self.run(true)?;
        }
        while self.ring.in_kernel() > 0 && Instant::now() < deadline {
            let left = deadline.saturating_duration_since(Instant::now());
            self.ring
                .wait_for(left.min(Duration::from_millis(10)))
                .map_err(Error::sys("io_uring_enter"))?;
            self.reap();
            self.dispatch();
        }
        for (i, c) in self.conns.iter_mut().enumerate() {
            if let Some(c) = c {
                let left = self.ring.buffers_in_kernel_for(i as u32) as u64;
                c.state.count_leaked(left);
            }
        }
        Ok(())
    }
}

/// The order the sends of a stream connection on a driver made from `opts` keep, for a
/// connection that sends with `choice` (the zero-copy ones may use registered buffers): what
/// a result row records. Probes the kernel once per process.
pub fn stream_order(opts: &crate::Options, choice: Choice) -> Order {
    let cfg = DriverConfig::from_options(opts, 1, choice);
    order_for(cfg.order, crate::probe::ring_ops(), cfg.fixed_buffers)
}

/// The order a stream connection's sends keep: `asked`, else vectored where the kernel has
/// `SENDMSG` and `SENDMSG_ZC` and no registered buffers are wanted, else linked.
pub(crate) fn order_for(asked: Option<Order>, ops: OpSupport, fixed_buffers: bool) -> Order {
    let vectored = ops.sendmsg && ops.sendmsg_zc && !fixed_buffers;
    match asked {
        Some(Order::Vectored) | None if vectored => Order::Vectored,
        Some(Order::Unlinked) => Order::Unlinked,
        _ => Order::Linked,
    }
}

/// Pushes one request of connection `tag` on `ring`: a `SEND`/`SEND_ZC` for one buffer, a
/// vectored `SENDMSG`/`SENDMSG_ZC` for several. Each new buffer goes to a ring slot.
fn push_request(
    ring: &mut SendRing,
    fd: std::os::fd::BorrowedFd<'_>,
    s: Submit<'_>,
    tag: u32,
) -> std::io::Result<Pushed> {
    if let [part] = s.parts {
        let slot = match part.payload {
            Payload::Held(slot) => slot,
            Payload::New => {
                let buf = s
                    .queue
                    .pop_front()
                    .ok_or(std::io::Error::from_raw_os_error(libc::EBADSLT))?;
                let now = ring.clock(s.op);
                let slot = ring.hold(buf, tag, now);
                // Named from here on, so a failed push below still lets the slot go.
                part.payload = Payload::Held(slot);
                slot
            }
        };
        let (req, registered) = ring.push_slot(fd, slot, part.range.clone(), s.op, s.link)?;
        return Ok(Pushed { req, registered });
    }
    let req = ring.push_vectored(fd, s.parts, s.queue, s.op, s.link, tag)?;
    Ok(Pushed {
        req,
        registered: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch(max: usize) -> BatchWait {
        BatchWait {
            max,
            min_wait: Duration::from_micros(100),
            seen: 0,
        }
    }

    #[test]
    fn a_loop_answering_one_request_at_a_time_wakes_at_the_first_completion() {
        let mut b = batch(32);
        // Each wait brings a receive, answering it reaps its send: two per wait.
        for _ in 0..100 {
            assert_eq!(b.start(), (1, Duration::ZERO));
            b.seen += 2;
        }
        assert_eq!(b.want(), 1);
    }

    #[test]
    fn a_busy_loop_waits_for_as_many_as_it_handled_capped_and_a_quiet_spell_resets_it() {
        let mut b = batch(32);
        b.seen = 10;
        assert_eq!(b.start(), (10, Duration::from_micros(100)));
        assert_eq!(b.seen, 0, "counting starts again with each wait");
        b.seen = 500;
        assert_eq!(b.start().0, 32);
        // The wait timed out or brought one: back to waking at the first.
        b.seen = 1;
        assert_eq!(b.start(), (1, Duration::ZERO));
        b.seen = BATCH_FROM;
        assert_eq!(b.want(), BATCH_FROM);
        assert_eq!(batch(1).want(), 1);
    }
}
