//! What a workload's traffic looks like, as plans, results and the agent protocol name it:
//! the message sizes and their mix, how buffers are allocated, how the receiver treats bytes.
//! Plain data: nothing here opens a socket.

pub mod datagram;
pub mod mix;
pub mod stamp;

/// How the receiver treats bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RecvMode {
    /// `read()` into a buffer (what a real application does).
    Copy,
    /// `recv(MSG_TRUNC)`: the kernel drops the bytes without copying them out.
    Discard,
    /// `read()` and check every byte against the pattern.
    Verify,
    /// `TCP_ZEROCOPY_RECEIVE`: map received pages instead of copying them out; what the
    /// kernel cannot map is copied (both counted). TCP stream receivers only.
    Zerocopy,
}

impl RecvMode {
    /// Every mode.
    pub const ALL: [RecvMode; 4] = [
        RecvMode::Copy,
        RecvMode::Discard,
        RecvMode::Verify,
        RecvMode::Zerocopy,
    ];

    /// The stable name, as in results files.
    pub fn name(self) -> &'static str {
        match self {
            RecvMode::Copy => "copy",
            RecvMode::Discard => "discard",
            RecvMode::Verify => "verify",
            RecvMode::Zerocopy => "zerocopy",
        }
    }
}

impl std::str::FromStr for RecvMode {
    type Err = String;
    fn from_str(s: &str) -> Result<RecvMode, String> {
        RecvMode::ALL
            .into_iter()
            .find(|m| m.name() == s)
            .ok_or_else(|| {
                format!("`{s}` is not a receive mode: use copy, discard, verify or zerocopy")
            })
    }
}

/// What runs a stream's senders.
#[derive(
    Debug,
    Clone,
    Copy,
    Default,
    PartialEq,
    Eq,
    Hash,
    PartialOrd,
    Ord,
    serde::Serialize,
    serde::Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Runtime {
    /// A thread per sender, sendpath's blocking paths.
    #[default]
    Thread,
    /// A tokio task per sender (on a runtime of the sender's thread), sendpath's async sender.
    Tokio,
    /// A tokio task per sender writing with tokio's own `write_all` (`send` for UDP): no
    /// sendpath code in the loop, the baseline a tokio server starts from. Its rows' strategy
    /// is `copy`, which those writes are.
    TokioWrite,
}

impl Runtime {
    /// The stable name, as in results files and on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Runtime::Thread => "thread",
            Runtime::Tokio => "tokio",
            Runtime::TokioWrite => "tokio-write",
        }
    }

    /// Whether the senders are tokio tasks.
    pub fn is_tokio(self) -> bool {
        self != Runtime::Thread
    }
}

/// The default receiver read size for messages of `size` bytes: the message size clamped to
/// 16 KiB..1 MiB, iperf3's convention for its `-l` block.
pub fn default_recv_size(size: usize) -> usize {
    size.clamp(16 << 10, 1 << 20)
}
