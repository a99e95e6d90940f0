//! Test-only: the one place in the lab with `unsafe`, a global allocator that counts what
//! each thread allocates, so tests can bound a parser's memory.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    static NOW: Cell<usize> = const { Cell::new(0) };
    static PEAK: Cell<usize> = const { Cell::new(0) };
}

// SAFETY: every call is forwarded to the system allocator unchanged; the counters are
// thread-local cells that allocate nothing.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, l: Layout) -> *mut u8 {
        let _ = NOW.try_with(|n| {
            n.set(n.get() + l.size());
            let _ = PEAK.try_with(|p| p.set(p.get().max(n.get())));
        });
        // SAFETY: the caller's layout, passed on.
        unsafe { System.alloc(l) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, l: Layout) {
        let _ = NOW.try_with(|n| n.set(n.get().saturating_sub(l.size())));
        // SAFETY: `ptr` came from `alloc` with this layout.
        unsafe { System.dealloc(ptr, l) }
    }
}

#[global_allocator]
static A: Counting = Counting;

/// `f()` and the most it held allocated at once beyond what the thread held before.
pub(crate) fn peak_during<R>(f: impl FnOnce() -> R) -> (R, usize) {
    let base = NOW.with(Cell::get);
    PEAK.with(|p| p.set(base));
    let r = f();
    (r, PEAK.with(Cell::get) - base)
}
