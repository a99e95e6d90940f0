//! A global allocator that counts: the system allocator, with the bytes and calls it handed
//! out and took back, so a program can show what its message buffers cost in allocation
//! (`--alloc pool` against `fresh`). Installed by the program (`#[global_allocator]`); the
//! counts are of the whole process.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

static ALLOCATIONS: AtomicU64 = AtomicU64::new(0);
static ALLOCATED: AtomicU64 = AtomicU64::new(0);
static FREED: AtomicU64 = AtomicU64::new(0);
static INSTALLED: AtomicBool = AtomicBool::new(false);

/// The system allocator, counting. Install it with
/// `#[global_allocator] static A: CountingAlloc = CountingAlloc;`.
pub struct CountingAlloc;

fn count(bytes: usize) {
    ALLOCATIONS.fetch_add(1, Ordering::Relaxed);
    ALLOCATED.fetch_add(bytes as u64, Ordering::Relaxed);
    if !INSTALLED.load(Ordering::Relaxed) {
        INSTALLED.store(true, Ordering::Relaxed);
    }
}

// SAFETY: every call is passed unchanged to `System`, which upholds GlobalAlloc's contract;
// the counting touches only atomics and never allocates.
unsafe impl GlobalAlloc for CountingAlloc {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: the caller's layout, as GlobalAlloc::alloc requires.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count(layout.size());
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        FREED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: `ptr` came from this allocator (so from `System`) with `layout`.
        unsafe { System.dealloc(ptr, layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count(new_size);
        FREED.fetch_add(layout.size() as u64, Ordering::Relaxed);
        // SAFETY: `ptr` came from `System` with `layout`; the caller checked `new_size`.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

/// What the process allocated so far.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct HeapCounts {
    /// Calls that allocated (a reallocation counts as one).
    pub allocations: u64,
    /// Bytes they handed out.
    pub allocated_bytes: u64,
    /// Bytes in use now: allocated less freed.
    pub live_bytes: u64,
}

/// The counts now; `None` when [`CountingAlloc`] is not the program's allocator.
pub fn heap_counts() -> Option<HeapCounts> {
    if !INSTALLED.load(Ordering::Relaxed) {
        return None;
    }
    let allocated = ALLOCATED.load(Ordering::Relaxed);
    Some(HeapCounts {
        allocations: ALLOCATIONS.load(Ordering::Relaxed),
        allocated_bytes: allocated,
        live_bytes: allocated.saturating_sub(FREED.load(Ordering::Relaxed)),
    })
}
