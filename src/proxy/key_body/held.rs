//! What the bodies read before their decision hold on this worker: counted on the
//! worker alone (like `max_requests`), against its share of `max_key_body_memory`.

use std::cell::Cell;

use bytes::Bytes;

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

    /// Counts up to `n` bytes in all unless the worker's `share` would be passed: `false`
    /// then, and nothing more is counted.
    pub fn grow_to(&mut self, n: usize, share: usize) -> bool {
        let Some(more) = n.checked_sub(self.0).filter(|&more| more > 0) else {
            return true;
        };
        HELD.with(|held| {
            let now = held.get();
            let fits = now.saturating_add(more) <= share;
            if fits {
                held.set(now + more);
                self.0 += more;
            }
            fits
        })
    }
}

impl Drop for Held {
    fn drop(&mut self) {
        HELD.with(|held| held.set(held.get().saturating_sub(self.0)));
    }
}

/// The frames of a body read before its decision, held as counted: a body is counted as
/// its bytes arrive, not as its `Content-Length` declares (a client that declares a body
/// and sends none of it holds nothing, so parking streams costs it the bytes it parks).
/// One frame is kept as it came; from a second on, frames are copied into one buffer that
/// doubles (up to `max_key_body`, then exactly to the frame that passes it, the last one
/// read), and its whole capacity is counted: a body sent as thousands of one-byte frames
/// (HTTP/2 DATA frames, HTTP/1.1 chunks) would otherwise keep a handle per frame, and the
/// read buffer behind each, far past what is counted.
#[derive(Default)]
pub struct Gathered {
    first: Option<Bytes>,
    joined: Option<Vec<u8>>,
    pub total: usize,
}

impl Gathered {
    /// Adds `data`, counting what is then held in `held` within the worker's `share`
    /// (`max`: `max_key_body`): `false` when that would pass the share (the body is then
    /// dropped whole).
    pub fn push(&mut self, data: Bytes, held: &mut Held, (max, share): (usize, usize)) -> bool {
        self.total += data.len();
        let total = self.total;
        // Doubling, capped at `max` (a body stops being read once past it).
        let room = |len: usize| total.max(len.saturating_mul(2).min(max));
        match (self.joined.as_mut(), self.first.take()) {
            (None, None) => self.first = Some(data),
            (Some(joined), _) => {
                if total > joined.capacity() {
                    joined.reserve_exact(room(joined.len()) - joined.len());
                }
                joined.extend_from_slice(&data);
            }
            (None, Some(before)) => {
                let mut joined = Vec::with_capacity(room(before.len()));
                joined.extend_from_slice(&before);
                joined.extend_from_slice(&data);
                self.joined = Some(joined);
            }
        }
        let holds = self.joined.as_ref().map_or(total, Vec::capacity);
        held.grow_to(holds.max(total), share)
    }

    /// The body read, as one buffer.
    pub fn into_bytes(self) -> Bytes {
        match (self.joined, self.first) {
            (Some(joined), _) => Bytes::from(joined),
            (None, first) => first.unwrap_or_default(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_holds_what_came_and_what_its_buffer_may_grow_into_no_more() {
        let (max, share) = (1024, 4096);
        let mut held = Held(0);
        let mut gathered = Gathered::default();
        assert!(gathered.push(Bytes::from_static(b"a"), &mut held, (max, share)));
        assert_eq!(held.0, 1, "one frame: its bytes");
        // 500 one-byte frames: one buffer, doubling, never a handle each.
        for _ in 0..499 {
            assert!(gathered.push(Bytes::from_static(b"b"), &mut held, (max, share)));
        }
        assert_eq!(gathered.total, 500);
        assert!(held.0 >= 500 && held.0 <= 1024, "{}", held.0);
        // Past `max_key_body` (the last frame read): exactly what came.
        let big = Bytes::from(vec![b'c'; 1000]);
        assert!(gathered.push(big, &mut held, (max, share)));
        assert_eq!(held.0, 1500);
        assert_eq!(gathered.into_bytes().len(), 1500);
        drop(held);
        assert_eq!(HELD.with(Cell::get), 0, "given back when dropped");
    }

    #[test]
    fn a_body_past_the_share_is_refused_and_counts_nothing_more() {
        let mut other = Held(0);
        assert!(other.grow_to(900, 1000));
        let mut held = Held(0);
        let mut gathered = Gathered::default();
        assert!(gathered.push(Bytes::from_static(b"{}"), &mut held, (1024, 1000)));
        let more = Bytes::from(vec![b' '; 200]);
        assert!(!gathered.push(more, &mut held, (1024, 1000)));
        assert_eq!(held.0, 2, "nothing more counted");
        drop((held, other));
        assert_eq!(HELD.with(Cell::get), 0);
    }
}
