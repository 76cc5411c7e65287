//! Which data-plane worker thread runs the caller: per-worker state (upstream clients)
//! is indexed by it, so a connection is only ever driven by the thread that owns it.

use std::cell::Cell;

thread_local! {
    static WORKER: Cell<usize> = const { Cell::new(0) };
}

/// Index of the data-plane worker running on this thread (0 elsewhere).
pub fn current() -> usize {
    WORKER.with(Cell::get)
}

/// Worker `index`'s slot among `len` per-worker slots (a metric's shards, a table per
/// worker): its own number when there are enough, wrapped when not. Workers are numbered
/// from 0 and slots are made one per CPU, so the division (tens of cycles, several times
/// a request) is almost never run.
#[inline]
pub fn slot_of(index: usize, len: usize) -> usize {
    if index < len {
        index
    } else {
        index % len
    }
}

/// Marks this thread as worker `index`; called once as the worker starts.
pub fn set(index: usize) {
    WORKER.with(|w| w.set(index));
}
