//! The binary's global allocator: mimalloc, asked for plain blocks wherever a plain block
//! already has the alignment.
//!
//! `mimalloc::MiMalloc` hands every request to `mi_malloc_aligned`, whose fast path only
//! covers small blocks that happen to sit at the right alignment; the rest — hyper's 8 KiB
//! read buffers among them, four times a forwarded request — go through mimalloc's generic
//! aligned path and are over-allocated to be aligned by hand (`bench/instructions.sh`
//! counted ~1,200 instructions a request there). Every `mi_malloc` block is aligned to 16
//! bytes, or to its own size below that, so when the layout asks no more (the rule std's
//! `System` allocator applies to libc malloc) the plain calls are exact and take the fast
//! path; larger alignments still go to the aligned calls.

use std::alloc::{GlobalAlloc, Layout};
use std::ffi::c_void;

use libmimalloc_sys as mi;

/// The alignment every `mi_malloc` block of at least that size has (MI_MAX_ALIGN_SIZE).
const PLAIN_ALIGN: usize = 16;

pub struct Allocator;

/// Whether a plain block of `size` bytes is aligned to `align` already.
fn plain(align: usize, size: usize) -> bool {
    align <= PLAIN_ALIGN && align <= size
}

// SAFETY: every block comes from mimalloc and goes back to it (`mi_free` takes blocks of
// both kinds); a plain block is used only where its guaranteed alignment covers the layout's.
unsafe impl GlobalAlloc for Allocator {
    #[inline]
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        // SAFETY: GlobalAlloc's contract (a non-zero size) is passed on unchanged.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_malloc(layout.size()).cast()
            } else {
                mi::mi_malloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn alloc_zeroed(&self, layout: Layout) -> *mut u8 {
        // SAFETY: as for `alloc`.
        unsafe {
            if plain(layout.align(), layout.size()) {
                mi::mi_zalloc(layout.size()).cast()
            } else {
                mi::mi_zalloc_aligned(layout.size(), layout.align()).cast()
            }
        }
    }

    #[inline]
    unsafe fn dealloc(&self, ptr: *mut u8, _layout: Layout) {
        // SAFETY: `ptr` came from this allocator, so from mimalloc.
        unsafe { mi::mi_free(ptr.cast::<c_void>()) }
    }

    #[inline]
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        // SAFETY: `ptr` came from this allocator; the new layout keeps the alignment, so
        // the plain call is exact when `new_size` is at least the alignment too.
        unsafe {
            if plain(layout.align(), new_size) {
                mi::mi_realloc(ptr.cast::<c_void>(), new_size).cast()
            } else {
                mi::mi_realloc_aligned(ptr.cast::<c_void>(), new_size, layout.align()).cast()
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every layout the request path uses, and the edges of the rule: each block comes
    /// back aligned as asked, and survives growing and shrinking with its contents.
    #[test]
    fn blocks_are_aligned_as_asked_and_keep_their_contents() {
        for align in [1usize, 2, 4, 8, 16, 32, 64, 4096] {
            for size in [
                1usize,
                3,
                8,
                15,
                16,
                17,
                100,
                1000,
                8192,
                8200,
                70_000,
                1 << 21,
            ] {
                let layout = Layout::from_size_align(size, align).unwrap();
                // SAFETY: non-zero sizes; every block is freed with its layout.
                unsafe {
                    let p = Allocator.alloc(layout);
                    assert!(!p.is_null());
                    assert_eq!(p as usize % align, 0, "size {size} align {align}");
                    p.write_bytes(0xA5, size);
                    let grown = Allocator.realloc(p, layout, size * 3);
                    assert_eq!(grown as usize % align, 0, "grown {size} align {align}");
                    assert!((0..size).all(|i| *grown.add(i) == 0xA5));
                    let layout3 = Layout::from_size_align(size * 3, align).unwrap();
                    let shrunk = Allocator.realloc(grown, layout3, 1);
                    assert_eq!(shrunk as usize % align, 0, "shrunk {size} align {align}");
                    assert_eq!(*shrunk, 0xA5);
                    Allocator.dealloc(shrunk, Layout::from_size_align(1, align).unwrap());
                    let z = Allocator.alloc_zeroed(layout);
                    assert_eq!(z as usize % align, 0);
                    assert!((0..size).all(|i| *z.add(i) == 0));
                    Allocator.dealloc(z, layout);
                }
            }
        }
    }
}
