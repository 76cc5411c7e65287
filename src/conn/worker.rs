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

/// Marks this thread as worker `index`; called once as the worker starts.
pub fn set(index: usize) {
    WORKER.with(|w| w.set(index));
}
