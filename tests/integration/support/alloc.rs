//! Counting the heap allocations a piece of code makes on the calling thread: the test
//! binary's global allocator is the system one with a per-thread counter in front.

use std::alloc::{GlobalAlloc, Layout, System};
use std::cell::Cell;

struct Counting;

thread_local! {
    /// `Some(n)` while [`allocations`] counts on this thread.
    static COUNT: Cell<Option<usize>> = const { Cell::new(None) };
}

fn count() {
    let _ = COUNT.try_with(|c| {
        if let Some(n) = c.get() {
            c.set(Some(n + 1));
        }
    });
}

// SAFETY: every call is passed on unchanged to the system allocator; counting touches
// only a const-initialised thread-local `Cell`, which never allocates.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: the caller's contract is `System`'s.
        unsafe { System.alloc(layout) }
    }

    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.alloc_zeroed(layout) }
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        count();
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

/// Runs `f` and returns its result with the number of allocations (and reallocations) it
/// made on this thread.
pub fn allocations<R>(f: impl FnOnce() -> R) -> (R, usize) {
    COUNT.with(|c| c.set(Some(0)));
    let result = f();
    let n = COUNT.with(|c| c.replace(None)).unwrap_or(0);
    (result, n)
}

#[test]
fn allocations_are_counted() {
    let ((), none) = allocations(|| {});
    assert_eq!(none, 0);
    let (v, some) = allocations(|| vec![1u8; 100]);
    assert_eq!(v.len(), 100);
    assert_eq!(some, 1);
}
