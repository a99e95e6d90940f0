//! The BPF copy counter on a real loopback connection: what the receiving thread's reads
//! copied into user memory is exactly what it read, a read that discards copies nothing, and
//! each counter that did not attach says why.

use sendpath_host::copies::{CopyCounter, CopyKind};
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};

fn skip(reason: &str) {
    if std::env::var("SENDPATH_REQUIRE").as_deref() == Ok("all") {
        panic!("cannot run here and SENDPATH_REQUIRE=all forbids skipping: {reason}");
    }
    println!("skipped: {reason}");
}

fn counter() -> Option<CopyCounter> {
    match CopyCounter::open() {
        Ok(c) => Some(c),
        Err(why) => {
            skip(&why);
            None
        }
    }
}

const BYTES: usize = 8 << 20;

/// Sends [`BYTES`] to a fresh loopback connection from another thread and returns the
/// receiving end.
fn connection() -> (TcpStream, std::thread::JoinHandle<()>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let sender = std::thread::spawn(move || {
        let mut s = TcpStream::connect(addr).unwrap();
        let buf = vec![7u8; 64 << 10];
        for _ in 0..BYTES / buf.len() {
            s.write_all(&buf).unwrap();
        }
    });
    (l.accept().unwrap().0, sender)
}

#[test]
fn a_copying_read_counts_every_byte_and_a_discarding_one_none() {
    let Some(mut c) = counter() else { return };
    let me = sendpath_host::thread::gettid();
    c.watch(&[me]).unwrap();
    assert_eq!(c.read(me).unwrap().to_user, Some(0));
    if let Some(why) = c.unavailable(CopyKind::ToUser) {
        return skip(&format!("the receive-side counter: {why}"));
    }

    let (mut rx, sender) = connection();
    let mut buf = vec![0u8; 64 << 10];
    let mut got = 0;
    while got < BYTES {
        let n = rx.read(&mut buf).unwrap();
        assert!(n > 0);
        got += n;
    }
    sender.join().unwrap();
    assert_eq!(c.read(me).unwrap().to_user, Some(BYTES as u64));

    let (rx, sender) = connection();
    let mut got = 0;
    while got < BYTES {
        let n = rustix::net::recv(&rx, &mut buf, rustix::net::RecvFlags::TRUNC)
            .unwrap()
            .0;
        assert!(n > 0);
        got += n;
    }
    sender.join().unwrap();
    assert_eq!(
        c.read(me).unwrap().to_user,
        Some(BYTES as u64),
        "MSG_TRUNC copies nothing"
    );
}

#[test]
fn a_thread_not_watched_is_not_counted_and_each_missing_counter_says_why() {
    let Some(mut c) = counter() else { return };
    let me = sendpath_host::thread::gettid();
    c.watch(&[me]).unwrap();
    c.watch(&[]).unwrap();
    assert_eq!(c.read(me), None);
    for k in c.counters() {
        if let Some(why) = &k.unavailable {
            assert!(!why.is_empty(), "{}", k.hooks);
            println!("{:?} ({}): not counted: {why}", k.kind, k.hooks);
        }
    }
    assert_eq!(
        c.deferred().is_some(),
        c.unavailable(CopyKind::Deferred).is_none()
    );
}
