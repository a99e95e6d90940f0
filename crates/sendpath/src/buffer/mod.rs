//! Owned send buffers and the pool they return to.
//!
//! A [`Buf`] handed to a send path is moved in: the caller keeps no reference to it. The path
//! hands it back (through [`crate::SendPath::take_buf`]) only when the kernel can no longer read
//! it: right after the call for copying paths, after the completion notification for zero-copy
//! paths. So no safe code can write to a buffer the kernel may still be reading.

pub(crate) use crate::sys::mem::ArenaMem;
use crate::sys::mem::{ArenaSlot, PageBuf};
use std::sync::Arc;

/// The byte that every buffer handed out by [`BufPool::take`] and [`Buf::pages`] is filled with
/// when it is created or grown. Untouched anonymous memory (`vec![0; n]` above the allocator's
/// mmap threshold, or fresh pages) is backed by the kernel's shared zero page until written, so a
/// send from it would copy one hot 4 KiB page over and over instead of the message. Writing every
/// byte once gives each buffer pages of its own; a caller that fills the buffer (with a message,
/// or the verification pattern) overwrites it.
pub(crate) const FILL: u8 = 0x5A;

/// The page size zero-copy sends pin memory by.
const PAGE: usize = 4096;

/// An owned, heap-allocated send buffer. Moving a `Buf` never moves its bytes, so the kernel can
/// keep referencing them while the `Buf` value is owned by a send path.
pub struct Buf {
    data: Storage,
    /// Index in an io_uring registered-buffer table, set only by the ring that registered the
    /// memory (see `uring-zc` with fixed buffers).
    pub(crate) fixed: Option<u16>,
    /// Freed instead of reused when it comes back to a pool ([`Buf::fresh`]).
    fresh: bool,
    /// The shared pool it goes back to when released, whichever pool it comes back through
    /// ([`SharedPool::take`]).
    home: Option<SharedPool>,
}

enum Storage {
    Heap(Vec<u8>),
    /// Heap bytes that start on a page boundary: `v[off..]`, `off` below [`PAGE`].
    Aligned {
        v: Vec<u8>,
        off: usize,
    },
    Pages(PageBuf),
    /// Immutable bytes shared by every [`Buf::share`] of one buffer (a server's body).
    Shared(std::sync::Arc<[u8]>),
    /// A slot of a driver's arena ([`crate::ArenaConfig`]), the bytes in use.
    Arena(ArenaSlot),
}

impl std::fmt::Debug for Buf {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Buf")
            .field("len", &self.len())
            .field("pages", &matches!(self.data, Storage::Pages(_)))
            .field("arena", &self.is_arena())
            .field("fixed", &self.fixed)
            .finish()
    }
}

impl Default for Buf {
    fn default() -> Self {
        Buf::zeroed(0)
    }
}

impl Buf {
    /// A buffer of `data`, unregistered, reused when it comes back to a pool.
    fn of(data: Storage) -> Buf {
        Buf {
            data,
            fixed: None,
            fresh: false,
            home: None,
        }
    }

    /// A zeroed heap buffer of `len` bytes. Large ones may be backed by the kernel's shared zero
    /// page until written: fill it before sending, or use [`Buf::filled`].
    pub fn zeroed(len: usize) -> Buf {
        Buf::of(Storage::Heap(vec![0; len]))
    }

    /// A heap buffer of `len` bytes, every one written with `byte` (so its pages are the
    /// process's own, never the shared zero page).
    pub fn filled(len: usize, byte: u8) -> Buf {
        Buf::of(Storage::Heap(vec![byte; len]))
    }

    /// A heap buffer of `len` bytes that starts on a page boundary, every byte written with
    /// `byte`. A zero-copy send pins every page its bytes touch: 4 KiB that start mid-page
    /// (where the allocator puts them) take two pages and two fragments instead of one, and on
    /// the project's machine a MSG_ZEROCOPY send of 4 KiB over loopback ran at 0.39 of the
    /// speed of the same sends from page-aligned buffers (64 KiB SEND_ZC: 0.69). Pools hand
    /// these out from a page up.
    pub fn page_aligned(len: usize, byte: u8) -> Buf {
        let (v, off) = aligned_vec(len, byte);
        Buf::of(Storage::Aligned { v, off })
    }

    /// A newly allocated heap buffer of `len` bytes, every one written with `byte`, that a
    /// pool frees instead of reusing once the kernel has released it: a message allocated and
    /// filled per send, as an application without a pool does.
    pub fn fresh(len: usize, byte: u8) -> Buf {
        let mut b = Buf::filled(len, byte);
        b.fresh = true;
        b
    }

    /// A whole slot of a driver's arena, as a buffer.
    pub(crate) fn arena(slot: ArenaSlot) -> Buf {
        Buf::of(Storage::Arena(slot))
    }

    /// A buffer of `len` bytes in its own anonymous pages (what `vmsplice` needs: the pages can
    /// be given away to the kernel and unmapped instead of being reused), every byte written
    /// with a fill byte (`0x5A`).
    pub fn pages(len: usize) -> std::io::Result<Buf> {
        let mut p = PageBuf::new(len)?;
        p.as_mut_slice().fill(FILL);
        Ok(Buf::of(Storage::Pages(p)))
    }

    /// A buffer whose bytes never change once made, so one copy can be in many sends at once
    /// (a response body sent on every connection): see [`Buf::share`]. Writing to it
    /// ([`Buf::as_mut_slice`], [`Buf::resize`]) first makes a private copy.
    pub fn shared(bytes: Vec<u8>) -> Buf {
        Buf::of(Storage::Shared(bytes.into()))
    }

    /// Another handle on the same bytes, for a buffer made by [`Buf::shared`] (with its
    /// io_uring registration, if it has one); `None` for any other buffer.
    pub fn share(&self) -> Option<Buf> {
        match &self.data {
            Storage::Shared(a) => Some(Buf {
                fixed: self.fixed,
                ..Buf::of(Storage::Shared(a.clone()))
            }),
            _ => None,
        }
    }

    /// Takes the anonymous pages out, if the buffer has them.
    pub(crate) fn into_pages(self) -> Result<PageBuf, Buf> {
        match self.data {
            Storage::Pages(p) => Ok(p),
            heap => Err(Buf { data: heap, ..self }),
        }
    }

    /// Lets go of a buffer that no pool of the caller's keeps: back to its shared pool if it
    /// came from one ([`SharedPool::take`]), else freed.
    pub(crate) fn release(mut self) {
        if let Some(home) = self.home.take() {
            home.put(self);
        }
    }

    /// Number of bytes.
    #[inline]
    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Whether the buffer holds no bytes.
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Sets the length, writing a fill byte (`0x5A`) into new bytes. Keeps the allocation (and any
    /// registration) when shrinking or growing within capacity.
    #[inline]
    pub fn resize(&mut self, len: usize) {
        // A pool's steady loop takes buffers back at the size they left at (heap buffers below
        // a page, aligned ones from a page up), and a slot of an arena is cut to any length it
        // holds.
        let done = match &mut self.data {
            Storage::Heap(v) => v.len() == len,
            Storage::Aligned { v, off } => v.len() == *off + len,
            Storage::Arena(slot) => slot.set_len(len),
            _ => false,
        };
        if !done {
            self.resize_slow(len);
        }
    }

    /// [`Buf::resize`] where it may allocate or move the bytes.
    #[inline(never)]
    fn resize_slow(&mut self, len: usize) {
        match &mut self.data {
            Storage::Heap(v) => {
                if len > v.capacity() {
                    self.fixed = None;
                }
                v.resize(len, FILL);
            }
            Storage::Aligned { v, off } => {
                if *off + len <= v.capacity() {
                    v.resize(*off + len, FILL);
                } else {
                    // A new allocation starts elsewhere: keep the bytes, on a page boundary.
                    let mut b = Buf::page_aligned(len, FILL);
                    let keep = v.len() - *off;
                    b.as_mut_slice()[..keep].copy_from_slice(&v[*off..]);
                    self.move_to(b);
                }
            }
            Storage::Shared(a) => {
                let mut v = a[..len.min(a.len())].to_vec();
                v.resize(len, FILL);
                self.move_to(Buf::from(v));
            }
            Storage::Arena(slot) => {
                if !slot.set_len(len) {
                    // Past the slot: the bytes move to the heap, and the slot goes back.
                    let mut v = slot.bytes().to_vec();
                    v.resize(len, FILL);
                    self.move_to(Buf::from(v));
                }
            }
            Storage::Pages(p) => {
                if len != p.len() {
                    // Pages are never recycled (see vmsplice); a new size gets new pages, and
                    // heap memory if the mapping fails.
                    self.move_to(Buf::pages(len).unwrap_or_else(|_| Buf::filled(len, FILL)));
                }
            }
        }
    }

    /// Takes `new`'s bytes (new memory, which no ring has registered), keeping where this
    /// buffer goes when released: its shared pool, or freed if fresh.
    fn move_to(&mut self, new: Buf) {
        self.data = new.data;
        self.fixed = None;
    }

    /// The bytes.
    #[inline]
    pub fn as_slice(&self) -> &[u8] {
        match &self.data {
            Storage::Heap(v) => v,
            Storage::Aligned { v, off } => &v[*off..],
            Storage::Pages(p) => p.as_slice(),
            Storage::Shared(a) => a,
            Storage::Arena(slot) => slot.bytes(),
        }
    }

    /// The bytes, writable: possible only while the caller owns the buffer.
    #[inline]
    pub fn as_mut_slice(&mut self) -> &mut [u8] {
        if matches!(self.data, Storage::Shared(_)) {
            self.unshare();
        }
        match &mut self.data {
            Storage::Heap(v) => v,
            Storage::Aligned { v, off } => &mut v[*off..],
            Storage::Pages(p) => p.as_mut_slice(),
            Storage::Arena(slot) => slot.bytes_mut(),
            Storage::Shared(_) => unreachable!("made private above"),
        }
    }

    /// Copies shared bytes into a buffer of its own, to write.
    #[cold]
    #[inline(never)]
    fn unshare(&mut self) {
        if let Storage::Shared(a) = &self.data {
            self.move_to(Buf::from(a.to_vec()));
        }
    }

    /// Whether the buffer is in an io_uring registered-buffer table.
    pub fn is_fixed(&self) -> bool {
        self.fixed.is_some()
    }

    pub(crate) fn capacity(&self) -> usize {
        match &self.data {
            Storage::Heap(v) => v.capacity(),
            Storage::Aligned { v, off } => v.capacity() - off,
            Storage::Pages(p) => p.len(),
            Storage::Shared(a) => a.len(),
            Storage::Arena(slot) => slot.capacity(),
        }
    }

    /// Whether the bytes are in a slot of a driver's arena.
    pub(crate) fn is_arena(&self) -> bool {
        matches!(self.data, Storage::Arena(_))
    }

    /// Where the arena slot this buffer is starts, and its capacity; `None` for another
    /// buffer.
    pub(crate) fn arena_raw(&self) -> Option<(*mut u8, usize)> {
        match &self.data {
            Storage::Arena(slot) => Some(slot.raw()),
            _ => None,
        }
    }
}

impl From<Vec<u8>> for Buf {
    fn from(data: Vec<u8>) -> Buf {
        Buf::of(Storage::Heap(data))
    }
}

/// `len` bytes that start on a page boundary, every one written with `byte`: `v[off..]`, `off`
/// below a page ([`Buf::page_aligned`]).
pub(crate) fn aligned_vec(len: usize, byte: u8) -> (Vec<u8>, usize) {
    let mut v: Vec<u8> = Vec::with_capacity(len + PAGE - 1);
    let off = v.as_ptr().align_offset(PAGE).min(PAGE - 1);
    v.resize(off + len, byte);
    (v, off)
}

/// `reused` resized to `len` bytes, or a new buffer of `len` bytes when there is none:
/// page-aligned from a page up ([`Buf::page_aligned`]), every byte written with [`FILL`].
#[inline]
fn reuse_or_new(reused: Option<Buf>, len: usize) -> Buf {
    match reused {
        Some(mut b) => {
            b.resize(len);
            b
        }
        None if len >= PAGE => Buf::page_aligned(len, FILL),
        None => Buf::filled(len, FILL),
    }
}

/// One free list for several threads, behind a lock: a buffer taken on one thread goes back to
/// it when released, on whichever thread its path releases it, and may be taken next by another
/// thread (a server's global buffer pool). Clones share
/// the list.
#[derive(Clone, Default)]
pub struct SharedPool(std::sync::Arc<std::sync::Mutex<Vec<Buf>>>);

impl SharedPool {
    /// An empty pool.
    pub fn new() -> SharedPool {
        SharedPool::default()
    }

    fn free(&self) -> std::sync::MutexGuard<'_, Vec<Buf>> {
        // A thread that panicked while holding the lock left a valid list behind.
        self.0
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// A buffer of exactly `len` bytes: the last one released to this pool, or a new one
    /// (page-aligned from a page up, every byte written). It comes back here when released.
    pub fn take(&self, len: usize) -> Buf {
        let reused = self.free().pop();
        let mut b = reuse_or_new(reused, len);
        b.home = Some(self.clone());
        b
    }

    /// Takes a released buffer back (without its link home: the list does not own itself).
    fn put(&self, b: Buf) {
        self.free().push(b);
    }

    /// Buffers ready for reuse.
    pub fn free_len(&self) -> usize {
        self.free().len()
    }
}

/// Emptied lists a pool keeps at most: one per message a zero-copy path may hold.
const SPARE_LISTS: usize = 4096;

/// A free list of buffers, so a steady send loop allocates nothing. Buffers come back from
/// [`crate::SendPath::take_buf`] and are reused for any size up to their capacity.
#[derive(Debug, Default)]
pub(crate) struct BufPool {
    free: Vec<Buf>,
    /// Emptied lists of messages' buffers, kept for the next messages (at most
    /// [`SPARE_LISTS`]).
    spares: Vec<Vec<Buf>>,
    /// How many buffers this pool has allocated in total.
    pub allocated: u64,
    /// The driver's arena, which buffers that fit a slot come from; `free` then holds only
    /// slots, and `heap` the released heap buffers.
    arena: Option<Arc<ArenaMem>>,
    heap: Vec<Buf>,
}

impl BufPool {
    /// An empty pool.
    pub(crate) fn new() -> BufPool {
        BufPool::default()
    }

    /// A buffer of exactly `len` bytes: a recycled one if any, otherwise a new one, page-aligned
    /// from a page up ([`Buf::page_aligned`]). Every byte of it has been written (by an earlier
    /// message, or with [`FILL`]).
    #[inline(always)]
    pub(crate) fn take(&mut self, len: usize) -> Buf {
        if self.arena.is_some() {
            return self.take_with_arena(len);
        }
        let reused = self.free.pop();
        self.allocated += u64::from(reused.is_none());
        reuse_or_new(reused, len)
    }

    /// Hands out slots of `arena` for the messages that fit one.
    pub(crate) fn use_arena(&mut self, arena: Arc<ArenaMem>) {
        self.arena = Some(arena);
    }

    /// With an arena: for a message that fits a slot, a released slot, else a free one of the
    /// arena; otherwise (larger than a slot, or no slot free) a released heap buffer, else a
    /// new one.
    fn take_with_arena(&mut self, len: usize) -> Buf {
        if let Some(arena) = self.arena.as_ref().filter(|a| len <= a.slot_size()) {
            let slot = self.free.pop().or_else(|| {
                let slot = arena.take()?;
                Some(Buf::of(Storage::Arena(slot)))
            });
            if let Some(mut b) = slot {
                b.resize(len);
                return b;
            }
        }
        let reused = self.heap.pop();
        self.allocated += u64::from(reused.is_none());
        reuse_or_new(reused, len)
    }

    /// Gives a buffer back for reuse. A handle on shared bytes ([`Buf::shared`]) and a
    /// [`Buf::fresh`] buffer are dropped instead.
    #[inline(always)]
    pub(crate) fn put(&mut self, mut b: Buf) {
        if let Some(home) = b.home.take() {
            return home.put(b);
        }
        if b.fresh || matches!(b.data, Storage::Shared(_)) {
            return;
        }
        // With an arena, heap buffers wait apart, so a message that fits a slot gets one.
        match self.arena.is_some() && !b.is_arena() {
            true => self.heap.push(b),
            false => self.free.push(b),
        }
    }

    /// Gives buffers back for reuse.
    pub(crate) fn put_all(&mut self, bufs: impl IntoIterator<Item = Buf>) {
        for b in bufs {
            self.put(b);
        }
    }

    /// Gives a message's buffers back for reuse, and keeps their emptied list for
    /// [`BufPool::take_fields`].
    #[inline]
    pub(crate) fn put_fields(&mut self, mut fields: Vec<Buf>) {
        for b in fields.drain(..) {
            self.put(b);
        }
        if fields.capacity() > 0 && self.spares.len() < SPARE_LISTS {
            self.spares.push(fields);
        }
    }

    /// An empty list for a message's buffers: one [`BufPool::put_fields`] kept, so a steady
    /// loop allocates no list per message.
    #[inline]
    pub(crate) fn take_fields(&mut self) -> Vec<Buf> {
        self.spares.pop().unwrap_or_default()
    }

    /// Number of buffers ready for reuse.
    pub(crate) fn free_len(&self) -> usize {
        self.free.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn with_an_arena_a_message_that_fits_gets_a_slot_and_heap_buffers_are_reused() {
        let mut p = BufPool::new();
        p.use_arena(Arc::new(ArenaMem::new(4096, 1, FILL).unwrap()));
        let big = p.take(10_000);
        assert!(!big.is_arena());
        p.put(big);
        // A free heap buffer does not stand in for a slot...
        let small = p.take(100);
        assert!(small.is_arena() && small.len() == 100);
        // ...and a second message larger than a slot reuses the heap buffer.
        let big = p.take(9_000);
        assert!(!big.is_arena());
        assert_eq!(p.allocated, 1, "the heap buffer was allocated once");
        // The one slot is taken: a message that fits one comes from the heap, counted.
        let more = p.take(100);
        assert!(!more.is_arena());
        p.put(small);
        assert!(p.take(4096).is_arena(), "the slot came back");
    }

    #[test]
    fn a_shared_buffer_goes_home_from_any_thread_and_is_taken_by_another() {
        let shared = SharedPool::new();
        let b = shared.take(8192);
        assert_eq!(b.as_slice().as_ptr().align_offset(PAGE), 0);
        let at = b.as_slice().as_ptr();
        // Another thread's path releases it into its own pool: it goes home instead.
        std::thread::spawn(move || {
            let mut p = BufPool::new();
            p.put(b);
            assert_eq!(p.free_len(), 0);
        })
        .join()
        .unwrap();
        assert_eq!(shared.free_len(), 1);
        let again = shared.clone().take(100);
        assert_eq!((again.len(), again.as_slice().as_ptr()), (100, at));
        assert_eq!(shared.free_len(), 0);
    }

    #[test]
    fn a_buffer_grown_into_new_memory_keeps_its_home_and_its_freshness_not_its_registration() {
        let shared = SharedPool::new();
        let mut b = shared.take(4096);
        b.fixed = Some(3);
        b.as_mut_slice()[..3].copy_from_slice(b"abc");
        b.resize(1 << 20);
        assert_eq!((b.len(), &b.as_slice()[..3]), (1 << 20, &b"abc"[..]));
        assert!(!b.is_fixed(), "new memory is not the registered one");
        let mut local = BufPool::new();
        local.put(b);
        assert_eq!(
            (shared.free_len(), local.free_len()),
            (1, 0),
            "it went home"
        );
        // A fresh buffer in new pages stays fresh (freed, not reused) when it grows.
        let mut f = Buf::fresh(10, FILL);
        f.data = Storage::Pages(PageBuf::new(4096).unwrap());
        f.resize(3 * 4096);
        local.put(f);
        assert_eq!(local.free_len(), 0, "freed, not kept");
    }

    #[test]
    fn a_shared_pool_buffer_not_in_pages_comes_back_from_into_pages_and_goes_home() {
        let shared = SharedPool::new();
        let b = shared.take(100);
        let Err(back) = b.into_pages() else {
            panic!("heap bytes are not pages")
        };
        back.release();
        assert_eq!(shared.free_len(), 1, "it went home");
        Buf::filled(10, FILL).release(); // no home: freed
    }

    #[test]
    fn emptied_lists_come_back_for_the_next_message() {
        let mut p = BufPool::new();
        let mut f = p.take_fields();
        assert_eq!(f.capacity(), 0, "nothing kept yet");
        f.push(p.take(10));
        let (cap, at) = (f.capacity(), f.as_ptr());
        p.put_fields(f);
        assert_eq!(p.free_len(), 1, "its buffer is free for reuse");
        let g = p.take_fields();
        assert!(g.is_empty());
        assert_eq!((g.capacity(), g.as_ptr()), (cap, at), "the same list");
        assert_eq!(p.take_fields().capacity(), 0);
    }

    #[test]
    fn every_buffer_handed_out_was_written() {
        // A shared zero page reads as 0; FILL proves the bytes were written by the process.
        let mut pool = BufPool::new();
        let b = pool.take(1 << 20);
        assert!(b.as_slice().iter().all(|&x| x == FILL));
        let mut small = pool.take(16);
        small.as_mut_slice().fill(1);
        pool.put(small);
        let grown = pool.take(1 << 20);
        assert_eq!(grown.len(), 1 << 20);
        assert!(grown.as_slice()[16..].iter().all(|&x| x == FILL));
        let b = pool.take(4096);
        assert_eq!(
            b.as_slice().as_ptr() as usize % 4096,
            0,
            "a page starts on a page"
        );
        let mut a = Buf::page_aligned(5000, FILL);
        a.as_mut_slice()[..3].copy_from_slice(b"abc");
        a.resize(100);
        a.resize(4000);
        assert_eq!(a.as_slice().as_ptr() as usize % 4096, 0);
        a.resize(3 << 20);
        assert_eq!(
            a.as_slice().as_ptr() as usize % 4096,
            0,
            "still aligned when grown"
        );
        assert_eq!(
            &a.as_slice()[..3],
            b"abc",
            "the bytes survive a new allocation"
        );
        assert!(a.as_slice()[4000..].iter().all(|&x| x == FILL));
        assert_eq!(a.len(), 3 << 20);
        let p = Buf::pages(3 * 4096 + 5).unwrap();
        assert!(p.as_slice().iter().all(|&x| x == FILL));
        let mut p = p;
        p.resize(100);
        assert!(p.as_slice().iter().all(|&x| x == FILL));
    }
}
