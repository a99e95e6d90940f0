//! `TCP_ZEROCOPY_RECEIVE`: a TCP receiver that maps received pages into its address space
//! instead of copying them out (`getsockopt(IPPROTO_TCP, TCP_ZEROCOPY_RECEIVE)` on a region
//! `mmap`ed from the socket). The kernel maps only whole pages it can hand over; what it
//! cannot map it copies into a buffer in the same call (`copybuf`, Linux 5.11), and a plain
//! `recv` copies what is left. See tcp(7) and Documentation/networking/tcp_mmap (the kernel's
//! selftest `tcp_mmap.c`).

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// `TCP_ZEROCOPY_RECEIVE` from `linux/tcp.h`.
const TCP_ZEROCOPY_RECEIVE: libc::c_int = 35;

/// `struct tcp_zerocopy_receive` as Linux 5.11+ lays it out (glibc's copy is an older, shorter
/// one; the kernel reads only as much as `optlen` says, so the full layout is declared here).
#[repr(C)]
#[derive(Default)]
struct TcpZerocopyReceive {
    address: u64,
    length: u32,
    recv_skip_hint: u32,
    inq: u32,
    err: i32,
    copybuf_address: u64,
    copybuf_len: i32,
    flags: u32,
    msg_control: u64,
    msg_controllen: u64,
    msg_flags: u32,
    reserved: u32,
}

/// What one [`MappedReceiver::receive`] took off the socket.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Received {
    /// Bytes mapped into the receiver's region (not copied).
    pub mapped: usize,
    /// Bytes copied into the caller's buffer (the part the kernel could not map).
    pub copied: usize,
}

impl Received {
    /// The peer closed the stream: nothing was mapped and a read returned 0.
    pub fn is_eof(&self) -> bool {
        self.mapped == 0 && self.copied == 0
    }
}

/// A region mapped from a TCP socket that received pages are mapped into.
pub struct MappedReceiver {
    region: *mut libc::c_void,
    len: usize,
}

// SAFETY: the region is plain memory owned by this value; nothing else refers to it.
unsafe impl Send for MappedReceiver {}

impl MappedReceiver {
    /// Maps a region of `len` bytes (rounded up to whole pages) from `sock` for its received
    /// pages. Fails where the kernel or the socket does not allow it (not TCP, no
    /// `CONFIG_MMU`, `ENODEV` on kernels without the feature).
    pub fn new(sock: BorrowedFd<'_>, len: usize) -> io::Result<MappedReceiver> {
        let page = page_size();
        let len = len.max(page).div_ceil(page) * page;
        // SAFETY: a fresh shared read-only mapping of the socket chosen by the kernel; the
        // result is checked before use.
        let region = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                sock.as_raw_fd(),
                0,
            )
        };
        if region == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        let m = MappedReceiver { region, len };
        // Wake the receiver once a region's worth is queued (or the stream ends), so that the
        // kernel has whole pages to map rather than the first bytes of one.
        super::socket::set_int_opt(sock, libc::SOL_SOCKET, libc::SO_RCVLOWAT, len as i32)?;
        Ok(m)
    }

    /// Takes what the socket has: maps whole pages into the region (replacing the pages the
    /// last call mapped) and copies the rest into `copybuf`. When nothing is ready it waits
    /// until the socket is readable (until the region's worth is queued: the socket's
    /// `SO_RCVLOWAT`, set at [`MappedReceiver::new`], so whole pages gather) for at most the
    /// socket's receive timeout (`TimedOut` past it), then tries again; what is still not
    /// mappable after a wait is read by a plain `recv`, which returns 0 at the end of the
    /// stream.
    pub fn receive(&mut self, sock: BorrowedFd<'_>, copybuf: &mut [u8]) -> io::Result<Received> {
        let got = self.try_map(sock, copybuf)?;
        if !got.is_eof() {
            return Ok(got);
        }
        wait_readable(sock)?;
        let got = self.try_map(sock, copybuf)?;
        if !got.is_eof() {
            return Ok(got);
        }
        let n = rustix::net::recv(sock, copybuf, rustix::net::RecvFlags::empty())
            .map(|(n, _)| n)
            .map_err(io::Error::from)?;
        Ok(Received {
            mapped: 0,
            copied: n,
        })
    }

    /// One `TCP_ZEROCOPY_RECEIVE`: what it mapped and copied (both 0 when nothing was ready,
    /// or the stream ended).
    fn try_map(&mut self, sock: BorrowedFd<'_>, copybuf: &mut [u8]) -> io::Result<Received> {
        let mut zc = TcpZerocopyReceive {
            address: self.region as u64,
            length: self.len as u32,
            copybuf_address: copybuf.as_mut_ptr() as u64,
            copybuf_len: copybuf.len().min(i32::MAX as usize) as i32,
            ..Default::default()
        };
        let mut optlen = std::mem::size_of::<TcpZerocopyReceive>() as libc::socklen_t;
        // SAFETY: `zc` is a valid, writable `tcp_zerocopy_receive` of the size passed; the
        // region and the buffer it names outlive the call and are this value's and the
        // caller's.
        let rc = unsafe {
            libc::getsockopt(
                sock.as_raw_fd(),
                libc::IPPROTO_TCP,
                TCP_ZEROCOPY_RECEIVE,
                (&mut zc as *mut TcpZerocopyReceive).cast(),
                &mut optlen,
            )
        };
        if let Err(e) = super::cvt(rc) {
            // EIO: the stream ended with nothing left to map; the `recv` below says so.
            if e.raw_os_error() != Some(libc::EIO) {
                return Err(e);
            }
            zc = TcpZerocopyReceive::default();
        }
        if zc.err != 0 {
            return Err(io::Error::from_raw_os_error(zc.err.abs()));
        }
        let got = Received {
            mapped: zc.length as usize,
            copied: zc.copybuf_len.max(0) as usize,
        };
        Ok(got)
    }

    /// The bytes the last [`receive`](MappedReceiver::receive) mapped, readable until the
    /// next call.
    pub fn mapped(&self, got: &Received) -> &[u8] {
        // SAFETY: the kernel mapped `got.mapped` bytes from the region's start, readable
        // (PROT_READ) until the next call replaces them; the borrow of `self` ends first.
        unsafe { std::slice::from_raw_parts(self.region as *const u8, got.mapped.min(self.len)) }
    }
}

impl Drop for MappedReceiver {
    fn drop(&mut self) {
        // SAFETY: the region was mapped by `new` with this length and is unmapped once.
        unsafe {
            libc::munmap(self.region, self.len);
        }
    }
}

/// Waits until `sock` is readable (or at its end), for at most its receive timeout.
fn wait_readable(sock: BorrowedFd<'_>) -> io::Result<()> {
    use rustix::event::{poll, PollFd, PollFlags, Timespec};
    let timeout = rustix::net::sockopt::socket_timeout(sock, rustix::net::sockopt::Timeout::Recv)
        .map_err(io::Error::from)?
        .map(|d| {
            Timespec::try_from(d).unwrap_or(Timespec {
                tv_sec: i64::MAX,
                tv_nsec: 0,
            })
        });
    let mut fds = [PollFd::new(&sock, PollFlags::IN | PollFlags::RDHUP)];
    loop {
        match poll(&mut fds, timeout.as_ref()) {
            Ok(0) => return Err(io::ErrorKind::TimedOut.into()),
            Ok(_) => return Ok(()),
            Err(rustix::io::Errno::INTR) => continue,
            Err(e) => return Err(e.into()),
        }
    }
}

fn page_size() -> usize {
    rustix::param::page_size()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::Write;
    use std::os::fd::AsFd;

    /// Loopback TCP: what a plain `send` delivers is not mappable (the kernel copies it into
    /// the receiver's buffer), so it comes back as copied bytes, every one, in order.
    #[test]
    fn every_byte_comes_back_mapped_or_copied_in_order() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let mut tx = std::net::TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (rx, _) = l.accept().unwrap();
        let data: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
        let sent = data.clone();
        let w = std::thread::spawn(move || {
            tx.write_all(&sent).unwrap();
        });
        let mut m = match MappedReceiver::new(rx.as_fd(), 1 << 20) {
            Ok(m) => m,
            Err(e) => return crate::test_support::skip(&format!("mmap on a TCP socket: {e}")),
        };
        let mut buf = vec![0u8; 64 << 10];
        let mut got = Vec::new();
        let (mut mapped, mut copied) = (0, 0);
        loop {
            let r = m.receive(rx.as_fd(), &mut buf).unwrap();
            if r.is_eof() {
                break;
            }
            got.extend_from_slice(m.mapped(&r));
            got.extend_from_slice(&buf[..r.copied]);
            mapped += r.mapped;
            copied += r.copied;
            if got.len() == data.len() {
                break;
            }
        }
        w.join().unwrap();
        assert_eq!(got.len(), data.len());
        assert!(got == data, "bytes out of order or wrong");
        assert_eq!(mapped + copied, data.len());
        println!("plain send on loopback: {mapped} bytes mapped, {copied} copied");
    }
}
