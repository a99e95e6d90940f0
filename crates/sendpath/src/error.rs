//! The library's one error type. A system call's failure names the call, the errno and what
//! to do about it; [`Error::kind`] sorts it as `std::io` does, and it converts into an
//! `io::Error` for code that speaks only that.

use crate::SendStats;
use std::io;

/// Everything that can go wrong in the library.
///
/// ```no_run
/// use sendpath::{open, Options, Strategy};
/// use std::io::ErrorKind;
///
/// let sock = std::net::TcpStream::connect("127.0.0.1:9000")?;
/// let mut path = open(Strategy::Copy, sock, &Options::default())?;
/// let buf = path.take_buf(4096);
/// match path.send_buf(buf) {
///     Ok(()) => {}
///     // "send failed: Broken pipe (EPIPE): the peer closed the connection"
///     Err(e) if e.kind() == ErrorKind::BrokenPipe => eprintln!("{e}"),
///     Err(e) => return Err(e.into()), // an io::Error, for `?` in io code
/// }
/// # Ok::<(), std::io::Error>(())
/// ```
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A system call failed.
    #[error("{call} failed: {}", describe(source))]
    Sys {
        /// The call, e.g. `sendmsg(MSG_ZEROCOPY)`.
        call: &'static str,
        /// What the kernel said.
        #[source]
        source: io::Error,
    },
    /// A payload of the wrong kind for the path (memory fields to a file path, or the reverse).
    #[error("the {path} path cannot send {what}")]
    WrongPayload {
        /// Path name.
        path: &'static str,
        /// What it was given.
        what: &'static str,
    },
    /// A strategy name that does not exist.
    #[error("unknown strategy `{0}` (expected one of: {list})", list = crate::strategy::Strategy::names().join(", "))]
    UnknownStrategy(String),
    /// A path or driver needs something the caller did not give, or was given a value it
    /// cannot use; the message says which and what to give.
    #[error("{0}")]
    Config(String),
    /// A socket the library cannot send on as given: not a socket, a listening socket, not
    /// connected, or non-blocking for a path that waits in the kernel. Refused when the path
    /// is opened, with what to do.
    #[error("{0}")]
    Socket(String),
    /// A host profile that cannot be used (another schema version, malformed); says what to do.
    #[error("{0}")]
    Profile(String),
    /// The byte stream could not be kept in order (io_uring links ran out of order).
    #[error("io_uring send chain failed: {}", describe(.0))]
    Chain(io::Error),
    /// A [`ConnId`](crate::ConnId) that names no open connection of this driver: it was
    /// closed (its index may now be another connection's), or it is another driver's.
    #[error("connection {index} is not an open connection of this driver (it was closed, or belongs to another driver): nothing was sent")]
    UnknownConn {
        /// The id's index.
        index: usize,
    },
    /// The kernel still held buffers at the deadline of a close: they are leaked (never
    /// reused or freed, since the kernel may still read them). The final counts are here.
    #[error("the kernel still held {buffers} buffer(s) at the close deadline: they are leaked, never reused; give the peer time to read, or close with a longer deadline")]
    Leaked {
        /// Buffers leaked.
        buffers: u64,
        /// What the path did, to the end.
        stats: Box<SendStats>,
    },
}

impl Error {
    /// Wraps an `io::Error` from `call`.
    pub(crate) fn sys(call: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Sys { call, source }
    }

    /// What sort of error this is, as `std::io` sorts them: the kernel's for a failed call
    /// (`BrokenPipe`, `WouldBlock`, ...), `InvalidInput` for a misuse, `NotFound` for an
    /// unknown connection, `TimedOut` for buffers the kernel held past a deadline.
    ///
    /// ```
    /// let e = "nope".parse::<sendpath::Strategy>().unwrap_err();
    /// assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput);
    /// ```
    pub fn kind(&self) -> io::ErrorKind {
        match self {
            Error::Sys { source, .. } | Error::Chain(source) => source.kind(),
            Error::WrongPayload { .. }
            | Error::UnknownStrategy(_)
            | Error::Config(_)
            | Error::Socket(_)
            | Error::Profile(_) => io::ErrorKind::InvalidInput,
            Error::UnknownConn { .. } => io::ErrorKind::NotFound,
            Error::Leaked { .. } => io::ErrorKind::TimedOut,
        }
    }

    /// The errno of a failed system call, if this is one.
    ///
    /// ```no_run
    /// # fn f(path: &mut dyn sendpath::SendPath) {
    /// let buf = path.take_buf(4096);
    /// if let Err(e) = path.send_buf(buf) {
    ///     let retry = e.raw_os_error() == Some(11); // EAGAIN: the send timeout passed
    ///     # let _ = retry;
    /// }
    /// # }
    /// ```
    pub fn raw_os_error(&self) -> Option<i32> {
        match self {
            Error::Sys { source, .. } | Error::Chain(source) => source.raw_os_error(),
            _ => None,
        }
    }
}

/// An `io::Error` of the same [`kind`](Error::kind) that carries the sendpath error (its
/// message, and `get_ref` gives it back).
///
/// ```
/// let e = "nope".parse::<sendpath::Strategy>().unwrap_err();
/// let io: std::io::Error = e.into();
/// assert_eq!(io.kind(), std::io::ErrorKind::InvalidInput);
/// assert!(io.to_string().contains("unknown strategy"));
/// ```
impl From<Error> for io::Error {
    fn from(e: Error) -> io::Error {
        io::Error::new(e.kind(), e)
    }
}

/// What the kernel said, its errno's name, and what to do: "Broken pipe (EPIPE): the peer
/// closed the connection".
fn describe(e: &io::Error) -> String {
    let Some(n) = e.raw_os_error() else {
        return e.to_string();
    };
    let text = io::Error::from_raw_os_error(n).to_string();
    let text = text.split(" (os error").next().unwrap_or(&text).to_string();
    match errno_name(n) {
        Some((name, "")) => format!("{text} ({name})"),
        Some((name, hint)) => format!("{text} ({name}): {hint}"),
        None => format!("{text} (errno {n})"),
    }
}

/// The name of errno `n` and a hint for the errors a send path meets.
fn errno_name(n: i32) -> Option<(&'static str, &'static str)> {
    Some(match n {
        libc::EPIPE => ("EPIPE", "the peer closed the connection"),
        libc::ECONNRESET => ("ECONNRESET", "the peer reset the connection"),
        libc::EAGAIN => (
            "EAGAIN",
            "no room in the socket before its send timeout (SO_SNDTIMEO), or the socket is non-blocking: the peer is not reading fast enough",
        ),
        libc::ENOBUFS => (
            "ENOBUFS",
            "zero-copy sends in flight exceed the socket's notification memory (net.core.optmem_max) or the locked-memory limit: raise `ulimit -l`, or lower Options::inflight",
        ),
        libc::ENOMEM => (
            "ENOMEM",
            "the kernel could not pin or allocate memory for the send: raise `ulimit -l` (registered buffers, SEND_ZC), or send less at once",
        ),
        libc::EMSGSIZE => (
            "EMSGSIZE",
            "a datagram larger than the socket sends: at most 65507 bytes per UDP message",
        ),
        libc::ENOTCONN => ("ENOTCONN", "the socket is not connected: connect it first"),
        libc::EDESTADDRREQ => (
            "EDESTADDRREQ",
            "the socket has no peer: connect it first",
        ),
        libc::ENOTSOCK => ("ENOTSOCK", "the descriptor is not a socket"),
        libc::EOPNOTSUPP => (
            "EOPNOTSUPP",
            "this socket or kernel does not offer the operation",
        ),
        libc::EINVAL => ("EINVAL", "the kernel refused the arguments"),
        libc::ECANCELED => (
            "ECANCELED",
            "the request was cancelled (its connection was closed)",
        ),
        libc::ETIMEDOUT => ("ETIMEDOUT", "the connection timed out"),
        libc::EBADF => ("EBADF", "the descriptor is not open"),
        libc::EPERM => ("EPERM", "not permitted for this user"),
        libc::EACCES => ("EACCES", "not permitted for this user"),
        libc::ENOSYS => ("ENOSYS", "the kernel lacks this system call"),
        libc::EINTR => ("EINTR", "interrupted by a signal"),
        libc::EBUSY => ("EBUSY", "the ring's submission queue is full of work that cannot be submitted"),
        libc::EIO => ("EIO", ""),
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_failed_call_names_the_call_the_errno_and_what_to_do() {
        let e = Error::sys("sendmsg(MSG_ZEROCOPY)")(io::Error::from_raw_os_error(libc::ENOBUFS));
        let s = e.to_string();
        assert!(s.starts_with("sendmsg(MSG_ZEROCOPY) failed: "), "{s}");
        assert!(s.contains("(ENOBUFS)") && s.contains("ulimit -l"), "{s}");
        assert_eq!(e.raw_os_error(), Some(libc::ENOBUFS));
        let e = Error::sys("send")(io::Error::from_raw_os_error(libc::EPIPE));
        assert_eq!(e.kind(), io::ErrorKind::BrokenPipe);
        assert!(e.to_string().contains("the peer closed the connection"));
        let io: io::Error = e.into();
        assert_eq!(io.kind(), io::ErrorKind::BrokenPipe);
        assert!(io.get_ref().is_some_and(|i| i.is::<Error>()));
        // An errno the table does not name still shows its number.
        let e = Error::sys("send")(io::Error::from_raw_os_error(200));
        assert!(e.to_string().contains("errno 200"), "{e}");
    }

    #[test]
    fn misuse_is_invalid_input_and_an_unknown_connection_not_found() {
        assert_eq!(
            Error::Config("x".into()).kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            Error::UnknownConn { index: 3 }.kind(),
            io::ErrorKind::NotFound
        );
        let leaked = Error::Leaked {
            buffers: 8,
            stats: Box::default(),
        };
        assert_eq!(leaked.kind(), io::ErrorKind::TimedOut);
        assert!(leaked.to_string().contains("8 buffer(s)"));
    }
}
