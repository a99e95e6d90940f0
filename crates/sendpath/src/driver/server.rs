//! What a server also does on the ring: multishot accept on a listener, multishot receive into
//! provided buffers, and a file spliced to a connection behind a response head, each reported
//! to the owner's event loop as an [`Event`].

use super::splice::{SpliceJob, SpliceProgress};
use super::{ConnId, Event, RecvBuf, RecvConfig, UringDriver, LISTENER};
use crate::sys::uring::AuxOp;
use crate::{Error, Result, Socket, Strategy};
use std::fs::File;
use std::os::fd::{AsFd, OwnedFd};
use std::sync::Arc;

/// A connection's pipe for file sends, and the file send under way.
pub(super) struct FileSend {
    read: OwnedFd,
    write: OwnedFd,
    size: u64,
    job: Option<(SpliceJob, Arc<File>, u64)>,
}

impl FileSend {
    /// No file send under way.
    pub(super) fn is_idle(&self) -> bool {
        self.job.is_none()
    }
}

impl UringDriver {
    /// Registers `cfg.buffers` provided buffers of `cfg.size` bytes with the ring, for
    /// connections that receive on it. Once per driver.
    ///
    /// ```no_run
    /// # let mut ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// ring.provide_recv_buffers(sendpath::RecvConfig::default())?;
    /// # Ok::<(), sendpath::Error>(())
    /// ```
    pub fn provide_recv_buffers(&mut self, cfg: RecvConfig) -> Result<()> {
        self.ring
            .provide_recv_buffers(cfg.buffers, cfg.size)
            .map_err(Error::sys("io_uring_register(PBUF_RING)"))
    }

    /// Accepts connections from `listener` on the ring (multishot accept): each comes back as
    /// [`Event::Accepted`]. The driver keeps the listener open while it runs.
    ///
    /// ```no_run
    /// # let mut ring = sendpath::UringDriver::new(sendpath::DriverConfig::default())?;
    /// ring.listen(std::net::TcpListener::bind("127.0.0.1:8080")?)?;
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn listen(&mut self, listener: std::net::TcpListener) -> Result<()> {
        let l = Socket::from(OwnedFd::from(listener));
        self.ring
            .push_accept_multi(l.as_fd(), LISTENER)
            .map_err(Error::sys("io_uring ACCEPT (multishot)"))?;
        self.listener = Some(l);
        Ok(())
    }

    /// Adds a connection that sends with `strategy` (as [`UringDriver::add`]) and also
    /// receives on the ring: a multishot receive into the ring's provided buffers
    /// ([`UringDriver::provide_recv_buffers`]) reports what arrives as [`Event::Received`].
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, sock: sendpath::Socket) -> sendpath::Result<()> {
    /// let id = ring.add_receiving(sock, sendpath::Strategy::Uring)?;
    /// # let _ = id; Ok(()) }
    /// ```
    pub fn add_receiving(&mut self, sock: impl Into<Socket>, strategy: Strategy) -> Result<ConnId> {
        let id = self.add(sock, strategy)?;
        let c = self.conns[id.index()].as_ref().expect("just added");
        if let Err(e) = self.ring.push_recv_multi(c.sock.as_fd(), id.idx) {
            self.close(id);
            return Err(Error::sys("io_uring RECV (multishot)")(e));
        }
        Ok(id)
    }

    /// The bytes a receive handed over.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, buf: sendpath::RecvBuf) {
    /// let request = ring.received(&buf).to_vec();
    /// ring.recycle(buf);
    /// # let _ = request;
    /// # }
    /// ```
    pub fn received(&self, buf: &RecvBuf) -> &[u8] {
        self.ring.recv_bytes(buf.id, buf.len).unwrap_or(&[])
    }

    /// Gives a receive buffer back to the kernel.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, buf: sendpath::RecvBuf) {
    /// ring.recycle(buf);
    /// # }
    /// ```
    pub fn recycle(&mut self, buf: RecvBuf) {
        self.ring.recycle(buf.id);
    }

    /// Moves the events since the last call into `out`.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver) {
    /// let mut events = Vec::new();
    /// ring.take_events(&mut events);
    /// # }
    /// ```
    pub fn take_events(&mut self, out: &mut Vec<Event>) {
        out.append(&mut self.events);
    }

    /// Sends `head`, then `len` bytes of `file` from `offset`, on `id`: the head is written
    /// into a pipe the connection keeps, and the file follows it through the pipe by linked
    /// pairs of `IORING_OP_SPLICE` (file to pipe, pipe to socket), a pipe-full at a time; no
    /// byte of the file passes through user memory. [`Event::FileSent`] says when every byte
    /// reached the socket, or why not. The connection must have nothing queued
    /// ([`UringDriver::is_flushed`]) and no other file under way; it counts as unflushed
    /// until the file is sent.
    ///
    /// ```no_run
    /// # fn f(ring: &mut sendpath::UringDriver, id: sendpath::ConnId) -> sendpath::Result<()> {
    /// let file = std::sync::Arc::new(std::fs::File::open("index.html").unwrap());
    /// let len = file.metadata().unwrap().len();
    /// let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {len}\r\n\r\n");
    /// ring.send_file(id, head.as_bytes(), file, 0, len)?;
    /// # Ok(()) }
    /// ```
    pub fn send_file(
        &mut self,
        id: ConnId,
        head: &[u8],
        file: Arc<File>,
        offset: u64,
        len: u64,
    ) -> Result<()> {
        let pipe_size = self.cfg.options.pipe_size;
        let c = self.open_conn_mut(id)?;
        if !c.state.is_flushed() || c.file.as_ref().is_some_and(|f| f.job.is_some()) {
            return Err(Error::Config(
                "a file send needs the connection's earlier bytes on the socket first: wait until is_flushed(id)".into(),
            ));
        }
        if c.file.is_none() {
            let (read, write) = crate::sys::file::pipe().map_err(Error::sys("pipe2"))?;
            let size = crate::sys::file::set_pipe_size(write.as_fd(), pipe_size)
                .unwrap_or(64 * 1024) as u64;
            c.file = Some(FileSend {
                read,
                write,
                size,
                job: None,
            });
        }
        let f = c.file.as_mut().expect("made above");
        if head.len() as u64 > f.size / 2 {
            return Err(Error::Config(format!(
                "a response head of {} bytes does not fit the connection's pipe ({} bytes): raise Options::pipe_size",
                head.len(),
                f.size
            )));
        }
        // The pipe is empty between files and holds at least twice the head: no wait.
        let wrote = match head {
            [] => 0,
            head => rustix::io::write(&f.write, head)
                .map_err(|e| Error::sys("write(pipe)")(e.into()))?,
        };
        let total = head.len() as u64 + len;
        f.job = Some((SpliceJob::new(offset, len, wrote as u64), file, total));
        self.next_splice(id.idx)
    }

    /// Pushes the next pair of connection `idx`'s file send.
    fn next_splice(&mut self, idx: u32) -> Result<()> {
        let c = self.conns[idx as usize].as_mut().expect("a file send's");
        let f = c.file.as_mut().expect("a file send's pipe");
        let Some((job, file, _)) = f.job.as_mut() else {
            return Ok(());
        };
        let step = job
            .next(f.size)
            .map_err(|e| Error::Config(format!("file send: {e} (raise Options::pipe_size)")))?;
        self.ring
            .push_splice(
                file.as_fd(),
                step.offset,
                step.len,
                f.write.as_fd(),
                f.read.as_fd(),
                c.sock.as_fd(),
                step.in_pipe + step.len,
                idx,
            )
            .map_err(Error::sys("io_uring SPLICE"))
    }

    /// A half of connection `idx`'s splice pair completed.
    fn on_spliced(&mut self, idx: u32, into_pipe: bool, res: i32) {
        let id = self.id_of(idx);
        let Some(f) = self.conns[idx as usize]
            .as_mut()
            .and_then(|c| c.file.as_mut())
        else {
            return;
        };
        let Some((job, _, total)) = f.job.as_mut() else {
            return;
        };
        let total = *total;
        let ended = match job.on_spliced(into_pipe, res) {
            Ok(SpliceProgress::Waiting) => return,
            Ok(SpliceProgress::Next) => match self.next_splice(idx) {
                Ok(()) => return,
                Err(e) => Err(std::io::Error::other(e.to_string())),
            },
            Ok(SpliceProgress::Done) => Ok(total),
            Err(e) => Err(e.into_io()),
        };
        if let Some(f) = self.conns[idx as usize]
            .as_mut()
            .and_then(|c| c.file.as_mut())
        {
            f.job = None;
        }
        if self.is_open(id) {
            self.events.push(Event::FileSent {
                conn: id,
                result: ended,
            });
        }
    }

    /// Turns accept, receive and splice completions into events.
    pub(super) fn dispatch_aux(&mut self) {
        let mut aux = std::mem::take(&mut self.aux);
        self.ring.take_aux(&mut aux);
        for a in aux.drain(..) {
            match a.op {
                AuxOp::Accept => {
                    if let Some(fd) = a.fd {
                        self.events.push(Event::Accepted(Socket::from(fd)));
                    } else if a.res < 0 {
                        let e = std::io::Error::from_raw_os_error(-a.res);
                        self.events.push(Event::AcceptFailed(e));
                    }
                    if !a.more && self.listener.is_some() {
                        self.rearm_accept = true;
                    }
                }
                AuxOp::Recv => self.on_received(a.tag, a.buf, a.res, a.more),
                AuxOp::SpliceIn | AuxOp::SpliceOut => {
                    self.on_spliced(a.tag, a.op == AuxOp::SpliceIn, a.res)
                }
                AuxOp::Cancel => {}
            }
        }
        self.aux = aux;
    }

    /// A receive completion of connection `tag`: bytes in provided buffer `buf`, or its end.
    fn on_received(&mut self, tag: u32, buf: Option<u16>, res: i32, more: bool) {
        let id = self.id_of(tag);
        let open = self.is_open(id);
        match (buf, res) {
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
        if more || !open {
            return;
        }
        if res == -libc::ENOBUFS || res > 0 {
            // Out of buffers, or ended after data (the kernel's choice): arm it again.
            self.rearm.push(tag);
        } else {
            let error = (res < 0).then(|| std::io::Error::from_raw_os_error(-res));
            self.events.push(Event::RecvEnded { conn: id, error });
        }
    }

    /// Arms again the accept and the receives that ended for want of buffers.
    pub(super) fn rearm(&mut self) {
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
}
