//! Every send path streams the pattern over 127.0.0.1 and the receiver checks every byte.

mod common;

use common::{assert_intact, report, stream};
use sendpath::InflightLimits;
use sendpath::{probe, Options, Strategy};
use std::time::Duration;

const NO_PAUSE: Duration = Duration::ZERO;

fn plain(strategy: Strategy, size: usize, fields: usize, count: usize) {
    let o = stream(strategy, size, fields, count, Options::default(), NO_PAUSE);
    report(strategy.name(), &o);
    assert_eq!(o.name, strategy.name());
    assert_intact(&o);
}

#[test]
fn memory_paths_hand_back_their_lists_of_buffers() {
    use Strategy::*;
    // Copying paths free a message at once: every list after the first is the one before.
    for s in [Copy, Serialize, Gather, Uring, Adaptive] {
        let o = stream(s, 4096, 2, 64, Options::default(), Duration::ZERO);
        assert_intact(&o);
        assert_eq!(o.lists_reused, 63, "{s}");
    }
    // msg-zerocopy frees a message when its completion is read: lists come back then.
    let o = stream(
        MsgZerocopy,
        4096,
        1,
        256,
        Options::default(),
        Duration::ZERO,
    );
    assert_intact(&o);
    assert!(o.lists_reused > 0, "msg-zerocopy reused no list");
}

/// Every path that sends from memory, from the table of paths.
fn memory_paths() -> impl Iterator<Item = Strategy> {
    Strategy::ALL
        .into_iter()
        .filter(|s| s.source() == sendpath::Source::Memory)
}

#[test]
fn every_file_path_sends_batches_by_send_ranges_in_order() {
    let file_paths = Strategy::ALL
        .into_iter()
        .filter(|s| s.source() == sendpath::Source::File);
    for s in file_paths {
        // 300 = 18 batches of 16 and one of 12; 4099 B: ranges that start inside a page.
        let o = common::stream_as(s, 4099, 1, 300, Options::default(), NO_PAUSE, 16);
        report(s.name(), &o);
        assert_intact(&o);
        assert_eq!(o.stats.sends, 300, "{s}: each range of a batch is one send");
    }
}

#[test]
fn every_memory_path_sends_one_buffer_by_send_buf() {
    for s in memory_paths() {
        let o = common::stream_as(s, 4096, 1, 300, Options::default(), NO_PAUSE, 1);
        report(s.name(), &o);
        assert_intact(&o);
        assert_eq!(o.stats.sends, 300, "{s}: every send_buf is one send");
    }
}

#[test]
fn every_memory_path_sends_batches_by_send_bufs_in_order() {
    for s in memory_paths() {
        // 300 = 18 batches of 16 and one of 12.
        let o = common::stream_as(s, 4096, 1, 300, Options::default(), NO_PAUSE, 16);
        report(s.name(), &o);
        assert_intact(&o);
        assert_eq!(
            o.stats.sends, 300,
            "{s}: each buffer of a batch is one send"
        );
    }
}

/// `copy_batch` puts several messages of a batch in one `sendmsg`; the counters say how
/// many messages each system call (or io_uring request) carried, where a path counts them.
#[test]
fn copy_batched_sends_a_batch_per_call_in_order_and_calls_are_counted() {
    let batched = Options {
        copy_batch: 8,
        ..Options::default()
    };
    let per_call = |o: &common::Outcome| o.stats.messages_per_call;
    // 300 = 18 batches of 16 and one of 12; batched by 8: 38 calls, one more per short send.
    let o = common::stream_as(Strategy::Copy, 4096, 1, 300, batched, NO_PAUSE, 16);
    report("copy, batched by 8", &o);
    assert_intact(&o);
    assert_eq!(o.stats.sends, 300);
    let m = per_call(&o).expect("copy counts its calls");
    assert!(
        (6.0..=300.0 / 38.0 + 1e-9).contains(&m),
        "copy_batch 8: {m} messages per call (short sends {})",
        o.stats.short_sends
    );
    // One `send` per message without it.
    let o = common::stream_as(
        Strategy::Copy,
        4096,
        1,
        300,
        Options::default(),
        NO_PAUSE,
        16,
    );
    let m = per_call(&o).expect("copy counts its calls");
    assert!(m <= 1.0 && m > 0.9, "copy: {m} messages per call");
    // io_uring's vectored requests carry several; a path that does not count says None.
    if probe().io_uring.enabled {
        let o = common::stream_as(
            Strategy::Uring,
            4096,
            1,
            300,
            Options::default(),
            NO_PAUSE,
            16,
        );
        assert_intact(&o);
        let m = per_call(&o).expect("uring counts its requests");
        assert!(
            m > 1.0,
            "uring: {m} messages per request ({:?})",
            o.stats.uring_order
        );
    }
    let o = common::stream_as(
        Strategy::MmapSend,
        4096,
        1,
        30,
        Options::default(),
        NO_PAUSE,
        0,
    );
    assert_eq!(per_call(&o), None, "mmap-send does not count its calls");
}

#[test]
fn msg_zerocopy_times_one_zero_copy_send_in_16() {
    if !probe().msg_zerocopy.supported {
        common::skip("MSG_ZEROCOPY unavailable");
        return;
    }
    let o = common::stream_as(
        Strategy::MsgZerocopy,
        4096,
        1,
        100,
        Options::default(),
        NO_PAUSE,
        16,
    );
    report("msg-zerocopy", &o);
    assert_intact(&o);
    // Most of the 100 sends asked the kernel for zero-copy (before, a run where every one
    // fell back checked 0 completions against 0).
    let zero_copy = o.stats.sends - o.stats.zerocopy.fallbacks.total();
    assert!(
        zero_copy >= 50 && o.stats.zerocopy.attempts == zero_copy,
        "{zero_copy} zero-copy sends: {:?}",
        o.stats.zerocopy
    );
    assert_eq!(
        o.stats.zerocopy.completions, zero_copy,
        "every completion read"
    );
    assert_eq!(
        o.stats.completion_latency.count,
        zero_copy.div_ceil(16),
        "the 1st, 17th, 33rd... zero-copy send is timed"
    );
}

#[test]
fn adaptive_counts_a_run_of_copies_by_send_buf_as_by_send() {
    use sendpath::Msg;
    // Copy-tier sizes only (the defaults copy below 64 KiB): no completion can change a
    // decision, so both ways in must count the same.
    let sizes: Vec<usize> = [300; 20]
        .into_iter()
        .chain([77; 5])
        .chain([300; 20])
        .collect();
    let decisions = |by_buf: bool, sizes: &[usize]| {
        let (addr, rx) = common::receiver(NO_PAUSE);
        let sock = std::net::TcpStream::connect(addr).unwrap();
        let mut p = sendpath::open(Strategy::Adaptive, sock, &Options::default()).unwrap();
        let mut off = 0u64;
        for &len in sizes {
            let mut b = p.take_buf(len);
            sendpath_host::pattern::fill(b.as_mut_slice(), off);
            off += len as u64;
            match by_buf {
                true => p.send_buf(b).unwrap(),
                false => p.send(Msg::one(b)).unwrap(),
            }
        }
        p.finish(Duration::from_secs(2)).unwrap();
        let s = p.stats().summary();
        drop(p);
        let v = rx.join().unwrap();
        assert_eq!((v.bytes_verified(), v.mismatches), (off, 0));
        assert_eq!(s.sends, sizes.len() as u64);
        s.decisions.unwrap()
    };
    let by_buf = decisions(true, &sizes);
    assert_eq!(by_buf.copy_sends, sizes.len() as u64, "{by_buf:?}");
    assert_eq!(by_buf.switches, 0, "{by_buf:?}");
    assert_eq!(by_buf, decisions(false, &sizes));
    // A zero-copy tier (the defaults' from 64 KiB) copies only the first 64 sends of a run: a
    // run of one-buffer sends still goes zero-copy after them.
    let big = decisions(true, &[64 << 10; 100]);
    assert!(big.run_copies > 0 && big.zerocopy_sends > 0, "{big:?}");
}

#[test]
fn the_copying_paths_take_back_a_sent_buffer_at_once() {
    use Strategy::*;
    for s in [Copy, Serialize, Gather] {
        let (addr, rx) = common::receiver(NO_PAUSE);
        let sock = std::net::TcpStream::connect(addr).unwrap();
        let mut p = sendpath::open(s, sock, &Options::default()).unwrap();
        let mut b = p.take_buf(4096);
        sendpath_host::pattern::fill(b.as_mut_slice(), 0);
        let at = b.as_slice().as_ptr();
        p.send_buf(b).unwrap();
        assert_eq!(
            p.take_buf(4096).as_slice().as_ptr(),
            at,
            "{s}: the buffer is reused"
        );
        drop(p);
        let v = rx.join().unwrap();
        assert_eq!((v.bytes_verified(), v.mismatches), (4096, 0), "{s}");
    }
}

/// A blocking send on a socket with a send timeout (`SO_SNDTIMEO`) returns what it sent when
/// the timeout passes: a short send. copy, serialize, gather and msg-zerocopy finish the
/// message, in order, and count it; msg-zerocopy counts one completion id per call, so a
/// second message's ids follow (none unexpected, no buffer left with the kernel). The receiver
/// reads 128 KiB every 4 ms, so each call makes progress but a 64 MiB message outlasts a 0.5 s
/// timeout.
#[test]
fn the_blocking_paths_finish_and_count_a_short_send() {
    use Strategy::*;
    let runs: Vec<_> = [Copy, Serialize, Gather, MsgZerocopy]
        .into_iter()
        .map(|s| std::thread::spawn(move || (s, short_send(s, 64 << 20))))
        .collect();
    for r in runs {
        let (s, (short, verified, mismatches, astray)) = r.join().unwrap();
        println!("{s}: short sends {short}, verified {verified}");
        assert_eq!(
            (verified, mismatches, astray),
            ((64 << 20) + 4096, 0, 0),
            "{s}"
        );
        assert!(short >= 1, "{s}: no short send counted");
    }
}

/// Sends a `size`-byte message, then a 4 KiB one, to a slow reader with a 0.5 s send timeout:
/// the short sends counted, the bytes verified, the mismatches, and the completions unexpected
/// or still due.
fn short_send(s: Strategy, size: usize) -> (u64, u64, u64, u64) {
    use std::io::Read;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let rx = std::thread::spawn(move || {
        let (mut c, _) = l.accept().unwrap();
        let mut v = sendpath_host::pattern::Verifier::new();
        let mut buf = vec![0u8; 128 << 10];
        loop {
            std::thread::sleep(Duration::from_millis(4));
            match c.read(&mut buf).unwrap() {
                0 => return v,
                n => v.check(&buf[..n]),
            }
        }
    });
    let sock = std::net::TcpStream::connect(addr).unwrap();
    sock.set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let mut p = sendpath::open(s, sock, &Options::default()).unwrap();
    let mut b = p.take_buf(size);
    sendpath_host::pattern::fill(b.as_mut_slice(), 0);
    p.send_buf(b).unwrap();
    // A second message after it: its ids follow the first's only if those were all counted.
    let mut b = p.take_buf(4096);
    sendpath_host::pattern::fill(b.as_mut_slice(), size as u64);
    p.send_buf(b).unwrap();
    std::thread::sleep(Duration::from_millis(200));
    p.finish(Duration::from_secs(5)).unwrap();
    let st = p.stats();
    let (short, astray) = (st.short_sends, st.zerocopy.unexpected + st.leaked_buffers);
    drop(p);
    let v = rx.join().unwrap();
    (short, v.bytes_verified(), v.mismatches, astray)
}

#[test]
fn copy_is_byte_exact() {
    plain(Strategy::Copy, 65536, 1, 200);
    plain(Strategy::Copy, 100, 1, 2000);
}

#[test]
fn serialize_is_byte_exact() {
    plain(Strategy::Serialize, 16384, 8, 500);
    plain(Strategy::Serialize, 257, 8, 2000);
}

#[test]
fn gather_is_byte_exact() {
    plain(Strategy::Gather, 16384, 8, 500);
    plain(Strategy::Gather, 1000, 7, 2000);
}

#[test]
fn read_send_is_byte_exact() {
    plain(Strategy::ReadSend, 65536, 1, 100);
}

#[test]
fn mmap_send_is_byte_exact() {
    plain(Strategy::MmapSend, 65536, 1, 100);
}

#[test]
fn sendfile_is_byte_exact() {
    plain(Strategy::Sendfile, 1 << 20, 1, 16);
    plain(Strategy::Sendfile, 4099, 1, 300);
}

#[test]
fn splice_is_byte_exact() {
    plain(Strategy::Splice, 1 << 20, 1, 16);
    plain(Strategy::Splice, 70_001, 1, 50);
}

#[test]
fn uring_splice_is_byte_exact() {
    let p = probe();
    if !p.io_uring.enabled {
        common::skip(&format!("io_uring unavailable ({:?})", p.io_uring.error));
        return;
    }
    plain(Strategy::UringSplice, 1 << 20, 1, 16);
    plain(Strategy::UringSplice, 70_001, 1, 50);
    // A 64 KiB pipe: many pairs per message, ranges that start inside a page.
    let small = Options {
        pipe_size: 65536,
        ..Options::default()
    };
    let o = stream(Strategy::UringSplice, 300_001, 1, 8, small, NO_PAUSE);
    report("uring-splice, 64 KiB pipe", &o);
    assert_intact(&o);
}

#[test]
fn vmsplice_is_byte_exact() {
    plain(Strategy::Vmsplice, 65536, 1, 200);
    plain(Strategy::Vmsplice, 3 << 20, 1, 4);
}

#[test]
fn msg_zerocopy_is_byte_exact_and_reports_local_copies() {
    let p = probe();
    if !p.msg_zerocopy.supported {
        common::skip(&format!(
            "MSG_ZEROCOPY unavailable here ({})",
            p.msg_zerocopy.error.unwrap_or_default()
        ));
        return;
    }
    let o = stream(
        Strategy::MsgZerocopy,
        65536,
        8,
        500,
        Options::default(),
        NO_PAUSE,
    );
    report("msg-zerocopy", &o);
    assert_intact(&o);
    let s = &o.stats;
    assert!(s.zerocopy.attempts > 0, "no zero-copy send was attempted");
    assert_eq!(
        s.zerocopy.completions, s.zerocopy.attempts,
        "every zero-copy send must be completed after finish()"
    );
    assert_eq!(s.leaked_buffers, 0);
    assert!(s.zerocopy.notifications > 0 && s.zerocopy.notifications <= s.zerocopy.completions);
    if p.msg_zerocopy.local_copied == Some(true) {
        let f = s.copied_fraction.expect("copied fraction must be reported");
        assert!(
            f > 0.95,
            "a local receiver copies every zero-copy send; reported {f}"
        );
    }
}

#[test]
fn msg_zerocopy_inflight_cap_falls_back_to_copy() {
    let opts = Options {
        inflight: InflightLimits {
            max_sends: 2,
            max_bytes: 1 << 30,
        },
        ..Options::default()
    };
    // The receiver pauses, so completions lag and the cap of 2 fills.
    let o = stream(
        Strategy::MsgZerocopy,
        65536,
        1,
        200,
        opts,
        Duration::from_millis(100),
    );
    report("msg-zerocopy cap=2", &o);
    assert_intact(&o);
    assert!(
        o.stats.zerocopy.fallbacks.inflight_cap > 0,
        "cap of 2 sends never filled"
    );
    assert_eq!(
        o.stats.zerocopy.attempts + o.stats.zerocopy.fallbacks.inflight_cap,
        o.stats.sends,
        "every send is either zero-copy or a counted fallback"
    );
}

#[test]
fn uring_is_byte_exact() {
    let p = probe();
    if !p.io_uring.enabled || !p.io_uring.send {
        common::skip(&format!(
            "io_uring SEND unavailable ({:?})",
            p.io_uring.error
        ));
        return;
    }
    plain(Strategy::Uring, 65536, 1, 300);
    plain(Strategy::Uring, 1000, 1, 3000);
    let deep = Options {
        uring_depth: 32,
        ..Options::default()
    };
    let o = stream(Strategy::Uring, 32768, 1, 1000, deep, NO_PAUSE);
    report("uring depth=32", &o);
    assert_intact(&o);
}

#[test]
fn uring_zc_is_byte_exact_and_reports_local_copies() {
    let p = probe();
    if !p.io_uring.send_zc {
        common::skip("IORING_OP_SEND_ZC unavailable");
        return;
    }
    let o = stream(
        Strategy::UringZc,
        65536,
        1,
        500,
        Options::default(),
        NO_PAUSE,
    );
    report("uring-zc", &o);
    assert_eq!(o.name, "uring-zc");
    assert_intact(&o);
    let s = &o.stats;
    assert!(s.zerocopy.attempts > 0);
    assert_eq!(
        s.zerocopy.completions, s.zerocopy.attempts,
        "one notification per SEND_ZC"
    );
    if !p.io_uring.send_zc_report_usage {
        common::skip("copied fraction (IORING_SEND_ZC_REPORT_USAGE unsupported)");
        assert_eq!(s.copied_fraction, None);
        return;
    }
    let f = s.copied_fraction.expect("copied fraction must be reported");
    if p.io_uring.send_zc_local_copied == Some(true) {
        assert!(f > 0.95, "local receiver: expected ~1.0, reported {f}");
    }
}

#[test]
fn uring_zc_fixed_buffers_are_byte_exact() {
    let p = probe();
    if !p.io_uring.send_zc {
        common::skip("IORING_OP_SEND_ZC unavailable");
        return;
    }
    let opts = Options {
        uring_fixed_buffers: true,
        ..Options::default()
    };
    let table = (opts.inflight.max_sends + 2 * opts.uring_depth) as u64;
    let o = stream(Strategy::UringZc, 65536, 1, 300, opts, NO_PAUSE);
    report("uring-zc fixed", &o);
    assert_intact(&o);
    assert_eq!(o.stats.zerocopy.completions, o.stats.zerocopy.attempts);
    // Most sends were SEND_ZC (a few may go by copy under the in-flight cap), and each of the
    // first buffers the table holds went registered: before, a run that registered none
    // passed. Registered sends are not held to the cap, so while notifications are slow (a
    // loaded host) the pool outgrows the table and its newer buffers go unregistered.
    let z = &o.stats.zerocopy;
    assert!(z.attempts >= 150, "{z:?}");
    assert!(
        z.registered >= z.attempts.min(table),
        "every SEND_ZC from a buffer the table could hold: {z:?}"
    );
}

#[test]
fn uring_zc_inflight_cap_falls_back_to_copy() {
    let p = probe();
    if !p.io_uring.send_zc {
        common::skip("IORING_OP_SEND_ZC unavailable");
        return;
    }
    let opts = Options {
        inflight: InflightLimits {
            max_sends: 1,
            max_bytes: 1 << 30,
        },
        ..Options::default()
    };
    let o = stream(
        Strategy::UringZc,
        65536,
        1,
        200,
        opts,
        Duration::from_millis(50),
    );
    report("uring-zc cap=1", &o);
    assert_intact(&o);
    let f = o.stats.zerocopy.fallbacks;
    assert!(f.inflight_cap > 0, "cap of 1 never filled");
    assert_eq!(f.enobufs + f.unsupported, 0);
}

#[test]
fn file_message_to_memory_path_is_a_clear_error() {
    let (addr, _rx) = common::receiver(NO_PAUSE);
    let sock = std::net::TcpStream::connect(addr).unwrap();
    let mut p = sendpath::open(Strategy::Copy, sock, &Options::default()).unwrap();
    let e = p
        .send(sendpath::Msg::File { offset: 0, len: 1 })
        .unwrap_err();
    assert!(
        e.to_string().contains("copy path cannot send a file range"),
        "{e}"
    );
    let sock = std::net::TcpStream::connect(addr);
    drop(sock);
}

#[test]
fn file_path_without_a_file_is_a_clear_error() {
    let (addr, _rx) = common::receiver(NO_PAUSE);
    let sock = std::net::TcpStream::connect(addr).unwrap();
    let e = sendpath::open(Strategy::Sendfile, sock, &Options::default())
        .err()
        .unwrap();
    assert!(e.to_string().contains("Options::file"), "{e}");
}

#[test]
fn unknown_strategy_names_the_choices() {
    let e = Strategy::parse("zerocopy").unwrap_err().to_string();
    assert!(
        e.contains("unknown strategy `zerocopy`") && e.contains("msg-zerocopy"),
        "{e}"
    );
    for s in Strategy::ALL {
        assert_eq!(Strategy::parse(s.name()).unwrap(), s);
    }
}

#[test]
fn adaptive_is_byte_exact_and_backs_off_where_the_kernel_copies() {
    let p = probe();
    if p.msg_zerocopy.local_copied != Some(true) {
        common::skip("this kernel does not report local MSG_ZEROCOPY sends as copied");
        return;
    }
    // The defaults expect real zero-copy from 64 KiB: on loopback the completions come back
    // copied, so the sender stops using zero-copy and retries later.
    let o = stream(
        Strategy::Adaptive,
        1 << 20,
        1,
        600,
        Options::default(),
        NO_PAUSE,
    );
    report("adaptive, default profile, 1 MiB", &o);
    assert_eq!(o.name, "adaptive");
    assert_intact(&o);
    let d = o.stats.decisions.expect("adaptive counts its decisions");
    assert!(d.zerocopy_sends > 0, "{d:?}");
    assert!(d.backoffs >= 1 && d.backoff_copies > 0, "{d:?}");
    assert!(
        d.backoff_copies > d.zerocopy_sends,
        "most sends go by copy once it backed off: {d:?}"
    );
    assert_eq!(d.copy_sends, 0, "no 1 MiB send is in a copy tier");
    assert_eq!(o.stats.zerocopy.attempts, d.zerocopy_sends);

    // Below the crossover every send copies; nothing is held.
    let o = stream(
        Strategy::Adaptive,
        4096,
        1,
        2000,
        Options::default(),
        NO_PAUSE,
    );
    assert_intact(&o);
    let d = o.stats.decisions.unwrap();
    assert_eq!((d.copy_sends, d.zerocopy_sends), (2000, 0), "{d:?}");

    // A profile measured on this kind of route (zero-copy won although copied) keeps it.
    let defaults = sendpath::Profile::defaults();
    let profile = sendpath::Profile::from_tiers(defaults.tiers().to_vec(), true).unwrap();
    let opts = Options {
        profile: Some(std::sync::Arc::new(profile)),
        ..Options::default()
    };
    let o = stream(Strategy::Adaptive, 1 << 20, 1, 300, opts, NO_PAUSE);
    report("adaptive, profile measured copied, 1 MiB", &o);
    assert_intact(&o);
    let d = o.stats.decisions.unwrap();
    assert_eq!(d.backoffs, 0, "{d:?}");
    assert_eq!(d.zerocopy_sends + d.cap_copies + d.run_copies, 300, "{d:?}");
}

/// One connection whose adaptive sender moves between io_uring memory sends (SEND and
/// SEND_ZC on its ring) and sendfile for file messages, back and forth: the stream is the
/// pattern, byte for byte, in order (file ranges are taken at the stream's own offsets).
#[test]
fn adaptive_keeps_byte_order_between_its_ring_and_sendfile() {
    use sendpath::Msg;
    use sendpath_host::pattern;
    if !probe().io_uring.send_zc {
        common::skip("io_uring SEND_ZC unavailable here");
        return;
    }
    let sizes: Vec<usize> = (0..240)
        .map(|i| [700, 40_000, 5000, 100_000][i % 4] + i)
        .collect();
    let total: usize = sizes.iter().sum();
    // Every send decided on its own size (no run to wait for).
    let opts = Options {
        file: Some(common::pattern_file(total)),
        ..common::tiered(&[(0, Strategy::Uring), (32_000, Strategy::UringZc)], 0)
    };
    let (addr, rx) = common::receiver(NO_PAUSE);
    let sock = std::net::TcpStream::connect(addr).unwrap();
    let mut p = sendpath::open(Strategy::Adaptive, sock, &opts).unwrap();
    let mut off = 0u64;
    // Two memory messages, then one from the file, then one memory...: the ring's queued
    // sends must be out before sendfile writes, and sendfile's bytes before the next send.
    for (i, &len) in sizes.iter().enumerate() {
        if i % 3 == 2 {
            p.send(Msg::File { offset: off, len }).unwrap();
        } else {
            let mut b = p.take_buf(len);
            pattern::fill(b.as_mut_slice(), off);
            p.send_buf(b).unwrap();
        }
        off += len as u64;
    }
    p.finish(Duration::from_secs(5)).unwrap();
    let s = p.stats().summary();
    drop(p);
    let v = rx.join().unwrap();
    assert_eq!(v.bytes_verified(), off, "every byte arrived");
    assert_eq!(v.first_mismatch, None, "in order");
    assert_eq!((s.sends, s.bytes), (sizes.len() as u64, off));
    // Both of the ring's ways were taken, not only the copy tier.
    assert!(s.zerocopy.attempts > 0, "no SEND_ZC: {:?}", s.decisions);
}

#[test]
fn adaptive_keeps_byte_order_across_all_four_paths() {
    use sendpath::Msg;
    use sendpath_host::pattern;
    if !probe().io_uring.send_zc {
        common::skip("io_uring SEND_ZC unavailable here");
        return;
    }
    // A profile naming every path, so runs of sizes cross between the blocking calls and the
    // ring, and between SEND and SEND_ZC on the ring.
    let tiers = [
        (0, Strategy::Copy),
        (1000, Strategy::Uring),
        (16_000, Strategy::MsgZerocopy),
        (100_000, Strategy::UringZc),
    ];
    let opts = common::tiered(&tiers, 8);
    let (addr, rx) = common::receiver(NO_PAUSE);
    let sock = std::net::TcpStream::connect(addr).unwrap();
    let mut p = sendpath::open(Strategy::Adaptive, sock, &opts).unwrap();
    let mut off = 0u64;
    // Runs long enough to pass the run rule, then single sends that switch every time.
    let mut sizes: Vec<usize> = Vec::new();
    for round in 0..3 {
        for len in [300, 5000, 40_000, 300_000, 77, 1 << 20] {
            sizes.extend(std::iter::repeat_n(len + round, 20));
        }
        sizes.extend([300, 300_000, 5000, 40_000, 1 << 20, 7].map(|x| x + round));
    }
    for (i, &len) in sizes.iter().enumerate() {
        let mut b = p.take_buf(len);
        pattern::fill(b.as_mut_slice(), off);
        // Both ways in: one buffer alone, and as a list of one field.
        match i % 3 {
            0 => p.send(Msg::one(b)).unwrap(),
            _ => p.send_buf(b).unwrap(),
        }
        off += len as u64;
    }
    p.finish(Duration::from_secs(5)).unwrap();
    let s = p.stats().summary();
    drop(p);
    let v = rx.join().unwrap();
    println!(
        "adaptive over four paths: {} bytes verified, {:?}",
        v.bytes_verified(),
        s.decisions
    );
    assert_eq!(v.bytes_verified(), off, "every byte arrived");
    assert_eq!(v.mismatches, 0, "in order");
    assert_eq!(s.sends, sizes.len() as u64);
    assert_eq!(s.bytes, off);
    let d = s.decisions.unwrap();
    assert!(
        d.zerocopy_sends > 0 && d.copy_sends > 0 && d.run_copies > 0,
        "{d:?}"
    );
    assert!(d.switches >= 30, "{d:?}");
    // Every send is one decision, whichever way it came in.
    let decided = d.copy_sends + d.zerocopy_sends + d.run_copies + d.backoff_copies + d.cap_copies;
    assert_eq!(decided, s.sends, "{d:?}");
    // A zero-copy pick may still go by copy under the path's own byte cap (counted).
    assert_eq!(
        s.zerocopy.attempts + s.zerocopy.fallbacks.inflight_cap,
        d.zerocopy_sends,
        "{s:?}"
    );
    assert_eq!(s.leaked_buffers, 0);
}

/// A server's shared pool ([`sendpath::SharedPool`]) gets back every buffer it handed out,
/// whichever path sent it: once a copying path has sent it, once a zero-copy path's kernel
/// let it go (`finish`), and from `vmsplice`, which sends a copy in pages of its own.
#[test]
fn every_memory_path_sends_shared_pool_buffers_home() {
    for s in memory_paths() {
        let (addr, rx) = common::receiver(NO_PAUSE);
        let sock = std::net::TcpStream::connect(addr).unwrap();
        let mut p = sendpath::open(s, sock, &Options::default()).unwrap();
        let shared = sendpath::SharedPool::new();
        // The buffers handed out, by address: one taken again once it came home is one.
        let mut handed_out = std::collections::HashSet::new();
        for i in 0..8 {
            let mut b = shared.take(4096);
            sendpath_host::pattern::fill(b.as_mut_slice(), i * 4096);
            handed_out.insert(b.as_slice().as_ptr() as usize);
            p.send_buf(b).unwrap();
        }
        p.finish(Duration::from_secs(2)).unwrap();
        drop(p);
        let v = rx.join().unwrap();
        assert_eq!((v.bytes_verified(), v.mismatches), (8 * 4096, 0), "{s}");
        assert_eq!(shared.free_len(), handed_out.len(), "{s}: each came home");
    }
}
