//! Socket options the measuring tools read or set: `TCP_INFO` counters, `SO_MEMINFO` drops,
//! `UDP_SEGMENT`.

use super::cvt;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `setsockopt(fd, level, name, &value, sizeof(int))`: sets an integer socket option.
/// See setsockopt(2), socket(7), tcp(7).
pub(crate) fn set_int_opt(fd: BorrowedFd<'_>, level: i32, name: i32, value: i32) -> io::Result<()> {
    // SAFETY: `value` is a live c_int and the length passed is its size.
    let ret = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&value as *const i32).cast(),
            std::mem::size_of::<i32>() as libc::socklen_t,
        )
    };
    cvt(ret).map(drop)
}

/// `UDP_SEGMENT` from `<linux/udp.h>` (glibc's headers lack it).
const UDP_SEGMENT: i32 = 103;

/// `setsockopt(fd, SOL_UDP, UDP_SEGMENT, seg)`: every send on this UDP socket is cut by the
/// kernel (or the NIC) into datagrams of `seg` payload bytes, the last one shorter (UDP GSO);
/// 0 turns it off. See udp(7).
pub fn set_udp_segment(fd: BorrowedFd<'_>, seg: u16) -> io::Result<()> {
    set_int_opt(fd, libc::SOL_UDP, UDP_SEGMENT, i32::from(seg))
}

/// `getsockopt(fd, level, name)` into a `T` (a plain C struct or array that any bytes are a
/// valid value of); the bytes the kernel did not write stay zero. See getsockopt(2).
fn get_opt<T: Copy>(fd: BorrowedFd<'_>, level: i32, name: i32) -> io::Result<T> {
    get_opt_len(fd, level, name).map(|(v, _)| v)
}

/// [`get_opt`], and how many bytes of the value the kernel wrote (an older kernel writes a
/// shorter `tcp_info`).
fn get_opt_len<T: Copy>(fd: BorrowedFd<'_>, level: i32, name: i32) -> io::Result<(T, usize)> {
    // SAFETY: `T` is only instantiated below with C structs and integer arrays, for which the
    // all-zero value is valid; the kernel writes at most `len` bytes into it.
    let mut v: T = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<T>() as libc::socklen_t;
    // SAFETY: `v` is a live value of `len` bytes, and `len` a live socklen_t.
    let ret = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            level,
            name,
            (&mut v as *mut T).cast(),
            &mut len,
        )
    };
    cvt(ret).map(|_| (v, len as usize))
}

/// Counters of a TCP socket since it was opened, from `TCP_INFO` (what `ss -ti` prints).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TcpCounters {
    /// Segments retransmitted (`tcpi_total_retrans`).
    pub retrans_segs: u64,
    /// Microseconds with data to send (`tcpi_busy_time`).
    pub busy_us: u64,
    /// Microseconds of those held back by the peer's receive window (`tcpi_rwnd_limited`).
    pub rwnd_limited_us: u64,
    /// Sockets whose peer advertises a receive window of 0 now (`tcpi_snd_wnd`): a receiver
    /// that stopped reading. `None` when the kernel does not report it (before Linux 5.4).
    pub zero_window: Option<u64>,
}

/// This TCP socket's [`TcpCounters`]. See tcp(7).
pub fn tcp_counters(fd: BorrowedFd<'_>) -> io::Result<TcpCounters> {
    let (i, len) = get_opt_len::<libc::tcp_info>(fd, libc::IPPROTO_TCP, libc::TCP_INFO)?;
    let has_snd_wnd = len >= std::mem::offset_of!(libc::tcp_info, tcpi_snd_wnd) + 4;
    Ok(TcpCounters {
        retrans_segs: u64::from(i.tcpi_total_retrans),
        busy_us: i.tcpi_busy_time,
        rwnd_limited_us: i.tcpi_rwnd_limited,
        zero_window: has_snd_wnd.then_some(u64::from(i.tcpi_snd_wnd == 0)),
    })
}

/// `SO_MEMINFO` from `<linux/sock_diag.h>`, and the index of the drop counter in its array.
const SO_MEMINFO: i32 = 55;
const SK_MEMINFO_DROPS: usize = 8;

/// The packets this socket dropped since it was opened (`SK_MEMINFO_DROPS` of `SO_MEMINFO`,
/// what `ss -m` prints as `d`): on a receiving TCP socket, segments that did not fit its
/// receive buffer, among other causes. See sock_diag(7).
pub fn socket_drops(fd: BorrowedFd<'_>) -> io::Result<u32> {
    get_opt::<[u32; 9]>(fd, libc::SOL_SOCKET, SO_MEMINFO).map(|m| m[SK_MEMINFO_DROPS])
}
