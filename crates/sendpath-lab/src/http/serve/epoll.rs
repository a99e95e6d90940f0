//! The `epoll` worker, the classic baseline: non-blocking sockets, `epoll_wait`, `read` and
//! `writev` (and `sendfile(2)` for `--file`).

use super::worker::{Activity, Base, Counts, Gauge, Responses, WorkerResult, MAX_OWED};
use super::ServeConfig;
use crate::cancel::Cancel;
use crate::http::{parse_request, Heads, Parsed, Refusal};
use rustix::event::epoll;
use rustix::io::Errno;
use std::collections::VecDeque;
use std::os::fd::OwnedFd;
use std::sync::atomic::AtomicUsize;
use std::time::{Duration, Instant};

/// The listener's key in the epoll set (connections use their slot index).
const LISTENER: u64 = u64::MAX;

/// A connection's state in the epoll worker.
struct EClient {
    fd: OwnedFd,
    partial: Vec<u8>,
    /// Bytes to write, in order: owned bytes, or the shared body from an offset.
    out: VecDeque<Chunk>,
    close_when_flushed: bool,
    /// For the idle sweep.
    activity: Activity,
    /// Whether the epoll set waits for the socket to be writable too.
    writing: bool,
}

enum Chunk {
    Owned(Vec<u8>, usize),
    Body(usize),
    /// The file body from this offset, sent with `sendfile(2)`.
    File(u64),
}

/// An epoll worker: its epoll set, listener and connections, and what every worker keeps
/// ([`Base`]).
struct Epoll<'a> {
    cfg: &'a ServeConfig,
    ep: OwnedFd,
    listener: OwnedFd,
    /// Connections by slot; `free` lists the empty slots.
    clients: Vec<Option<EClient>>,
    free: Vec<usize>,
    /// Connections open.
    live: usize,
    /// One read's bytes.
    rbuf: Vec<u8>,
    base: Base<'a>,
}

/// Serves `listener` until `cancel` or the configured duration; the counts, or the reason
/// the worker gave up with what it counted.
pub(super) fn epoll_worker(
    cfg: &ServeConfig,
    listener: OwnedFd,
    cancel: &Cancel,
    open: &Gauge<'_>,
    ready: &AtomicUsize,
) -> WorkerResult {
    let base = Base::new(cfg, ready)?;
    let mut w = Epoll::open(cfg, listener, base).map_err(Base::failed_setup)?;
    w.base.ready.mark();
    let mut events = Vec::with_capacity(512);
    while !cancel.is_cancelled() && Instant::now() < w.base.end {
        if let Err(e) = crate::http::epoll_wait(&w.ep, &mut events, Duration::from_millis(100)) {
            if e != Errno::INTR {
                return w.base.fail(format!("epoll_wait: {e}"));
            }
        }
        for ev in events.iter() {
            match ev.data.u64() {
                LISTENER => w.accept_all(open),
                key => w.on_ready(key as usize, ev.flags),
            }
        }
        open.set(w.live);
        let now = Instant::now();
        if w.base.tick(now) {
            w.sweep_idle(now);
        }
    }
    open.set(0);
    Ok(w.base.c)
}

impl<'a> Epoll<'a> {
    /// A non-blocking listener in a new epoll set.
    fn open(
        cfg: &'a ServeConfig,
        listener: OwnedFd,
        base: Base<'a>,
    ) -> Result<Epoll<'a>, Box<(Base<'a>, String)>> {
        let fail = |base, what: &str, e: Errno| Box::new((base, format!("{what}: {e}")));
        if let Err(e) = rustix::io::ioctl_fionbio(&listener, true) {
            return Err(fail(base, "ioctl(FIONBIO)", e));
        }
        let ep = match epoll::create(epoll::CreateFlags::CLOEXEC) {
            Ok(e) => e,
            Err(e) => return Err(fail(base, "epoll_create", e)),
        };
        let key = epoll::EventData::new_u64(LISTENER);
        if let Err(e) = epoll::add(&ep, &listener, key, epoll::EventFlags::IN) {
            return Err(fail(base, "epoll_ctl", e));
        }
        Ok(Epoll {
            cfg,
            ep,
            listener,
            clients: Vec::new(),
            free: Vec::new(),
            live: 0,
            rbuf: vec![0u8; 16 * 1024],
            base,
        })
    }

    /// Accepts every connection waiting, or refuses it above `--max-connections`.
    fn accept_all(&mut self, open: &Gauge<'_>) {
        use rustix::net::SocketFlags;
        loop {
            let fd = match rustix::net::accept_with(
                &self.listener,
                SocketFlags::NONBLOCK | SocketFlags::CLOEXEC,
            ) {
                Ok(fd) => fd,
                Err(Errno::AGAIN) => break,
                Err(e) => {
                    self.base.c.accept_error(&std::io::Error::from(e));
                    break;
                }
            };
            self.base.c.accepted += 1;
            if self.live >= self.cfg.max_connections {
                self.base.c.rejected += 1;
                continue;
            }
            let _ = rustix::net::sockopt::set_tcp_nodelay(&fd, true);
            let i = self.free.pop().unwrap_or_else(|| {
                self.clients.push(None);
                self.clients.len() - 1
            });
            let key = epoll::EventData::new_u64(i as u64);
            if epoll::add(&self.ep, &fd, key, epoll::EventFlags::IN).is_err() {
                self.free.push(i);
                continue;
            }
            self.clients[i] = Some(EClient {
                fd,
                partial: Vec::new(),
                out: VecDeque::new(),
                close_when_flushed: false,
                activity: Activity::new(Instant::now()),
                writing: false,
            });
            self.live += 1;
            open.set(self.live);
        }
    }

    /// Connection `i` is readable or writable: read and answer what arrived, write what is
    /// queued, watch for writability while output waits, close when done or failed.
    fn on_ready(&mut self, i: usize, flags: epoll::EventFlags) {
        let Epoll {
            clients,
            rbuf,
            base,
            ep,
            ..
        } = self;
        let Some(cl) = clients.get_mut(i).and_then(|x| x.as_mut()) else {
            return;
        };
        let readable = epoll::EventFlags::IN | epoll::EventFlags::HUP | epoll::EventFlags::ERR;
        let mut close = flags.intersects(readable) && read_some(cl, rbuf, &base.r, &mut base.c);
        if !close {
            if let Err(e) = epoll_write(cl, &base.r) {
                base.c.ended(e.raw_os_error());
                close = true;
            }
        }
        if !close {
            let want_out = !cl.out.is_empty();
            if want_out != cl.writing {
                cl.writing = want_out;
                let flags = if want_out {
                    epoll::EventFlags::IN | epoll::EventFlags::OUT
                } else {
                    epoll::EventFlags::IN
                };
                let _ = epoll::modify(&*ep, &cl.fd, epoll::EventData::new_u64(i as u64), flags);
            }
            close = cl.close_when_flushed && cl.out.is_empty();
        }
        if close {
            self.close(i);
        }
    }

    /// Removes connection `i`.
    fn close(&mut self, i: usize) {
        if let Some(cl) = self.clients[i].take() {
            let _ = epoll::delete(&self.ep, &cl.fd);
        }
        self.free.push(i);
        self.live -= 1;
    }

    /// Closes the connections idle past `--idle-timeout`.
    fn sweep_idle(&mut self, now: Instant) {
        for i in 0..self.clients.len() {
            let Some(cl) = self.clients[i].as_mut() else {
                continue;
            };
            let waiting = !cl.out.is_empty();
            if cl.activity.timed_out(waiting, now, self.cfg.idle_timeout) {
                self.base.c.idle_timeouts += 1;
                self.close(i);
            }
        }
    }
}

/// Reads what arrived on `cl` and queues its responses; true to close at once.
fn read_some(cl: &mut EClient, rbuf: &mut [u8], r: &Responses, c: &mut Counts) -> bool {
    match rustix::io::read(&cl.fd, &mut *rbuf) {
        Ok(0) => {
            cl.close_when_flushed = true;
            false
        }
        Ok(n) => !cl.close_when_flushed && epoll_parse(cl, &rbuf[..n], r, c),
        Err(Errno::AGAIN) | Err(Errno::INTR) => false,
        Err(e) => {
            c.ended(Some(e.raw_os_error()));
            true
        }
    }
}

/// Parses `data` on an epoll connection and queues the responses; true to close at once.
fn epoll_parse(cl: &mut EClient, data: &[u8], r: &Responses, c: &mut Counts) -> bool {
    let heads = &r.heads;
    let file_len = r.file.as_ref().map(|f| f.1);
    let mut buf = std::mem::take(&mut cl.partial);
    buf.extend_from_slice(data);
    let mut at = 0;
    let mut small: Vec<u8> = Vec::new();
    while at < buf.len() {
        match parse_request(&buf[at..]) {
            Parsed::Request {
                len,
                head_only,
                close,
            } => {
                at += len;
                cl.activity.request(Instant::now());
                c.requests += 1;
                let body_len = file_len.unwrap_or(r.body.len() as u64);
                let n = heads.ok().len() as u64 + if head_only { 0 } else { body_len };
                c.response_bytes += n;
                small.extend_from_slice(heads.ok());
                if !head_only {
                    if file_len.is_some() {
                        cl.out
                            .push_back(Chunk::Owned(std::mem::take(&mut small), 0));
                        cl.out.push_back(Chunk::File(0));
                    } else if r.inline {
                        small.extend_from_slice(r.body.as_slice());
                    } else {
                        cl.out
                            .push_back(Chunk::Owned(std::mem::take(&mut small), 0));
                        cl.out.push_back(Chunk::Body(0));
                    }
                }
                if cl.out.len() > MAX_OWED {
                    c.pipeline_overflows += 1;
                    c.refuse(Refusal::Overflow);
                    return true;
                }
                if close {
                    cl.close_when_flushed = true;
                    break;
                }
            }
            Parsed::Partial => {
                cl.partial = buf[at..].to_vec();
                break;
            }
            Parsed::Refused(why) => {
                c.refuse(why);
                small.extend_from_slice(&Heads::refusal(why));
                cl.close_when_flushed = true;
                break;
            }
        }
    }
    if !small.is_empty() {
        cl.out.push_back(Chunk::Owned(small, 0));
    }
    false
}

/// Writes what is queued until the socket is full: bytes in memory with `writev`, the file
/// body with `sendfile(2)`. An error closes.
fn epoll_write(cl: &mut EClient, r: &Responses) -> std::io::Result<()> {
    let (body, file) = (r.body.as_slice(), r.file.as_ref());
    while let Some(front) = cl.out.front_mut() {
        if let Chunk::File(off) = front {
            let Some((f, len)) = file else {
                cl.out.pop_front();
                continue;
            };
            let left = (len - *off) as usize;
            match rustix::fs::sendfile(&cl.fd, f, Some(off), left) {
                Ok(0) if left > 0 => {
                    // The file is shorter than when the server started: end the connection
                    // rather than send a short body under a longer Content-Length.
                    return Err(std::io::Error::from(std::io::ErrorKind::UnexpectedEof));
                }
                Ok(_) => {
                    if *off >= *len {
                        cl.out.pop_front();
                    }
                    continue;
                }
                Err(Errno::AGAIN) => return Ok(()),
                Err(Errno::INTR) => continue,
                Err(e) => return Err(e.into()),
            }
        }
        let iov: Vec<std::io::IoSlice<'_>> = cl
            .out
            .iter()
            .take(8)
            .map_while(|ch| match ch {
                Chunk::Owned(v, off) => Some(std::io::IoSlice::new(&v[*off..])),
                Chunk::Body(off) => Some(std::io::IoSlice::new(&body[*off..])),
                Chunk::File(_) => None,
            })
            .collect();
        let mut n = match rustix::io::writev(&cl.fd, &iov) {
            Ok(n) => n,
            Err(Errno::AGAIN) => return Ok(()),
            Err(Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        };
        while n > 0 {
            let front = cl.out.front_mut().expect("written bytes belong to a chunk");
            let (left, off) = match front {
                Chunk::Owned(v, off) => (v.len() - *off, off),
                Chunk::Body(off) => (body.len() - *off, off),
                Chunk::File(_) => unreachable!("writev stops before a file chunk"),
            };
            if n >= left {
                n -= left;
                cl.out.pop_front();
            } else {
                *off += n;
                n = 0;
            }
        }
    }
    Ok(())
}
