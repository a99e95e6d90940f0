//! The socket a send path writes to: any connected socket, as an owned descriptor, used as
//! given. The library never changes its file description's flags or options behind the
//! caller's back; what it cannot send on is refused when a path is opened on it.

use crate::{Error, Result};
use rustix::fs::OFlags;
use rustix::net::sockopt;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Duration;

/// A connected socket: TCP, a connected UDP socket, a Unix stream socket, or any descriptor of
/// one. Paths own it; nothing in them assumes TCP. Made from the std socket types or from an
/// `OwnedFd` (checked when a path is opened on it: a descriptor that is not a connected
/// socket is refused then, naming why).
///
/// ```no_run
/// use sendpath::Socket;
/// let s: Socket = std::net::TcpStream::connect("127.0.0.1:9000")?.into();
/// s.shutdown(std::net::Shutdown::Write)?; // the peer sees the end of the stream
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug)]
pub struct Socket(OwnedFd);

/// How a path waits for socket space.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Waits {
    /// In a blocking system call: the socket must be in blocking mode.
    InTheKernel,
    /// On io_uring, which waits itself whatever the socket's mode.
    OnTheRing,
    /// On the tokio reactor: the socket must be non-blocking, as tokio's are.
    OnTheReactor,
}

impl Socket {
    /// `shutdown(fd, how)`: `Write` sends a FIN (end of stream) on TCP. See shutdown(2).
    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        crate::sys::socket::shutdown(self.0.as_fd(), how)
    }

    /// Checks that a path can send on this socket as it is: a socket (`SO_TYPE`), not a
    /// listening one (`SO_ACCEPTCONN`), connected (`getpeername`), and in blocking mode when
    /// the path waits in the kernel. Each refusal says what to do.
    pub(crate) fn check(&self, waits: Waits) -> Result<()> {
        let fd = self.0.as_fd();
        let refuse = |why: String| Err(Error::Socket(why));
        if sockopt::socket_type(fd).is_err() {
            return refuse(
                "not a socket (ENOTSOCK): a send path needs a connected socket (TcpStream, a connected UdpSocket, UnixStream)".into(),
            );
        }
        if sockopt::socket_acceptconn(fd).unwrap_or(false) {
            return refuse(
                "a listening socket: accept a connection and send on that (or give a listener to UringDriver::listen)".into(),
            );
        }
        if rustix::net::getpeername(fd).is_err() {
            return refuse(
                "the socket is not connected: connect it (UDP too: UdpSocket::connect) before opening a path".into(),
            );
        }
        let nonblocking = rustix::fs::fcntl_getfl(fd).is_ok_and(|f| f.contains(OFlags::NONBLOCK));
        if waits == Waits::OnTheReactor && !nonblocking {
            return refuse(
                "the socket is in blocking mode and the async sender must never block a runtime thread: give it a tokio socket (TcpStream::into_std keeps it non-blocking) or call set_nonblocking(true) first".into(),
            );
        }
        if waits == Waits::InTheKernel && nonblocking {
            return refuse(
                "the socket is non-blocking (O_NONBLOCK) and this path waits for socket space in a blocking call: clear it (set_nonblocking(false)) before opening the path, put the connection on a UringDriver (which waits itself), or use the async sender".into(),
            );
        }
        Ok(())
    }

    /// The socket's send timeout (`SO_SNDTIMEO`), if one is set: how long a path waits for
    /// socket space before it gives up with `EAGAIN`.
    pub(crate) fn send_timeout(&self) -> Option<Duration> {
        sockopt::socket_timeout(&self.0, sockopt::Timeout::Send)
            .ok()
            .flatten()
    }
}

impl AsFd for Socket {
    #[inline]
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
    }
}

impl std::os::fd::AsRawFd for Socket {
    #[inline]
    fn as_raw_fd(&self) -> std::os::fd::RawFd {
        self.0.as_raw_fd()
    }
}

impl From<OwnedFd> for Socket {
    fn from(fd: OwnedFd) -> Socket {
        Socket(fd)
    }
}

impl From<std::net::TcpStream> for Socket {
    fn from(s: std::net::TcpStream) -> Socket {
        Socket(s.into())
    }
}

impl From<Socket> for OwnedFd {
    fn from(s: Socket) -> OwnedFd {
        s.0
    }
}

impl From<std::net::UdpSocket> for Socket {
    fn from(s: std::net::UdpSocket) -> Socket {
        Socket(s.into())
    }
}

impl From<std::os::unix::net::UnixStream> for Socket {
    fn from(s: std::os::unix::net::UnixStream) -> Socket {
        Socket(s.into())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream, UdpSocket};

    #[test]
    fn what_cannot_be_sent_on_is_refused_naming_why() {
        let why = |s: Socket, w: Waits| s.check(w).unwrap_err().to_string();
        let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        assert!(why(null.into(), Waits::OnTheRing).starts_with("not a socket"));
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let listener: OwnedFd = l.into();
        assert!(why(listener.into(), Waits::OnTheRing).starts_with("a listening socket"));
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(why(udp.into(), Waits::OnTheRing).contains("not connected"));
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let tcp = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        tcp.set_nonblocking(true).unwrap();
        let s = Socket::from(tcp);
        assert!(s.check(Waits::OnTheRing).is_ok(), "the ring waits itself");
        assert!(why(s, Waits::InTheKernel).contains("non-blocking (O_NONBLOCK)"));
        let _ = addr;
    }
}
