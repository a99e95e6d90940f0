//! The paths are not TCP-only: the memory paths send datagrams on a connected UDP socket,
//! each message one datagram, byte for byte.

mod common;

use sendpath::{open, Msg, Options, Source, Strategy};
use sendpath_host::pattern::{self, Verifier};
use std::net::UdpSocket;
use std::time::Duration;

const DATAGRAMS: usize = 40;
const SIZE: usize = 1200;

#[test]
fn memory_paths_send_datagrams_on_a_connected_udp_socket() {
    // vmsplice is left out: its splice from a pipe may cut one message into several datagrams.
    let memory = Strategy::ALL
        .into_iter()
        .filter(|s| s.source() == Source::Memory && *s != Strategy::Vmsplice);
    for strategy in memory {
        let rx = UdpSocket::bind("127.0.0.1:0").unwrap();
        rx.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let tx = UdpSocket::bind("127.0.0.1:0").unwrap();
        tx.connect(rx.local_addr().unwrap()).unwrap();
        let reader = std::thread::spawn(move || {
            let mut v = Verifier::new();
            let mut sizes = Vec::new();
            let mut buf = vec![0u8; 65536];
            while sizes.len() < DATAGRAMS {
                let n = rx.recv(&mut buf).expect("a datagram within 5 s");
                sizes.push(n);
                v.check(&buf[..n]);
            }
            (v, sizes)
        });
        let mut p = open(strategy, tx, &Options::default()).unwrap();
        for i in 0..DATAGRAMS {
            let mut b = p.take_buf(SIZE);
            pattern::fill(b.as_mut_slice(), (i * SIZE) as u64);
            p.send(Msg::one(b)).unwrap();
            // Paced, so that a receiver on a busy host never has its buffer overrun.
            if i % 8 == 7 {
                p.flush().unwrap();
                std::thread::sleep(Duration::from_millis(2));
            }
        }
        p.finish(Duration::from_secs(2)).unwrap();
        let (v, sizes) = reader.join().unwrap();
        assert!(
            sizes.iter().all(|&n| n == SIZE),
            "{strategy}: each message is one datagram: {sizes:?}"
        );
        assert_eq!(v.mismatches, 0, "{strategy}");
        assert_eq!(v.bytes_verified(), (DATAGRAMS * SIZE) as u64, "{strategy}");
        let s = p.stats().summary();
        assert_eq!(s.bytes, (DATAGRAMS * SIZE) as u64, "{strategy}");
        println!(
            "{strategy} over UDP: {DATAGRAMS} datagrams verified; zero-copy attempts {}, completions {}, copied {:?}",
            s.zerocopy.attempts, s.zerocopy.completions, s.copied_fraction
        );
    }
}
