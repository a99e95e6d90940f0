//! The socket a send path writes to: any connected socket, as an owned descriptor.

use crate::sys;
use std::io;
use std::os::fd::{AsFd, BorrowedFd, OwnedFd};

/// A connected socket: TCP today's workloads use, or any other stream or datagram socket (a
/// connected UDP socket, a Unix stream socket). Paths own it; nothing in them assumes TCP.
#[derive(Debug)]
pub struct Socket(OwnedFd);

impl Socket {
    /// `shutdown(fd, how)`: `Write` sends a FIN (end of stream) on TCP. See shutdown(2).
    pub fn shutdown(&self, how: std::net::Shutdown) -> io::Result<()> {
        sys::socket::shutdown(self.0.as_fd(), how)
    }

    /// Clears `O_NONBLOCK`: the blocking paths wait for socket space in the kernel, and
    /// io_uring waits itself either way.
    pub(crate) fn set_blocking(&self) -> io::Result<()> {
        sys::socket::set_blocking(self.0.as_fd())
    }
}

impl AsFd for Socket {
    #[inline]
    fn as_fd(&self) -> BorrowedFd<'_> {
        self.0.as_fd()
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

impl From<std::net::TcpListener> for Socket {
    fn from(s: std::net::TcpListener) -> Socket {
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
