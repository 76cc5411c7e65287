//! What the bodies read before their decision hold on this worker: counted on the
//! worker alone (like `max_requests`), against its share of `max_key_body_memory`.

use std::cell::Cell;

thread_local! {
    static HELD: Cell<usize> = const { Cell::new(0) };
}

/// Bytes of key bodies counted on this worker until dropped.
pub struct Held(pub usize);

impl Held {
    /// Counts `n` more bytes unless the worker's `share` would be passed.
    pub fn take(n: usize, share: usize) -> Option<Self> {
        HELD.with(|held| {
            let now = held.get();
            (now.saturating_add(n) <= share).then(|| {
                held.set(now + n);
                Held(n)
            })
        })
    }

    /// Counts `n` more bytes, whatever the share (a chunk already read).
    pub fn grow(&mut self, n: usize) {
        HELD.with(|held| held.set(held.get().saturating_add(n)));
        self.0 += n;
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.with(|held| held.set(held.get().saturating_sub(self.0)));
    }
}
