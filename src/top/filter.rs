//! What a full sketch did not count: a small count-min filter of its misses (two rows of
//! [`WIDTH`] counters, conservative update), by key hash. Each counter a key maps to is
//! never below the decisions of that key the sketch has not counted, so the smaller of
//! its two is a bound on them that no arrival order can break; a key is let into the
//! sketch as soon as that bound passes the smallest counter's total (see
//! [`super::sketch`]). Keys seen once raise the counters too: the wider the rows, the
//! slower, and the fewer of them pass (a flood of new keys lets about one miss in six in
//! with 256 counters a row, one in three with 128).
//! Which counters a key maps to depends on the key hash (keyed by the process's random
//! seeds) and a per-sketch salt from the system's random source: a client can neither
//! choose nor learn whom it shares them with.

/// Bits of a row's index.
const BITS: u32 = 8;
/// Counters per row.
pub const WIDTH: usize = 1 << BITS;

/// The filter: 2 KiB, no allocation.
#[derive(Clone)]
pub struct Misses {
    rows: [[u32; WIDTH]; 2],
    salt: u64,
}

impl Misses {
    pub fn new(salt: u64) -> Self {
        Self {
            rows: [[0; WIDTH]; 2],
            salt,
        }
    }

    /// The key's counter in each row: two slices of the top bits of a multiplication that
    /// spreads every bit of the salted hash there.
    #[inline]
    fn slots(&self, hash: u64) -> (usize, usize) {
        let m = (hash ^ self.salt).wrapping_mul(0xd6e8_feb8_6659_fd93);
        (
            (m >> (64 - BITS)) as usize,
            ((m >> (64 - 2 * BITS)) as usize) & (WIDTH - 1),
        )
    }

    /// Counts one more decision of `hash` the sketch does not count; answers what its
    /// uncounted decisions may be at most now, this one included. Conservative update:
    /// each counter is raised only as far as this key needs (not by one), so a counter
    /// many keys share overstates each of them less.
    #[inline]
    pub fn add(&mut self, hash: u64) -> u32 {
        let (a, b) = self.slots(hash);
        let [first, second] = &mut self.rows;
        let seen = first[a].min(second[b]).saturating_add(1);
        first[a] = first[a].max(seen);
        second[b] = second[b].max(seen);
        seen
    }

    /// What `hash`'s decisions not counted may be at most.
    #[inline]
    pub fn at_most(&self, hash: u64) -> u32 {
        let (a, b) = self.slots(hash);
        self.rows[0][a].min(self.rows[1][b])
    }

    /// A key leaves the sketch having been decided at most `total` times: from now on its
    /// counters must say at least that.
    pub fn left(&mut self, hash: u64, total: u32) {
        let (a, b) = self.slots(hash);
        let [first, second] = &mut self.rows;
        first[a] = first[a].max(total);
        second[b] = second[b].max(total);
    }

    pub fn clear(&mut self) {
        self.rows = [[0; WIDTH]; 2];
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    proptest::proptest! {
        /// Whatever the keys and their order, no key's bound falls below its count, and a
        /// key that left is bounded by what it left with.
        #[test]
        fn a_bound_is_never_below_the_truth(
            salt in proptest::prelude::any::<u64>(),
            picks in proptest::collection::vec((0u64..2_000, 0u32..3), 1..5_000),
        ) {
            let mut f = Misses::new(salt);
            let mut truth = std::collections::HashMap::new();
            for (key, what) in picks {
                let hash = key.wrapping_mul(0x9e37_79b9_7f4a_7c15);
                let count = truth.entry(hash).or_insert(0u32);
                if what == 0 {
                    // Left the sketch after being decided a few more times.
                    *count += 3;
                    f.left(hash, *count);
                } else {
                    *count += 1;
                    let bound = f.add(hash);
                    proptest::prop_assert!(bound >= *count);
                }
            }
            for (&hash, &count) in &truth {
                proptest::prop_assert!(f.at_most(hash) >= count, "{hash}: {count}");
            }
        }
    }
}
