//! Memory mappings: anonymous pages for `vmsplice` and read-only file mappings for `mmap-send`.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};

fn page_size() -> usize {
    // SAFETY: sysconf has no memory effects.
    let n = unsafe { libc::sysconf(libc::_SC_PAGESIZE) };
    if n > 0 {
        n as usize
    } else {
        4096
    }
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

/// Private anonymous pages, page aligned, writable until sealed. The fill-then-seal life cycle
/// is what makes `vmsplice` safe: see [`SealedPages`].
pub(crate) struct PageBuf {
    ptr: *mut u8,
    len: usize,
    map_len: usize,
}

// SAFETY: PageBuf owns its mapping exclusively, like a Box<[u8]>.
unsafe impl Send for PageBuf {}

impl PageBuf {
    /// `mmap(NULL, len, PROT_READ|PROT_WRITE, MAP_PRIVATE|MAP_ANONYMOUS)`: `len` zeroed bytes.
    pub(crate) fn new(len: usize) -> io::Result<PageBuf> {
        let ps = page_size();
        let map_len = len.max(1).div_ceil(ps) * ps;
        let ptr = map(
            map_len,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS,
            -1,
        )?;
        Ok(PageBuf { ptr, len, map_len })
    }

    /// Number of bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// The first byte, for memory the kernel writes into (see `sys::bufring`).
    pub(crate) fn as_ptr(&self) -> *mut u8 {
        self.ptr
    }

    /// Read-only view of the bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is `map_len >= len` readable bytes owned by self.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// Writable view of the bytes.
    pub(crate) fn as_mut_slice(&mut self) -> &mut [u8] {
        // SAFETY: the mapping is `map_len >= len` bytes, readable and writable, owned by self,
        // and `&mut self` makes this the only reference.
        unsafe { std::slice::from_raw_parts_mut(self.ptr, self.len) }
    }

    /// Gives up write access for good: the pages can now be handed to the kernel by reference.
    pub(crate) fn seal(self) -> SealedPages {
        let s = SealedPages {
            ptr: self.ptr,
            len: self.len,
            map_len: self.map_len,
        };
        std::mem::forget(self);
        s
    }
}

impl Drop for PageBuf {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns; no reference outlives self.
        unsafe { libc::munmap(self.ptr.cast(), self.map_len) };
    }
}

/// Pages that no code in this process can write any more: there is no `&mut` access, and when the
/// value is dropped the mapping is removed (`munmap`). Pages spliced into a pipe or socket stay
/// referenced by the kernel after the unmap and are freed only when the last reader has consumed
/// them; they are never given back to this process's allocator, so nothing can rewrite them.
pub(crate) struct SealedPages {
    ptr: *mut u8,
    len: usize,
    map_len: usize,
}

// SAFETY: SealedPages owns its mapping exclusively and only reads it.
unsafe impl Send for SealedPages {}

impl SealedPages {
    /// Read-only view of the bytes.
    pub(crate) fn as_slice(&self) -> &[u8] {
        // SAFETY: the mapping is valid for `len` bytes while self lives; no writer exists.
        unsafe { std::slice::from_raw_parts(self.ptr, self.len) }
    }

    /// `vmsplice(pipe_w, {self[range]}, 1, flags)`: see [`super::file::vmsplice`].
    pub(crate) fn vmsplice(
        &self,
        pipe_w: BorrowedFd<'_>,
        range: std::ops::Range<usize>,
        flags: super::SpliceFlags,
    ) -> io::Result<usize> {
        // SAFETY: the contract of vmsplice is that nothing rewrites the pages until the reader
        // has consumed them. SealedPages has no write access, and its drop unmaps the pages
        // instead of recycling them, so no code in this process can write them again.
        unsafe { super::file::vmsplice(pipe_w, &self.as_slice()[range], flags) }
    }

    /// Test hook that breaks the contract on purpose: rewrites the pages in place, which a
    /// receiver that has not read them yet will see. Exists only so a test can prove that the
    /// byte verifier catches a too-early rewrite.
    #[cfg(test)]
    pub(crate) fn scribble_for_test(&self, byte: u8) {
        // SAFETY: the mapping is valid and writable (PROT_WRITE) for `len` bytes; this is
        // deliberately a data race with the kernel's readers, which only observe wrong bytes.
        unsafe { std::ptr::write_bytes(self.ptr, byte, self.len) };
    }
}

impl Drop for SealedPages {
    fn drop(&mut self) {
        // SAFETY: unmapping exactly the mapping this value owns; pages the kernel still
        // references stay alive on its side.
        unsafe { libc::munmap(self.ptr.cast(), self.map_len) };
    }
}

/// A read-only shared mapping of a whole file, for `send()` straight from the page cache.
///
/// The mapping is never exposed as a Rust slice: another process may write or truncate the file
/// while it is mapped, and a `&[u8]` over bytes that change (or vanish, raising SIGBUS) would be
/// unsound. Only the kernel reads it, in [`FileMap::send`], where a truncated range is an
/// `EFAULT`, not a signal.
pub(crate) struct FileMap {
    ptr: *mut u8,
    len: usize,
}

// SAFETY: read-only mapping owned by this value.
unsafe impl Send for FileMap {}

impl FileMap {
    /// `mmap(NULL, len, PROT_READ, MAP_SHARED, fd, 0)`. See mmap(2).
    pub(crate) fn new(fd: BorrowedFd<'_>, len: usize) -> io::Result<FileMap> {
        if len == 0 {
            return Ok(FileMap {
                ptr: std::ptr::NonNull::dangling().as_ptr(),
                len: 0,
            });
        }
        let ptr = map(len, libc::PROT_READ, libc::MAP_SHARED, fd.as_raw_fd())?;
        Ok(FileMap { ptr, len })
    }

    /// Mapped bytes.
    pub(crate) fn len(&self) -> usize {
        self.len
    }

    /// `send(sock, map + range.start, range.len(), flags)`: the kernel copies straight from the
    /// mapping. A range outside the mapping is `EINVAL`. See send(2).
    pub(crate) fn send(
        &self,
        sock: BorrowedFd<'_>,
        range: std::ops::Range<usize>,
        flags: super::SendFlags,
    ) -> io::Result<usize> {
        if range.start > range.end || range.end > self.len {
            return Err(io::Error::from_raw_os_error(libc::EINVAL));
        }
        // SAFETY: `range` lies inside the live mapping of `len` bytes, so the pointer and length
        // describe mapped memory for the duration of the call. No Rust reference to the bytes is
        // made; the kernel reads them with fault handling (EFAULT if the file shrank).
        let ret = unsafe {
            libc::send(
                sock.as_raw_fd(),
                self.ptr.add(range.start).cast(),
                range.len(),
                flags.bits(),
            )
        };
        super::cvt_size(ret)
    }
}

impl Drop for FileMap {
    fn drop(&mut self) {
        if self.len > 0 {
            // SAFETY: unmapping exactly this value's mapping.
            unsafe { libc::munmap(self.ptr.cast(), self.len) };
        }
    }
}

/// One anonymous mapping cut into slots of one size: the memory an io_uring driver registers
/// once and sends from by index ([`crate::ArenaConfig`]). Each slot is owned by at most one
/// [`ArenaSlot`] at a time: the free list hands an index out once and takes it back when that
/// slot is dropped, so a slot's bytes are never reachable from two places.
pub(crate) struct ArenaMem {
    pages: PageBuf,
    slot_size: usize,
    free: std::sync::Mutex<Vec<u32>>,
}

// SAFETY: the pages are only reached through ArenaSlots, each the sole owner of its bytes;
// the free list is behind a lock.
unsafe impl Sync for ArenaMem {}

impl std::fmt::Debug for ArenaMem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArenaMem")
            .field("slot_size", &self.slot_size)
            .field("slots", &(self.pages.len() / self.slot_size))
            .finish()
    }
}

impl ArenaMem {
    /// `slots` slots of `slot_size` bytes (rounded up to whole pages), every byte written with
    /// `fill` so each page is the process's own (never the shared zero page).
    pub(crate) fn new(slot_size: usize, slots: usize, fill: u8) -> io::Result<ArenaMem> {
        let slot_size = slot_size.max(1).next_multiple_of(page_size());
        let len = slot_size
            .checked_mul(slots.max(1))
            .filter(|n| *n <= 1 << 30)
            .ok_or_else(|| io::Error::from_raw_os_error(libc::EINVAL))?;
        let mut pages = PageBuf::new(len)?;
        pages.as_mut_slice().fill(fill);
        let n = (len / slot_size) as u32;
        Ok(ArenaMem {
            pages,
            slot_size,
            free: std::sync::Mutex::new((0..n).rev().collect()),
        })
    }

    /// Bytes per slot (whole pages).
    pub(crate) fn slot_size(&self) -> usize {
        self.slot_size
    }

    /// The first byte and length of the whole mapping, for registering it.
    pub(crate) fn region(&self) -> (usize, usize) {
        (self.pages.as_ptr() as usize, self.pages.len())
    }

    /// A free slot, owned by the caller until dropped, all its bytes in use; `None` when
    /// every slot is taken.
    pub(crate) fn take(self: &std::sync::Arc<Self>) -> Option<ArenaSlot> {
        let index = self.free.lock().ok()?.pop()?;
        // SAFETY: `index < len / slot_size`, so the offset stays inside the mapping, which
        // lives as long as the Arc the slot keeps (a buffer the kernel may still read is
        // leaked by the ring, Arc and all, so the pages are never unmapped under it).
        let start = unsafe { self.pages.as_ptr().add(index as usize * self.slot_size) };
        // An arena is at most 1 GiB (`ArenaMem::new`).
        let size = self.slot_size as u32;
        Some(ArenaSlot {
            mem: self.clone(),
            start,
            size,
            len: size,
        })
    }
}

/// The sole owner of one slot of an [`ArenaMem`], of which its first `len` bytes are in use;
/// the slot goes back to the free list when this is dropped. Where the bytes are is kept here,
/// so reaching them reads no more than the slot itself.
pub(crate) struct ArenaSlot {
    mem: std::sync::Arc<ArenaMem>,
    start: *mut u8,
    size: u32,
    len: u32,
}

// SAFETY: `start` points into the mapping the Arc keeps alive, at bytes this slot alone owns.
unsafe impl Send for ArenaSlot {}
// SAFETY: as for Send; a shared ArenaSlot gives only shared access to its bytes.
unsafe impl Sync for ArenaSlot {}

impl ArenaSlot {
    /// The bytes in use.
    #[inline]
    pub(crate) fn bytes(&self) -> &[u8] {
        // SAFETY: `len <= size`, and the slot is `size` bytes inside the live mapping (the
        // Arc keeps it), owned by self alone.
        unsafe { std::slice::from_raw_parts(self.start, self.len as usize) }
    }

    /// The bytes in use, writable.
    #[inline]
    pub(crate) fn bytes_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `bytes`; `&mut self` and the slot's sole ownership make this the only
        // reference to these bytes.
        unsafe { std::slice::from_raw_parts_mut(self.start, self.len as usize) }
    }

    /// Uses the first `len` bytes; false (and nothing changes) when the slot is smaller.
    #[inline]
    pub(crate) fn set_len(&mut self, len: usize) -> bool {
        let fits = len <= self.size as usize;
        if fits {
            self.len = len as u32;
        }
        fits
    }

    /// Where the slot's bytes start, and how many it has: for a writer that holds the slot
    /// and reaches its bytes without reading the slot again.
    pub(crate) fn raw(&self) -> (*mut u8, usize) {
        (self.start, self.size as usize)
    }

    /// Bytes in the slot.
    #[inline]
    pub(crate) fn capacity(&self) -> usize {
        self.size as usize
    }
}

impl Drop for ArenaSlot {
    fn drop(&mut self) {
        let index = (self.start as usize - self.mem.pages.as_ptr() as usize) / self.mem.slot_size;
        if let Ok(mut f) = self.mem.free.lock() {
            f.push(index as u32);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn an_arena_slot_owns_its_own_bytes_and_goes_back_whole_when_dropped() {
        let arena = Arc::new(ArenaMem::new(4096, 3, 0).unwrap());
        let mut slots: Vec<ArenaSlot> = std::iter::from_fn(|| arena.take()).collect();
        assert_eq!(slots.len(), 3);
        for (i, s) in slots.iter_mut().enumerate() {
            assert!(s.set_len(100 + i));
            s.bytes_mut().fill(i as u8 + 1);
        }
        assert!(!slots[0].set_len(4097), "past the slot: refused");
        for (i, s) in slots.iter().enumerate() {
            assert_eq!(
                s.bytes(),
                vec![i as u8 + 1; 100 + i],
                "slot {i} kept its bytes"
            );
        }
        // The middle one goes back: the next take is that slot, whole again.
        let middle = slots.remove(1).start;
        let again = arena.take().unwrap();
        assert_eq!((again.start, again.bytes().len()), (middle, 4096));
        assert!(arena.take().is_none(), "all three are taken again");
    }
}
