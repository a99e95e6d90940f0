//! What this kernel lets the library do, checked by trying it, once per process.
//!
//! Nothing here is inferred from the kernel version: io_uring opcodes come from
//! `IORING_REGISTER_PROBE`; MSG_ZEROCOPY and SEND_ZC usage reporting are exercised with a real
//! send to a local listener, whose completion also shows whether the kernel copies for a local
//! receiver.

use crate::buffer::Buf;
use crate::completion::ZcNotification;
use crate::sys;
use crate::sys::uring::{Op, SendRing, IORING_NOTIF_USAGE_ZC_COPIED};
use serde::{Deserialize, Serialize};
use std::io;
use std::net::{TcpListener, TcpStream};
use std::os::fd::AsFd;
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// io_uring support.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct IoUringProbe {
    /// A ring could be created.
    pub enabled: bool,
    /// `/proc/sys/kernel/io_uring_disabled` (0 allowed, 1 restricted, 2 disabled).
    pub disabled_sysctl: Option<u32>,
    /// Why a ring could not be created.
    pub error: Option<String>,
    /// `IORING_OP_SEND`.
    pub send: bool,
    /// `IORING_OP_SEND_ZC`.
    pub send_zc: bool,
    /// `IORING_OP_SENDMSG`: with SENDMSG_ZC, what a connection's queued sends go in as, one
    /// vectored request per chain.
    #[serde(default)]
    pub sendmsg: bool,
    /// `IORING_OP_SENDMSG_ZC`.
    pub sendmsg_zc: bool,
    /// `IORING_SEND_ZC_REPORT_USAGE` accepted by a real SEND_ZC.
    pub send_zc_report_usage: bool,
    /// `IORING_OP_SPLICE`.
    pub splice: bool,
    /// `IORING_FEAT_MIN_TIMEOUT` (Linux 6.12): a wait can hold out for a batch of completions
    /// for a bounded time ([`UringDriver::batch_waits`](crate::UringDriver::batch_waits)).
    #[serde(default)]
    pub min_wait: bool,
    /// A SEND_ZC to a local listener was reported copied (`IORING_NOTIF_USAGE_ZC_COPIED`);
    /// null when it could not be tested.
    pub send_zc_local_copied: Option<bool>,
}

/// MSG_ZEROCOPY support.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct MsgZerocopyProbe {
    /// `SO_ZEROCOPY` accepted and a `MSG_ZEROCOPY` send completed.
    pub supported: bool,
    /// What failed, when not supported.
    pub error: Option<String>,
    /// The test send to a local listener came back `SO_EE_CODE_ZEROCOPY_COPIED`.
    pub local_copied: Option<bool>,
}

/// What the kernel lets the send paths do: [`probe`]'s answer.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct Capabilities {
    /// io_uring: the opcodes `uring`, `uring-zc` and the ring driver use.
    pub io_uring: IoUringProbe,
    /// MSG_ZEROCOPY: what `msg-zerocopy` and `adaptive` use.
    pub msg_zerocopy: MsgZerocopyProbe,
}

/// Checks what this kernel lets the send paths do, by trying it once per process (later calls
/// return the first answer): a ring and its opcodes, and one zero-copy send of each kind to a
/// listener on 127.0.0.1, whose completion also says whether the kernel copies for a local
/// receiver (it does on Linux up to at least 6.18).
///
/// ```no_run
/// let caps = sendpath::probe();
/// if !caps.io_uring.send_zc {
///     println!("no SEND_ZC here: uring-zc falls back to copying, counted");
/// }
/// ```
pub fn probe() -> Capabilities {
    static CAPS: OnceLock<Capabilities> = OnceLock::new();
    CAPS.get_or_init(|| Capabilities {
        io_uring: probe_io_uring(),
        msg_zerocopy: probe_msg_zerocopy(),
    })
    .clone()
}

fn read_num<T: std::str::FromStr>(path: &str) -> Option<T> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// The name of an errno, for messages (`ENOENT`), falling back to the number.
pub(crate) fn errno_name(e: &io::Error) -> String {
    let n = e.raw_os_error().unwrap_or(0);
    let name = match n {
        libc::ENOENT => "ENOENT",
        libc::EACCES => "EACCES",
        libc::EPERM => "EPERM",
        libc::EOPNOTSUPP => "EOPNOTSUPP",
        libc::EINVAL => "EINVAL",
        libc::ENOSYS => "ENOSYS",
        libc::ENOMEM => "ENOMEM",
        libc::ENOBUFS => "ENOBUFS",
        libc::ENODEV => "ENODEV",
        _ => return format!("errno {n}"),
    };
    name.to_string()
}

/// A connected loopback pair: (sender, receiver).
fn local_pair() -> io::Result<(TcpStream, TcpStream)> {
    let l = TcpListener::bind("127.0.0.1:0")?;
    let tx = TcpStream::connect(l.local_addr()?)?;
    let (rx, _) = l.accept()?;
    Ok((tx, rx))
}

/// Sends 64 KiB with `MSG_ZEROCOPY` to a local listener and waits (up to 1 s) for the
/// completion.
fn probe_msg_zerocopy() -> MsgZerocopyProbe {
    let run = || -> Result<bool, String> {
        let (tx, _rx) = local_pair().map_err(|e| format!("loopback connection: {e}"))?;
        sys::socket::enable_zerocopy(tx.as_fd())
            .map_err(|e| format!("setsockopt(SO_ZEROCOPY): {e} ({})", errno_name(&e)))?;
        let buf = vec![7u8; 64 * 1024];
        sys::socket::sendmsg(tx.as_fd(), &[&buf], sys::SendFlags::ZEROCOPY)
            .map_err(|e| format!("sendmsg(MSG_ZEROCOPY): {e} ({})", errno_name(&e)))?;
        let deadline = Instant::now() + Duration::from_secs(1);
        let mut out: Vec<ZcNotification> = Vec::new();
        while out.is_empty() && Instant::now() < deadline {
            let _ = sys::socket::poll(tx.as_fd(), 0, 50);
            sys::socket::recv_zc_notifications(tx.as_fd(), &mut out)
                .map_err(|e| format!("recvmsg(MSG_ERRQUEUE): {e}"))?;
        }
        out.first()
            .map(|n| n.copied)
            .ok_or_else(|| "no completion within 1 s".to_string())
    };
    match run() {
        Ok(copied) => MsgZerocopyProbe {
            supported: true,
            error: None,
            local_copied: Some(copied),
        },
        Err(e) => MsgZerocopyProbe {
            supported: false,
            error: Some(e),
            local_copied: None,
        },
    }
}

/// Result of a real SEND_ZC with usage reporting to a local listener.
#[derive(Debug, Clone, Copy)]
struct UringZcCheck {
    report_usage: bool,
    local_copied: Option<bool>,
}

/// One SEND_ZC of `len` bytes with usage reporting on `fd`: its result and its
/// notification's `res`, each when it came within a second.
fn send_zc_once(
    fd: std::os::fd::BorrowedFd<'_>,
    len: usize,
) -> io::Result<(Option<i32>, Option<i32>)> {
    let mut ring = SendRing::new(8, 16)?;
    let buf = Buf::from(vec![7u8; len]);
    ring.push(fd, buf, 0..len, Op::SendZc { report_usage: true }, false, 0)?;
    let mut cqes = Vec::new();
    if ring.drain(Duration::from_secs(1), &mut cqes) > 0 {
        return Err(io::Error::new(
            io::ErrorKind::TimedOut,
            "no SEND_ZC completion",
        ));
    }
    let res = |notif: bool| cqes.iter().find(|c| c.notif == notif).map(|c| c.res);
    Ok((res(false), res(true)))
}

fn check_uring_zc() -> UringZcCheck {
    let unknown = UringZcCheck {
        report_usage: false,
        local_copied: None,
    };
    // To a local listener: whether the flag is taken, and whether the kernel copied.
    let local = || -> io::Result<UringZcCheck> {
        let (tx, _rx) = local_pair()?;
        Ok(match send_zc_once(tx.as_fd(), 16 * 1024)? {
            (Some(r), notif) if r >= 0 => UringZcCheck {
                report_usage: true,
                local_copied: notif.map(|v| (v as u32) & IORING_NOTIF_USAGE_ZC_COPIED != 0),
            },
            _ => unknown,
        })
    };
    // Without a loopback connection (a thread in a namespace whose `lo` is down), the flag is
    // still tested on a UDP socket with no destination: an unknown flag fails with EINVAL when
    // the request is prepared, a known one gets as far as the send (EDESTADDRREQ).
    let flag_only = || -> io::Result<UringZcCheck> {
        let s = std::net::UdpSocket::bind("0.0.0.0:0")?;
        let (result, _) = send_zc_once(s.as_fd(), 64)?;
        Ok(UringZcCheck {
            report_usage: result.is_some_and(|r| r != -libc::EINVAL),
            local_copied: None,
        })
    };
    local().or_else(|_| flag_only()).unwrap_or(unknown)
}

fn uring_zc_check() -> UringZcCheck {
    static C: OnceLock<UringZcCheck> = OnceLock::new();
    *C.get_or_init(check_uring_zc)
}

/// Whether SEND_ZC accepts `IORING_SEND_ZC_REPORT_USAGE` here (tested once per process).
pub(crate) fn send_zc_report_usage_supported() -> bool {
    uring_zc_check().report_usage
}

fn probe_io_uring() -> IoUringProbe {
    let mut p = IoUringProbe {
        disabled_sysctl: read_num("/proc/sys/kernel/io_uring_disabled"),
        ..Default::default()
    };
    match SendRing::new(8, 16).and_then(|r| Ok((r.probe()?, r.has_min_wait()))) {
        Ok((ops, min_wait)) => {
            p.enabled = true;
            p.min_wait = min_wait;
            p.send = ops.send;
            p.send_zc = ops.send_zc;
            p.sendmsg = ops.sendmsg;
            p.sendmsg_zc = ops.sendmsg_zc;
            p.splice = ops.splice;
            if ops.send_zc {
                let c = uring_zc_check();
                p.send_zc_report_usage = c.report_usage;
                p.send_zc_local_copied = c.local_copied;
            }
        }
        Err(e) => p.error = Some(format!("io_uring_setup: {e} ({})", errno_name(&e))),
    }
    p
}
