//! The paths are not TCP-only: the memory paths send datagrams on a connected UDP socket,
//! each message one datagram, byte for byte.

mod common;

use sendpath::{open, Msg, Options, Source, Strategy};
use sendpath_host::pattern::{self, Verifier};
use std::net::UdpSocket;
use std::time::Duration;

const DATAGRAMS: usize = 40;
const SIZE: usize = 1200;
/// The paths that send a message's fields one system call or request each.
const SPLIT: [Strategy; 3] = [Strategy::Copy, Strategy::Uring, Strategy::UringZc];

/// Sends `DATAGRAMS` messages of `SIZE` bytes with `strategy` on a connected UDP socket, with
/// `fields` every other one as three fields; what the receiver read (verified as one stream)
/// and the datagram sizes, and the path's stats.
fn send_datagrams(
    strategy: Strategy,
    opts: &Options,
    fields: bool,
) -> (Verifier, Vec<usize>, sendpath::SendStatsSummary) {
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    let reader = std::thread::spawn(move || {
        let mut v = Verifier::new();
        let mut sizes = Vec::new();
        let mut buf = vec![0u8; 65536];
        // Until the bytes sent are in, or nothing more comes (a path that cut messages
        // into more datagrams than sent still shows every byte).
        while v.bytes_verified() < (DATAGRAMS * SIZE) as u64 {
            let Ok(n) = rx.recv(&mut buf) else { break };
            sizes.push(n);
            v.check(&buf[..n]);
        }
        (v, sizes)
    });
    let mut p = open(strategy, tx, opts).unwrap();
    for i in 0..DATAGRAMS {
        let off = (i * SIZE) as u64;
        let msg = if i % 2 == 0 || !fields {
            let mut b = p.take_buf(SIZE);
            pattern::fill(b.as_mut_slice(), off);
            Msg::one(b)
        } else {
            let third = SIZE / 3;
            let fields = (0..3)
                .map(|k| {
                    let mut b = p.take_buf(third);
                    pattern::fill(b.as_mut_slice(), off + (k * third) as u64);
                    b
                })
                .collect();
            Msg::Fields(fields)
        };
        p.send(msg).unwrap();
        // Paced, so that a receiver on a busy host never has its buffer overrun.
        if i % 8 == 7 {
            p.flush().unwrap();
            std::thread::sleep(Duration::from_millis(2));
        }
    }
    p.finish(Duration::from_secs(2)).unwrap();
    let (v, sizes) = reader.join().unwrap();
    (v, sizes, p.stats().summary())
}

#[test]
fn memory_paths_send_datagrams_on_a_connected_udp_socket() {
    let p = sendpath::probe();
    if !p.msg_zerocopy.supported || !p.io_uring.send_zc {
        common::skip("MSG_ZEROCOPY or SEND_ZC unavailable: the zero-copy paths would copy");
        return;
    }
    // adaptive twice: on the copy tier of the defaults, and on a zero-copy tier from the
    // first byte.
    let zc_opts = common::tiered(&[(0, Strategy::MsgZerocopy)], 0);
    let memory = Strategy::ALL
        .into_iter()
        .filter(|s| s.source() == Source::Memory && *s != Strategy::Vmsplice)
        .map(|s| (s, Options::default()))
        .chain([(Strategy::Adaptive, zc_opts)]);
    for (strategy, opts) in memory {
        // The paths that send one datagram per field take messages of one buffer (a message
        // of several is refused: the next test).
        let fields = !SPLIT.contains(&strategy);
        let (v, sizes, s) = send_datagrams(strategy, &opts, fields);
        assert!(
            sizes.len() == DATAGRAMS && sizes.iter().all(|&n| n == SIZE),
            "{strategy}: each message is one datagram, of one field or three: {sizes:?}"
        );
        assert_eq!(v.first_mismatch, None, "{strategy}");
        assert_eq!(v.bytes_verified(), (DATAGRAMS * SIZE) as u64, "{strategy}");
        assert_eq!(s.bytes, (DATAGRAMS * SIZE) as u64, "{strategy}");
        println!(
            "{strategy} over UDP: {DATAGRAMS} datagrams verified; zero-copy attempts {}, completions {}, copied {:?}",
            s.zerocopy.attempts, s.zerocopy.completions, s.copied_fraction
        );
        // The zero-copy paths asked the kernel for zero-copy on every datagram (adaptive on
        // its zero-copy tier too): a run that fell back to copy proves nothing of them.
        let zero_copy = matches!(strategy, Strategy::MsgZerocopy | Strategy::UringZc)
            || s.decisions.is_some_and(|d| d.zerocopy_sends > 0);
        if zero_copy {
            assert_eq!(
                s.zerocopy.attempts, DATAGRAMS as u64,
                "{strategy}: {:?}",
                s.zerocopy
            );
            assert_eq!(s.zerocopy.completions, DATAGRAMS as u64, "{strategy}");
        }
    }
}

/// `copy_batch` on a UDP socket: one `sendmmsg` per batch, each message its own datagram,
/// from owned buffers (`send_bufs`) and written in the path's own (`send_in_place`).
#[test]
fn copy_batched_sends_each_message_as_a_datagram_by_sendmmsg() {
    for in_place in [false, true] {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let opts = Options {
            copy_batch: 8,
            ..Options::default()
        };
        let mut p = open(Strategy::Copy, tx, &opts).unwrap();
        let mut bufs = Vec::new();
        let mut v = Verifier::new();
        let mut sizes = Vec::new();
        let mut buf = vec![0u8; 65536];
        // Five batches of 8, each read before the next, so the receive buffer never overflows.
        for batch in 0..DATAGRAMS / 8 {
            let at = |i: usize| ((batch * 8 + i) * SIZE) as u64;
            if in_place {
                p.send_in_place(8, SIZE, &mut |i, b| pattern::fill(b, at(i)))
                    .unwrap();
            } else {
                for i in 0..8 {
                    let mut b = p.take_buf(SIZE);
                    pattern::fill(b.as_mut_slice(), at(i));
                    bufs.push(b);
                }
                p.send_bufs(&mut bufs).unwrap();
            }
            for _ in 0..8 {
                let n = rx.recv(&mut buf).expect("a datagram of the batch");
                sizes.push(n);
                v.check(&buf[..n]);
            }
        }
        let s = p.stats().summary();
        assert!(sizes.iter().all(|&n| n == SIZE), "{sizes:?}");
        assert_eq!(v.first_mismatch, None, "in place: {in_place}");
        assert_eq!(v.bytes_verified(), (DATAGRAMS * SIZE) as u64);
        assert_eq!(
            (s.sends, s.bytes),
            (DATAGRAMS as u64, (DATAGRAMS * SIZE) as u64)
        );
        let m = s.messages_per_call.expect("copy counts its calls");
        assert!(m > 4.0, "sendmmsg carried {m} datagrams per call");
        println!("copy batched by 8 over UDP, in place {in_place}: {DATAGRAMS} datagrams verified, {m} per call");
    }
}

/// Options for the ring paths in place: depth 8, an arena of 64 slots of 2 KiB.
fn in_place_options() -> Options {
    Options {
        uring_depth: 8,
        uring_arena: Some(sendpath::ArenaConfig {
            slot_size: 2048,
            slots: 64,
        }),
        ..Options::default()
    }
}

/// The io_uring paths write datagrams in place in their arena's slots, each one request
/// pushed as it is written: every datagram whole and in order, in batches that are not a
/// multiple of the ring's depth (the rest of a batch goes with `flush`).
#[test]
fn ring_paths_write_datagrams_in_place_each_whole_and_in_order() {
    if !sendpath::probe().io_uring.send_zc {
        common::skip("io_uring SEND_ZC unavailable");
        return;
    }
    const BATCH: usize = 13;
    let opts = in_place_options();
    for strategy in [Strategy::Uring, Strategy::UringZc] {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let mut p = open(strategy, tx, &opts).unwrap();
        let (mut v, mut sizes, mut buf) = (Verifier::new(), Vec::new(), vec![0u8; 65536]);
        for batch in 0..5 {
            let at = |i: usize| ((batch * BATCH + i) * SIZE) as u64;
            p.send_in_place(BATCH, SIZE, &mut |i, b| pattern::fill(b, at(i)))
                .unwrap();
            p.flush().unwrap();
            for _ in 0..BATCH {
                let n = rx.recv(&mut buf).expect("a datagram of the batch");
                sizes.push(n);
                v.check(&buf[..n]);
            }
        }
        p.finish(Duration::from_secs(2)).unwrap();
        let s = p.stats().summary();
        let total = 5 * BATCH;
        assert!(sizes.iter().all(|&n| n == SIZE), "{strategy}: {sizes:?}");
        assert_eq!(v.first_mismatch, None, "{strategy}");
        assert_eq!((s.sends, s.bytes), (total as u64, (total * SIZE) as u64));
        let a = s.arena.expect("an arena");
        assert_eq!((a.slots, a.heap), (total as u64, 0), "{strategy}: {a:?}");
        if strategy == Strategy::UringZc {
            let z = s.zerocopy;
            assert_eq!(
                (z.attempts, z.completions),
                (total as u64, total as u64),
                "{z:?}"
            );
            assert_eq!(a.registered_requests, total as u64, "sent by index: {a:?}");
        }
        assert_eq!(s.leaked_buffers, 0);
        println!("{strategy} in place over UDP: {total} datagrams verified, {a:?}");
    }
}

/// A datagram the kernel refuses mid-batch (the receiver is gone: `ECONNREFUSED`) ends the
/// run written in place with that error, and every slot comes back.
#[test]
fn a_refused_datagram_in_place_ends_the_run_with_its_error() {
    let opts = in_place_options();
    for strategy in [Strategy::Uring, Strategy::UringZc] {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        drop(rx);
        let mut p = open(strategy, tx, &opts).unwrap();
        let mut err = None;
        for _ in 0..50 {
            if let Err(e) = p.send_in_place(16, SIZE, &mut |_, b| b.fill(1)) {
                err = Some(e);
                break;
            }
            let _ = p.flush();
        }
        let e = err.expect("the port unreachable comes back as an error");
        assert!(e.to_string().contains("refused"), "{strategy}: {e}");
        p.finish(Duration::from_secs(2)).ok();
        assert_eq!(p.stats().summary().leaked_buffers, 0, "{strategy}");
        assert_eq!(p.stats().summary().short_sends, 0);
    }
}

/// vmsplice on a UDP socket: its splice from a pipe may cut a message into several datagrams,
/// but every byte arrives, in order.
#[test]
fn vmsplice_sends_every_byte_on_a_udp_socket_in_order() {
    let (v, sizes, s) = send_datagrams(Strategy::Vmsplice, &Options::default(), true);
    println!("vmsplice over UDP: datagrams of {sizes:?}");
    assert_eq!(v.first_mismatch, None);
    assert_eq!(v.bytes_verified(), (DATAGRAMS * SIZE) as u64, "{sizes:?}");
    assert_eq!(s.bytes, (DATAGRAMS * SIZE) as u64);
}

/// A message of several fields on a UDP socket, from a path that would send each field as a
/// datagram of its own, is refused saying what to do (before: it arrived as three datagrams).
#[test]
fn a_message_of_fields_a_path_would_cut_into_datagrams_is_refused() {
    for strategy in SPLIT {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let mut p = open(strategy, tx, &Options::default()).unwrap();
        let fields = (0..3).map(|_| p.take_buf(400)).collect();
        let e = p.send(Msg::Fields(fields)).unwrap_err();
        assert_eq!(e.kind(), std::io::ErrorKind::InvalidInput, "{strategy}");
        let said = e.to_string();
        assert!(
            said.contains("several fields on a datagram socket") && said.contains("use gather"),
            "{strategy}: {said}"
        );
        // One buffer still goes, as one datagram.
        let b = p.take_buf(SIZE);
        p.send(Msg::one(b)).unwrap();
        p.finish(Duration::from_secs(2)).unwrap();
        let mut buf = vec![0u8; 65536];
        rx.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
        assert_eq!(rx.recv(&mut buf).unwrap(), SIZE, "{strategy}");
    }
}
