//! Workloads: what runs on the connections while a window is measured.

pub mod congestion;
pub mod routes;
pub mod rr;
pub mod sink;
pub mod stream;

use crate::setting::{invalid, About, Setting};
use crate::traffic::mix::Alloc;
use crate::traffic::stamp::{now_ns, StampReader};
pub use crate::traffic::{default_recv_size, RecvMode};
use anyhow::{bail, Context};
use sendpath::{Buf, FileRange, Msg, SendPath, Source, Strategy};
use sendpath_host::pattern::{self, Verifier};
use std::fs::File;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

/// Counters a receiver publishes while it runs, alone on their cache lines ([`OwnLine`]).
#[derive(Default)]
#[repr(align(128))]
pub(crate) struct RecvCounters {
    pub(crate) bytes: AtomicU64,
    /// Of `bytes`, those `--recv zerocopy` mapped rather than copied.
    pub(crate) mapped: AtomicU64,
}

/// A value alone on its cache lines: 128 bytes, a line and the neighbour the CPU prefetches
/// with it. A counter the sender writes on every send, next to one the receiver writes on
/// every read (two small heap allocations end up side by side), makes each write fetch the
/// line from the other CPU (measured: 1% of a 4 KiB copy send on the project's machine).
#[derive(Debug, Default)]
#[repr(align(128))]
pub(crate) struct OwnLine<T>(pub(crate) T);

impl<T> std::ops::Deref for OwnLine<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.0
    }
}

/// Reads from `s` until EOF, counting bytes into `c`, `read_size` bytes per call (as iperf3
/// reads its `-l` size); returns the verifier (meaningful in verify mode). A reset or any other
/// error before EOF is an error that names the stream offset it happened at. The socket is
/// borrowed, so whoever shares it can end the reads (`shutdown(SHUT_RD)` makes them see EOF).
/// With `stamps`, each read goes through its reader, which times messages while the flag is
/// set (`--msg-latency`).
pub(crate) fn receive(
    mut s: &TcpStream,
    mode: RecvMode,
    c: &RecvCounters,
    read_size: usize,
    mut stamps: Option<(&mut StampReader, &AtomicBool)>,
) -> anyhow::Result<Verifier> {
    let mut v = Verifier::new();
    let mut buf = vec![0u8; read_size.max(1)];
    let mut total = 0u64;
    if mode == RecvMode::Zerocopy {
        return receive_mapped(s, c, &mut buf).map(|()| v);
    }
    loop {
        let n = match mode {
            RecvMode::Discard => rustix::net::recv(s, &mut buf[..], rustix::net::RecvFlags::TRUNC)
                .map(|(_, n)| n)
                .map_err(std::io::Error::from),
            _ => s.read(&mut buf),
        };
        let n = match n {
            Ok(0) => return Ok(v),
            Ok(n) => n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_failed(s, total, e)),
        };
        if let Some((r, on)) = stamps.as_mut() {
            r.feed(&mut buf[..n], now_ns(), on.load(Ordering::Relaxed));
        }
        if mode == RecvMode::Verify {
            v.check(&buf[..n]);
        }
        total += n as u64;
        c.bytes.fetch_add(n as u64, Ordering::Relaxed);
    }
}

/// A read that failed after `total` bytes: its time limit ran out (the setting named), or
/// the stream broke before its clean end (the offset named).
fn read_failed(s: &TcpStream, total: u64, e: std::io::Error) -> anyhow::Error {
    if crate::setting::is_timeout(&e) {
        let waited = s.read_timeout().ok().flatten().unwrap_or_default();
        return invalid(
            Setting::Timeout,
            format!("receiver: no data for {waited:?} after {total} bytes: its time limit ran out"),
        );
    }
    anyhow::Error::new(e).context(format!(
        "receiver: the stream broke at byte offset {total} (before a clean end of stream)"
    ))
}

/// [`receive`] with `--recv zerocopy`: maps the received pages (`TCP_ZEROCOPY_RECEIVE`) into a
/// region as large as the read size, copying into `buf` what the kernel cannot map; counts
/// both, and the mapped bytes apart.
fn receive_mapped(s: &TcpStream, c: &RecvCounters, buf: &mut [u8]) -> anyhow::Result<()> {
    use std::os::fd::AsFd;
    let mut m = sendpath_host::socket::MappedReceiver::new(s.as_fd(), buf.len())
        .context("receiver: mmap of the socket for TCP_ZEROCOPY_RECEIVE (--recv zerocopy)")?;
    let mut total = 0u64;
    loop {
        let got = match m.receive(s.as_fd(), buf) {
            Ok(g) if g.is_eof() => return Ok(()),
            Ok(g) => g,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(read_failed(s, total, e)),
        };
        let n = (got.mapped + got.copied) as u64;
        total += n;
        c.bytes.fetch_add(n, Ordering::Relaxed);
        if got.mapped > 0 {
            c.mapped.fetch_add(got.mapped as u64, Ordering::Relaxed);
        }
    }
}

/// Reads every connection in `socks` to EOF on one thread (epoll, level-triggered, one read
/// per ready connection per pass so that none starves the others), as [`receive`] does for one.
/// `per_conn[i]` (zero at the start) counts connection `i`'s bytes and `c` their sum. Returns one verifier per
/// connection. An error on any connection is an error naming it and its offset.
pub(crate) fn receive_many(
    socks: &[Arc<TcpStream>],
    mode: RecvMode,
    c: &RecvCounters,
    per_conn: &[AtomicU64],
    read_size: usize,
) -> anyhow::Result<Vec<Verifier>> {
    use rustix::event::epoll;
    let ep = epoll::create(epoll::CreateFlags::CLOEXEC).context("epoll_create1")?;
    for (i, s) in socks.iter().enumerate() {
        s.set_nonblocking(true).context("fcntl(O_NONBLOCK)")?;
        epoll::add(
            &ep,
            &**s,
            epoll::EventData::new_u64(i as u64),
            epoll::EventFlags::IN | epoll::EventFlags::RDHUP,
        )
        .context("epoll_ctl(ADD)")?;
    }
    let mut verifiers: Vec<Verifier> = socks.iter().map(|_| Verifier::new()).collect();
    let mut open = socks.len();
    let mut buf = vec![0u8; read_size.max(1)];
    let mut events = Vec::with_capacity(socks.len().min(4096));
    let flags = match mode {
        RecvMode::Discard => rustix::net::RecvFlags::TRUNC,
        _ => rustix::net::RecvFlags::empty(),
    };
    while open > 0 {
        events.clear();
        match epoll::wait(&ep, rustix::buffer::spare_capacity(&mut events), None) {
            Ok(_) => {}
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e).context("epoll_wait"),
        }
        for ev in &events {
            let i = ev.data.u64() as usize;
            let n = match rustix::net::recv(&*socks[i], &mut buf[..], flags) {
                Ok((_, 0)) => {
                    epoll::delete(&ep, &*socks[i]).context("epoll_ctl(DEL)")?;
                    open -= 1;
                    continue;
                }
                Ok((_, n)) => n,
                Err(rustix::io::Errno::AGAIN | rustix::io::Errno::INTR) => continue,
                Err(e) => {
                    return Err(std::io::Error::from(e)).with_context(|| {
                        format!("receiver: connection {i} broke at byte offset {} (before a clean end of stream)", per_conn[i].load(Ordering::Relaxed))
                    })
                }
            };
            if mode == RecvMode::Verify {
                verifiers[i].check(&buf[..n]);
            }
            per_conn[i].fetch_add(n as u64, Ordering::Relaxed);
            c.bytes.fetch_add(n as u64, Ordering::Relaxed);
        }
    }
    Ok(verifiers)
}

/// Waits on the non-blocking listener `l` for one connection, polling every 2 ms, until
/// `deadline` or `give_up()`: `Ok(None)` then. The connection comes back blocking.
pub(crate) fn accept_before(
    l: &TcpListener,
    deadline: Instant,
    mut give_up: impl FnMut() -> bool,
) -> std::io::Result<Option<(TcpStream, SocketAddr)>> {
    loop {
        match l.accept() {
            Ok((s, peer)) => {
                s.set_nonblocking(false)?;
                return Ok(Some((s, peer)));
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                if Instant::now() > deadline || give_up() {
                    return Ok(None);
                }
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(e),
        }
    }
}

/// A file of the pattern for the file paths, long enough to stream from in a loop. Its length
/// is a multiple of the pattern period, so wrapping around keeps the stream verifiable.
pub struct PatternFile {
    pub file: Arc<File>,
    pub len: u64,
    /// The filesystem holding it (`ext4`, `tmpfs`, ...).
    pub filesystem: String,
}

/// `lcm(pattern period, 4096)`: a file part of a multiple of this many bytes starts on a page
/// and continues the pattern as if from offset 0.
pub(crate) const PART_ALIGN: u64 = pattern::PERIOD * 4096;

impl PatternFile {
    /// Creates the file (unlinked, in `dir` or the temp dir) of `len` bytes, rounded up to a
    /// multiple of the pattern period when `verifiable`; its pages are in the page cache
    /// afterwards (warm).
    pub fn create(len: u64, verifiable: bool, dir: Option<&Path>) -> anyhow::Result<PatternFile> {
        let period = pattern::PERIOD;
        let len = if verifiable {
            len.div_ceil(period) * period
        } else {
            len
        };
        let f = match dir {
            Some(d) => tempfile::tempfile_in(d),
            None => tempfile::tempfile(),
        };
        let mut f = f.context(
            "creating the source file for file paths (set TMPDIR to a writable directory)",
        )?;
        let mut chunk = vec![0u8; 1 << 20];
        let mut off = 0u64;
        while off < len {
            let n = ((len - off) as usize).min(chunk.len());
            pattern::fill(&mut chunk[..n], off);
            f.write_all(&chunk[..n]).about(Setting::FileSize, || {
                "writing the source file (is the disk full? a smaller file needs less)".into()
            })?;
            off += n as u64;
        }
        f.sync_all().context("fsync of the source file")?;
        let filesystem =
            sendpath_host::file::fs_type(f.as_fd()).unwrap_or_else(|_| "unknown".into());
        Ok(PatternFile {
            file: Arc::new(f),
            len,
            filesystem,
        })
    }

    /// Drops the file's pages from the page cache (`posix_fadvise(DONTNEED)`), for a cold run.
    /// Pages still in another CPU's LRU batch, or held for a moment by the kernel's own page
    /// scanning (DAMON's, on these hosts), survive a call (seen here as up to 23% of a file
    /// left resident after three calls 5 ms apart), so it tries again while more than 1%
    /// remains, up to 6 times, waiting twice as long each time (5 to 80 ms, 155 ms in all).
    pub(crate) fn make_cold(&self) -> anyhow::Result<()> {
        for wait_ms in [5, 10, 20, 40, 80, 0] {
            sendpath_host::file::drop_page_cache(self.file.as_fd())
                .context("posix_fadvise(DONTNEED)")?;
            if self.resident_fraction().is_none_or(|f| f <= 0.01) {
                break;
            }
            std::thread::sleep(std::time::Duration::from_millis(wait_ms));
        }
        Ok(())
    }

    /// Fraction of the file in the page cache now (`mincore`).
    pub(crate) fn resident_fraction(&self) -> Option<f64> {
        sendpath_host::file::resident_fraction(self.file.as_fd(), self.len as usize).ok()
    }
}

/// Where a cold run's file goes: the temp dir when it is on a disk, else `/var/tmp` when that
/// is; `None` (with the name of the memory filesystem) when neither is, so `--cold` cannot be
/// honoured.
pub fn cold_file_dir() -> Result<Option<PathBuf>, String> {
    let fs_of = |d: &Path| -> Option<String> {
        let f = tempfile::tempfile_in(d).ok()?;
        sendpath_host::file::fs_type(f.as_fd()).ok()
    };
    let tmp = std::env::temp_dir();
    match fs_of(&tmp) {
        Some(fs) if sendpath_host::file::fs_is_memory_backed(&fs) => {
            let var = PathBuf::from("/var/tmp");
            match fs_of(&var) {
                Some(v) if !sendpath_host::file::fs_is_memory_backed(&v) => Ok(Some(var)),
                _ => Err(fs),
            }
        }
        _ => Ok(None),
    }
}

/// How [`send_message`] builds a message.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MsgShape {
    /// Buffers per memory message.
    pub(crate) fields: usize,
    /// Fill with the pattern (for a verifying receiver).
    pub(crate) fill: bool,
    /// Length of the source file (file paths).
    pub(crate) file_len: u64,
    /// Pooled, freshly allocated, or shared by the run's threads.
    pub(crate) alloc: Alloc,
    /// Write the send time into each memory message's first bytes (`--msg-latency`).
    pub(crate) stamp: bool,
}

impl MsgShape {
    /// Whether its buffers come from the path's pool as they are, with nothing written into
    /// them: [`message_buf`] is then `take_buf`.
    #[inline]
    pub(crate) fn taken_as_is(&self) -> bool {
        self.alloc == Alloc::Pool && !self.fill && !self.stamp
    }
}

/// Whether [`send_message`] sends a `size`-byte message of `strategy` as one buffer, which a
/// sender may also take with [`message_buf`] and send in batches with `SendPath::send_bufs`.
#[inline]
pub(crate) fn one_buf(strategy: Strategy, size: usize, shape: &MsgShape) -> bool {
    strategy.source() == Source::Memory && shape.fields.clamp(1, size.max(1)) == 1
}

/// The one buffer of a `size`-byte memory message at stream offset `off` (see [`one_buf`]):
/// taken from the path's pool or newly allocated (`shape.alloc`), filled with the pattern when
/// `shape.fill` (otherwise it holds bytes written earlier, see [`crate::units::FILL`]),
/// stamped with the send time when `shape.stamp`.
#[inline]
pub(crate) fn message_buf(
    p: &mut dyn SendPath,
    size: usize,
    off: u64,
    shape: &MsgShape,
    shared: Option<&sendpath::SharedPool>,
) -> anyhow::Result<Buf> {
    let mut b = field_buf(p, size, off, shape, shared)?;
    if shape.stamp {
        crate::traffic::stamp::stamp(b.as_mut_slice());
    }
    Ok(b)
}

/// One field's buffer of `len` bytes at stream offset `off`, filled when `shape.fill`.
#[inline]
fn field_buf(
    p: &mut dyn SendPath,
    len: usize,
    off: u64,
    shape: &MsgShape,
    shared: Option<&sendpath::SharedPool>,
) -> anyhow::Result<Buf> {
    let mut b = match (shape.alloc, shared) {
        (Alloc::Pool, _) => p.take_buf(len),
        (Alloc::Fresh, _) => Buf::fresh(len, crate::units::FILL),
        (Alloc::Shared, Some(s)) => s.take(len),
        (Alloc::Shared, None) => {
            bail!("shared buffers: this workload has no pool shared by its threads (stream has)")
        }
    };
    if shape.fill {
        pattern::fill(b.as_mut_slice(), off);
    }
    Ok(b)
}

/// Sends one message of `size` bytes at stream offset `off` on `p`. Memory paths get
/// `shape.fields` buffers (see [`message_buf`] for one); file paths get the range at `off`
/// modulo the file length, split in two where it wraps.
pub(crate) fn send_message(
    p: &mut dyn SendPath,
    strategy: Strategy,
    size: usize,
    off: u64,
    shape: MsgShape,
    shared: Option<&sendpath::SharedPool>,
) -> anyhow::Result<()> {
    let file_len = shape.file_len;
    match strategy.source() {
        Source::Memory if one_buf(strategy, size, &shape) => {
            // One field, the common case: no list of fields.
            let b = message_buf(p, size, off, &shape, shared)?;
            p.send_buf(b)?;
        }
        Source::Memory => {
            let n = shape.fields.clamp(1, size);
            let base = size / n;
            let mut f = p.take_fields();
            f.reserve(n);
            let mut o = off;
            for i in 0..n {
                let len = if i + 1 == n {
                    size - base * (n - 1)
                } else {
                    base
                };
                f.push(field_buf(p, len, o, &shape, shared)?);
                o += len as u64;
            }
            if shape.stamp {
                crate::traffic::stamp::stamp(f[0].as_mut_slice());
            }
            p.send(Msg::Fields(f))?;
        }
        Source::File => {
            if file_len == 0 {
                bail!("no source file for the {strategy} path");
            }
            file_message(off % file_len, size, file_len, |r| {
                Ok(p.send(Msg::File {
                    offset: r.offset,
                    len: r.len,
                })?)
            })?;
        }
    }
    Ok(())
}

/// The file ranges of one `size`-byte message that starts `at` bytes into a file of
/// `file_len` bytes (`at` below it), round and round: each to `emit`, in order; the offset in
/// the file after the message. A comparison finds the wrap, not a division.
#[inline]
pub(crate) fn file_message(
    at: u64,
    size: usize,
    file_len: u64,
    mut emit: impl FnMut(FileRange) -> anyhow::Result<()>,
) -> anyhow::Result<u64> {
    let mut at = at;
    let mut left = size as u64;
    while left > 0 {
        let n = left.min(file_len - at);
        emit(FileRange {
            offset: at,
            len: n as usize,
        })?;
        left -= n;
        at += n;
        if at == file_len {
            at = 0;
        }
    }
    Ok(at)
}

/// What a sending thread (a stream sender, an rr server) returns: its statistics and its
/// path's fallback note.
pub(crate) type Sent = anyhow::Result<(sendpath::SendStats, Option<String>)>;

/// Joins sending threads: their merged statistics and first fallback note; the first error
/// goes to `first_err` (unless one is there); a panic is an error naming `who`.
pub(crate) fn join_senders(
    threads: Vec<std::thread::JoinHandle<Sent>>,
    who: &str,
    first_err: &mut Option<anyhow::Error>,
) -> anyhow::Result<(sendpath::SendStats, Option<String>)> {
    let mut stats = sendpath::SendStats::default();
    let mut note = None;
    for t in threads {
        match t.join().map_err(|_| anyhow::anyhow!("{who} panicked"))? {
            Ok((st, n)) => {
                stats.merge(&st);
                note = note.or(n);
            }
            Err(e) => {
                first_err.get_or_insert(e);
            }
        }
    }
    Ok((stats, note))
}
