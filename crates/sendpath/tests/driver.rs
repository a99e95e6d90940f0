//! The io_uring driver on the real kernel: many connections on one ring, SEND and SEND_ZC
//! side by side, every byte verified; a connection whose peer resets fails alone.

mod common;

use sendpath::{DriverConfig, Options, Strategy, UringDriver};
use sendpath_host::pattern::{self, Verifier};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

fn driver(connections: usize) -> Option<UringDriver> {
    match UringDriver::new(DriverConfig {
        connections,
        options: Options {
            uring_depth: 4,
            ..Options::default()
        },
        ..DriverConfig::default()
    }) {
        Ok(d) => Some(d),
        Err(e) => {
            common::skip(&format!("io_uring unavailable: {e}"));
            None
        }
    }
}

/// `n` loopback connections: the sending ends, and threads that read each receiving end to
/// EOF, verifying every byte (or, for the ones in `reset`, reset after the first read).
fn connections(
    n: usize,
    reset: &[usize],
) -> (
    Vec<TcpStream>,
    Vec<std::thread::JoinHandle<std::io::Result<Verifier>>>,
) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let mut tx = Vec::new();
    let mut rx = Vec::new();
    for i in 0..n {
        tx.push(TcpStream::connect(addr).unwrap());
        let (mut s, _) = l.accept().unwrap();
        let reset_it = reset.contains(&i);
        rx.push(std::thread::spawn(move || {
            s.set_read_timeout(Some(Duration::from_secs(30)))?;
            let mut v = Verifier::new();
            let mut buf = vec![0u8; 64 << 10];
            loop {
                let n = s.read(&mut buf)?;
                if n == 0 {
                    return Ok(v);
                }
                v.check(&buf[..n]);
                if reset_it {
                    // SO_LINGER 0 then close: the sender gets a reset.
                    common::reset_on_close(&s);
                    return Ok(v);
                }
            }
        }));
    }
    (tx, rx)
}

#[test]
fn many_connections_on_one_ring_stay_byte_exact() {
    const CONNS: usize = 64;
    const MSGS: usize = 40;
    let Some(mut d) = driver(CONNS) else { return };
    let zc = sendpath::probe().io_uring.send_zc;
    if !zc {
        common::skip("IORING_OP_SEND_ZC unavailable: only the SEND half is checked");
    }
    let (tx, rx) = connections(CONNS, &[]);
    let ids: Vec<_> = tx
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let strategy = if i % 2 == 0 {
                Strategy::Uring
            } else {
                Strategy::UringZc
            };
            d.add(s, strategy).unwrap()
        })
        .collect();
    // Sizes vary per connection and message so chains and short sends differ.
    let size = |c: usize, m: usize| 1000 + (c * 7919 + m * 104_729) % 70_000;
    let mut next = vec![0usize; CONNS];
    let mut offset = vec![0u64; CONNS];
    while next.iter().any(|&m| m < MSGS) {
        let mut queued = false;
        for (c, &id) in ids.iter().enumerate() {
            while next[c] < MSGS && d.room(id) > 0 {
                let len = size(c, next[c]);
                let mut b = d.take_buf(id, len).unwrap();
                pattern::fill(b.as_mut_slice(), offset[c]);
                offset[c] += len as u64;
                d.push(id, b, true).map_err(|(e, _)| e).unwrap();
                next[c] += 1;
                queued = true;
            }
        }
        d.run(!queued).unwrap();
    }
    d.finish(Duration::from_secs(10)).unwrap();
    for (c, &id) in ids.iter().enumerate() {
        d.conn_error(id).unwrap();
        let st = d.stats(id).unwrap();
        assert_eq!(st.bytes, offset[c], "connection {c}: bytes on the socket");
        assert_eq!(st.sends, MSGS as u64);
        if c % 2 == 1 && zc {
            assert!(
                st.zerocopy.attempts > 0,
                "connection {c}: no SEND_ZC was made"
            );
            assert_eq!(
                st.zerocopy.completions + st.zerocopy.fallbacks.total(),
                MSGS as u64,
                "connection {c}: every zero-copy send completed or fell back"
            );
        }
        assert_eq!(st.leaked_buffers, 0);
        d.socket(id)
            .unwrap()
            .shutdown(std::net::Shutdown::Write)
            .unwrap();
    }
    for (c, h) in rx.into_iter().enumerate() {
        let v = h.join().unwrap().unwrap();
        assert_eq!(v.mismatches, 0, "connection {c}");
        assert_eq!(v.bytes_verified(), offset[c], "connection {c}");
    }
}

#[test]
fn a_reset_connection_fails_alone() {
    let Some(mut d) = driver(3) else { return };
    let (tx, rx) = connections(3, &[1]);
    let ids: Vec<_> = tx
        .into_iter()
        .map(|s| d.add(s, Strategy::UringZc).unwrap())
        .collect();
    let mut offset = [0u64; 3];
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    // Keep sending until the reset connection has failed and the others sent 8 MiB each.
    loop {
        let mut queued = false;
        for (c, &id) in ids.iter().enumerate() {
            let enough = offset[c] >= 8 << 20;
            while !enough && d.room(id) > 0 {
                let mut b = d.take_buf(id, 32 << 10).unwrap();
                pattern::fill(b.as_mut_slice(), offset[c]);
                offset[c] += 32 << 10;
                d.push(id, b, true).map_err(|(e, _)| e).unwrap();
                queued = true;
            }
        }
        let before = d.conn_error(ids[1]).is_err();
        d.run(!queued).unwrap();
        let mut writable = Vec::new();
        d.take_writable(&mut writable);
        let failed = d.conn_error(ids[1]).is_err();
        if failed && !before {
            assert!(
                writable.contains(&ids[1]),
                "the pass that saw the reset hands the connection to its owner"
            );
        }
        if failed && offset[0] >= 8 << 20 && offset[2] >= 8 << 20 {
            break;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the reset was never seen"
        );
    }
    d.finish(Duration::from_secs(10)).unwrap();
    assert!(d.conn_error(ids[1]).is_err());
    for c in [0, 2] {
        d.conn_error(ids[c]).unwrap();
        assert_eq!(d.stats(ids[c]).unwrap().bytes, offset[c]);
        d.socket(ids[c])
            .unwrap()
            .shutdown(std::net::Shutdown::Write)
            .unwrap();
    }
    for (c, h) in rx.into_iter().enumerate() {
        let v = h.join().unwrap().unwrap();
        assert_eq!(v.mismatches, 0, "connection {c}");
        if c != 1 {
            assert_eq!(v.bytes_verified(), offset[c], "connection {c}");
        }
    }
}

/// A ring that accepts, receives into provided buffers and answers: 50 clients each send
/// three messages and read back what they sent, byte for byte; then every connection is closed
/// and its id comes back as `Closed`, with the receive buffers all returned.
#[test]
fn a_ring_accepts_receives_answers_and_closes() {
    use sendpath::{Event, RecvConfig};
    let Some(mut d) = driver(64) else { return };
    if let Err(e) = d.provide_recv_buffers(RecvConfig {
        buffers: 16,
        size: 256,
    }) {
        common::skip(&format!("provided buffer rings unavailable: {e}"));
        return;
    }
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    d.listen(l).unwrap();
    const CLIENTS: usize = 50;
    let clients: Vec<_> = (0..CLIENTS)
        .map(|i| {
            std::thread::spawn(move || -> std::io::Result<()> {
                use std::io::Write;
                let mut s = TcpStream::connect(addr)?;
                s.set_read_timeout(Some(Duration::from_secs(10)))?;
                for round in 0..3u8 {
                    let msg: Vec<u8> = (0..100).map(|k| (i as u8) ^ round ^ k).collect();
                    s.write_all(&msg)?;
                    let mut back = vec![0u8; msg.len()];
                    s.read_exact(&mut back)?;
                    assert_eq!(back, msg, "client {i} round {round}");
                }
                Ok(())
            })
        })
        .collect();
    let mut events = Vec::new();
    let mut done = 0;
    let mut closed = 0;
    let mut accepted = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while closed < CLIENTS && std::time::Instant::now() < deadline {
        d.run_for(Duration::from_millis(50)).unwrap();
        d.take_events(&mut events);
        for ev in events.drain(..) {
            match ev {
                Event::Accepted(sock) => {
                    accepted += 1;
                    d.add_receiving(sock, Strategy::Uring).unwrap();
                }
                Event::Received { conn, buf } => {
                    let mut out = d.take_buf(conn, buf.len()).unwrap();
                    out.as_mut_slice().copy_from_slice(d.received(&buf));
                    d.recycle(buf);
                    d.push(conn, out, true).map_err(|(e, _)| e).unwrap();
                    d.request_flush(conn).unwrap();
                }
                Event::RecvEnded { conn, error } => {
                    assert!(error.is_none(), "{error:?}");
                    done += 1;
                    d.close(conn);
                }
                Event::Closed(_) => closed += 1,
                Event::AcceptFailed(e) => panic!("accept failed: {e}"),
                e => panic!("no file send was asked for: {e:?}"),
            }
        }
    }
    for c in clients {
        c.join().unwrap().unwrap();
    }
    assert_eq!((accepted, done, closed), (CLIENTS, CLIENTS, CLIENTS));
    assert_eq!(d.len(), 0);
    assert_eq!(d.total_stats().bytes, (CLIENTS * 300) as u64);
    let t = std::time::Instant::now();
    drop(d);
    assert!(
        t.elapsed() < Duration::from_millis(1900),
        "the armed accept is cancelled at drop without waiting out the timeout"
    );
}

/// An index handed out again after `Closed` gets a new id: the old one is not open, and
/// closing it again does not touch the new connection.
#[test]
fn a_closed_connections_id_never_names_the_next_one() {
    use sendpath::Event;
    let Some(mut d) = driver(4) else { return };
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let _a = TcpStream::connect(addr).unwrap();
    let _b = TcpStream::connect(addr).unwrap();
    let old = d.add(l.accept().unwrap().0, Strategy::Uring).unwrap();
    d.close(old);
    let mut events = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while !events
        .iter()
        .any(|e| matches!(e, Event::Closed(id) if *id == old))
    {
        assert!(std::time::Instant::now() < deadline, "no Closed event");
        d.run_for(Duration::from_millis(10)).unwrap();
        d.take_events(&mut events);
    }
    let new = d.add(l.accept().unwrap().0, Strategy::Uring).unwrap();
    assert_eq!(new.index(), old.index(), "the index is handed out again");
    assert_ne!(new, old);
    assert!(!d.is_open(old) && d.is_open(new));
    d.close(old);
    assert!(
        d.is_open(new),
        "closing a stale id leaves the new connection alone"
    );
    // The stale id is refused by everything that would act on a connection, and nothing
    // reaches the connection now at its index.
    let buf = sendpath::Buf::from(vec![1u8; 7]);
    let (e, back) = d.push(old, buf, true).unwrap_err();
    assert!(matches!(e, sendpath::Error::UnknownConn { .. }), "{e}");
    assert_eq!(back.len(), 7, "the buffer comes back");
    assert!(d.take_buf(old, 10).is_err() && d.stats(old).is_err());
    assert!(d.request_flush(old).is_err() && d.flush(old).is_err());
    assert_eq!(d.stats(new).unwrap().sends, 0);
    // An id of another driver names none of this one's connections, even at a live index.
    let Some(mut other) = driver(1) else { return };
    let foreign = other
        .add(TcpStream::connect(addr).unwrap(), Strategy::Uring)
        .unwrap();
    assert_eq!(foreign.index(), 0);
    let (e, _) = d
        .push(foreign, sendpath::Buf::from(vec![1u8; 7]), true)
        .unwrap_err();
    assert!(e.to_string().contains("belongs to another driver"), "{e}");
    assert_eq!(e.kind(), std::io::ErrorKind::NotFound);
}

/// How each connection keeps its order is decided once, by the driver, and recorded in its
/// counters: vectored where the kernel has SENDMSG_ZC, linked when asked or with registered
/// buffers for a connection that may send zero-copy, unlinked for datagrams.
#[test]
fn each_connection_records_the_order_the_driver_chose_for_it() {
    use sendpath::Order;
    let ops = sendpath::probe().io_uring;
    if !(ops.sendmsg && ops.sendmsg_zc) {
        return common::skip("no SENDMSG_ZC here: every order is linked");
    }
    let order_of = |opts: Options, strategy: Strategy, udp: bool| -> Option<Order> {
        let mut d = UringDriver::new(DriverConfig {
            options: opts,
            ..DriverConfig::default()
        })
        .unwrap();
        let id = if udp {
            let (a, b) = (
                std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
                std::net::UdpSocket::bind("127.0.0.1:0").unwrap(),
            );
            a.connect(b.local_addr().unwrap()).unwrap();
            d.add(a, strategy).unwrap()
        } else {
            let l = TcpListener::bind("127.0.0.1:0").unwrap();
            let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
            d.add(s, strategy).unwrap()
        };
        d.stats(id).unwrap().uring_order
    };
    let fixed = Options {
        uring_fixed_buffers: true,
        ..Options::default()
    };
    let linked = Options {
        uring_order: Some(Order::Linked),
        ..Options::default()
    };
    let d = Options::default;
    assert_eq!(order_of(d(), Strategy::Uring, false), Some(Order::Vectored));
    assert_eq!(
        order_of(d(), Strategy::UringZc, false),
        Some(Order::Vectored)
    );
    assert_eq!(
        order_of(linked, Strategy::Uring, false),
        Some(Order::Linked)
    );
    assert_eq!(
        order_of(fixed.clone(), Strategy::UringZc, false),
        Some(Order::Linked)
    );
    assert_eq!(
        order_of(fixed.clone(), Strategy::Adaptive, false),
        Some(Order::Linked)
    );
    assert_eq!(
        order_of(fixed, Strategy::Uring, false),
        Some(Order::Vectored),
        "registered buffers serve only zero-copy sends"
    );
    assert_eq!(
        order_of(d(), Strategy::UringZc, true),
        Some(Order::Unlinked)
    );
    // Off the ring, a path says nothing of an order.
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let p = sendpath::open(Strategy::Copy, s, &Options::default()).unwrap();
    assert_eq!(p.stats().uring_order, None);
    // A strategy that does not run on the ring is refused by the driver, naming why.
    let mut ring = UringDriver::new(DriverConfig::default()).unwrap();
    let s = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    let e = ring.add(s, Strategy::Sendfile).unwrap_err();
    assert!(e.to_string().contains("sendpath::open"), "{e}");
}

/// Zero-copy notifications that came while the ring's thread was away are all routed by its
/// next pass. A DEFER_TASKRUN ring runs only a bounded batch of deferred completions in a
/// plain enter (20 on Linux 6.13 and later): a pass that ran a few such batches left the rest
/// behind, holding buffers the kernel was done with, and with 1000 connections the sender
/// made a new buffer for nearly every send.
#[test]
fn the_next_pass_routes_every_notification_that_came_while_the_ring_was_away() {
    const CONNS: usize = 400;
    const MSGS: usize = 4;
    const LEN: usize = 4096;
    if !sendpath::probe().io_uring.send_zc {
        common::skip("IORING_OP_SEND_ZC unavailable");
        return;
    }
    let Some(mut d) = driver(CONNS) else { return };
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let mut ids = Vec::with_capacity(CONNS);
    let mut rxs = Vec::with_capacity(CONNS);
    for _ in 0..CONNS {
        let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        rxs.push(l.accept().unwrap().0);
        ids.push(d.add(tx, Strategy::UringZc).unwrap());
    }
    // A request of MSGS messages on every connection, all submitted by one pass; loopback
    // acknowledges them at once, so their notifications come while that pass submits.
    for &id in &ids {
        for m in 0..MSGS {
            let mut b = d.take_buf(id, LEN).unwrap();
            pattern::fill(b.as_mut_slice(), (m * LEN) as u64);
            d.push(id, b, true).map_err(|(e, _)| e).unwrap();
        }
    }
    d.run(false).unwrap();
    assert!(ids.iter().all(|&id| d.is_flushed(id)), "one pass sent all");
    // Any acknowledgement the receivers delayed has come by now.
    std::thread::sleep(Duration::from_millis(300));
    d.run(false).unwrap();
    let st = d.total_stats();
    let sends = (CONNS * MSGS) as u64;
    assert!(st.zerocopy.attempts > 0, "no SEND_ZC was made");
    assert_eq!(
        st.zerocopy.completions + st.zerocopy.fallbacks.total(),
        sends,
        "every zero-copy send's notification routed by the next pass ({} CQ overflows)",
        d.cq_overflows()
    );
    for (c, rx) in rxs.iter_mut().enumerate() {
        let mut got = vec![0u8; MSGS * LEN];
        rx.read_exact(&mut got).unwrap();
        let mut v = Verifier::new();
        v.check(&got);
        assert_eq!(v.mismatches, 0, "connection {c}");
    }
    d.finish(Duration::from_secs(5)).unwrap();
}
