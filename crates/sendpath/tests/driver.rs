//! The io_uring driver on the real kernel: many connections on one ring, SEND and SEND_ZC
//! side by side, every byte verified; a connection whose peer resets fails alone.

mod common;

use sendpath::engine::{Choice, DriverConfig, UringDriver};
use sendpath_host::pattern::{self, Verifier};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

fn driver(connections: usize) -> Option<UringDriver> {
    match UringDriver::new(DriverConfig {
        connections,
        depth: 4,
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
    let (tx, rx) = connections(CONNS, &[]);
    let ids: Vec<_> = tx
        .into_iter()
        .enumerate()
        .map(|(i, s)| {
            let choice = if i % 2 == 0 {
                Choice::Copy
            } else {
                Choice::ZeroCopy
            };
            d.add(s, choice, true).unwrap()
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
                let mut b = d.take_buf(id, len);
                pattern::fill(b.as_mut_slice(), offset[c]);
                offset[c] += len as u64;
                d.push(id, b, true).unwrap();
                next[c] += 1;
                queued = true;
            }
        }
        d.run(!queued).unwrap();
    }
    d.finish(Duration::from_secs(10)).unwrap();
    for (c, &id) in ids.iter().enumerate() {
        d.conn_error(id).unwrap();
        let st = d.stats(id);
        assert_eq!(st.bytes, offset[c], "connection {c}: bytes on the socket");
        assert_eq!(st.sends, MSGS as u64);
        if c % 2 == 1 && d.ops().send_zc {
            assert_eq!(
                st.zc_completions + st.fallbacks.total(),
                MSGS as u64,
                "connection {c}: every zero-copy send completed or fell back"
            );
        }
        assert_eq!(st.leaked_buffers, 0);
        d.socket(id).shutdown(std::net::Shutdown::Write).unwrap();
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
        .map(|s| d.add(s, Choice::ZeroCopy, true).unwrap())
        .collect();
    let mut offset = [0u64; 3];
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    // Keep sending until the reset connection has failed and the others sent 8 MiB each.
    loop {
        let mut queued = false;
        for (c, &id) in ids.iter().enumerate() {
            let enough = offset[c] >= 8 << 20;
            while !enough && d.room(id) > 0 {
                let mut b = d.take_buf(id, 32 << 10);
                pattern::fill(b.as_mut_slice(), offset[c]);
                offset[c] += 32 << 10;
                d.push(id, b, true).unwrap();
                queued = true;
            }
        }
        let before = d.state(ids[1]).error().is_some();
        d.run(!queued).unwrap();
        let mut writable = Vec::new();
        d.take_writable(&mut writable);
        let failed = d.state(ids[1]).error().is_some();
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
        assert_eq!(d.stats(ids[c]).bytes, offset[c]);
        d.socket(ids[c])
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
    use sendpath::engine::{Event, RecvConfig};
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
                    d.add_receiving(
                        sock,
                        sendpath::engine::ConnState::new(
                            d.state_config(false),
                            Box::new(sendpath::engine::Fixed(Choice::Copy)),
                        ),
                    )
                    .unwrap();
                }
                Event::Received { conn, buf } => {
                    let mut out = d.take_buf(conn, buf.len());
                    out.as_mut_slice().copy_from_slice(d.received(&buf));
                    d.recycle(buf);
                    d.push(conn, out, true).unwrap();
                    d.request_flush(conn);
                }
                Event::RecvEnded { conn, error } => {
                    assert!(error.is_none(), "{error:?}");
                    done += 1;
                    d.close(conn);
                }
                Event::Closed(_) => closed += 1,
                Event::AcceptFailed(e) => panic!("accept failed: {e}"),
                Event::Spliced { .. } => panic!("no splice was asked for"),
            }
        }
    }
    for c in clients {
        c.join().unwrap().unwrap();
    }
    assert_eq!((accepted, done, closed), (CLIENTS, CLIENTS, CLIENTS));
    assert_eq!(d.open_connections(), 0);
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
    use sendpath::engine::Event;
    let Some(mut d) = driver(4) else { return };
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let _a = TcpStream::connect(addr).unwrap();
    let _b = TcpStream::connect(addr).unwrap();
    let old = d.add(l.accept().unwrap().0, Choice::Copy, false).unwrap();
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
    let new = d.add(l.accept().unwrap().0, Choice::Copy, false).unwrap();
    assert_eq!(new.index(), old.index(), "the index is handed out again");
    assert_ne!(new, old);
    assert!(!d.is_open(old) && d.is_open(new));
    d.close(old);
    assert!(
        d.is_open(new),
        "closing a stale id leaves the new connection alone"
    );
    assert_eq!(d.conn_at(new.index()), Some(new));
}
