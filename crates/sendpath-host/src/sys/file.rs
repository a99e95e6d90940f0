//! Files and the page cache: `posix_fadvise`, `fstatfs`, `mincore`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

/// The page size mappings are made of. See sysconf(3).
fn page_size() -> usize {
    rustix::param::page_size()
}

/// `mmap(NULL, len, prot, flags, fd, 0)`. See mmap(2).
fn map(len: usize, prot: i32, flags: i32, fd: i32) -> io::Result<*mut u8> {
    // SAFETY: a fresh mapping chosen by the kernel (addr NULL); nothing of ours is replaced.
    let p = unsafe { libc::mmap(std::ptr::null_mut(), len, prot, flags, fd, 0) };
    if p == libc::MAP_FAILED {
        return Err(io::Error::last_os_error());
    }
    Ok(p.cast())
}

/// `posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED)`: drops the file's clean pages from the page
/// cache so the next read comes from the device (a "cold" cache). See posix_fadvise(2).
pub fn drop_page_cache(fd: BorrowedFd<'_>) -> io::Result<()> {
    // SAFETY: plain integer arguments.
    let ret = unsafe { libc::posix_fadvise(fd.as_raw_fd(), 0, 0, libc::POSIX_FADV_DONTNEED) };
    if ret != 0 {
        return Err(io::Error::from_raw_os_error(ret));
    }
    Ok(())
}

/// `fstatfs(fd)`: the name of the filesystem type holding the file (`ext4`, `xfs`, `tmpfs`,
/// ...; `0x...` for one not in this list). See statfs(2).
pub fn fs_type(fd: BorrowedFd<'_>) -> io::Result<String> {
    // SAFETY: statfs is a plain struct the kernel fills.
    let mut st: libc::statfs = unsafe { std::mem::zeroed() };
    // SAFETY: `st` is a valid, writable statfs.
    super::cvt(unsafe { libc::fstatfs(fd.as_raw_fd(), &mut st) })?;
    Ok(fs_name(st.f_type as i64))
}

fn fs_name(magic: i64) -> String {
    match magic {
        0xEF53 => "ext4".into(),
        0x5846_5342 => "xfs".into(),
        0x9123_683E => "btrfs".into(),
        0x0102_1994 => "tmpfs".into(),
        0x8584_58F6 => "ramfs".into(),
        0x794C_7630 => "overlayfs".into(),
        0x6969 => "nfs".into(),
        0xF2F5_2010 => "f2fs".into(),
        0x2FC1_2FC1 => "zfs".into(),
        m => format!("0x{m:x}"),
    }
}

/// Whether a filesystem named by [`fs_type`] keeps files in memory only, so that dropping a
/// file from the page cache is impossible.
pub fn fs_is_memory_backed(name: &str) -> bool {
    matches!(name, "tmpfs" | "ramfs")
}
/// `mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0)` then `mincore()`: the fraction of the file's
/// first `len` bytes that are in the page cache, without reading (or faulting in) any of them.
/// See mincore(2).
pub fn resident_fraction(fd: BorrowedFd<'_>, len: usize) -> io::Result<f64> {
    if len == 0 {
        return Ok(0.0);
    }
    let ps = page_size();
    let pages = len.div_ceil(ps);
    let ptr = map(len, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd())?;
    let mut vec = vec![0u8; pages];
    // SAFETY: `ptr` is a fresh mapping of `len` bytes (page aligned); `vec` has one byte per page.
    let r = super::cvt(unsafe { libc::mincore(ptr.cast(), len, vec.as_mut_ptr()) });
    // SAFETY: unmapping the mapping made above, which nothing else refers to.
    unsafe { libc::munmap(ptr.cast(), len) };
    r?;
    let resident = vec.iter().filter(|&&b| b & 1 != 0).count();
    Ok(resident as f64 / pages as f64)
}
