//! A tokio HTTP/1.1 server that sends with sendpath's async sender: each connection's responses
//! go through `AsyncSender` with the adaptive strategy (the path per send from this host's
//! profile, the defaults without one), `GET /file` bodies by `sendfile` from a file, `GET /`
//! bodies from buffers the kernel gives back. With `--clients N` it also runs N clients that
//! each send pipelined requests for both and check every byte, then exits (1 if one failed).
//!
//! ```sh
//! cargo run --release -p sendpath --features tokio --example tokio_server -- --clients 1000
//! cargo run --release -p sendpath --features tokio --example tokio_server -- --listen 127.0.0.1:8080 --seconds 60
//! ```

use sendpath::{AsyncSender, FileRange, Options, Profile, Strategy};
use std::io::Write;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// The byte at offset `o` of a body: a pattern with a prime period, so a misplaced byte shows.
fn byte_at(o: usize) -> u8 {
    (o % 251) as u8
}

#[tokio::main]
async fn main() {
    if let Err(e) = run().await {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

async fn run() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |name: &str| std::env::args().skip_while(|a| a != name).nth(1);
    let listen = arg("--listen").unwrap_or_else(|| "127.0.0.1:0".into());
    let body: usize = arg("--body").map_or(Ok(65536), |s| s.parse())?;
    let clients: usize = arg("--clients").map_or(Ok(0), |s| s.parse())?;
    let requests: usize = arg("--requests").map_or(Ok(2), |s| s.parse())?;
    let seconds: u64 = arg("--seconds").map_or(Ok(30), |s| s.parse())?;

    // The file `GET /file` serves, and the host profile adaptive decides from.
    let mut file = tempfile::tempfile()?;
    file.write_all(&(0..body).map(byte_at).collect::<Vec<u8>>())?;
    let (profile, _) = Profile::load_active()?;
    let opts = Arc::new(Options {
        file: Some(Arc::new(file)),
        profile: Some(Arc::new(profile)),
        ..Options::default()
    });
    let listener = TcpListener::bind(&listen).await?;
    let addr = listener.local_addr()?;
    println!("serving {body}-byte bodies on http://{addr} (GET / and GET /file)");
    let checks: Vec<_> = (0..clients)
        .map(|_| tokio::spawn(client(addr, requests, body)))
        .collect();
    let served = tokio::spawn(async move {
        let mut tasks = Vec::new();
        while let Ok((conn, _)) = listener.accept().await {
            let (opts, len) = (opts.clone(), body);
            tasks.push(tokio::spawn(async move { serve(conn, &opts, len).await }));
        }
    });
    let mut ok = 0;
    let deadline = tokio::time::sleep(Duration::from_secs(seconds));
    tokio::pin!(deadline);
    for c in checks {
        tokio::select! {
            r = c => match r? {
                Ok(()) => ok += 1,
                Err(e) => eprintln!("client: {e}"),
            },
            _ = &mut deadline => break,
        }
    }
    if clients == 0 {
        deadline.await;
    }
    served.abort();
    println!("{ok} of {clients} clients got every byte of {requests} responses");
    if ok < clients {
        std::process::exit(1);
    }
    Ok(())
}

/// Answers one connection's requests in order until it closes: a head, then the body by
/// `sendfile` (`/file`) or from a buffer (anything else).
/// sendpath's errors convert into `io::Error`, so `?` works in io code.
async fn serve(conn: TcpStream, opts: &Options, body: usize) -> std::io::Result<()> {
    let std = conn.into_std()?;
    let mut reader = TcpStream::from_std(std.try_clone()?)?;
    let mut tx = AsyncSender::open(Strategy::Adaptive, std, opts)?;
    let (mut pending, mut buf) = (Vec::new(), vec![0u8; 4096]);
    loop {
        let n = reader.read(&mut buf).await?;
        if n == 0 {
            break;
        }
        pending.extend_from_slice(&buf[..n]);
        while let Some(end) = pending.windows(4).position(|w| w == b"\r\n\r\n") {
            let file = pending.starts_with(b"GET /file ");
            pending.drain(..end + 4);
            let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {body}\r\n\r\n");
            let mut h = tx.take_buf(head.len());
            h.as_mut_slice().copy_from_slice(head.as_bytes());
            tx.send_buf(h).await?;
            if file {
                tx.send_ranges(&[FileRange {
                    offset: 0,
                    len: body,
                }])
                .await?;
            } else {
                let mut b = tx.take_buf(body);
                for (i, x) in b.as_mut_slice().iter_mut().enumerate() {
                    *x = byte_at(i);
                }
                tx.send_buf(b).await?;
            }
        }
    }
    tx.close(Duration::from_secs(2)).await?;
    Ok(())
}

/// A client: `requests` pipelined GETs, alternately `/file` and `/`, every response checked.
async fn client(addr: SocketAddr, requests: usize, body: usize) -> std::io::Result<()> {
    let mut s = TcpStream::connect(addr).await?;
    let mut ask = Vec::new();
    for r in 0..requests {
        let path = if r % 2 == 0 { "/file" } else { "/" };
        ask.extend_from_slice(format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n").as_bytes());
    }
    s.write_all(&ask).await?;
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {body}\r\n\r\n");
    let mut got = vec![0u8; head.len() + body];
    for r in 0..requests {
        tokio::time::timeout(Duration::from_secs(20), s.read_exact(&mut got)).await??;
        let ok_body = got[head.len()..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == byte_at(i));
        if &got[..head.len()] != head.as_bytes() || !ok_body {
            return Err(std::io::Error::other(format!("response {r} differs")));
        }
    }
    Ok(())
}
