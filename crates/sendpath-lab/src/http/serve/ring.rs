//! The io_uring workers (`copy`, `uring`, `uring-zc`, `adaptive`): one [`UringDriver`] per
//! worker, multishot accept, multishot receive into a provided buffer ring, and the responses
//! through each connection's send state, so pipelined requests are answered in order and one
//! `io_uring_enter` submits the responses of every connection that has some.

use super::worker::{Activity, Base, Counts, Gauge, Responses, WorkerResult, MAX_OWED};
use super::{SendMode, ServeConfig};
use crate::cancel::Cancel;
use crate::http::{parse_request, Heads, Parsed, Refusal};
use sendpath::{
    ConnId, DriverConfig, Event, Options, RecvBuf, RecvConfig, Socket, Strategy, UringDriver,
};
use std::collections::VecDeque;
use std::fs::File;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicUsize;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// A connection's state in a ring worker.
#[derive(Debug)]
struct Client {
    /// The connection (its generation tells it from a later one at the same index).
    id: ConnId,
    /// What arrived and is not parsed yet: the start of a request not yet whole, or, while
    /// `parked`, every byte after the last request parsed (at most [`MAX_HELD`]).
    partial: Vec<u8>,
    /// [`MAX_OWED`] responses are owed: what arrives is held, not parsed, until they drain.
    parked: bool,
    /// Requests parsed and not yet answered, in order (`true`: HEAD).
    owed: VecDeque<bool>,
    /// A refusal to send after the owed responses, then close.
    refusal: Option<Refusal>,
    /// Close once everything queued is on the socket (`Connection: close`, end of file).
    close_when_flushed: bool,
    /// For the idle sweep.
    activity: Activity,
    /// `--file`: a response's file is being spliced out.
    sending_file: bool,
}

impl Client {
    fn new(id: ConnId, now: Instant) -> Client {
        Client {
            id,
            partial: Vec::new(),
            parked: false,
            owed: VecDeque::new(),
            refusal: None,
            close_when_flushed: false,
            activity: Activity::new(now),
            sending_file: false,
        }
    }
}

/// A ring worker: its driver and connections, and what every worker keeps ([`Base`]).
struct Ring<'a> {
    cfg: &'a ServeConfig,
    d: UringDriver,
    clients: Vec<Option<Client>>,
    base: Base<'a>,
    /// The owed responses of a connection gathered into one buffer.
    scratch: Vec<u8>,
    /// What a connection sends with: `uring`, `uring-zc` or `adaptive`.
    strategy: Strategy,
    /// The clock, read once per pass.
    now: Instant,
}

/// Serves `listener` until `cancel` or the configured duration; the counts, or the reason
/// the worker gave up with what it counted.
pub(super) fn ring_worker(
    cfg: &ServeConfig,
    listener: OwnedFd,
    cancel: &Cancel,
    open: &Gauge<'_>,
    ready: &AtomicUsize,
) -> WorkerResult {
    let base = Base::new(cfg, ready)?;
    let mut ring = Ring::open(cfg, listener, base).map_err(Base::failed_setup)?;
    ring.base.ready.mark();
    if let Err(e) = ring.run(cancel, open) {
        ring.base.c.send = Some(ring.d.total_stats());
        return ring.base.fail(e);
    }
    ring.close_all();
    open.set(0);
    ring.base.c.cq_overflows = ring.d.cq_overflows();
    ring.base.c.send = Some(ring.d.total_stats());
    Ok(ring.base.c)
}

impl<'a> Ring<'a> {
    /// Sets up the ring: the driver (registered bodies and a zero-copy cap for the modes that
    /// may send zero-copy), the receive buffers, and multishot accept on `listener`.
    fn open(
        cfg: &'a ServeConfig,
        listener: OwnedFd,
        mut base: Base<'a>,
    ) -> Result<Ring<'a>, Box<(Base<'a>, String)>> {
        let zc = matches!(cfg.send, SendMode::UringZc | SendMode::Adaptive);
        let mut d = match UringDriver::new(DriverConfig {
            connections: cfg.max_connections.min(4096),
            ring_zc_inflight: zc.then_some(cfg.zc_inflight),
            options: Options {
                uring_depth: cfg.depth,
                uring_fixed_buffers: zc,
                profile: cfg.profile.clone(),
                ..Options::default()
            },
        }) {
            Ok(d) => d,
            Err(e) => return Err(Box::new((base, format!("io_uring setup: {e}")))),
        };
        base.c.setup = Some(d.setup().name().to_string());
        // Batched waits only when the kernel takes a minimum wait; else each completion wakes.
        base.c.batched = cfg.wait_nr > 1 && !cfg.min_wait.is_zero() && d.has_min_wait();
        let recv = RecvConfig {
            buffers: 2048,
            size: 4096,
        };
        if let Err(e) = d.provide_recv_buffers(recv) {
            return Err(Box::new((base, format!("{e}"))));
        }
        if let Err(e) = d.listen(std::net::TcpListener::from(listener)) {
            return Err(Box::new((base, format!("{e}"))));
        }
        if zc && !base.r.inline {
            d.register(&mut base.r.body);
        }
        let strategy = match cfg.send {
            SendMode::Adaptive => Strategy::Adaptive,
            SendMode::UringZc => Strategy::UringZc,
            _ => Strategy::Uring,
        };
        Ok(Ring {
            cfg,
            d,
            clients: Vec::new(),
            base,
            scratch: Vec::new(),
            strategy,
            now: Instant::now(),
        })
    }

    /// The worker's loop: wait, handle every event, answer every connection that can take
    /// more, and once a second the idle sweep.
    fn run(&mut self, cancel: &Cancel, open: &Gauge<'_>) -> Result<(), String> {
        let (mut events, mut writable) = (Vec::new(), Vec::new());
        while !cancel.is_cancelled() && self.now < self.base.end {
            if self.base.c.batched {
                // No more completions can be waited for than connections could send requests.
                let nr = self.cfg.wait_nr.min(self.d.len());
                self.d.batch_waits(nr, self.cfg.min_wait);
            }
            self.d
                .run_for(Duration::from_millis(100))
                .map_err(|e| format!("{e}"))?;
            // One clock reading per pass: what a request's arrival and the idle checks need.
            self.now = Instant::now();
            self.d.take_events(&mut events);
            for ev in events.drain(..) {
                self.on_event(ev, open);
            }
            self.d.take_writable(&mut writable);
            for id in writable.drain(..) {
                self.respond(id);
            }
            if self.base.tick(self.now) {
                self.sweep_idle();
            }
        }
        Ok(())
    }

    fn on_event(&mut self, ev: Event, open: &Gauge<'_>) {
        match ev {
            Event::Accepted(sock) => self.accept(sock, open),
            Event::AcceptFailed(e) => self.base.c.accept_error(&e),
            Event::Received { conn, buf } => {
                self.on_received(conn, buf);
                self.respond(conn);
            }
            Event::RecvEnded { conn, error } => {
                if let Some(e) = error {
                    self.base.c.ended(e.raw_os_error());
                    self.d.close(conn);
                } else if let Some(cl) = client(&mut self.clients, conn) {
                    cl.close_when_flushed = true;
                    self.respond(conn);
                }
            }
            Event::FileSent { conn, result } => {
                if let Some(cl) = client(&mut self.clients, conn) {
                    cl.sending_file = false;
                }
                // A file that ended early (it shrank) would leave a short body under its
                // Content-Length and corrupt the stream: the connection ends either way.
                match result {
                    Ok(_) => self.respond(conn),
                    Err(e) => {
                        self.base.c.ended(e.raw_os_error());
                        self.d.close(conn);
                    }
                }
            }
            Event::Closed(id) => {
                // Only if the slot still holds that connection, not a later one at the same
                // index.
                if let Some(x) = self.clients.get_mut(id.index()) {
                    if x.as_ref().is_some_and(|c| c.id == id) {
                        *x = None;
                    }
                }
                open.set(self.d.len());
            }
            // Events of what this worker does not ask for (none today).
            _ => {}
        }
    }

    /// Adds an accepted connection, or refuses it above `--max-connections`.
    fn accept(&mut self, sock: Socket, open: &Gauge<'_>) {
        let c = &mut self.base.c;
        c.accepted += 1;
        if self.d.len() >= self.cfg.max_connections {
            c.rejected += 1;
            return;
        }
        let _ = rustix::net::sockopt::set_tcp_nodelay(&sock, true);
        match self.d.add_receiving(sock, self.strategy) {
            Ok(id) => {
                if self.clients.len() <= id.index() {
                    self.clients.resize_with(id.index() + 1, || None);
                }
                self.clients[id.index()] = Some(Client::new(id, self.now));
                open.set(self.d.len());
            }
            Err(e) => c.accept_error(&std::io::Error::other(e.to_string())),
        }
    }

    /// Parses what arrived, owing a response per whole request.
    fn on_received(&mut self, conn: ConnId, buf: RecvBuf) {
        let Ring {
            d,
            clients,
            base,
            scratch,
            now,
            ..
        } = self;
        match client(clients, conn) {
            // Already refused or closing: ignore what else comes.
            Some(cl) if cl.refusal.is_none() && !cl.close_when_flushed => {
                let data = d.received(&buf);
                if cl.partial.is_empty() && !cl.parked {
                    parse_requests(cl, &mut base.c, data, *now);
                } else if cl.partial.len() + data.len() > MAX_HELD {
                    overflow(cl, &mut base.c);
                } else {
                    cl.partial.extend_from_slice(data);
                    if !cl.parked {
                        scratch.clear();
                        scratch.append(&mut cl.partial);
                        parse_requests(cl, &mut base.c, scratch, *now);
                    }
                }
            }
            _ => {}
        }
        d.recycle(buf);
    }

    /// Queues the owed responses that fit, then a refusal, and closes once all is out when
    /// asked.
    fn respond(&mut self, conn: ConnId) {
        if !self.d.is_open(conn) {
            return;
        }
        let Ring {
            d,
            clients,
            base,
            scratch,
            cfg,
            ..
        } = self;
        let Some(cl) = client(clients, conn) else {
            return;
        };
        if cl.parked && cl.owed.len() <= MAX_OWED / 2 {
            // Half the owed responses are out: parse what was held meanwhile.
            cl.parked = false;
            scratch.clear();
            scratch.append(&mut cl.partial);
            parse_requests(cl, &mut base.c, scratch, self.now);
        }
        let mut s = Serving {
            d,
            cl,
            c: &mut base.c,
            conn,
        };
        if let Some(file) = &base.r.file {
            if s.cl.sending_file {
                return;
            }
            if let Some(head_only) = s.cl.owed.pop_front() {
                return s.start_file_response(&base.r.heads, file, head_only);
            }
        }
        let mut queued = false;
        while !s.cl.owed.is_empty() && s.d.room(conn) > 0 {
            if base.r.inline {
                queued |= s.queue_inline(&base.r, cfg.send, scratch);
            } else if let Some(q) = s.queue_split(&base.r) {
                queued |= q;
            } else {
                break;
            }
        }
        if s.cl.owed.is_empty() {
            queued |= s.queue_refusal();
        }
        if queued {
            let _ = s.d.request_flush(conn);
        }
        s.close_when_done();
    }

    /// Closes the connections idle past `--idle-timeout`.
    fn sweep_idle(&mut self) {
        for cl in self.clients.iter_mut().flatten() {
            if !self.d.is_open(cl.id) {
                continue;
            }
            let waiting = !self.d.is_flushed(cl.id);
            if cl
                .activity
                .timed_out(waiting, self.now, self.cfg.idle_timeout)
            {
                self.base.c.idle_timeouts += 1;
                self.d.close(cl.id);
            }
        }
    }

    /// Closing: stop accepting, close every connection, wait (2 s at most) for the kernel to
    /// let go.
    fn close_all(&mut self) {
        for cl in self.clients.iter().flatten() {
            self.d.close(cl.id);
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut events = Vec::new();
        while !self.d.is_empty() && Instant::now() < deadline {
            if self.d.run_for(Duration::from_millis(10)).is_err() {
                break;
            }
            self.d.take_events(&mut events);
            for ev in events.drain(..) {
                if let Event::Received { buf, .. } = ev {
                    self.d.recycle(buf);
                }
            }
        }
    }
}

/// The state of connection `id`, if the table holds that very connection.
fn client(clients: &mut [Option<Client>], id: ConnId) -> Option<&mut Client> {
    clients.get_mut(id.index())?.as_mut().filter(|c| c.id == id)
}

/// Unparsed bytes a connection may hold while its owed responses drain: a client that
/// pipelines past this without reading them is refused (`pipeline_overflow`, 503).
const MAX_HELD: usize = 4 << 20;

/// Refuses `cl` for pipelining past what is held for it, counted.
fn overflow(cl: &mut Client, c: &mut Counts) {
    c.pipeline_overflows += 1;
    c.refuse(Refusal::Overflow);
    cl.refusal = Some(Refusal::Overflow);
    cl.partial = Vec::new();
    cl.parked = false;
}

/// Parses `rest` on `cl`: a response owed per whole request, the start of the next kept, a
/// refusal noted. With [`MAX_OWED`] responses owed, the rest is held unparsed (`parked`)
/// until they drain.
fn parse_requests(cl: &mut Client, c: &mut Counts, rest: &[u8], now: Instant) {
    let mut at = 0;
    while at < rest.len() {
        if cl.owed.len() >= MAX_OWED {
            cl.parked = true;
            cl.partial.extend_from_slice(&rest[at..]);
            return;
        }
        match parse_request(&rest[at..]) {
            Parsed::Request {
                len,
                head_only,
                close,
            } => {
                at += len;
                cl.activity.request(now);
                cl.owed.push_back(head_only);
                if close {
                    cl.close_when_flushed = true;
                    break;
                }
            }
            Parsed::Partial => {
                cl.partial.extend_from_slice(&rest[at..]);
                at = rest.len();
            }
            Parsed::Refused(why) => {
                c.refuse(why);
                cl.refusal = Some(why);
                break;
            }
        }
    }
}

/// One connection being answered: the driver, the connection's state and the worker's
/// counters.
struct Serving<'w> {
    d: &'w mut UringDriver,
    cl: &'w mut Client,
    c: &'w mut Counts,
    conn: ConnId,
}

impl Serving<'_> {
    /// As many owed responses as fit in one buffer of at most 64 KiB; `copy` writes what the
    /// socket takes at once and queues the rest. Whether anything was queued on the ring.
    fn queue_inline(&mut self, r: &Responses, mode: SendMode, scratch: &mut Vec<u8>) -> bool {
        scratch.clear();
        while let Some(&head_only) = self.cl.owed.front() {
            if !scratch.is_empty() && scratch.len() + r.len(head_only) > 64 * 1024 {
                break;
            }
            r.write(head_only, scratch);
            self.cl.owed.pop_front();
            self.c.requests += 1;
        }
        self.c.response_bytes += scratch.len() as u64;
        let sent = match self.d.socket(self.conn) {
            Ok(sock) if mode == SendMode::Copy && self.d.is_flushed(self.conn) => {
                send_now(sock, scratch)
            }
            _ => 0,
        };
        if sent == scratch.len() {
            return false;
        }
        let Ok(mut b) = self.d.take_buf(self.conn, scratch.len() - sent) else {
            return false;
        };
        b.as_mut_slice().copy_from_slice(&scratch[sent..]);
        let _ = self.d.push(self.conn, b, true);
        true
    }

    /// The next owed response as its head copied in and the shared body; `None` when the
    /// queue has no room for both.
    fn queue_split(&mut self, r: &Responses) -> Option<bool> {
        let head_only = *self.cl.owed.front().expect("not empty");
        if !head_only && self.d.room(self.conn) < 2 {
            return None;
        }
        self.cl.owed.pop_front();
        self.c.requests += 1;
        let head = r.heads.ok();
        let mut b = self.d.take_buf(self.conn, head.len()).ok()?;
        b.as_mut_slice().copy_from_slice(head);
        self.c.response_bytes += head.len() as u64;
        let _ = self.d.push(self.conn, b, head_only);
        if !head_only {
            let body = r.body.share().expect("the body is a shared buffer");
            self.c.response_bytes += body.len() as u64;
            let _ = self.d.push(self.conn, body, true);
        }
        Some(true)
    }

    /// The refusal after the owed responses, when there is room; then close once flushed.
    fn queue_refusal(&mut self) -> bool {
        let Some(why) = self.cl.refusal.take() else {
            return false;
        };
        if self.d.room(self.conn) == 0 {
            self.cl.refusal = Some(why);
            return false;
        }
        let bytes = Heads::refusal(why);
        let Ok(mut b) = self.d.take_buf(self.conn, bytes.len()) else {
            return false;
        };
        b.as_mut_slice().copy_from_slice(&bytes);
        let _ = self.d.push(self.conn, b, true);
        self.cl.close_when_flushed = true;
        true
    }

    /// Closes the connection when it asked to be closed and everything is out.
    fn close_when_done(&mut self) {
        let cl = &self.cl;
        if cl.close_when_flushed
            && cl.owed.is_empty()
            && cl.refusal.is_none()
            && self.d.is_flushed(self.conn)
        {
            self.d.close(self.conn);
        }
    }

    /// Starts a `--file` response: the head, then the file spliced out behind it through the
    /// connection's pipe, on the ring ([`UringDriver::send_file`]).
    fn start_file_response(&mut self, heads: &Heads, file: &(Arc<File>, u64), head_only: bool) {
        let head = heads.ok();
        let body = if head_only { 0 } else { file.1 };
        match self.d.send_file(self.conn, head, file.0.clone(), 0, body) {
            Ok(()) => {
                self.c.requests += 1;
                self.c.response_bytes += head.len() as u64 + body;
                self.cl.sending_file = true;
            }
            Err(_) => {
                // No pipe for it, or a head larger than the pipe takes.
                self.c.receive_errors += 1;
                self.d.close(self.conn);
            }
        }
    }
}

/// `send(2)` with `MSG_DONTWAIT`: how many bytes the socket took (0 when it would block or
/// failed; the ring then sends the rest and reports any error).
fn send_now(sock: &Socket, bytes: &[u8]) -> usize {
    use rustix::net::SendFlags;
    rustix::net::send(sock, bytes, SendFlags::DONTWAIT | SendFlags::NOSIGNAL).unwrap_or(0)
}
