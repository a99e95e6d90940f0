use std::io;

/// Everything that can go wrong in the library. Variants that come from a system call name it
/// and keep the `io::Error` as the source.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A system call failed.
    #[error("{call} failed")]
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
    /// A path needs something the caller did not give (such as a file for `sendfile`).
    #[error("{0}")]
    Config(String),
    /// A host profile that cannot be used (another schema version, malformed); says what to do.
    #[error("{0}")]
    Profile(String),
    /// The byte stream could not be kept in order (io_uring links ran out of order).
    #[error("io_uring send chain failed: {0}")]
    Chain(io::Error),
}

impl Error {
    /// Wraps an `io::Error` from `call`.
    pub fn sys(call: &'static str) -> impl FnOnce(io::Error) -> Error {
        move |source| Error::Sys { call, source }
    }
}
