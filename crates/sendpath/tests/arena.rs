//! Sending in place from the driver's registered arena, on the real kernel: every byte
//! verified, requests named by index, slots back after their last completion, datagrams too.

mod common;

use sendpath::{ArenaConfig, DriverConfig, Options, Order, Strategy, UringDriver};
use sendpath_host::pattern::{self, Verifier};
use std::net::{TcpStream, UdpSocket};
use std::time::Duration;

const SLOT: usize = 16 << 10;

fn driver(connections: usize, order: Order, slots: usize) -> Option<UringDriver> {
    let options = Options {
        uring_depth: 8,
        uring_order: Some(order),
        uring_arena: Some(ArenaConfig {
            slot_size: SLOT,
            slots,
        }),
        ..Options::default()
    };
    let cfg = DriverConfig {
        connections,
        options,
        ..DriverConfig::default()
    };
    match UringDriver::new(cfg) {
        Ok(d) => Some(d),
        Err(e) => {
            common::skip(&format!("io_uring unavailable: {e}"));
            None
        }
    }
}

/// A loopback connection and a thread that reads it to EOF, verifying every byte.
fn connection() -> (TcpStream, std::thread::JoinHandle<Verifier>) {
    let (addr, rx) = common::receiver(Duration::ZERO);
    (TcpStream::connect(addr).unwrap(), rx)
}

/// Sends `msgs` messages on each connection through reserve and commit, sizes varying from
/// 100 B to a slot and one in 64 larger (from the heap), and checks what the receivers read.
fn send_in_place(strategy: Strategy, order: Order, conns: usize, msgs: usize) {
    let Some(mut d) = driver(conns, order, 64) else {
        return;
    };
    assert_eq!(d.note(), None, "the arena registered whole");
    let (tx, rx): (Vec<_>, Vec<_>) = (0..conns).map(|_| connection()).unzip();
    let ids: Vec<_> = tx
        .into_iter()
        .map(|s| d.add(s, strategy).unwrap())
        .collect();
    let size = |c: usize, m: usize| match m % 64 {
        7 => SLOT + 100 * (c + 1),
        _ => 100 + (c * 7919 + m * 104_729) % (SLOT - 100),
    };
    let (mut next, mut offset) = (vec![0; conns], vec![0u64; conns]);
    while next.iter().any(|&m| m < msgs) {
        for (c, &id) in ids.iter().enumerate() {
            while next[c] < msgs && d.room(id) > 0 {
                let len = size(c, next[c]);
                let mut msg = d.reserve(id, len).unwrap();
                pattern::fill(&mut msg, offset[c]);
                msg.commit().unwrap();
                (offset[c], next[c]) = (offset[c] + len as u64, next[c] + 1);
            }
        }
        d.run(true).unwrap();
    }
    d.finish(Duration::from_secs(10)).unwrap();
    for (c, &id) in ids.iter().enumerate() {
        let st = d.stats(id).unwrap();
        assert_eq!(st.bytes, offset[c], "connection {c}: bytes on the socket");
        let a = st
            .arena
            .expect("a connection of a driver with an arena counts it");
        assert!(a.slots > 0 && a.heap > 0, "{strategy} {order:?}: {a:?}");
        let by_index = strategy == Strategy::UringZc;
        assert_eq!(
            a.registered_requests > 0,
            by_index,
            "{strategy} {order:?}: {a:?}"
        );
        d.socket(id)
            .unwrap()
            .shutdown(std::net::Shutdown::Write)
            .unwrap();
    }
    for (c, h) in rx.into_iter().enumerate() {
        let v = h.join().unwrap();
        assert_eq!(v.mismatches, 0, "{strategy} {order:?} connection {c}");
        assert_eq!(v.bytes_verified(), offset[c], "connection {c}");
    }
}

#[test]
fn send_and_send_zc_in_place_stay_byte_exact_linked_and_vectored() {
    for strategy in [Strategy::Uring, Strategy::UringZc] {
        for order in [Order::Linked, Order::Vectored] {
            send_in_place(strategy, order, 4, 200);
        }
    }
}

#[test]
fn a_reservation_dropped_or_refused_gives_its_slot_back() {
    let Some(mut d) = driver(1, Order::Linked, 2) else {
        return;
    };
    let (tx, _rx) = connection();
    let id = d.add(tx, Strategy::Uring).unwrap();
    for _ in 0..10 {
        let msg = d.reserve(id, SLOT).unwrap();
        drop(msg);
    }
    let a = d.stats(id).unwrap().arena.unwrap();
    assert_eq!(
        (a.slots, a.heap),
        (10, 0),
        "a slot each time, the one given back: {a:?}"
    );
    d.close(id);
    let e = d.reserve(id, 10).unwrap_err();
    assert!(matches!(e, sendpath::Error::UnknownConn { .. }), "{e}");
}

#[test]
fn datagrams_go_in_place_one_per_slot() {
    let Some(mut d) = driver(1, Order::Linked, 16) else {
        return;
    };
    let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
    rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
    tx.connect(rx.local_addr().unwrap()).unwrap();
    let id = d.add(tx, Strategy::UringZc).unwrap();
    for i in 0..32u8 {
        while d.room(id) == 0 {
            d.run(true).unwrap();
        }
        let mut msg = d.reserve(id, 1400).unwrap();
        msg.fill(i);
        msg.truncate(1000 + usize::from(i));
        msg.commit().unwrap();
        d.run(false).unwrap();
        let mut buf = [0u8; 2048];
        // Loopback delivers at once; each datagram whole, in order.
        d.flush(id).unwrap();
        let n = rx.recv(&mut buf).unwrap();
        assert_eq!(n, 1000 + usize::from(i));
        assert!(buf[..n].iter().all(|b| *b == i), "datagram {i}");
    }
    d.finish(Duration::from_secs(5)).unwrap();
    let st = d.stats(id).unwrap();
    assert_eq!(st.sends, 32);
    assert!(st.arena.unwrap().registered_requests > 0);
}

/// `batches` batches of 16 messages through `send_in_place`, batch `k`'s of `len_of(k)`
/// bytes, written with the pattern at their offset in the stream. The bytes and messages sent.
fn batches_in_place(
    p: &mut dyn sendpath::SendPath,
    batches: usize,
    len_of: impl Fn(usize) -> usize,
) -> (u64, u64) {
    let (mut off, mut messages, name) = (0u64, 0u64, p.name());
    for batch in 0..batches {
        let (len, base) = (len_of(batch), off);
        p.send_in_place(16, len, &mut |i, b| {
            assert_eq!(b.len(), len, "{name}: a message of the size asked for");
            pattern::fill(b, base + (i * len) as u64);
        })
        .unwrap();
        (off, messages) = (off + 16 * len as u64, messages + 16);
    }
    (off, messages)
}

#[test]
fn send_in_place_writes_each_message_where_the_kernel_reads_it_on_every_path() {
    use sendpath::SendPath;
    let arena = ArenaConfig {
        slot_size: SLOT,
        slots: 64,
    };
    for (strategy, arena, copy_batch) in [
        (Strategy::Uring, Some(arena), 1),
        (Strategy::UringZc, Some(arena), 1),
        (Strategy::Uring, None, 1),
        (Strategy::Copy, None, 1),
        // Several messages per `sendmsg`, each in a scratch buffer of its own.
        (Strategy::Copy, None, 6),
        // Slots of the path's own, each held until its notification.
        (Strategy::MsgZerocopy, None, 1),
    ] {
        let opts = Options {
            uring_depth: 8,
            uring_arena: arena,
            copy_batch,
            ..Options::default()
        };
        let (tx, rx) = connection();
        let mut p: Box<dyn SendPath> = match sendpath::open(strategy, tx, &opts) {
            Ok(p) => p,
            Err(e) => return common::skip(&format!("{strategy}: {e}")),
        };
        // 100 B to a whole slot, and past a slot (from the heap) once.
        let (off, messages) = batches_in_place(&mut *p, 40, |batch| match batch {
            39 => SLOT + 1,
            _ => 100 + batch * (SLOT - 100) / 38,
        });
        let st = p.close(Duration::from_secs(10)).unwrap();
        assert_eq!((st.sends, st.bytes), (messages, off), "{strategy}");
        match (arena, st.arena) {
            (Some(_), Some(a)) => {
                // SEND_ZC holds a slot until its notification, which may come late: how many
                // found none free depends on the kernel's timing.
                assert_eq!(a.slots + a.heap, messages, "{strategy}: {a:?}");
                assert!(a.heap >= 16 && a.slots > 0, "{strategy}: {a:?}");
                if strategy == Strategy::Uring {
                    assert_eq!(a.heap, 16, "{strategy}: only the messages past a slot");
                }
            }
            (None, a) => assert_eq!(a, None, "{strategy}: no arena, nothing counted"),
            (Some(_), None) => panic!("{strategy}: an arena counts where buffers came from"),
        }
        let v = rx.join().unwrap();
        assert_eq!((v.mismatches, v.bytes_verified()), (0, off), "{strategy}");
    }
}

/// `adaptive` in place: each batch written where the half its size's tier uses sends from
/// (the blocking half's own buffers by copy or `MSG_ZEROCOPY`, the ring's arena slots), every
/// byte in order across the switches between halves.
#[test]
fn adaptive_writes_in_place_on_every_tier_and_keeps_byte_order() {
    use sendpath::{Profile, Tier};
    let tiers = [
        (0, Strategy::Copy),
        (2_000, Strategy::MsgZerocopy),
        (6_000, Strategy::Uring),
        (11_000, Strategy::UringZc),
    ]
    .map(|(from_bytes, path)| Tier { from_bytes, path });
    let opts = Options {
        uring_depth: 8,
        uring_arena: Some(ArenaConfig {
            slot_size: SLOT,
            slots: 64,
        }),
        profile: Some(std::sync::Arc::new(
            Profile::from_tiers(tiers.to_vec(), false).unwrap(),
        )),
        adaptive: sendpath::AdaptiveConfig {
            run_min: 2,
            // Loopback copies every zero-copy send: with the default limit the route backs
            // off to copying after 4 copied completions, and whether the MSG_ZEROCOPY tier
            // had sent by then depends on when the ring's completions came.
            copied_limit: u64::MAX,
            ..Default::default()
        },
        ..Options::default()
    };
    let (tx, rx) = connection();
    let mut p = sendpath::open(Strategy::Adaptive, tx, &opts).unwrap();
    if let Some(note) = p.note() {
        return common::skip(note);
    }
    // Every tier in turn, and back: 100 B to a whole slot.
    let (off, messages) =
        batches_in_place(&mut *p, 60, |batch| 100 + (batch * 7919) % (SLOT - 100));
    let st = p.close(Duration::from_secs(10)).unwrap();
    assert_eq!((st.sends, st.bytes), (messages, off));
    let d = st.decisions.expect("adaptive counts its decisions");
    assert!(d.copy_sends > 0 && d.zerocopy_sends > 0, "{d:?}");
    let a = st.arena.expect("the ring's tiers count its arena");
    assert!(a.slots > 0, "the ring's tiers written in its slots: {a:?}");
    // Every ring-tier SEND_ZC went by index: any other zero-copy send was the blocking half's.
    let z = &st.zerocopy;
    assert!(
        z.attempts > z.registered,
        "MSG_ZEROCOPY from its slots: {z:?}"
    );
    let v = rx.join().unwrap();
    assert_eq!((v.mismatches, v.bytes_verified()), (0, off));
}

#[test]
fn a_fill_that_panics_gives_its_slots_back_and_sends_none_of_its_batch_half_written() {
    use std::io::Read;
    let opts = Options {
        uring_depth: 8,
        uring_arena: Some(ArenaConfig {
            slot_size: SLOT,
            slots: 64,
        }),
        ..Options::default()
    };
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let tx = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let rx = std::thread::spawn(move || {
        let (mut s, _) = listener.accept().unwrap();
        std::io::copy(&mut s.by_ref(), &mut std::io::sink()).unwrap()
    });
    let mut p = match sendpath::open(Strategy::Uring, tx, &opts) {
        Ok(p) => p,
        Err(e) => return common::skip(&format!("uring: {e}")),
    };
    // More panics than the arena has slots: one slot kept per panic would empty it.
    for _ in 0..80 {
        let r = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            p.send_in_place(16, 1000, &mut |i, b| {
                if i == 13 {
                    // A panic without the hook's message in the test's output.
                    std::panic::resume_unwind(Box::new("a fill that fails"));
                }
                b.fill(1);
            })
        }));
        assert!(r.is_err(), "the panic reaches the caller");
    }
    let heap = p.stats().arena.unwrap().heap;
    for _ in 0..20 {
        p.send_in_place(16, 1000, &mut |_, b| b.fill(2)).unwrap();
    }
    let a = p.stats().arena.unwrap();
    assert_eq!(
        a.heap, heap,
        "every message after the panics found a slot: {a:?}"
    );
    let st = p.close(Duration::from_secs(10)).unwrap();
    assert_eq!(st.bytes % 1000, 0, "whole messages only");
    assert_eq!(
        rx.join().unwrap(),
        st.bytes,
        "the receiver read what the path counted"
    );
}

/// In place on a stream, a batch of the depth's messages goes in one request however the
/// calls cut it: one message per call waits for the next seven, sixteen per call make two
/// requests, every byte in order.
#[test]
fn a_stream_s_messages_in_place_go_a_depth_to_a_request_however_the_calls_cut_them() {
    use sendpath::SendPath;
    for strategy in [Strategy::Uring, Strategy::UringZc] {
        for per_call in [1, 3, 16] {
            let opts = Options {
                uring_depth: 8,
                uring_arena: Some(ArenaConfig {
                    slot_size: 4096,
                    slots: 64,
                }),
                ..Options::default()
            };
            let (tx, rx) = connection();
            let mut p: Box<dyn SendPath> = match sendpath::open(strategy, tx, &opts) {
                Ok(p) => p,
                Err(e) => return common::skip(&format!("{strategy}: {e}")),
            };
            let (mut off, mut messages) = (0u64, 0u64);
            while messages < 96 {
                let base = off;
                p.send_in_place(per_call, 4096, &mut |i, b| {
                    pattern::fill(b, base + (i * 4096) as u64)
                })
                .unwrap();
                (off, messages) = (off + 4096 * per_call as u64, messages + per_call as u64);
            }
            let st = p.close(Duration::from_secs(10)).unwrap();
            assert_eq!(
                (st.sends, st.bytes),
                (messages, off),
                "{strategy} {per_call}"
            );
            let why = format!("{strategy}, {per_call} per call: {st:?}");
            // SEND_ZC holds a slot until its notification: when one comes late the arena may
            // run short, and a batch cut short by it goes in a request of its own.
            let a = st.arena.unwrap();
            if strategy == Strategy::Uring || a.heap == 0 {
                assert_eq!((st.calls, a.slots), (messages / 8, messages), "{why}");
            }
            let v = rx.join().unwrap();
            assert_eq!((v.mismatches, v.bytes_verified()), (0, off), "{why}");
        }
    }
}
