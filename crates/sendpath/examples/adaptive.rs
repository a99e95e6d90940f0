//! The adaptive sender, embedded: load this host's profile (written by `sendpath calibrate`;
//! the documented defaults when there is none), open the `adaptive` path on a socket, send
//! messages of mixed sizes, and read back what it decided.
//!
//! ```sh
//! cargo run --release -p sendpath --example adaptive
//! ```
//!
//! A receiver thread on 127.0.0.1 reads everything; on loopback the kernel copies every
//! zero-copy send, so with the defaults the sender backs off from zero-copy after a few sends.

use sendpath::Profile;
use sendpath::{open, Options, Strategy};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::sync::Arc;
use std::time::Duration;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let (profile, from) = Profile::load_active()?;
    match &from {
        Some(path) => println!("profile: {}", path.display()),
        None => println!("profile: none found, the defaults apply"),
    }
    println!("tiers: {}", profile.describe_tiers().join(", "));

    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> std::io::Result<u64> {
        let (mut s, _) = listener.accept()?;
        let mut buf = vec![0u8; 1 << 20];
        let mut total = 0u64;
        loop {
            match s.read(&mut buf)? {
                0 => return Ok(total),
                n => total += n as u64,
            }
        }
    });

    let opts = Options {
        profile: Some(Arc::new(profile)),
        ..Options::default()
    };
    let mut path = open(Strategy::Adaptive, TcpStream::connect(addr)?, &opts)?;
    let sizes = [88, 4096, 256 << 10, 1 << 20];
    let mut sent = 0u64;
    for i in 0..2000 {
        let len = sizes[i % sizes.len()];
        // A buffer the kernel has released (or a new one), filled by us before it is sent.
        let mut buf = path.take_buf(len);
        buf.as_mut_slice().fill(b'a' + (i % 26) as u8);
        path.send_buf(buf)?;
        sent += len as u64;
    }
    // Wait (at most 2 s) until the kernel has released every zero-copy buffer.
    path.finish(Duration::from_secs(2))?;
    let stats = path.stats().summary();
    drop(path); // closes the socket: the receiver sees the end
    let received = receiver.join().expect("receiver thread")?;
    assert_eq!(received, sent, "every byte arrived");

    let d = stats
        .decisions
        .expect("the adaptive path counts its decisions");
    println!("sent {sent} bytes in {} messages", stats.sends);
    println!(
        "by copy {} (tier) + {} (backed off) + {} (cap full), zero-copy {}, switches {}",
        d.copy_sends, d.backoff_copies, d.cap_copies, d.zerocopy_sends, d.switches
    );
    println!(
        "back-offs {}, retries {}, copied fraction {:?}",
        d.backoffs, d.retries, stats.copied_fraction
    );
    Ok(())
}
