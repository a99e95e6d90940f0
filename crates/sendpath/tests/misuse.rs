//! What a path or driver does with a socket it cannot use, a peer that stops reading, and a
//! close or drop with buffers still in the kernel: each a clear error at once or within the
//! socket's send timeout, never a hang, a panic or a silent loss.

mod common;

use sendpath::{open, Error, Options, Strategy};
use sendpath_host::pattern::{self, Verifier};
use std::net::{TcpListener, TcpStream, UdpSocket};
use std::os::fd::OwnedFd;
use std::time::{Duration, Instant};

/// A connected pair whose receiving end is returned unread.
fn pair() -> (TcpStream, TcpStream) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let tx = TcpStream::connect(l.local_addr().unwrap()).unwrap();
    (tx, l.accept().unwrap().0)
}

#[test]
fn a_path_on_what_is_not_a_connected_socket_is_refused_at_open_naming_why() {
    let refused = |s: sendpath::Socket, strategy| match open(strategy, s, &Options::default()) {
        Err(e) => (e.kind(), e.to_string()),
        Ok(p) => panic!("{} opened", p.name()),
    };
    for strategy in [Strategy::Copy, Strategy::MsgZerocopy, Strategy::UringZc] {
        let null: OwnedFd = std::fs::File::open("/dev/null").unwrap().into();
        let (kind, why) = refused(null.into(), strategy);
        assert_eq!(kind, std::io::ErrorKind::InvalidInput);
        assert!(why.starts_with("not a socket"), "{strategy}: {why}");
        let l: OwnedFd = TcpListener::bind("127.0.0.1:0").unwrap().into();
        let (_, why) = refused(l.into(), strategy);
        assert!(why.starts_with("a listening socket"), "{strategy}: {why}");
        let u = UdpSocket::bind("127.0.0.1:0").unwrap();
        let (_, why) = refused(u.into(), strategy);
        assert!(why.contains("not connected"), "{strategy}: {why}");
    }
}

#[test]
fn a_non_blocking_socket_is_left_as_given() {
    let (tx, _rx) = pair();
    tx.set_nonblocking(true).unwrap();
    let clone = tx.try_clone().unwrap();
    // A path that waits in a blocking call refuses it, and changes nothing.
    let e = open(Strategy::Copy, tx, &Options::default()).err().unwrap();
    assert!(e.to_string().contains("non-blocking (O_NONBLOCK)"), "{e}");
    let flags = rustix::fs::fcntl_getfl(&clone).unwrap();
    assert!(
        flags.contains(rustix::fs::OFlags::NONBLOCK),
        "the flag is the caller's"
    );
}

/// io_uring waits for socket space itself: a non-blocking socket on the ring sends every byte
/// in order to a slow reader, and keeps its flag.
#[test]
fn the_ring_sends_on_a_non_blocking_socket_as_given() {
    if !sendpath::probe().io_uring.send_zc {
        return common::skip("io_uring SEND_ZC unavailable here");
    }
    for strategy in [Strategy::Uring, Strategy::UringZc] {
        let (addr, rx) = common::receiver(Duration::from_millis(200));
        let tx = TcpStream::connect(addr).unwrap();
        tx.set_nonblocking(true).unwrap();
        let clone = tx.try_clone().unwrap();
        let mut p = open(strategy, tx, &Options::default()).unwrap();
        let (mut off, mut batch) = (0u64, Vec::new());
        while off < 16 << 20 {
            let mut b = p.take_buf(64 << 10);
            pattern::fill(b.as_mut_slice(), off);
            off += 64 << 10;
            batch.push(b);
            if batch.len() == 8 {
                p.send_bufs(&mut batch).unwrap();
            }
        }
        let stats = p.close(Duration::from_secs(5)).unwrap();
        assert_eq!(stats.bytes, off);
        let flags = rustix::fs::fcntl_getfl(&clone).unwrap();
        assert!(
            flags.contains(rustix::fs::OFlags::NONBLOCK),
            "{strategy}: flag kept"
        );
        drop(clone);
        let v: Verifier = rx.join().unwrap();
        assert_eq!((v.mismatches, v.bytes_verified()), (0, off), "{strategy}");
    }
}

/// A peer that never reads: every path gives up within its socket's send timeout with
/// `EAGAIN` (what a blocking send says), the ring paths too.
#[test]
fn every_memory_path_honours_the_send_timeout() {
    for strategy in [
        Strategy::Copy,
        Strategy::MsgZerocopy,
        Strategy::Uring,
        Strategy::UringZc,
        Strategy::Adaptive,
    ] {
        let (tx, _rx) = pair();
        tx.set_write_timeout(Some(Duration::from_millis(300)))
            .unwrap();
        let mut p = open(strategy, tx, &Options::default()).unwrap();
        let start = Instant::now();
        let e = loop {
            let mut batch: Vec<_> = (0..8).map(|_| p.take_buf(64 << 10)).collect();
            if let Err(e) = p.send_bufs(&mut batch) {
                break e;
            }
            assert!(
                start.elapsed() < Duration::from_secs(10),
                "{strategy}: never gave up"
            );
        };
        assert_eq!(e.raw_os_error(), Some(libc::EAGAIN), "{strategy}: {e}");
        assert!(e.to_string().contains("SO_SNDTIMEO"), "{e}");
        assert!(
            start.elapsed() < Duration::from_secs(5),
            "{strategy}: {:?}",
            start.elapsed()
        );
    }
}

/// Closing with buffers the kernel still holds is an error that carries the final counts;
/// dropping never waits long and counts what it leaked.
#[test]
fn a_close_reports_held_buffers_and_a_drop_counts_them() {
    let caps = sendpath::probe();
    if !caps.msg_zerocopy.supported || !caps.io_uring.send_zc {
        return common::skip("MSG_ZEROCOPY or SEND_ZC unavailable here");
    }
    for strategy in [Strategy::MsgZerocopy, Strategy::UringZc] {
        // The peer reads nothing, so the kernel keeps the zero-copy pages it queued.
        let (tx, rx) = pair();
        tx.set_write_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut p = open(strategy, tx, &Options::default()).unwrap();
        let mut batch: Vec<_> = (0..4).map(|_| p.take_buf(64 << 10)).collect();
        p.send_bufs(&mut batch).unwrap();
        match p.close(Duration::from_millis(200)) {
            Err(Error::Leaked { buffers, stats }) => {
                assert!(buffers > 0, "{strategy}");
                assert_eq!(stats.leaked_buffers, buffers, "{strategy}");
                assert_eq!(stats.bytes, 4 << 16, "{strategy}: nothing measured is lost");
            }
            other => panic!("{strategy}: {other:?}"),
        }
        drop(rx);

        let (tx, rx) = pair();
        let mut p = open(strategy, tx, &Options::default()).unwrap();
        let mut batch: Vec<_> = (0..4).map(|_| p.take_buf(64 << 10)).collect();
        p.send_bufs(&mut batch).unwrap();
        p.flush().unwrap();
        let before = sendpath::leaked_on_drop();
        let t = Instant::now();
        drop(p);
        assert!(
            t.elapsed() < Duration::from_millis(500),
            "{strategy}: {:?}",
            t.elapsed()
        );
        assert!(
            sendpath::leaked_on_drop() > before,
            "{strategy}: the drop counted its leak"
        );
        drop(rx);
    }
}

/// With a reader, close returns the final counts and no leak.
#[test]
fn a_close_with_a_reader_hands_back_the_final_counts() {
    let (addr, rx) = common::receiver(Duration::ZERO);
    let mut p = open(
        Strategy::MsgZerocopy,
        TcpStream::connect(addr).unwrap(),
        &Options::default(),
    )
    .unwrap();
    let mut off = 0;
    for _ in 0..64 {
        let mut b = p.take_buf(16 << 10);
        pattern::fill(b.as_mut_slice(), off);
        off += 16 << 10;
        p.send_buf(b).unwrap();
    }
    let stats = p.close(Duration::from_secs(5)).unwrap();
    assert_eq!((stats.bytes, stats.leaked_buffers), (off, 0));
    let v = rx.join().unwrap();
    assert_eq!((v.mismatches, v.bytes_verified()), (0, off));
}
