//! A blocking sender: one connection, any path, buffers back only when the kernel is done.
//!
//! ```sh
//! cargo run --release -p sendpath --example blocking_sender -- msg-zerocopy 65536 2000
//! ```
//!
//! A receiver thread on 127.0.0.1 checks every byte; the sender fills each buffer from
//! `take_buf` (one the kernel has released, or a new one), sends it, then closes the path with a
//! deadline and prints what the kernel did. Exits with 1 if a byte arrived wrong.

use sendpath::{open, Options, Strategy};
use std::io::Read;
use std::net::{TcpListener, TcpStream};
use std::time::Duration;

/// The byte at stream offset `o`: a pattern with a prime period, so a misplaced byte shows.
fn byte_at(o: u64) -> u8 {
    (o % 251) as u8
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let strategy: Strategy = args.next().as_deref().unwrap_or("msg-zerocopy").parse()?;
    let size: usize = args.next().map_or(Ok(65536), |s| s.parse())?;
    let count: u64 = args.next().map_or(Ok(2000), |s| s.parse())?;

    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    let receiver = std::thread::spawn(move || -> std::io::Result<(u64, u64)> {
        let (mut s, _) = listener.accept()?;
        let (mut buf, mut at, mut wrong) = (vec![0u8; 1 << 20], 0u64, 0u64);
        loop {
            let n = s.read(&mut buf)?;
            if n == 0 {
                return Ok((at, wrong));
            }
            for &b in &buf[..n] {
                wrong += u64::from(b != byte_at(at));
                at += 1;
            }
        }
    });

    let mut path = open(strategy, TcpStream::connect(addr)?, &Options::default())?;
    let mut off = 0u64;
    for _ in 0..count {
        let mut buf = path.take_buf(size);
        for b in buf.as_mut_slice() {
            *b = byte_at(off);
            off += 1;
        }
        path.send_buf(buf)?; // moved in: the kernel may read it until its completion
    }
    let name = path.name();
    let stats = path.close(Duration::from_secs(5))?; // every completion in, or an error
    let (received, wrong) = receiver.join().expect("receiver thread")?;
    println!(
        "{name}: sent {} bytes in {} messages, received {received}, {wrong} wrong",
        stats.bytes, stats.sends
    );
    println!(
        "zero-copy sends {}, completions {}, copied {:?}, fallbacks {}",
        stats.zerocopy.attempts,
        stats.zerocopy.completions,
        stats.copied_fraction(),
        stats.zerocopy.fallbacks.total()
    );
    if received != off || wrong > 0 {
        eprintln!("error: {off} bytes sent, {received} received, {wrong} wrong");
        std::process::exit(1);
    }
    Ok(())
}
