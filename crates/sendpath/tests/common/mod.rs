//! A loopback receiver that checks every byte against the pattern, and a sender loop.
#![allow(dead_code)]

use sendpath::{open, Msg, Options, SendPath, Strategy};
use sendpath_host::pattern::{self, Verifier};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

/// Listens on 127.0.0.1:0; the returned thread reads to EOF (optionally after a pause),
/// verifying every byte.
pub(crate) fn receiver(pause: Duration) -> (std::net::SocketAddr, JoinHandle<Verifier>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let h = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        std::thread::sleep(pause);
        let mut v = Verifier::new();
        let mut buf = vec![0u8; 256 * 1024];
        loop {
            let n = s.read(&mut buf).expect("receiver read");
            if n == 0 {
                break;
            }
            v.check(&buf[..n]);
        }
        v
    });
    (addr, h)
}

/// A file holding `len` bytes of the pattern from offset 0.
pub(crate) fn pattern_file(len: usize) -> Arc<std::fs::File> {
    let mut f = tempfile::tempfile().unwrap();
    let mut b = vec![0u8; len];
    pattern::fill(&mut b, 0);
    f.write_all(&b).unwrap();
    f.sync_all().unwrap();
    Arc::new(f)
}

/// What a run produced.
pub(crate) struct Outcome {
    pub verifier: Verifier,
    pub stats: sendpath::SendStatsSummary,
    pub name: &'static str,
    pub note: Option<String>,
    pub sent: u64,
    /// Messages whose list of buffers came from `take_fields` with room already in it (a
    /// list the path kept from an earlier message).
    pub lists_reused: usize,
}

/// Streams `count` messages of `size` bytes (split into `nfields` fields for memory paths)
/// with `strategy`, then closes and returns the receiver's verdict and the sender's counters.
pub(crate) fn stream(
    strategy: Strategy,
    size: usize,
    nfields: usize,
    count: usize,
    opts: Options,
    pause: Duration,
) -> Outcome {
    stream_as(strategy, size, nfields, count, opts, pause, 0)
}

/// [`stream`]; one-field messages go as a list of fields (`batch` 0), by
/// [`SendPath::send_buf`] (1), or by [`SendPath::send_bufs`] in batches of `batch`; file
/// messages by `send` (`batch` 0) or by [`SendPath::send_ranges`] in batches of `batch`.
pub(crate) fn stream_as(
    strategy: Strategy,
    size: usize,
    nfields: usize,
    count: usize,
    mut opts: Options,
    pause: Duration,
    batch: usize,
) -> Outcome {
    let (addr, rx) = receiver(pause);
    if strategy.source() == sendpath::Source::File {
        opts.file = Some(pattern_file(size * count));
    }
    let sock = TcpStream::connect(addr).unwrap();
    let mut p: Box<dyn SendPath> = open(strategy, sock, &opts).unwrap();
    let mut off = 0u64;
    let mut lists_reused = 0;
    let mut bufs = Vec::new();
    let mut ranges = Vec::new();
    for k in 0..count {
        let msg = match strategy.source() {
            sendpath::Source::File if batch > 0 => {
                ranges.push(sendpath::FileRange {
                    offset: off,
                    len: size,
                });
                off += size as u64;
                if ranges.len() == batch || k + 1 == count {
                    p.send_ranges(&ranges).unwrap();
                    ranges.clear();
                }
                continue;
            }
            sendpath::Source::File => Msg::File {
                offset: off,
                len: size,
            },
            sendpath::Source::Memory if batch > 0 && nfields == 1 => {
                let mut b = p.take_buf(size);
                pattern::fill(b.as_mut_slice(), off);
                off += size as u64;
                if batch == 1 {
                    p.send_buf(b).unwrap();
                    continue;
                }
                bufs.push(b);
                if bufs.len() == batch || k + 1 == count {
                    p.send_bufs(&mut bufs).unwrap();
                    assert!(bufs.is_empty(), "send_bufs leaves the batch empty");
                }
                continue;
            }
            sendpath::Source::Memory => {
                let base = size / nfields;
                let mut f = p.take_fields();
                lists_reused += usize::from(f.capacity() > 0);
                assert!(f.is_empty(), "take_fields hands out an empty list");
                let mut o = off;
                for i in 0..nfields {
                    let len = if i + 1 == nfields {
                        size - base * (nfields - 1)
                    } else {
                        base
                    };
                    let mut b = p.take_buf(len);
                    pattern::fill(b.as_mut_slice(), o);
                    o += len as u64;
                    f.push(b);
                }
                Msg::Fields(f)
            }
        };
        p.send(msg).unwrap();
        off += size as u64;
    }
    p.finish(Duration::from_secs(5)).unwrap();
    let stats = p.stats().summary();
    let name = p.name();
    let note = p.note().map(String::from);
    drop(p);
    let verifier = rx.join().unwrap();
    Outcome {
        verifier,
        stats,
        name,
        note,
        sent: off,
        lists_reused,
    }
}

/// Prints what a test saw, so the counters are visible in the test output.
pub(crate) fn report(label: &str, o: &Outcome) {
    println!(
        "{label}: path={} sent={} verified={} mismatches={} sends={} zc_attempts={} completions={} copied={} copied_fraction={:?} fallbacks={:?} short={} leaked={} completion_p50={}ns note={:?}",
        o.name,
        o.sent,
        o.verifier.bytes_verified(),
        o.verifier.mismatches,
        o.stats.sends,
        o.stats.zerocopy.attempts,
        o.stats.zerocopy.completions,
        o.stats.zerocopy.copied,
        o.stats.copied_fraction,
        o.stats.zerocopy.fallbacks,
        o.stats.short_sends,
        o.stats.leaked_buffers,
        o.stats.completion_latency.p50_ns,
        o.note,
    );
}

/// Asserts the receiver got exactly what was sent.
pub(crate) fn assert_intact(o: &Outcome) {
    assert_eq!(o.verifier.mismatches, 0, "{}: corrupted bytes", o.name);
    assert_eq!(
        o.verifier.bytes_verified(),
        o.sent,
        "{}: byte count",
        o.name
    );
    assert_eq!(o.stats.bytes, o.sent, "{}: sender's byte count", o.name);
}

/// Skips a test that cannot run here: prints `skipped: REASON`, or fails when
/// `SENDPATH_REQUIRE=all` (which `.ci/run` sets), so a skip never passes silently in CI.
pub(crate) fn skip(reason: &str) {
    if std::env::var("SENDPATH_REQUIRE").as_deref() == Ok("all") {
        panic!("cannot run here and SENDPATH_REQUIRE=all forbids skipping: {reason}");
    }
    println!("skipped: {reason}");
}

/// `setsockopt(level, name, &value)` on `s`, failing the test on an error.
fn set_opt<T>(s: &TcpStream, level: i32, name: i32, value: &T) {
    use std::os::fd::AsRawFd;
    // SAFETY: a valid socket, and a pointer to a live value of the size passed.
    let rc = unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            level,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "setsockopt({level}, {name})");
}

/// An integer socket option.
pub(crate) fn set_int_opt(s: &TcpStream, level: i32, name: i32, value: i32) {
    set_opt(s, level, name, &value);
}

/// Sets SO_LINGER with a zero timeout, so closing `s` sends a reset instead of a FIN.
pub(crate) fn reset_on_close(s: &TcpStream) {
    let lg = libc::linger {
        l_onoff: 1,
        l_linger: 0,
    };
    set_opt(s, libc::SOL_SOCKET, libc::SO_LINGER, &lg);
}

/// Example `name`'s binary, built by `cargo test` beside this test's
/// (`target/PROFILE/examples`), if it is newer than every source file of the example under
/// `sources` (`cargo test --test NAME` alone does not build examples, and would find an old
/// one).
pub(crate) fn example(name: &str, sources: &str) -> Result<std::path::PathBuf, String> {
    let exe = std::env::current_exe().map_err(|e| e.to_string())?;
    let dir = exe
        .parent()
        .and_then(|d| d.parent())
        .ok_or("no target directory")?;
    let p = dir.join("examples").join(name);
    let built = std::fs::metadata(&p)
        .and_then(|m| m.modified())
        .map_err(|_| {
            format!(
                "{} is not built (`cargo test -p sendpath` builds it)",
                p.display()
            )
        })?;
    let src = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(sources);
    let newest = match src.is_dir() {
        true => walk(&src).into_iter().max(),
        false => std::fs::metadata(&src).and_then(|m| m.modified()).ok(),
    }
    .ok_or("no example sources")?;
    match newest <= built {
        true => Ok(p),
        false => Err(format!(
            "{} is older than its sources: run `cargo test -p sendpath`, which rebuilds it",
            p.display()
        )),
    }
}

/// Modification times of every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<std::time::SystemTime> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = e.path();
        if path.is_dir() {
            out.extend(walk(&path));
        } else if let Ok(t) = e.metadata().and_then(|m| m.modified()) {
            out.push(t);
        }
    }
    out
}

/// Options for the adaptive sender deciding from `tiers` (from this many bytes, this path),
/// using a zero-copy tier only after `run_min` sends in a row of it.
pub(crate) fn tiered(tiers: &[(usize, sendpath::Strategy)], run_min: u64) -> sendpath::Options {
    let tiers = tiers
        .iter()
        .map(|&(from_bytes, path)| sendpath::Tier { from_bytes, path })
        .collect();
    sendpath::Options {
        profile: Some(Arc::new(
            sendpath::Profile::from_tiers(tiers, true).unwrap(),
        )),
        adaptive: sendpath::AdaptiveConfig {
            run_min,
            ..Default::default()
        },
        ..sendpath::Options::default()
    }
}
