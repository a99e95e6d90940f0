//! Where bare sends: a TCP connection over loopback to a receiver thread of its own, or a UDP
//! socket in a namespace whose veth peer is down; and which system calls each path makes.

use super::lib_loop::LibPath;
use super::pool::Pool;
use super::receiver::{Reading, Receiver};
use super::{sys, Args, Tally};
use std::fs::File;
use std::io::{self, Write};
use std::net::{Shutdown, TcpListener, TcpStream, UdpSocket};
use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::process::Command;
use std::time::Instant;

/// The paths whose buffers the kernel is done with when the call returns (`--bufs`).
pub(crate) fn is_copying_path(path: &str) -> bool {
    matches!(path, "copy" | "serialize" | "gather")
}

pub(crate) fn is_file_path(path: &str) -> bool {
    [
        "read-send",
        "mmap-send",
        "sendfile",
        "splice",
        "uring-splice",
    ]
    .contains(&path)
}

/// The socket bare sends on, and the next id the kernel gives a zero-copy send on it.
pub(crate) struct Route {
    link: Link,
    zc_next: u32,
    /// With `--lib`, the library's path that sends instead of bare's system calls.
    lib: Option<LibPath>,
}

enum Link {
    Tcp {
        tx: TcpStream,
        receiver: Receiver,
        file: Option<File>,
    },
    Udp {
        sock: UdpSocket,
        _ns: Blackhole,
    },
}

impl Route {
    pub(crate) fn open(a: &Args) -> Result<Route, String> {
        if a.udp {
            let ns = Blackhole::create(a.mtu)?;
            let sock = ns.socket(a.gso)?;
            let lib = match a.lib {
                true => Some(LibPath::open(a, dup(&sock)?, None)?),
                false => None,
            };
            let link = Link::Udp { sock, _ns: ns };
            return Ok(Route {
                link,
                zc_next: 0,
                lib,
            });
        }
        let file = match is_file_path(&a.path) {
            true => Some(source_file(a.file_size).map_err(|e| format!("the source file: {e}"))?),
            false => None,
        };
        let l = TcpListener::bind("127.0.0.1:0").map_err(|e| e.to_string())?;
        let reading = Reading {
            // As `stream --recv discard` reads: the message size clamped to 16 KiB..1 MiB.
            read: a.recv_size.unwrap_or(a.size.clamp(16 << 10, 1 << 20)),
            cpu: a.cpu.and_then(|c| c.1),
            verify: a.verify.then(expected),
            copy: a.recv_copy,
        };
        let (tx, receiver) = Receiver::start(&l, reading, a.recv_process)
            .map_err(|e| format!("the receiver: {e}"))?;
        if let Some(cc) = &a.congestion {
            sys::set_congestion(tx.as_raw_fd(), cc)?;
        }
        let lib = match a.lib {
            true => Some(LibPath::open(a, dup(&tx)?, file.as_ref())?),
            false => None,
        };
        let link = Link::Tcp { tx, receiver, file };
        Ok(Route {
            link,
            zc_next: 0,
            lib,
        })
    }

    fn fd(&self) -> RawFd {
        match &self.link {
            Link::Tcp { tx, .. } => tx.as_raw_fd(),
            Link::Udp { sock, .. } => sock.as_raw_fd(),
        }
    }

    /// Sends by `a.path` until `until`.
    pub(crate) fn send(&mut self, a: &Args, until: Instant) -> io::Result<Tally> {
        if let Some(lib) = self.lib.as_mut() {
            return lib.send(a, until);
        }
        let fd = self.fd();
        if let Link::Tcp { file: Some(f), .. } = &self.link {
            return sys::file::send(fd, f.as_fd(), a, until);
        }
        // As sendpath orders by default: vectored on TCP, linked from a registered buffer.
        let order = a.order.unwrap_or(match self.link {
            Link::Tcp { .. } if a.fixed => super::Order::Linked,
            Link::Tcp { .. } => super::Order::Vectored,
            Link::Udp { .. } => super::Order::None,
        });
        if is_copying_path(&a.path) {
            // Their buffers come back at once: `--bufs` of them, sent in turn.
            let ring = Pool::new(a.size, true, a.bufs, true);
            let bufs: Vec<&[u8]> = ring.all().collect();
            return match a.path.as_str() {
                "gather" => sys::gather(fd, &bufs, until),
                p => sys::copy(fd, &bufs, until, p == "serialize"),
            };
        }
        let mut pool = match a.arena {
            // What `stream --arena 4M` holds, whatever the path.
            true => Pool::arena(a.size, super::arena_slots(a.size)),
            false => {
                // Zero-copy sends wait for notifications: up to sendpath's in-flight cap
                // (256) more.
                let zc = matches!(a.path.as_str(), "msg-zerocopy" | "uring-zc");
                let cap = 2 * a.depth + if zc { 256 } else { 0 };
                Pool::new(a.size, a.pool, cap, a.fixed)
            }
        };
        let p = &mut pool;
        match a.path.as_str() {
            "msg-zerocopy" => sys::msg_zerocopy(fd, p, until, a.reap_every, &mut self.zc_next),
            "vmsplice" => sys::file::vmsplice(fd, a.size, a.pipe_size, until),
            _ => sys::uring::send(fd, p, until, sys::uring::Cfg::of(a, order)),
        }
    }

    /// Half-closes a TCP connection and waits for its receiver to read to the end.
    pub(crate) fn close(self) -> io::Result<u64> {
        drop(self.lib);
        match self.link {
            Link::Tcp { tx, receiver, .. } => {
                // A receiver that failed closed its end (this shutdown then fails): its error
                // is the one to tell.
                let shut = tx.shutdown(Shutdown::Write);
                let n = receiver.join()?;
                shut.map(|()| n)
            }
            Link::Udp { .. } => Ok(0),
        }
    }
}

/// The byte every path writes into what it sends (and the source file holds).
pub(crate) const BYTE: u8 = 0x5a;

/// The byte `--verify` expects: [`BYTE`], or `SENDPATH_BARE_EXPECT` (a test hook that shows
/// the check fails on a byte other than the one expected).
fn expected() -> u8 {
    std::env::var("SENDPATH_BARE_EXPECT")
        .ok()
        .and_then(|v| u8::from_str_radix(v.trim_start_matches("0x"), 16).ok())
        .unwrap_or(BYTE)
}

/// A warm file of `len` bytes in the temp dir, unlinked, written and synced: in the page
/// cache, clean.
fn source_file(len: u64) -> io::Result<File> {
    let path = std::env::temp_dir().join(format!("sendpath-bare-{}", std::process::id()));
    let mut f = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)?;
    std::fs::remove_file(&path)?;
    let chunk = vec![BYTE; 1 << 20];
    let mut left = len;
    while left > 0 {
        let n = left.min(chunk.len() as u64) as usize;
        f.write_all(&chunk[..n])?;
        left -= n as u64;
    }
    // Clean pages, as sendpath's source file: dirty ones are slower to send.
    f.sync_all()?;
    Ok(f)
}

/// The namespace of the UDP route, removed on drop.
pub(crate) struct Blackhole(String);

impl Blackhole {
    fn create(mtu: u32) -> Result<Blackhole, String> {
        let name = format!("sendpath-bare-{}", std::process::id());
        let ns = Blackhole(name.clone());
        let ip = |args: &[&str]| -> Result<(), String> {
            let out = Command::new("ip")
                .args(["-n", &name])
                .args(args)
                .output()
                .map_err(|e| format!("cannot run `ip` (iproute2): {e}"))?;
            match out.status.success() {
                true => Ok(()),
                false => Err(format!(
                    "`ip {}` failed (root needed): {}",
                    args.join(" "),
                    String::from_utf8_lossy(&out.stderr).trim()
                )),
            }
        };
        let out = Command::new("ip").args(["netns", "add", &name]).output();
        if !out.is_ok_and(|o| o.status.success()) {
            return Err("`ip netns add` failed: run as root, with iproute2".into());
        }
        let m = mtu.to_string();
        ip(&[
            "link", "add", "va", "mtu", &m, "type", "veth", "peer", "name", "vb", "mtu", &m,
        ])?;
        ip(&["addr", "add", "192.0.2.1/30", "dev", "va"])?;
        ip(&["link", "set", "va", "up"])?;
        ip(&[
            "neigh",
            "add",
            "192.0.2.2",
            "lladdr",
            "02:00:00:00:00:02",
            "dev",
            "va",
            "nud",
            "permanent",
        ])?;
        Ok(ns)
    }

    /// A UDP socket made inside the namespace, connected to the neighbour that never answers.
    fn socket(&self, gso: Option<u16>) -> Result<UdpSocket, String> {
        let path = format!("/run/netns/{}", self.0);
        std::thread::spawn(move || -> Result<UdpSocket, String> {
            let f = File::open(&path).map_err(|e| format!("{path}: {e}"))?;
            sys::setns(f.as_fd()).map_err(|e| format!("setns: {e}"))?;
            let s = UdpSocket::bind("192.0.2.1:0").map_err(|e| e.to_string())?;
            s.connect("192.0.2.2:9").map_err(|e| e.to_string())?;
            let fd = s.as_raw_fd();
            sys::setsockopt(
                fd,
                libc::IPPROTO_IP,
                libc::IP_MTU_DISCOVER,
                libc::IP_PMTUDISC_DO,
            )?;
            if let Some(seg) = gso {
                sys::setsockopt(fd, libc::SOL_UDP, 103, i32::from(seg))?; // UDP_SEGMENT
            }
            Ok(s)
        })
        .join()
        .map_err(|_| "the namespace thread panicked".to_string())?
    }
}

impl Drop for Blackhole {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// A duplicate of `sock`'s descriptor, for the library's path to own.
fn dup(sock: &impl AsFd) -> Result<OwnedFd, String> {
    sock.as_fd().try_clone_to_owned().map_err(|e| e.to_string())
}
