//! The async sender (cargo feature `tokio`): the send paths on a tokio runtime, never
//! blocking a runtime thread.
//!
//! - `socket.rs`: `send`, `sendmsg(MSG_ZEROCOPY)` and `sendfile` on the non-blocking socket,
//!   awaiting writability and the error queue's readiness;
//! - `ring.rs`: SEND and SEND_ZC on a ring whose fd the reactor polls.
//!
//! `adaptive` uses both, deciding every send with one [`Adaptive`], as the blocking path does.

mod ring;
mod socket;

use crate::policy::adaptive::Adaptive;
use crate::send::Chooser;
use crate::socket::Waits;
use crate::sys::reactor::Deadline;
use crate::{Buf, Error, FileRange, Options, Result, SendStats, Socket, Strategy};
use ring::RingHalf;
use socket::SocketHalf;
use std::collections::VecDeque;
use std::fs::File;
use std::sync::Arc;
use std::time::Duration;

/// A send path on tokio: `copy`, `msg-zerocopy`, `uring`, `uring-zc`, `adaptive` or
/// `sendfile` on a connected, non-blocking socket (a tokio `TcpStream` or `UdpSocket` through
/// `into_std()`, or any socket with `set_nonblocking(true)`). Every `send` returns once its
/// bytes are in the kernel, never waiting for a zero-copy notification; buffers come back
/// through [`AsyncSender::take_buf`] only after the kernel released them.
///
/// **Cancel safety**: buffers handed to a send belong to the sender from the first poll of
/// the future. If the future is dropped before it completes, what it had not yet put on the
/// socket stays queued, in order, and goes out first on the next call (or `flush`); a buffer
/// the kernel may still read is never freed or handed out, whatever is dropped.
///
/// **One runtime**: use the sender on the runtime it was opened on. The ring paths register
/// their ring with that runtime's reactor when opened, so after it shut down their next wait
/// is an [`Error::Config`] saying so; the socket joins the reactor of the runtime that first
/// waits on it. A closed peer is the failed call's error (`EPIPE`, `ECONNRESET`).
///
/// ```no_run
/// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
/// use sendpath::{AsyncSender, Options, Strategy};
///
/// let stream = tokio::net::TcpStream::connect("127.0.0.1:9000").await?;
/// let mut tx = AsyncSender::open(Strategy::MsgZerocopy, stream.into_std()?, &Options::default())?;
/// for _ in 0..1000 {
///     let mut buf = tx.take_buf(65536);
///     buf.as_mut_slice().fill(b'x');
///     tx.send_buf(buf).await?; // in the kernel; its completion comes later
/// }
/// let stats = tx.close(std::time::Duration::from_secs(2)).await?;
/// println!("copied {:?}", stats.copied_fraction());
/// # Ok(()) }
/// ```
pub struct AsyncSender {
    strategy: Strategy,
    note: Option<String>,
    socket: Option<SocketHalf>,
    ring: Option<RingHalf>,
    /// `adaptive`'s decisions while it has no ring (then they are the ring's chooser's).
    decide: Option<Adaptive>,
    /// Buffers handed in and not yet given to a half.
    backlog: VecDeque<Buf>,
    /// The last buffers went on the ring (flush it before the socket sends).
    on_ring: bool,
    file: Option<Arc<File>>,
    opts: Options,
    stats: SendStats,
    sends: u64,
    /// The socket half's completions, copied ones and `ENOBUFS` already passed on to
    /// `adaptive`.
    seen: (u64, u64, u64),
}

impl std::fmt::Debug for AsyncSender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AsyncSender")
            .field("strategy", &self.strategy)
            .finish()
    }
}

/// The error of a wait on the reactor, which tokio gives only when the runtime the
/// descriptor was registered with is shutting down.
fn reactor_gone(what: &'static str) -> impl FnOnce(std::io::Error) -> Error {
    move |e| {
        Error::Config(format!(
            "waiting for {what}: the tokio runtime the sender registered with has shut down ({e}): use an AsyncSender on the runtime it was opened on"
        ))
    }
}

/// The error of making a wait's deadline (`sys::reactor::Deadline`): its timerfd, or its
/// registration with the reactor.
fn deadline_failed(e: std::io::Error) -> Error {
    Error::sys("timerfd_create")(e)
}

/// Which half a send goes on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Half {
    Socket { zc: bool },
    Ring,
}

impl AsyncSender {
    /// Opens `strategy` on `sock` in the current tokio runtime (its reactor must have I/O
    /// enabled; no timer is needed: `close` waits on a timerfd of its own). The socket must
    /// be connected and non-blocking; it is used as given. Refused, naming why: a path with no
    /// async sender (`serialize`, `gather`, `vmsplice`, the other file paths), a blocking
    /// socket, or no runtime.
    ///
    /// ```no_run
    /// # async fn f() -> Result<(), Box<dyn std::error::Error>> {
    /// let s = tokio::net::TcpStream::connect("127.0.0.1:9000").await?.into_std()?;
    /// let tx = sendpath::AsyncSender::open(sendpath::Strategy::Adaptive, s, &Default::default())?;
    /// # let _ = tx; Ok(()) }
    /// ```
    pub fn open(
        strategy: Strategy,
        sock: impl Into<Socket>,
        opts: &Options,
    ) -> Result<AsyncSender> {
        let sock: Socket = sock.into();
        sock.check(Waits::OnTheReactor)?;
        let mut s = AsyncSender {
            strategy,
            note: None,
            socket: None,
            ring: None,
            decide: None,
            backlog: VecDeque::new(),
            on_ring: false,
            file: opts.file.clone(),
            opts: opts.clone(),
            stats: SendStats::default(),
            sends: 0,
            seen: (0, 0, 0),
        };
        match strategy {
            Strategy::Uring | Strategy::UringZc => {
                let chooser = Chooser::for_strategy(strategy, opts).expect("a ring strategy");
                s.ring = Some(RingHalf::new(sock, chooser, opts)?);
            }
            Strategy::Copy | Strategy::MsgZerocopy | Strategy::Sendfile | Strategy::Adaptive => {
                if strategy == Strategy::Sendfile && s.file.is_none() {
                    return Err(Error::Config(
                        "the sendfile path sends from a file: give Options::file".into(),
                    ));
                }
                let zc = matches!(strategy, Strategy::MsgZerocopy | Strategy::Adaptive);
                let (half, note) = SocketHalf::new(sock, zc, opts.inflight, opts.zc_reap_every)?;
                s.socket = Some(half);
                s.note = note;
                if strategy == Strategy::Adaptive {
                    let profile = opts.profile.as_deref().cloned().unwrap_or_default();
                    s.decide = Some(Adaptive::new(profile, opts.adaptive));
                }
            }
            other => {
                return Err(Error::Config(format!(
                    "{other} has no async sender (copy, msg-zerocopy, uring, uring-zc, adaptive and sendfile do): open it with sendpath::open on a blocking socket in spawn_blocking"
                )))
            }
        }
        s.refresh();
        Ok(s)
    }

    /// The path's name.
    ///
    /// ```no_run
    /// # fn f(tx: &sendpath::AsyncSender) { assert_eq!(tx.name(), "uring-zc"); }
    /// ```
    pub fn name(&self) -> &'static str {
        self.strategy.name()
    }

    /// Why the path sends other than asked, if it does (no `SO_ZEROCOPY`, no io_uring).
    ///
    /// ```no_run
    /// # fn f(tx: &sendpath::AsyncSender) { if let Some(n) = tx.note() { eprintln!("{n}"); } }
    /// ```
    pub fn note(&self) -> Option<&str> {
        self.note.as_deref()
    }

    /// A buffer of `len` bytes to fill and send: one the kernel has released, or a new one.
    ///
    /// ```no_run
    /// # fn f(tx: &mut sendpath::AsyncSender) {
    /// let mut buf = tx.take_buf(4096);
    /// buf.as_mut_slice().fill(0);
    /// # }
    /// ```
    pub fn take_buf(&mut self, len: usize) -> Buf {
        match self.half(len) {
            Half::Ring => self.ring().expect("a ring half").take_buf(len),
            Half::Socket { .. } => self.socket.as_mut().expect("a socket half").take_buf(len),
        }
    }

    /// Sends one buffer as a message, after everything handed in before it.
    ///
    /// ```no_run
    /// # async fn f(tx: &mut sendpath::AsyncSender) -> sendpath::Result<()> {
    /// let buf = tx.take_buf(64);
    /// tx.send_buf(buf).await
    /// # }
    /// ```
    pub async fn send_buf(&mut self, buf: Buf) -> Result<()> {
        self.backlog.push_back(buf);
        self.drive().await
    }

    /// Sends each buffer of `bufs` as its own message, in order, and leaves `bufs` empty.
    ///
    /// ```no_run
    /// # async fn f(tx: &mut sendpath::AsyncSender) -> sendpath::Result<()> {
    /// let mut batch: Vec<_> = (0..16).map(|_| tx.take_buf(4096)).collect();
    /// tx.send_bufs(&mut batch).await
    /// # }
    /// ```
    pub async fn send_bufs(&mut self, bufs: &mut Vec<Buf>) -> Result<()> {
        self.backlog.extend(bufs.drain(..));
        self.drive().await
    }

    /// Sends ranges of `Options::file` with `sendfile` (the `sendfile` and `adaptive` paths),
    /// each a message, in order after the buffers handed in before.
    ///
    /// ```no_run
    /// # async fn f(tx: &mut sendpath::AsyncSender) -> sendpath::Result<()> {
    /// tx.send_ranges(&[sendpath::FileRange { offset: 0, len: 1 << 20 }]).await
    /// # }
    /// ```
    pub async fn send_ranges(&mut self, ranges: &[FileRange]) -> Result<()> {
        let Some(file) = self.file.clone() else {
            return Err(Error::Config(format!(
                "the {} path sends file data from Options::file, which was not given",
                self.name()
            )));
        };
        if !matches!(self.strategy, Strategy::Sendfile | Strategy::Adaptive) {
            return Err(Error::WrongPayload {
                path: self.name(),
                what: "a file range",
            });
        }
        self.flush().await?;
        for r in ranges {
            if let Some(d) = self.decide_mut() {
                d.choose_file();
            }
            let half = self.socket.as_mut().expect("a socket half");
            half.send_file(&file, r.offset, r.len).await?;
        }
        self.counted(ranges.len() as u64);
        Ok(())
    }

    /// Puts every byte handed in on the socket (zero-copy notifications may still be due).
    ///
    /// ```no_run
    /// # async fn f(tx: &mut sendpath::AsyncSender) -> sendpath::Result<()> {
    /// tx.flush().await
    /// # }
    /// ```
    pub async fn flush(&mut self) -> Result<()> {
        self.drive().await?;
        if let Some(r) = &mut self.ring {
            r.flush().await?;
        }
        self.on_ring = false;
        self.refresh();
        Ok(())
    }

    /// Flushes, awaits every zero-copy notification for at most `timeout`, and closes the
    /// socket, handing back what the path did; buffers the kernel still held then are an
    /// [`Error::Leaked`] with the same final counts.
    ///
    /// ```no_run
    /// # async fn f(tx: sendpath::AsyncSender) -> sendpath::Result<()> {
    /// let stats = tx.close(std::time::Duration::from_secs(2)).await?;
    /// println!("{} bytes", stats.bytes);
    /// # Ok(()) }
    /// ```
    pub async fn close(mut self, timeout: Duration) -> Result<SendStats> {
        let flushed = Deadline::after(timeout).within(self.flush()).await;
        if let Some(r) = flushed.map_err(deadline_failed)? {
            r?;
        }
        let mut leaked = 0;
        if let Some(s) = &mut self.socket {
            leaked += s.drain(timeout).await?;
        }
        if let Some(r) = &mut self.ring {
            leaked += r.drain(timeout).await?;
        }
        self.refresh();
        match leaked {
            0 => Ok(self.stats.clone()),
            buffers => Err(Error::Leaked {
                buffers,
                stats: Box::new(self.stats.clone()),
            }),
        }
    }

    /// What the path has done so far (refreshed by `flush`, `close` and every 4096 sends).
    ///
    /// ```no_run
    /// # fn f(tx: &sendpath::AsyncSender) { println!("{}", tx.stats().bytes); }
    /// ```
    pub fn stats(&self) -> &SendStats {
        &self.stats
    }

    /// Hands every buffer of the backlog to its half, run by run, in order.
    async fn drive(&mut self) -> Result<()> {
        while let Some(len) = self.backlog.front().map(Buf::len) {
            match self.half(len) {
                Half::Ring => {
                    self.socket_flush().await?;
                    let n = self.backlog.iter().take_while(|b| b.len() == len).count();
                    // Set first: a future dropped mid-send must still flush the ring before
                    // a socket send.
                    self.on_ring = true;
                    let ring = self.ring.as_mut().expect("half() made the ring");
                    ring.send(&mut self.backlog, n).await?;
                    self.counted(n as u64);
                }
                Half::Socket { zc } => {
                    if self.on_ring {
                        self.ring().expect("a ring half").flush().await?;
                        self.on_ring = false;
                    }
                    let b = self.backlog.pop_front().expect("a front buffer");
                    let zc = self.choose_zc(len, zc);
                    let half = self.socket.as_mut().expect("a socket half");
                    half.queue(b, zc);
                    half.drive().await?;
                    self.feedback();
                    self.counted(1);
                }
            }
        }
        Ok(())
    }

    /// The socket half's queue all on the socket (a ring send must not overtake it).
    async fn socket_flush(&mut self) -> Result<()> {
        match &mut self.socket {
            Some(s) if !s.is_flushed() => s.drive().await,
            _ => Ok(()),
        }
    }

    /// Where a send of `len` bytes goes: the ring for the ring strategies and `adaptive`'s
    /// ring tiers (when a ring can be made); else the socket, zero-copy when the path may.
    fn half(&mut self, len: usize) -> Half {
        match self.strategy {
            Strategy::Uring | Strategy::UringZc => Half::Ring,
            Strategy::MsgZerocopy => Half::Socket { zc: true },
            Strategy::Adaptive => {
                let tier = self.decide_mut().expect("adaptive decides").tier(len);
                match tier {
                    Strategy::Uring | Strategy::UringZc if self.ring().is_some() => Half::Ring,
                    t => Half::Socket {
                        zc: t.avoids_send_copy(),
                    },
                }
            }
            _ => Half::Socket { zc: false },
        }
    }

    /// Whether this socket send goes zero-copy: `adaptive` decides it (counting every
    /// decision, copies too), the fixed paths already did (`zc`).
    fn choose_zc(&mut self, len: usize, zc: bool) -> bool {
        if self.strategy != Strategy::Adaptive {
            return zc;
        }
        let inflight = self.socket.as_ref().map_or(0, SocketHalf::zc_inflight);
        let d = self.decide_mut().expect("adaptive decides");
        d.choose(len, inflight).avoids_send_copy()
    }

    /// `adaptive`'s ring, made on first use on a duplicate of the socket (a note says why
    /// when it cannot be); the ring strategies' own.
    fn ring(&mut self) -> Option<&mut RingHalf> {
        if self.ring.is_none() && self.strategy == Strategy::Adaptive && self.note.is_none() {
            if let Err(e) = self.make_ring() {
                self.note = Some(format!(
                    "io_uring unavailable ({e}): the uring and uring-zc tiers run on the socket"
                ));
            }
        }
        self.ring.as_mut()
    }

    fn make_ring(&mut self) -> Result<()> {
        let fd = self.socket.as_ref().expect("a socket half").fd();
        let fd = fd.try_clone_to_owned().map_err(Error::sys("dup"))?;
        let decide = self.decide.take().expect("no ring yet: the sender decides");
        let chooser = Chooser::Adaptive(Box::new(decide.clone()));
        match RingHalf::new(Socket::from(fd), chooser, &self.opts) {
            Ok(r) => {
                self.ring = Some(r);
                Ok(())
            }
            Err(e) => {
                self.decide = Some(decide);
                Err(e)
            }
        }
    }

    /// `adaptive`'s decisions: the ring's chooser's once there is a ring.
    fn decide_mut(&mut self) -> Option<&mut Adaptive> {
        match &mut self.ring {
            Some(r) => r.driver.chooser_mut(r.id)?.adaptive_mut(),
            None => self.decide.as_mut(),
        }
    }

    /// Passes the socket half's new completions and memory refusals on to `adaptive` (its
    /// ring's go to the ring's chooser directly).
    fn feedback(&mut self) {
        if self.strategy != Strategy::Adaptive {
            return;
        }
        let z = &self.socket.as_ref().expect("a socket half").stats.zerocopy;
        let now = (z.completions, z.copied, z.fallbacks.enobufs);
        let was = std::mem::replace(&mut self.seen, now);
        let d = self.decide_mut().expect("adaptive decides");
        if now.0 > was.0 {
            d.on_completions(now.0 - was.0, now.1.saturating_sub(was.1));
        }
        for _ in was.2..now.2 {
            d.on_no_memory();
        }
    }

    /// Counts sends; every 4096, refreshes the merged counters.
    fn counted(&mut self, n: u64) {
        let before = self.sends / 4096;
        self.sends += n;
        if self.sends / 4096 != before {
            self.refresh();
        }
    }

    /// Recomputes the merged stats.
    fn refresh(&mut self) {
        let mut s = SendStats::default();
        if let Some(h) = &self.socket {
            s.merge(&h.stats);
        }
        if let Some(r) = &self.ring {
            s.merge(r.driver.stats(r.id).expect("the ring's one connection"));
        }
        if let Some(d) = self.decide_mut() {
            s.decisions = Some(*d.decisions());
        }
        self.stats = s;
    }
}
