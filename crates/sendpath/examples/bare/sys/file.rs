//! The file paths and vmsplice: a warm file sent round and round `size` bytes at a time.

use super::super::{Args, Tally};
use super::{cvt, send_all};
use io_uring::{opcode, squeue, types, IoUring};
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, RawFd};
use std::time::Instant;

/// Sends `a.size` bytes of `file` per message, from offset 0 again once the file runs out.
pub(crate) fn send(
    sock: RawFd,
    file: BorrowedFd<'_>,
    a: &Args,
    until: Instant,
) -> io::Result<Tally> {
    // SAFETY: fstat fills the zeroed struct for an open descriptor.
    let len = unsafe {
        let mut st: libc::stat = std::mem::zeroed();
        cvt(libc::fstat(file.as_raw_fd(), &mut st) as isize)?;
        st.st_size as u64
    };
    let f = file.as_raw_fd();
    let mut t = Tally::default();
    // What the path sends from, made once: the loop does not look the path up per send.
    let mut way = match a.path.as_str() {
        "read-send" => Way::Read(vec![0u8; a.size]),
        "mmap-send" => Way::Map(Map::new(f, len as usize)?),
        "sendfile" => Way::Sendfile,
        "splice" => Way::Splice(Pipe::new(a.pipe_size)?),
        _ => Way::UringSplice(Pipe::new(a.pipe_size)?, Box::new(super::uring::ring(8)?)),
    };
    let mut off = 0u64;
    // The clock is read every 64 sends, as in bare's other loops (a read per send costs a
    // few percent at 4 KiB).
    while Instant::now() < until {
        for _ in 0..64 {
            if off + a.size as u64 > len {
                off = 0;
            }
            match &mut way {
                Way::Read(buf) => {
                    // SAFETY: `buf` is live and `size` bytes long.
                    let n = unsafe { libc::pread(f, buf.as_mut_ptr().cast(), a.size, off as i64) };
                    if cvt(n)? < a.size {
                        return Err(io::Error::other("a short read of a warm file"));
                    }
                    send_all(sock, buf, 0)?;
                }
                Way::Map(m) => super::send_all_libc(
                    sock,
                    &m.slice()[off as usize..off as usize + a.size],
                    libc::MSG_NOSIGNAL,
                )?,
                Way::Sendfile => sendfile(sock, f, off, a.size)?,
                Way::Splice(pipe) => pipe.splice(f, Some(off), sock, a.size)?,
                Way::UringSplice(pipe, ring) => pipe.uring_splice(ring, f, off, sock, a.size)?,
            }
            off += a.size as u64;
            t.sends += 1;
            t.bytes += a.size as u64;
        }
    }
    Ok(t)
}

/// How a file path sends, and what it sends from.
enum Way {
    /// `pread` into this buffer, then `send`.
    Read(Vec<u8>),
    /// `send` from a mapping of the file.
    Map(Map),
    Sendfile,
    /// File to pipe to socket with `splice`.
    Splice(Pipe),
    /// The two splices as a linked pair on this ring.
    UringSplice(Pipe, Box<IoUring>),
}

fn sendfile(sock: RawFd, f: RawFd, mut off: u64, size: usize) -> io::Result<()> {
    let end = off + size as u64;
    while off < end {
        let mut o = off as i64;
        // SAFETY: `o` is a live offset; both descriptors are open.
        let n = unsafe { libc::sendfile(sock, f, &mut o, (end - off) as usize) };
        match cvt(n) {
            Ok(0) => return Err(io::Error::other("sendfile: the file ended")),
            Ok(_) => off = o as u64,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// A read-only mapping of the whole file.
struct Map(*mut libc::c_void, usize);

impl Map {
    fn new(f: RawFd, len: usize) -> io::Result<Map> {
        // SAFETY: a shared read-only mapping of an open file, unmapped on drop.
        let p = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ,
                libc::MAP_SHARED,
                f,
                0,
            )
        };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map(p, len))
    }

    fn slice_mut(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `len` writable bytes (anonymous, read-write), owned by `self`.
        unsafe { std::slice::from_raw_parts_mut(self.0.cast(), self.1) }
    }

    fn slice(&self) -> &[u8] {
        // SAFETY: the mapping is `len` readable bytes, live as long as `self`.
        unsafe { std::slice::from_raw_parts(self.0.cast(), self.1) }
    }
}

impl Drop for Map {
    fn drop(&mut self) {
        // SAFETY: mapped in `new`, no slice of it outlives `self`.
        unsafe { libc::munmap(self.0, self.1) };
    }
}

/// A pipe, its size set as sendpath sets it (the kernel may grant less).
struct Pipe {
    r: RawFd,
    w: RawFd,
    size: usize,
}

impl Pipe {
    fn new(want: usize) -> io::Result<Pipe> {
        let mut fds = [0; 2];
        // SAFETY: `fds` has room for the two descriptors.
        cvt(unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } as isize)?;
        // SAFETY: F_SETPIPE_SZ on the pipe just made.
        let got = unsafe { libc::fcntl(fds[1], libc::F_SETPIPE_SZ, want as i32) };
        let size = if got > 0 { got as usize } else { 64 << 10 };
        Ok(Pipe {
            r: fds[0],
            w: fds[1],
            size,
        })
    }

    /// `splice` from `src` (at `off`) into the pipe and on to `sock`, a pipe-full at a time.
    fn splice(&self, src: RawFd, off: Option<u64>, sock: RawFd, size: usize) -> io::Result<()> {
        let mut left = size;
        let mut at = off.map(|o| o as i64);
        while left > 0 {
            let want = left.min(self.size);
            let p = at.as_mut().map_or(std::ptr::null_mut(), |o| o as *mut i64);
            // SAFETY: `p` is null or a live offset; the descriptors are open.
            let n = cvt(unsafe {
                libc::splice(
                    src,
                    p,
                    self.w,
                    std::ptr::null_mut(),
                    want,
                    libc::SPLICE_F_MOVE,
                )
            })?;
            if n == 0 {
                return Err(io::Error::other("splice: the source ended"));
            }
            self.drain(sock, n)?;
            left -= n;
        }
        Ok(())
    }

    fn drain(&self, sock: RawFd, mut n: usize) -> io::Result<()> {
        while n > 0 {
            let null = std::ptr::null_mut();
            // SAFETY: both descriptors are open; no offsets.
            match cvt(unsafe { libc::splice(self.r, null, sock, null, n, libc::SPLICE_F_MOVE) }) {
                Ok(m) => n -= m,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    }

    /// The two splices of each pipe-full as a linked pair of io_uring `SPLICE`s.
    fn uring_splice(
        &self,
        ring: &mut IoUring,
        f: RawFd,
        off: u64,
        sock: RawFd,
        size: usize,
    ) -> io::Result<()> {
        let mut done = 0;
        while done < size {
            let n = (size - done).min(self.size) as u32;
            let into = opcode::Splice::new(
                types::Fd(f),
                (off + done as u64) as i64,
                types::Fd(self.w),
                -1,
                n,
            )
            .flags(libc::SPLICE_F_MOVE)
            .build()
            .flags(squeue::Flags::IO_LINK);
            let out = opcode::Splice::new(types::Fd(self.r), -1, types::Fd(sock), -1, n)
                .flags(libc::SPLICE_F_MOVE)
                .build();
            // SAFETY: the requests carry only descriptors, open until both complete below.
            unsafe {
                let mut sq = ring.submission();
                sq.push(&into).expect("room for two");
                sq.push(&out).expect("room for two");
            }
            ring.submit_and_wait(2)?;
            let mut moved = [0i32; 2];
            for (i, c) in ring.completion().take(2).enumerate() {
                moved[i] = c.result();
            }
            if moved.iter().any(|&r| r <= 0) || moved[1] != moved[0] {
                // A short or failed pair: finish what is in the pipe with plain splice.
                let r = moved.iter().find(|&&r| r < 0).copied().unwrap_or(0);
                if r < 0 {
                    return Err(io::Error::from_raw_os_error(-r));
                }
                let in_pipe = moved[0].max(0) as usize - moved[1].max(0) as usize;
                self.drain(sock, in_pipe)?;
                done += moved[0].max(0) as usize;
                if moved[0] <= 0 {
                    return Err(io::Error::other("splice: the source ended"));
                }
                continue;
            }
            done += n as usize;
        }
        Ok(())
    }
}

impl Drop for Pipe {
    fn drop(&mut self) {
        // SAFETY: both descriptors were opened in `new` and are closed once.
        unsafe {
            libc::close(self.r);
            libc::close(self.w);
        }
    }
}

/// Fresh pages per message, vmspliced into the pipe, spliced to `sock`, unmapped: what
/// sendpath's vmsplice does so that no page it gave the kernel is ever written again.
pub(crate) fn vmsplice(
    sock: RawFd,
    size: usize,
    pipe_size: usize,
    until: Instant,
) -> io::Result<Tally> {
    let pipe = Pipe::new(pipe_size)?;
    let mut t = Tally::default();
    while Instant::now() < until {
        let mut m = Map::anon(size)?;
        // The message is written, as a program writes what it sends (and as sendpath fills
        // its pages): untouched pages would all be the kernel's one zero page.
        m.slice_mut().fill(crate::route::BYTE);
        let mut off = 0;
        while off < size {
            let iov = libc::iovec {
                iov_base: m.0.wrapping_byte_add(off),
                iov_len: (size - off).min(pipe.size),
            };
            // SAFETY: the iovec covers mapped pages that are unmapped only after the splice.
            let n = cvt(unsafe { libc::vmsplice(pipe.w, &iov, 1, 0) })?;
            pipe.drain(sock, n)?;
            off += n;
        }
        t.sends += 1;
        t.bytes += size as u64;
    }
    Ok(t)
}

impl Map {
    fn anon(len: usize) -> io::Result<Map> {
        let (prot, flags) = (
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
        );
        // SAFETY: a fresh anonymous mapping, unmapped on drop.
        let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, -1, 0) };
        if p == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        Ok(Map(p, len))
    }
}
