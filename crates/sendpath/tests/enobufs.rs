//! A real ENOBUFS from MSG_ZEROCOPY: the receiver stalls, a huge send buffer keeps the sender
//! from blocking, and the notifications waiting in the send queue exhaust the socket's optmem
//! (`/proc/sys/net/core/optmem_max`). The path must drain, retry once, then send by copy and
//! count an `enobufs` fallback, and every byte must still arrive in order.

mod common;

use sendpath::InflightLimits;
use sendpath::{open, Msg, Options, Strategy};
use sendpath_host::pattern;
use std::net::TcpStream;
use std::time::Duration;

#[test]
fn msg_zerocopy_enobufs_falls_back_to_copy_and_is_counted() {
    if sendpath_host::thread::euid() != 0 {
        common::skip("needs root for SO_SNDBUFFORCE (a send buffer past wmem_max)");
        return;
    }
    // About 830 bytes of optmem per outstanding notification, one per 512 KiB or less: 3000
    // sends of 64 KiB need ~310 KiB, so the test only proves something below that.
    let optmem: u64 = std::fs::read_to_string("/proc/sys/net/core/optmem_max")
        .ok()
        .and_then(|s| s.trim().parse().ok())
        .unwrap_or(u64::MAX);
    if optmem > 256 * 1024 {
        common::skip(&format!(
            "optmem_max is {optmem} bytes, too large for 3000 sends to exhaust"
        ));
        return;
    }
    let (addr, rx) = common::receiver(Duration::from_millis(1500));
    let sock = TcpStream::connect(addr).unwrap();
    common::set_int_opt(&sock, libc::SOL_SOCKET, libc::SO_SNDBUFFORCE, 1 << 30);
    let opts = Options {
        inflight: InflightLimits {
            max_sends: 1 << 20,
            max_bytes: 1 << 40,
        },
        ..Options::default()
    };
    let mut p = open(Strategy::MsgZerocopy, sock, &opts).unwrap();
    let size = 64 * 1024;
    let mut off = 0u64;
    for _ in 0..3000 {
        let mut b = p.take_buf(size);
        pattern::fill(b.as_mut_slice(), off);
        p.send(Msg::one(b)).unwrap();
        off += size as u64;
        if p.stats().zerocopy.fallbacks.enobufs > 0 && off > 64 << 20 {
            break;
        }
    }
    p.finish(Duration::from_secs(10)).unwrap();
    let s = p.stats().summary();
    drop(p);
    let v = rx.join().unwrap();
    println!(
        "stalled receiver: sent {off} B, zc_attempts={} completions={} enobufs={} inflight_cap={} leaked={} verified={} mismatches={}",
        s.zerocopy.attempts,
        s.zerocopy.completions,
        s.zerocopy.fallbacks.enobufs,
        s.zerocopy.fallbacks.inflight_cap,
        s.leaked_buffers,
        v.bytes_verified(),
        v.mismatches
    );
    assert_eq!(v.mismatches, 0);
    assert_eq!(v.bytes_verified(), off);
    assert!(
        s.zerocopy.fallbacks.enobufs > 0,
        "optmem_max {optmem} should have run out"
    );
    assert_eq!(
        s.zerocopy.completions, s.zerocopy.attempts,
        "every zero-copy send completes"
    );
    assert_eq!(s.leaked_buffers, 0);
}
