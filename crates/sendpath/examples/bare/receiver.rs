//! The TCP receiver: a thread of bare's, or with `--recv-process` a process of its own (bare
//! run again as `bare --receive ...`), for a tool that runs the sender's threads one at a time
//! (callgrind), where a receiver thread could not read while the sender waits in the kernel.

use super::sys;
use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::process::{Child, Command, Stdio};
use std::thread::JoinHandle;

/// How the receiver reads: its read size, the CPU it runs on, and the byte it checks or
/// whether it copies every byte out (neither: it discards).
#[derive(Clone, Copy)]
pub(crate) struct Reading {
    pub(crate) read: usize,
    pub(crate) cpu: Option<usize>,
    pub(crate) verify: Option<u8>,
    pub(crate) copy: bool,
}

/// A running receiver; [`Receiver::join`] gives how many bytes it read.
pub(crate) enum Receiver {
    Thread(JoinHandle<io::Result<u64>>),
    Process(Child),
}

impl Receiver {
    /// The sending end of a connection from `l` to a new receiver, in a process of its own
    /// when `process`.
    pub(crate) fn start(
        l: &TcpListener,
        r: Reading,
        process: bool,
    ) -> io::Result<(TcpStream, Receiver)> {
        if !process {
            let tx = TcpStream::connect(l.local_addr()?)?;
            let rx = l.accept()?.0;
            return Ok((
                tx,
                Receiver::Thread(std::thread::spawn(move || receive(&rx, r))),
            ));
        }
        let mut cmd = Command::new(std::env::current_exe()?);
        cmd.arg("--receive").arg(l.local_addr()?.to_string());
        cmd.arg(r.read.to_string())
            .arg(r.cpu.map_or("-".into(), |c| c.to_string()));
        cmd.arg(match (r.verify, r.copy) {
            (Some(b), _) => format!("verify:{b}"),
            (None, true) => "copy".into(),
            (None, false) => "discard".into(),
        });
        let child = cmd.stdout(Stdio::piped()).spawn()?;
        Ok((l.accept()?.0, Receiver::Process(child)))
    }

    /// Waits for the receiver to see the end of the stream: the bytes it read.
    pub(crate) fn join(self) -> io::Result<u64> {
        match self {
            Receiver::Thread(t) => t
                .join()
                .map_err(|_| io::Error::other("the receiver thread panicked"))?,
            Receiver::Process(child) => {
                let out = child.wait_with_output()?;
                let text = String::from_utf8_lossy(&out.stdout);
                match (out.status.success(), text.trim().parse()) {
                    (true, Ok(n)) => Ok(n),
                    // Its error went to stderr, which it shares with this process.
                    _ => Err(io::Error::other(format!(
                        "the receiver process ended with {}",
                        out.status
                    ))),
                }
            }
        }
    }
}

/// Reads `rx` to its end as `r` says: the bytes read.
fn receive(rx: &TcpStream, r: Reading) -> io::Result<u64> {
    if let Some(c) = r.cpu {
        sys::pin(c)?;
    }
    match (r.verify, r.copy) {
        (Some(b), _) => sys::read_out(rx.as_raw_fd(), r.read, Some(b)),
        (None, true) => sys::read_out(rx.as_raw_fd(), r.read, None),
        (None, false) => sys::discard(rx.as_raw_fd(), r.read),
    }
}

/// `bare --receive ADDR READ CPU|- discard|copy|verify:BYTE`, the process
/// [`Receiver::start`] runs: connects to ADDR, reads to the end, prints the bytes read.
pub(crate) fn serve(args: &[String]) -> Result<u64, String> {
    let [addr, read, cpu, how] = args else {
        return Err("--receive takes ADDR READ CPU HOW".into());
    };
    let bad = |what: &str| format!("--receive: a bad {what}");
    let addr: SocketAddr = addr.parse().map_err(|_| bad("address"))?;
    let r = Reading {
        read: read.parse().map_err(|_| bad("read size"))?,
        cpu: match cpu.as_str() {
            "-" => None,
            c => Some(c.parse().map_err(|_| bad("CPU"))?),
        },
        verify: match how.strip_prefix("verify:") {
            Some(b) => Some(b.parse().map_err(|_| bad("byte"))?),
            None => None,
        },
        copy: how == "copy",
    };
    let rx = TcpStream::connect(addr).map_err(|e| e.to_string())?;
    receive(&rx, r).map_err(|e| e.to_string())
}
