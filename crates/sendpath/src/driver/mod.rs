//! The io_uring driver: one ring serving many connections, each with its own I/O-free send
//! state ([`ConnState`]). The driver does the I/O (pushing SQEs, entering the kernel, reaping
//! CQEs) and routes each completion to its connection by the tag its buffer was pushed with.
//!
//! - `mod.rs`: the driver and its connections (adding, closing, what each has done);
//! - `pass.rs`: sending: queueing, one pass of routing completions and submitting chains;
//! - `wait.rs`: the waits built on passes (for room, a flush, every notification), each
//!   bounded by the connection's send timeout;
//! - `server.rs`: what a server also does on the ring (multishot accept and receive, a file
//!   spliced behind a response head), reported as [`Event`]s;
//! - `splice.rs`: the I/O-free rules of a file range going through a pipe.

mod arena;
mod config;
mod pass;
mod server;
mod splice;
mod wait;

pub use arena::{ArenaConfig, Reserved};
pub use config::{ConnId, DriverConfig, Event, RecvBuf, RecvConfig};

use crate::send::{Chooser, ConnState, Order, StateConfig, ZcConfig};
use crate::socket::Waits;
use crate::sys::uring::{AuxCqe, OpSupport, RingSetup, SendRing};
use crate::{Buf, Error, Result, SendStats, Socket, Strategy};
use pass::BatchWait;
use server::FileSend;
use std::os::fd::AsFd;
use std::time::Duration;

/// The tag of the listener's accepts (connections are numbered from 0).
const LISTENER: u32 = u32::MAX;

/// One connection of the ring.
struct Conn {
    sock: Socket,
    state: ConnState,
    /// Given to [`UringDriver::close`]; gone once no completion can name it.
    closing: bool,
    /// The socket's send timeout (`SO_SNDTIMEO`): the longest a wait for this connection's
    /// progress lasts.
    timeout: Option<Duration>,
    /// A file being spliced behind a response head ([`UringDriver::send_file`]).
    file: Option<FileSend>,
}

/// One ring, many connections: the `uring`, `uring-zc` and `adaptive` strategies for a server
/// that keeps thousands of connections on one thread. Each connection keeps one chain of
/// requests in the kernel while the next fills (byte order kept), gets SEND or SEND_ZC per send
/// as its strategy says, and hands buffers back only after the kernel's last completion for
/// them. One `io_uring_enter` submits every ready connection's chain.
///
/// ```no_run
/// use sendpath::{DriverConfig, Strategy, UringDriver};
///
/// let mut ring = UringDriver::new(DriverConfig { connections: 2, ..DriverConfig::default() })?;
/// let a = ring.add(std::net::TcpStream::connect("127.0.0.1:9000")?, Strategy::UringZc)?;
/// let b = ring.add(std::net::TcpStream::connect("127.0.0.1:9001")?, Strategy::Uring)?;
/// for id in [a, b] {
///     let mut buf = ring.take_buf(id, 65536)?;
///     buf.as_mut_slice().fill(b'x');
///     ring.push(id, buf, true).map_err(|(e, _buf)| e)?; // queued; submitted by run()
///     ring.request_flush(id)?;
/// }
/// ring.run(false)?; // one io_uring_enter for both
/// ring.finish(std::time::Duration::from_secs(2))?; // every notification in
/// println!("{:?}", ring.total_stats().summary());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct UringDriver {
    ring: SendRing,
    /// This driver's number: a [`ConnId`] of another names none of these connections.
    serial: u32,
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
    /// Buffers the ring released, with their connections' indexes (a list kept between
    /// passes).
    released: Vec<(u32, Buf)>,
    unheld: Vec<u32>,
    /// Connections that let go of slots during a reap (a list kept between passes).
    letting_go: Vec<u32>,
    /// Parked slots written in place, on their way to their connection's queue (a list kept
    /// between calls).
    written: Vec<u32>,
    /// Connections with a chain that may be ready to go.
    dirty: Vec<u32>,
    /// Connections whose queue gained room since [`UringDriver::take_writable`] last ran.
    writable: Vec<ConnId>,
    ops: OpSupport,
    usage_reporting: bool,
    note: Option<String>,
    /// How timed waits batch completions ([`UringDriver::batch_waits`]).
    batch: Option<BatchWait>,
    /// The registered memory new buffers come from first ([`ArenaConfig`]).
    arena: Option<std::sync::Arc<crate::sys::mem::ArenaMem>>,
}

impl std::fmt::Debug for UringDriver {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("UringDriver")
            .field("connections", &self.len())
            .field("setup", &self.ring.setup())
            .finish()
    }
}

impl UringDriver {
    /// A ring for `cfg.connections` connections. Probes which send operations the kernel has,
    /// and registers a table for zero-copy buffers when `cfg.options.uring_fixed_buffers` (a
    /// refusal, past `ulimit -l` say, is kept in [`UringDriver::note`] and the sends go
    /// unregistered).
    ///
    /// ```no_run
    /// let ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// println!("ring set up as {}", ring.setup().name());
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn new(cfg: DriverConfig) -> Result<UringDriver> {
        UringDriver::with_setup(cfg, RingSetup::SingleIssuerDeferTaskrun)
    }

    /// [`UringDriver::new`] with the ring set up as `setup` at most (for a ring that several
    /// threads drive in turn, or whose fd a reactor polls).
    pub(crate) fn with_setup(cfg: DriverConfig, setup: RingSetup) -> Result<UringDriver> {
        let depth = cfg.depth();
        let conns = cfg.connections.max(1);
        let sq = (depth * conns).clamp(8, 4096);
        let cq = (depth + cfg.options.inflight.max_sends) * conns * 2;
        let mut ring = SendRing::new_from(sq as u32, cq.clamp(16, 1 << 16) as u32, setup)
            .map_err(Error::sys("io_uring_setup"))?;
        let ops = ring
            .probe()
            .map_err(Error::sys("io_uring_register(PROBE)"))?;
        let usage_reporting = ops.send_zc && crate::probe::send_zc_report_usage_supported();
        let mut note = None;
        let asked = cfg.options.uring_order;
        if asked == Some(Order::Vectored) && order_for(asked, ops, false) != Order::Vectored {
            note = Some("vectored sends need SENDMSG and SENDMSG_ZC: sending linked chains".into());
        }
        let arena_cfg = cfg.options.uring_arena;
        if cfg.options.uring_fixed_buffers || arena_cfg.is_some() {
            let per_conn = cfg.options.inflight.max_sends + 2 * depth;
            let table = match cfg.options.uring_fixed_buffers {
                true => (per_conn * conns).min(1 << 14) as u32,
                false => 0,
            };
            if let Err(e) = ring.enable_fixed_buffers(table + u32::from(arena_cfg.is_some())) {
                note = Some(format!(
                    "registering fixed buffers failed ({e}): sending from unregistered buffers"
                ));
            }
        }
        let arena = match arena_cfg {
            Some(a) => {
                let (mem, why) = arena::set_up(&mut ring, a)?;
                note = why.or(note);
                Some(mem)
            }
            None => None,
        };
        Ok(UringDriver {
            ring,
            serial: config::next_ring_serial(),
            cfg,
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
            released: Vec::new(),
            unheld: Vec::new(),
            letting_go: Vec::new(),
            written: Vec::new(),
            dirty: Vec::new(),
            writable: Vec::new(),
            ops,
            usage_reporting,
            note,
            batch: None,
            arena,
        })
    }

    /// How the ring was set up (SINGLE_ISSUER and DEFER_TASKRUN where the kernel has them).
    ///
    /// ```no_run
    /// # let ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// assert!(!ring.setup().name().is_empty());
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn setup(&self) -> RingSetup {
        self.ring.setup()
    }

    /// Why the driver runs other than asked (registered buffers refused, no vectored sends),
    /// if it does.
    ///
    /// ```no_run
    /// # let ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// if let Some(why) = ring.note() { eprintln!("note: {why}"); }
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn note(&self) -> Option<String> {
        match (self.ring.fixed_error(), &self.note) {
            (Some(e), None) => Some(format!(
                "the kernel refused to register a buffer ({e}): the rest are sent unregistered"
            )),
            (_, n) => n.clone(),
        }
    }

    /// The state settings of a connection that sends with `chooser`: SEND_ZC where the kernel
    /// has it, usage reporting where asked and supported, and its stream order.
    fn state_config(&self, chooser: &Chooser) -> StateConfig {
        let opts = &self.cfg.options;
        let fixed = opts.uring_fixed_buffers && chooser.may_zero_copy();
        StateConfig {
            depth: self.cfg.depth(),
            zc: self.ops.send_zc.then_some(ZcConfig {
                limits: opts.inflight,
                report_usage: opts.uring_report_usage && self.usage_reporting,
            }),
            order: order_for(opts.uring_order, self.ops, fixed),
        }
    }

    /// Adds a connection that sends with `strategy`: `uring` (SEND), `uring-zc` (SEND_ZC) or
    /// `adaptive` (SEND or SEND_ZC per send, from `DriverConfig::options.profile`). The socket
    /// is used as given (io_uring waits for socket space itself, in blocking mode or not); its
    /// send timeout (`SO_SNDTIMEO`), if set, bounds every wait for this connection's progress.
    /// Refused, naming why: another strategy, or a socket that is not a connected one.
    ///
    /// ```no_run
    /// # let mut ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// let sock = std::net::TcpStream::connect("127.0.0.1:9000")?;
    /// sock.set_write_timeout(Some(std::time::Duration::from_secs(5)))?;
    /// let id = ring.add(sock, sendpath::Strategy::Adaptive)?;
    /// # let _ = id;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn add(&mut self, sock: impl Into<Socket>, strategy: Strategy) -> Result<ConnId> {
        let chooser = Chooser::for_strategy(strategy, &self.cfg.options).ok_or_else(|| {
            Error::Config(format!(
                "{strategy} does not run on the ring driver (uring, uring-zc and adaptive do): open it on its socket with sendpath::open"
            ))
        })?;
        self.add_with_chooser(sock.into(), chooser)
    }

    /// Adds a connection choosing its operations with `chooser`. Ids of connections that are
    /// gone ([`Event::Closed`]) are handed out again, with a new generation.
    pub(crate) fn add_with_chooser(&mut self, sock: Socket, chooser: Chooser) -> Result<ConnId> {
        sock.check(Waits::OnTheRing)?;
        let mut state = ConnState::new(self.state_config(&chooser), chooser);
        if let Some(a) = &self.arena {
            state.use_arena(a.clone());
        }
        if crate::sys::socket::is_datagram(sock.as_fd()) {
            state.set_datagrams();
        }
        let conn = Conn {
            timeout: sock.send_timeout(),
            sock,
            state,
            closing: false,
            file: None,
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
            ring: self.serial,
            idx,
            gen: self.gens.get(idx as usize).copied().unwrap_or(0),
        }
    }

    /// The connection `id` names, if it is one of this driver's and not gone.
    fn conn(&self, id: ConnId) -> Result<&Conn> {
        let current = id.ring == self.serial && self.gens.get(id.index()) == Some(&id.gen);
        current
            .then(|| self.conns.get(id.index())?.as_ref())
            .flatten()
            .ok_or_else(|| Error::UnknownConn { index: id.index() })
    }

    fn conn_mut(&mut self, id: ConnId) -> Result<&mut Conn> {
        self.conn(id)?;
        Ok(self.conns[id.index()].as_mut().expect("checked by conn"))
    }

    /// The connection `id` names if it is open (not closing).
    fn open_conn_mut(&mut self, id: ConnId) -> Result<&mut Conn> {
        match self.conn_mut(id)? {
            c if c.closing => Err(Error::UnknownConn { index: id.index() }),
            c => Ok(c),
        }
    }

    /// Ends a connection: shuts its socket down and cancels what it has in the kernel. Its id
    /// names no connection from now on; once no completion can name it, the socket is closed
    /// and [`Event::Closed`] says so. What it had queued is dropped; its counters join
    /// [`UringDriver::total_stats`]. An id that names no open connection is ignored.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, id: sendpath::ConnId) {
    /// ring.close(id);
    /// assert!(!ring.is_open(id));
    /// # }
    /// ```
    pub fn close(&mut self, id: ConnId) {
        let Ok(c) = self.open_conn_mut(id) else {
            return;
        };
        c.closing = true;
        let _ = c.sock.shutdown(std::net::Shutdown::Both);
        if self.ring.in_kernel_for(id.idx) > 0 {
            // A SEND waiting for room, or an armed receive, ends with -ECANCELED.
            let c = self.conns[id.index()].as_ref().expect("open");
            let _ = self.ring.push_cancel_fd(c.sock.as_fd(), id.idx);
        }
        let c = self.conns[id.index()].as_mut().expect("open");
        c.state.fail(libc::ECONNABORTED);
        self.closing.push(id.idx);
    }

    /// Whether `id` is an open connection of this driver (added, not closing).
    ///
    /// ```no_run
    /// # fn f(ring: &sendpath::UringDriver, id: sendpath::ConnId) {
    /// if !ring.is_open(id) { /* forget it */ }
    /// # }
    /// ```
    pub fn is_open(&self, id: ConnId) -> bool {
        self.conn(id).is_ok_and(|c| !c.closing)
    }

    /// Connections added and not yet gone (closing ones included).
    ///
    /// ```no_run
    /// # let ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// assert_eq!(ring.len(), 0);
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn len(&self) -> usize {
        self.conns.len() - self.free_ids.len()
    }

    /// Whether no connection is there.
    ///
    /// ```no_run
    /// # let ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// assert!(ring.is_empty());
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The socket of `id`.
    ///
    /// ```no_run
    /// # fn f(ring: &sendpath::UringDriver, id: sendpath::ConnId) -> Result<(), Box<dyn std::error::Error>> {
    /// ring.socket(id)?.shutdown(std::net::Shutdown::Write)?;
    /// # Ok(()) }
    /// ```
    pub fn socket(&self, id: ConnId) -> Result<&Socket> {
        Ok(&self.conn(id)?.sock)
    }

    /// What `id` has done so far.
    ///
    /// ```no_run
    /// # fn f(ring: &sendpath::UringDriver, id: sendpath::ConnId) -> sendpath::Result<()> {
    /// println!("{} bytes", ring.stats(id)?.bytes);
    /// # Ok(()) }
    /// ```
    pub fn stats(&self, id: ConnId) -> Result<&SendStats> {
        Ok(self.conn(id)?.state.stats())
    }

    /// What every connection has done, those gone included.
    ///
    /// ```no_run
    /// # let ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// println!("{:?}", ring.total_stats().summary());
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn total_stats(&self) -> SendStats {
        let mut t = self.closed_stats.clone();
        for c in self.conns.iter().flatten() {
            t.merge(c.state.stats());
        }
        t
    }

    /// Completions the kernel held back because the CQ was full, so far.
    ///
    /// ```no_run
    /// # let ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// assert_eq!(ring.cq_overflows(), 0);
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn cq_overflows(&self) -> u64 {
        u64::from(self.ring.cq_overflow())
    }

    /// A buffer of `len` bytes for `id` to fill: one the kernel has released, or a new one.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, id: sendpath::ConnId) -> sendpath::Result<()> {
    /// let mut buf = ring.take_buf(id, 4096)?;
    /// buf.as_mut_slice().fill(b'x');
    /// # Ok(()) }
    /// ```
    pub fn take_buf(&mut self, id: ConnId, len: usize) -> Result<Buf> {
        Ok(self.conn_mut(id)?.state.take_buf(len))
    }

    /// Registers `buf` with the ring (registered buffers on, and room in the table), so
    /// zero-copy sends of it, and of every [`Buf::share`] of it made afterwards, use the
    /// registration. Returns whether it is registered.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver) {
    /// let mut body = sendpath::Buf::shared(vec![b'x'; 65536]);
    /// let registered = ring.register(&mut body);
    /// # let _ = registered;
    /// # }
    /// ```
    pub fn register(&mut self, buf: &mut Buf) -> bool {
        self.ring.register(buf)
    }

    /// How many buffers `id` takes now ([`UringDriver::push`]); 0 for an id that names no
    /// open connection.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, id: sendpath::ConnId) {
    /// while ring.room(id) > 0 { /* push */ break; }
    /// # }
    /// ```
    pub fn room(&self, id: ConnId) -> usize {
        self.conn(id)
            .ok()
            .filter(|c| !c.closing)
            .map_or(0, |c| c.state.room())
    }

    /// Whether every byte queued on `id` is on the socket (nothing queued or in flight; the
    /// notifications of zero-copy sends may still be due). True for an id that names no
    /// connection: nothing of it is queued.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, id: sendpath::ConnId) {
    /// if ring.is_flushed(id) { ring.close(id); }
    /// # }
    /// ```
    pub fn is_flushed(&self, id: ConnId) -> bool {
        self.conn(id).map_or(true, |c| {
            c.state.is_flushed() && c.file.as_ref().is_none_or(|f| f.is_idle())
        })
    }

    /// The adaptive decisions of `id`, for the `adaptive` path, which sends its copy and
    /// MSG_ZEROCOPY tiers off the ring with the same state.
    pub(crate) fn chooser_mut(&mut self, id: ConnId) -> Option<&mut Chooser> {
        Some(self.conn_mut(id).ok()?.state.chooser_mut())
    }

    /// A duplicate of the ring's fd, for a reactor to poll.
    #[cfg(feature = "tokio")]
    pub(crate) fn ring_fd(&self) -> Result<std::os::fd::OwnedFd> {
        self.ring.dup_fd().map_err(Error::sys("dup(io_uring fd)"))
    }

    /// Send requests whose last completion has not come, over every connection.
    #[cfg(feature = "tokio")]
    pub(crate) fn in_kernel(&self) -> usize {
        self.ring.in_kernel()
    }

    /// Zero-copy sends of `id` awaiting their notification, and buffers free for reuse.
    pub(crate) fn zc_and_free(&self, id: ConnId) -> (usize, usize) {
        self.conn(id)
            .map_or((0, 0), |c| (c.state.zc_inflight(), c.state.free_bufs()))
    }
}

impl Drop for UringDriver {
    /// Cancels what is in the kernel and waits at most a short grace for it; buffers the
    /// kernel still holds then are leaked (never freed), counted in
    /// [`leaked_on_drop`](crate::leaked_on_drop). [`UringDriver::finish`] first, to wait
    /// longer and get the count as an error.
    fn drop(&mut self) {
        let leaked = self.ring.shut_down(DROP_GRACE);
        crate::stats::count_leaked_on_drop(leaked as u64);
    }
}

/// The longest a dropped driver waits for the kernel's last completions once it cancelled
/// what was in flight.
const DROP_GRACE: Duration = Duration::from_millis(250);

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
