//! The send paths, one file each, behind [`SendPath`].

mod adaptive;
mod copy;
mod gather;
mod mmap_send;
mod msg_zerocopy;
mod read_send;
mod sendfile;
mod serialize;
mod splice;
mod uring;
mod uring_splice;
mod uring_zc;
mod vmsplice;
mod write;

use write::{send_all, send_counted, sendmsg_all, sendmsg_counted, sendmsg_one};

use crate::buffer::Buf;
use crate::policy::adaptive::AdaptiveConfig;
use crate::policy::InflightLimits;
use crate::profile::Profile;
use crate::{Error, Result, SendStats, Socket};
use serde::{Deserialize, Serialize};
use std::fs::File;
use std::time::Duration;

/// Where a path takes its bytes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// Buffers in memory ([`Msg::Fields`]).
    Memory,
    /// A file ([`Msg::File`]).
    File,
}

/// One message to send.
#[derive(Debug)]
pub enum Msg {
    /// A message made of fields, sent back to back. Memory paths take this. On a datagram
    /// socket a message is one datagram: `gather`, `serialize`, `msg-zerocopy` and `adaptive` on
    /// its socket tiers send its fields as one; `copy`, `uring` and `uring-zc` (and `adaptive`
    /// on a ring tier), which send a field per call or request, refuse more than one there ([`Error::WrongPayload`](crate::Error::WrongPayload)).
    Fields(Vec<Buf>),
    /// `len` bytes of the path's file from `offset`. File paths take this.
    File {
        /// Offset in the file.
        offset: u64,
        /// Bytes to send.
        len: usize,
    },
}

/// `len` bytes of a file path's file from `offset`: one [`Msg::File`], for
/// [`SendPath::send_ranges`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FileRange {
    /// Offset in the file.
    pub offset: u64,
    /// Bytes to send.
    pub len: usize,
}

impl Msg {
    /// A message of one buffer.
    pub fn one(b: Buf) -> Msg {
        Msg::Fields(vec![b])
    }

    /// Payload bytes.
    pub fn len(&self) -> usize {
        match self {
            Msg::Fields(f) => f.iter().map(Buf::len).sum(),
            Msg::File { len, .. } => *len,
        }
    }

    /// Whether the message is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A way of putting bytes on a connected socket: what [`open`] returns.
///
/// Paths own their socket. `send` may return before the bytes are on the socket (io_uring paths
/// batch requests); `flush` makes sure they are; `finish` also waits, for at most the given
/// time, until the kernel has released every zero-copy buffer, and `close` does that and hands
/// back the final counts.
///
/// ```no_run
/// use sendpath::{open, FileRange, Msg, Options, Strategy};
/// use std::sync::Arc;
///
/// let file = Arc::new(std::fs::File::open("video.mp4")?);
/// let opts = Options { file: Some(file), ..Options::default() };
/// let mut path = open(Strategy::Sendfile, std::net::TcpStream::connect("127.0.0.1:9000")?, &opts)?;
/// path.send_ranges(&[FileRange { offset: 0, len: 1 << 20 }])?; // no byte through user memory
/// let mut memory = open(Strategy::Gather, std::net::TcpStream::connect("127.0.0.1:9001")?, &Options::default())?;
/// let mut fields = memory.take_fields();
/// for part in [b"head".as_slice(), b"body"] {
///     let mut b = memory.take_buf(part.len());
///     b.as_mut_slice().copy_from_slice(part);
///     fields.push(b);
/// }
/// memory.send(Msg::Fields(fields))?; // one sendmsg, one iovec per field
/// println!("{:?}", memory.close(std::time::Duration::from_secs(1))?.summary());
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub trait SendPath: Send {
    /// The stable name (`copy`, `msg-zerocopy`, ...). A path that fell back to another at open
    /// time reports the name of the one it runs.
    fn name(&self) -> &'static str;

    /// Why this path is not the one asked for, when it fell back at open time.
    fn note(&self) -> Option<&str> {
        None
    }

    /// Sends one message, in order after the previous ones.
    fn send(&mut self, msg: Msg) -> Result<()>;

    /// Sends one buffer as a message: `send(Msg::Fields)` of one field without the list, which
    /// the copying paths (`copy`, `serialize`, `gather`, and `adaptive` in a copy tier) make
    /// as lean as a bare `send()` loop; the other paths send it as a one-field message.
    fn send_buf(&mut self, b: Buf) -> Result<()> {
        let mut f = self.take_fields();
        f.push(b);
        self.send(Msg::Fields(f))
    }

    /// Sends each buffer of `bufs` as its own message, in order, as [`send_buf`] would, and
    /// leaves `bufs` empty (its capacity kept for the next batch). One call for many small
    /// messages: the loop runs inside the path, with no return through `dyn SendPath` after
    /// each system call. On an error the buffers not yet sent are dropped; [`stats`] counts
    /// the ones that were.
    ///
    /// [`send_buf`]: SendPath::send_buf
    /// [`stats`]: SendPath::stats
    fn send_bufs(&mut self, bufs: &mut Vec<Buf>) -> Result<()> {
        for b in bufs.drain(..) {
            self.send_buf(b)?;
        }
        Ok(())
    }

    /// Sends `n` messages of `len` bytes, in order, each written by `fill(i, bytes)` (`i` in
    /// `0..n`) where no buffer moves between writing and sending: on `uring` and `uring-zc`
    /// with an arena ([`Options::uring_arena`](crate::Options::uring_arena)) in a slot the
    /// kernel reads by index; on `copy` in a buffer the path keeps and writes again at once;
    /// on `msg-zerocopy` in a page-aligned slot kept until its notification; on `adaptive`
    /// where its size's tier sends from. Elsewhere: a [`take_buf`] filled, sent by [`send_buf`].
    /// On an error or a panic in `fill`, unqueued messages are not sent; [`stats`] counts the rest.
    ///
    /// ```no_run
    /// # fn f(path: &mut dyn sendpath::SendPath) -> sendpath::Result<()> {
    /// let mut seq = 0u64;
    /// path.send_in_place(16, 1400, &mut |_, b| {
    ///     b[..8].copy_from_slice(&seq.to_le_bytes());
    ///     seq += 1;
    /// })?;
    /// # Ok(()) }
    /// ```
    ///
    /// [`take_buf`]: SendPath::take_buf
    /// [`send_buf`]: SendPath::send_buf
    /// [`stats`]: SendPath::stats
    fn send_in_place(
        &mut self,
        n: usize,
        len: usize,
        fill: &mut dyn FnMut(usize, &mut [u8]),
    ) -> Result<()> {
        for i in 0..n {
            let mut b = self.take_buf(len);
            fill(i, b.as_mut_slice());
            self.send_buf(b)?;
        }
        Ok(())
    }

    /// Sends each range of the path's file as its own message, in order, as
    /// `send(Msg::File)` would: [`send_bufs`] for the file paths, with the loop inside the
    /// path. On an error the ranges after the failed one are not sent; [`stats`] counts the
    /// ones that were.
    ///
    /// [`send_bufs`]: SendPath::send_bufs
    /// [`stats`]: SendPath::stats
    fn send_ranges(&mut self, ranges: &[FileRange]) -> Result<()> {
        for r in ranges {
            self.send(Msg::File {
                offset: r.offset,
                len: r.len,
            })?;
        }
        Ok(())
    }

    /// Makes sure every message passed to `send` has been handed to the socket.
    fn flush(&mut self) -> Result<()> {
        Ok(())
    }

    /// Flushes, then waits up to `timeout` for every outstanding zero-copy completion. Buffers
    /// the kernel has not released by then are leaked (never reused, since the kernel may
    /// still read them), counted in [`SendStats::leaked_buffers`], and reported as
    /// [`Error::Leaked`].
    fn finish(&mut self, timeout: Duration) -> Result<()> {
        let _ = timeout;
        self.flush()
    }

    /// [`finish`](SendPath::finish)es, then closes the path (and its socket), handing back what
    /// it did. Buffers the kernel still held at the deadline are an [`Error::Leaked`] that
    /// carries the same final counts. A path dropped without this waits for nothing long,
    /// and counts what it leaks in [`leaked_on_drop`](crate::leaked_on_drop).
    ///
    /// ```no_run
    /// # fn f(path: Box<dyn sendpath::SendPath>) -> sendpath::Result<()> {
    /// match path.close(std::time::Duration::from_secs(2)) {
    ///     Ok(stats) => println!("{} bytes, {:?} copied", stats.bytes, stats.copied_fraction()),
    ///     Err(sendpath::Error::Leaked { buffers, stats }) => {
    ///         eprintln!("{buffers} buffers still in the kernel after {} bytes", stats.bytes)
    ///     }
    ///     Err(e) => return Err(e),
    /// }
    /// # Ok(()) }
    /// ```
    fn close(mut self: Box<Self>, timeout: Duration) -> Result<SendStats> {
        self.finish(timeout)?;
        Ok(self.stats().clone())
    }

    /// A buffer of `len` bytes to fill and send: one the kernel has released, or a new one.
    /// Its contents are unspecified.
    fn take_buf(&mut self, len: usize) -> Buf;

    /// An empty list for the buffers of the next [`Msg::Fields`]: one a message used before
    /// where the path kept it, so a steady loop allocates nothing per message.
    fn take_fields(&mut self) -> Vec<Buf> {
        Vec::new()
    }

    /// What this path has done so far.
    fn stats(&self) -> &SendStats;

    /// The socket the path sends on.
    fn socket(&self) -> &Socket;
}

/// The send paths sendpath knows, by stable name. Serialised as that name (`msg-zerocopy`).
#[derive(
    Debug, Clone, Copy, Default, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize,
)]
#[serde(rename_all = "kebab-case")]
pub enum Strategy {
    /// `send()` from one contiguous buffer: the baseline, and the default.
    #[default]
    Copy,
    /// Fields copied into one buffer, then `send()`.
    Serialize,
    /// `sendmsg()` with one iovec per field.
    Gather,
    /// `sendmsg(MSG_ZEROCOPY)` with error-queue completions.
    MsgZerocopy,
    /// io_uring SEND.
    Uring,
    /// io_uring SEND_ZC.
    UringZc,
    /// `read()` then `send()`.
    ReadSend,
    /// `send()` from a file mapping.
    MmapSend,
    /// `sendfile()`.
    Sendfile,
    /// file to pipe to socket with `splice()`.
    Splice,
    /// file to pipe to socket with linked io_uring `SPLICE` pairs.
    UringSplice,
    /// `vmsplice()` user pages, then `splice()` to the socket.
    Vmsplice,
    /// Per send, the path the host profile says wins at its size (`copy`, `msg-zerocopy`,
    /// `uring`, `uring-zc`; `sendfile()` for file data), backing off from zero-copy where the
    /// kernel copies.
    Adaptive,
}

impl Strategy {
    /// Every path, memory paths first.
    pub const ALL: [Strategy; 13] = [
        Strategy::Copy,
        Strategy::Serialize,
        Strategy::Gather,
        Strategy::MsgZerocopy,
        Strategy::Uring,
        Strategy::UringZc,
        Strategy::Vmsplice,
        Strategy::Adaptive,
        Strategy::ReadSend,
        Strategy::MmapSend,
        Strategy::Sendfile,
        Strategy::Splice,
        Strategy::UringSplice,
    ];

    /// Its entry in the table of paths (kept beside each path's code, in its file).
    fn info(self) -> &'static PathInfo {
        match self {
            Strategy::Copy => &copy::INFO,
            Strategy::Serialize => &serialize::INFO,
            Strategy::Gather => &gather::INFO,
            Strategy::MsgZerocopy => &msg_zerocopy::INFO,
            Strategy::Uring => &uring::INFO,
            Strategy::UringZc => &uring_zc::INFO,
            Strategy::Vmsplice => &vmsplice::INFO,
            Strategy::ReadSend => &read_send::INFO,
            Strategy::MmapSend => &mmap_send::INFO,
            Strategy::Sendfile => &sendfile::INFO,
            Strategy::Splice => &splice::INFO,
            Strategy::UringSplice => &uring_splice::INFO,
            Strategy::Adaptive => &adaptive::INFO,
        }
    }

    /// The stable name.
    pub fn name(self) -> &'static str {
        self.info().name
    }

    /// All names, in [`Strategy::ALL`] order.
    pub fn names() -> Vec<&'static str> {
        Strategy::ALL.iter().map(|s| s.name()).collect()
    }

    /// Looks a name up.
    pub fn parse(name: &str) -> Result<Strategy> {
        Strategy::ALL
            .into_iter()
            .find(|s| s.name() == name)
            .ok_or_else(|| Error::UnknownStrategy(name.to_string()))
    }

    /// Where the path takes its bytes from.
    pub fn source(self) -> Source {
        self.info().source
    }

    /// Whether the path asks the kernel not to copy on the send side.
    pub fn avoids_send_copy(self) -> bool {
        self.info().avoids_send_copy
    }

    /// Whether the path gets per-send completions that say whether the kernel copied.
    pub fn has_zc_completions(self) -> bool {
        self.info().has_zc_completions
    }

    /// The moves of the payload this path makes by construction, from where the bytes are
    /// to the NIC; `None` for `adaptive`, which makes those of the path it picks per send.
    pub fn data_copies(self) -> Option<&'static [DataCopy]> {
        self.info().copies
    }

    /// Whether the path runs on a [`UringDriver`](crate::UringDriver), so
    /// [`UringDriver::add`](crate::UringDriver::add) takes it for a connection of a ring with
    /// many (`uring`, `uring-zc`, `adaptive`).
    ///
    /// ```
    /// assert!(sendpath::Strategy::UringZc.on_ring());
    /// assert!(!sendpath::Strategy::Sendfile.on_ring());
    /// ```
    pub fn on_ring(self) -> bool {
        crate::send::Chooser::for_strategy(self, &Options::default()).is_some()
    }

    /// Whether a message is naturally several fields for this path (the paths that differ in
    /// how they put fields together); others send one contiguous buffer.
    pub fn uses_fields(self) -> bool {
        self.info().uses_fields
    }
}

/// One move of the payload a path makes by construction on its way to the wire: by the CPU (a
/// copy that costs cycles per byte) or by a device's DMA. Where the route or the device cannot
/// take pages by reference (a receiver on this host, a NIC without scatter-gather), the kernel
/// adds a CPU copy to the paths that avoid one; their completions report it (`copied`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct DataCopy {
    /// Where the bytes are.
    pub from: &'static str,
    /// Where they go.
    pub to: &'static str,
    /// The CPU moves them (else a device's DMA).
    pub by_cpu: bool,
}

impl std::fmt::Display for DataCopy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let by = if self.by_cpu { "CPU" } else { "DMA" };
        write!(f, "{} -> {} ({by})", self.from, self.to)
    }
}

/// The paths' moves of the payload, shared by the paths that make the same ones.
mod copies {
    use super::DataCopy;

    const fn by_cpu(from: &'static str, to: &'static str) -> DataCopy {
        DataCopy {
            from,
            to,
            by_cpu: true,
        }
    }

    const fn by_dma(from: &'static str, to: &'static str) -> DataCopy {
        DataCopy {
            from,
            to,
            by_cpu: false,
        }
    }

    const TO_NIC: DataCopy = by_dma("socket buffer", "NIC");
    const FROM_DISK: DataCopy = by_dma("disk", "page cache");

    /// `send()` from a user buffer: copy, uring.
    pub(super) const USER_SEND: &[DataCopy] = &[by_cpu("user buffer", "socket buffer"), TO_NIC];
    /// Fields copied into one buffer, then sent.
    pub(super) const SERIALIZE: &[DataCopy] = &[
        by_cpu("fields", "one user buffer"),
        by_cpu("user buffer", "socket buffer"),
        TO_NIC,
    ];
    /// One iovec per field: the kernel copies each into the socket buffer.
    pub(super) const GATHER: &[DataCopy] = &[by_cpu("fields", "socket buffer"), TO_NIC];
    /// The user's pages pinned and handed to the device: msg-zerocopy, uring-zc, vmsplice.
    pub(super) const PAGES_BY_REFERENCE: &[DataCopy] = &[by_dma("user pages", "NIC")];
    /// The classic four of a file sent through user memory: read into a buffer, send it.
    pub(super) const READ_SEND: &[DataCopy] = &[
        FROM_DISK,
        by_cpu("page cache", "user buffer"),
        by_cpu("user buffer", "socket buffer"),
        TO_NIC,
    ];
    /// The mapping is the page cache: one CPU copy into the socket buffer.
    pub(super) const MMAP_SEND: &[DataCopy] =
        &[FROM_DISK, by_cpu("page cache", "socket buffer"), TO_NIC];
    /// Page-cache pages handed to the device by reference: sendfile, splice, uring-splice.
    pub(super) const PAGE_CACHE_BY_REFERENCE: &[DataCopy] =
        &[FROM_DISK, by_dma("page cache", "NIC")];
}

/// What the crate knows about one path, declared in the path's own file (`INFO`).
pub(crate) struct PathInfo {
    name: &'static str,
    source: Source,
    avoids_send_copy: bool,
    has_zc_completions: bool,
    uses_fields: bool,
    /// The moves of the payload it makes by construction; `None` when it depends on each
    /// send (adaptive).
    copies: Option<&'static [DataCopy]>,
    /// How it waits for socket space: what it needs of the socket's mode.
    waits: crate::socket::Waits,
    /// Opens the path on a socket [`Socket::check`] found fit for it.
    open: fn(Socket, &Options) -> Result<Box<dyn SendPath>>,
}

impl std::fmt::Display for Strategy {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.pad(self.name())
    }
}

impl std::str::FromStr for Strategy {
    type Err = Error;
    fn from_str(s: &str) -> Result<Strategy> {
        Strategy::parse(s)
    }
}

/// Settings shared by the paths; each reads the ones that concern it.
#[derive(Debug, Clone)]
pub struct Options {
    /// Cap on zero-copy sends awaiting completion (msg-zerocopy, uring-zc). On the ring, sends
    /// from registered buffers are not counted (see [`InflightLimits`]).
    pub inflight: InflightLimits,
    /// msg-zerocopy: read the error queue once this many sends await completion and no
    /// released buffer is free (or half of `inflight.max_bytes` awaits), so that one read
    /// collects many merged completions; 1 reads it whenever the pool is empty.
    pub zc_reap_every: usize,
    /// io_uring sends in flight per socket, as one chain (uring, uring-zc).
    pub uring_depth: usize,
    /// Ask SEND_ZC for usage reporting (`IORING_SEND_ZC_REPORT_USAGE`) so copies are seen.
    pub uring_report_usage: bool,
    /// Send SEND_ZC from registered (fixed) buffers ([`crate::ZerocopyCounts::registered`]).
    pub uring_fixed_buffers: bool,
    /// New buffers of a ring's connections come from one arena the ring registers once,
    /// and its sends name them by index ([`ArenaConfig`](crate::ArenaConfig)); `None`: from
    /// the heap.
    pub uring_arena: Option<crate::ArenaConfig>,
    /// How a connection's queued sends keep their order on io_uring; `None` for the fastest
    /// the kernel has (vectored, else linked: [`Order`](crate::Order)).
    pub uring_order: Option<crate::Order>,
    /// Pipe size for splice and vmsplice (the kernel may grant less).
    pub pipe_size: usize,
    /// The file for file paths (and for `adaptive`'s file data).
    pub file: Option<std::sync::Arc<File>>,
    /// The host profile `adaptive` decides from; `None` for [`Profile::defaults`]. Load the
    /// active one with [`Profile::load_active`].
    pub profile: Option<std::sync::Arc<Profile>>,
    /// `adaptive`'s tunables.
    pub adaptive: AdaptiveConfig,
    /// `copy`: the most messages of one [`SendPath::send_bufs`] call put in one system call,
    /// up to 64: one `sendmsg` over their buffers on a stream socket (as a server's `writev`
    /// of its queued responses), one `sendmmsg` on a datagram socket. 1 (the default) sends
    /// each by its own `send`. Set it to `uring_depth` to compare `copy` with io_uring's
    /// vectored requests like for like.
    pub copy_batch: usize,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            inflight: InflightLimits::default(),
            zc_reap_every: 32,
            uring_depth: 8,
            uring_report_usage: true,
            uring_fixed_buffers: false,
            uring_arena: None,
            uring_order: None,
            pipe_size: 1 << 20,
            file: None,
            profile: None,
            adaptive: AdaptiveConfig::default(),
            copy_batch: 1,
        }
    }
}

/// Opens a send path on a connected socket (a `TcpStream`, a connected `UdpSocket`, a
/// `UnixStream`, or any [`Socket`]). File paths need `opts.file`. A path whose kernel
/// support is missing falls back (uring-zc to uring or copy, msg-zerocopy sends by copy) and says
/// so in [`SendPath::note`] and its fallback counters.
pub fn open(
    strategy: Strategy,
    sock: impl Into<Socket>,
    opts: &Options,
) -> Result<Box<dyn SendPath>> {
    let sock: Socket = sock.into();
    let info = strategy.info();
    sock.check(info.waits)?;
    (info.open)(sock, opts)
}

/// The file of a file path, or the error that says to give one.
fn required_file(path: &str, opts: &Options) -> Result<std::sync::Arc<File>> {
    opts.file.clone().ok_or_else(|| {
        Error::Config(format!(
            "the {path} path sends from a file: give Options::file"
        ))
    })
}

/// Fields of a memory message, or the error for a file message.
#[inline]
fn fields(path: &'static str, msg: Msg) -> Result<Vec<Buf>> {
    match msg {
        Msg::Fields(f) => Ok(f),
        Msg::File { .. } => Err(Error::WrongPayload {
            path,
            what: "a file range",
        }),
    }
}

/// The error for a message of several fields on a datagram socket, from a path that sends one
/// datagram per field: the message would arrive cut in pieces.
pub(crate) fn split_datagram(path: &'static str) -> Error {
    Error::WrongPayload {
        path,
        what: "a message of several fields on a datagram socket (each field would go as a datagram of its own): send one buffer per message, or use gather, serialize or msg-zerocopy, which send the fields as one datagram",
    }
}

/// The range of a file message, or the error for a memory message.
#[inline]
fn file_range(path: &'static str, msg: Msg) -> Result<(u64, usize)> {
    match msg {
        Msg::File { offset, len } => Ok((offset, len)),
        Msg::Fields(_) => Err(Error::WrongPayload {
            path,
            what: "memory buffers (it sends from its file)",
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_path_names_its_copies_as_the_transfer_to_study_counts_them() {
        let cpu = |s: Strategy| {
            s.data_copies()
                .map(|c| c.iter().filter(|c| c.by_cpu).count())
        };
        let all = |s: Strategy| s.data_copies().map(<[DataCopy]>::len);
        // The study: four copies for read + send, two of them by the CPU; two with sendfile.
        assert_eq!(
            (all(Strategy::ReadSend), cpu(Strategy::ReadSend)),
            (Some(4), Some(2))
        );
        assert_eq!(
            (all(Strategy::Sendfile), cpu(Strategy::Sendfile)),
            (Some(2), Some(0))
        );
        assert_eq!(cpu(Strategy::Copy), Some(1));
        assert_eq!(cpu(Strategy::Serialize), Some(2));
        assert_eq!(cpu(Strategy::MsgZerocopy), Some(0));
        assert_eq!(Strategy::Adaptive.data_copies(), None);
        for s in Strategy::ALL
            .into_iter()
            .filter(|s| *s != Strategy::Adaptive)
        {
            let c = s.data_copies().unwrap();
            assert_eq!(c.last().unwrap().to, "NIC", "{s}");
            assert_eq!(s.avoids_send_copy(), cpu(s) == Some(0), "{s}");
        }
        assert_eq!(
            Strategy::ReadSend.data_copies().unwrap()[1].to_string(),
            "page cache -> user buffer (CPU)"
        );
    }

    #[test]
    fn the_table_of_paths_says_what_each_path_is() {
        let names = Strategy::names();
        let unique: std::collections::BTreeSet<_> = names.iter().collect();
        assert_eq!(unique.len(), Strategy::ALL.len(), "names are unique");
        for s in Strategy::ALL {
            assert_eq!(Strategy::parse(s.name()).unwrap(), s);
            assert_eq!(s.to_string(), s.name());
        }
        let with = |f: fn(Strategy) -> bool| -> Vec<&str> {
            Strategy::ALL
                .into_iter()
                .filter(|s| f(*s))
                .map(Strategy::name)
                .collect()
        };
        assert_eq!(
            with(|s| s.source() == Source::File),
            [
                "read-send",
                "mmap-send",
                "sendfile",
                "splice",
                "uring-splice"
            ]
        );
        assert_eq!(
            with(Strategy::avoids_send_copy),
            [
                "msg-zerocopy",
                "uring-zc",
                "vmsplice",
                "adaptive",
                "sendfile",
                "splice",
                "uring-splice"
            ]
        );
        assert_eq!(
            with(Strategy::has_zc_completions),
            ["msg-zerocopy", "uring-zc", "adaptive"]
        );
        assert_eq!(
            with(Strategy::uses_fields),
            ["serialize", "gather", "msg-zerocopy"]
        );
    }
}
