//! A many-connection HTTP/1.1 server on one io_uring ring: multishot accept and receive,
//! pipelined requests answered in order, every response a head copied into a buffer plus one
//! shared body sent with SEND_ZC from a registered buffer. With `--clients N` it also runs N
//! clients that each send pipelined requests and check every byte they get back, then exits
//! (1 if a byte was wrong or a response missing).
//!
//! ```sh
//! cargo run --release -p sendpath --example ring_server -- --clients 1000 --requests 3
//! cargo run --release -p sendpath --example ring_server -- --listen 127.0.0.1:8080 --seconds 60
//! ```

use sendpath::{Buf, ConnId, DriverConfig, Event, Options, RecvConfig, Strategy, UringDriver};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: example\r\n\r\n";

/// A connection's requests: the start of one not yet whole, and responses owed.
#[derive(Default)]
struct Client {
    partial: Vec<u8>,
    owed: usize,
}

struct Server {
    ring: UringDriver,
    clients: Vec<Option<(ConnId, Client)>>,
    head: Vec<u8>,
    body: Buf,
    strategy: Strategy,
    closed: usize,
}

fn main() {
    if let Err(e) = run() {
        eprintln!("error: {e}");
        std::process::exit(2);
    }
}

fn run() -> Result<(), Box<dyn std::error::Error>> {
    let arg = |name: &str| {
        let mut a = std::env::args().skip_while(|a| a != name).skip(1);
        a.next()
    };
    let listen = arg("--listen").unwrap_or_else(|| "127.0.0.1:0".into());
    let body_len: usize = arg("--body").map_or(Ok(65536), |s| s.parse())?;
    let clients: usize = arg("--clients").map_or(Ok(0), |s| s.parse())?;
    let requests: usize = arg("--requests").map_or(Ok(3), |s| s.parse())?;
    let seconds: u64 = arg("--seconds").map_or(Ok(30), |s| s.parse())?;
    let strategy: Strategy = arg("--strategy").as_deref().unwrap_or("uring-zc").parse()?;

    let mut ring = UringDriver::new(DriverConfig {
        connections: clients.max(64),
        options: Options {
            uring_fixed_buffers: true,
            ..Options::default()
        },
        ..DriverConfig::default()
    })?;
    ring.provide_recv_buffers(RecvConfig {
        buffers: 4096,
        size: 4096,
    })?;
    let listener = TcpListener::bind(&listen)?;
    let addr = listener.local_addr()?;
    ring.listen(listener)?;
    let mut body = Buf::shared((0..body_len).map(|i| (i % 251) as u8).collect());
    let registered = ring.register(&mut body);
    println!("serving {body_len}-byte bodies on http://{addr} with {strategy} (body registered: {registered})");
    let head = format!("HTTP/1.1 200 OK\r\nContent-Length: {body_len}\r\n\r\n").into_bytes();
    let threads: Vec<_> = (0..clients)
        .map(|_| {
            let head = head.clone();
            std::thread::spawn(move || client(addr, requests, &head, body_len))
        })
        .collect();
    let mut server = Server {
        ring,
        clients: Vec::new(),
        head,
        body,
        strategy,
        closed: 0,
    };
    let deadline = Instant::now() + Duration::from_secs(seconds);
    while Instant::now() < deadline && (clients == 0 || server.closed < clients) {
        server.pass()?;
    }
    let finished = server.ring.finish(Duration::from_secs(2));
    let s = server.ring.total_stats();
    println!(
        "sent {} bytes in {} messages; zero-copy sends {}, copied {:?}, fallbacks {}, registered {}",
        s.bytes,
        s.sends,
        s.zerocopy.attempts,
        s.copied_fraction(),
        s.zerocopy.fallbacks.total(),
        s.zerocopy.registered
    );
    finished?;
    let mut ok = 0;
    for t in threads {
        match t.join().expect("client thread") {
            Ok(()) => ok += 1,
            Err(e) => eprintln!("client: {e}"),
        }
    }
    println!("{ok} of {clients} clients got every byte of {requests} responses");
    if ok < clients {
        std::process::exit(1);
    }
    Ok(())
}

impl Server {
    /// One turn of the loop: wait for the ring, handle its events, answer who has room.
    fn pass(&mut self) -> sendpath::Result<()> {
        self.ring.run_for(Duration::from_millis(50))?;
        let mut events = Vec::new();
        self.ring.take_events(&mut events);
        for e in events {
            match e {
                Event::Accepted(sock) => {
                    let id = self.ring.add_receiving(sock, self.strategy)?;
                    if self.clients.len() <= id.index() {
                        self.clients.resize_with(id.index() + 1, || None);
                    }
                    self.clients[id.index()] = Some((id, Client::default()));
                }
                Event::Received { conn, buf } => {
                    let Server { ring, clients, .. } = self;
                    if let Some(Some((id, c))) = clients.get_mut(conn.index()) {
                        if *id == conn {
                            c.partial.extend_from_slice(ring.received(&buf));
                            c.owed += take_requests(&mut c.partial);
                        }
                    }
                    self.ring.recycle(buf);
                    self.respond(conn);
                }
                Event::RecvEnded { conn, .. } => self.ring.close(conn),
                Event::Closed(id) => {
                    self.clients[id.index()] = None;
                    self.closed += 1;
                }
                _ => {}
            }
        }
        let mut writable = Vec::new();
        self.ring.take_writable(&mut writable);
        for id in writable {
            self.respond(id);
        }
        Ok(())
    }

    fn client(&mut self, id: ConnId) -> Option<&mut Client> {
        match self.clients.get_mut(id.index())? {
            Some((cid, c)) if *cid == id => Some(c),
            _ => None,
        }
    }

    /// Queues the owed responses that fit: a head, then the shared body.
    fn respond(&mut self, id: ConnId) {
        let Some(owed) = self.client(id).map(|c| c.owed) else {
            return;
        };
        let mut sent = 0;
        while sent < owed && self.ring.room(id) >= 2 {
            let Ok(mut head) = self.ring.take_buf(id, self.head.len()) else {
                return;
            };
            head.as_mut_slice().copy_from_slice(&self.head);
            let body = self.body.share().expect("a shared body");
            if self.ring.push(id, head, false).is_err() || self.ring.push(id, body, true).is_err() {
                return self.ring.close(id);
            }
            sent += 1;
        }
        if let Some(c) = self.client(id) {
            c.owed -= sent;
        }
        if sent > 0 {
            let _ = self.ring.request_flush(id);
        }
    }
}

/// Removes the whole requests from the start of `partial`; how many there were.
fn take_requests(partial: &mut Vec<u8>) -> usize {
    let mut n = 0;
    while let Some(end) = partial.windows(4).position(|w| w == b"\r\n\r\n") {
        partial.drain(..end + 4);
        n += 1;
    }
    n
}

/// A client: `requests` pipelined GETs, then every response read and checked.
fn client(addr: SocketAddr, requests: usize, head: &[u8], body_len: usize) -> std::io::Result<()> {
    let mut s = TcpStream::connect(addr)?;
    s.set_read_timeout(Some(Duration::from_secs(20)))?;
    s.write_all(&REQUEST.repeat(requests))?;
    let mut got = vec![0u8; head.len() + body_len];
    for r in 0..requests {
        s.read_exact(&mut got)?;
        let body_ok = got[head.len()..]
            .iter()
            .enumerate()
            .all(|(i, &b)| b == (i % 251) as u8);
        if &got[..head.len()] != head || !body_ok {
            return Err(std::io::Error::other(format!("response {r} differs")));
        }
    }
    Ok(())
}
