//! A Space-Saving heavy-hitter sketch of a fixed number of counters: memory independent of
//! the number of keys, no allocation per record. A key not in a full sketch takes the
//! smallest counter only at every [`ENTER_EVERY`]th such miss (a long tail of keys seen
//! once then costs a scan, not an entry and a copy of its text each time); a key seen often
//! enters within a few of its own misses and then stays. Its counts are exact from the
//! moment it entered, and `error` bounds what it may have been seen before: the count of
//! the key it replaced plus the misses skipped since the last entry.

/// Counters per sketch.
pub const CAPACITY: usize = 64;
/// Bytes of a key's text kept (longer texts are cut at a character boundary).
pub const TEXT_BYTES: usize = 48;
/// A full sketch lets a new key in at every this many misses.
pub const ENTER_EVERY: u32 = 8;

/// One counter: a key, its text as first seen, and its counts.
#[derive(Clone, Copy, Debug)]
pub struct Entry {
    pub admitted: u32,
    pub refused: u32,
    /// How many times the key may have been seen before it entered.
    pub error: u32,
    /// When it was last refused (the monotonic clock; 0: not since it entered).
    pub last_refused: u64,
    text: [u8; TEXT_BYTES],
    len: u8,
}

impl Entry {
    pub fn text(&self) -> &str {
        // Only whole characters are ever stored.
        std::str::from_utf8(&self.text[..usize::from(self.len)]).unwrap_or("")
    }
}

/// Slots of the index: a power of two, at most half full.
const INDEX_SLOTS: usize = 2 * CAPACITY;

/// The sketch: key hashes in one array, found through a small open-addressing index
/// (linear probing, at most half full, so a lookup reads one or two bytes of it in the
/// common case instead of scanning every hash), counters beside.
#[derive(Clone)]
pub struct Sketch {
    hashes: [u64; CAPACITY],
    /// `slot + 1` of the counter whose hash probes here first (or later), 0 when empty.
    index: [u8; INDEX_SLOTS],
    /// Each counter's total (admitted + refused + error), for the smallest's search.
    totals: [u32; CAPACITY],
    entries: [Entry; CAPACITY],
    used: usize,
    /// Misses let go since the last entry.
    skipped: u32,
}

impl Default for Sketch {
    fn default() -> Self {
        Self {
            hashes: [0; CAPACITY],
            index: [0; INDEX_SLOTS],
            totals: [0; CAPACITY],
            skipped: 0,
            entries: [Entry {
                admitted: 0,
                refused: 0,
                error: 0,
                last_refused: 0,
                text: [0; TEXT_BYTES],
                len: 0,
            }; CAPACITY],
            used: 0,
        }
    }
}

impl Sketch {
    /// Counts one decision of the key `hash` at `now_ns`; `text` is asked only when the
    /// key enters.
    #[inline]
    pub fn record(
        &mut self,
        hash: u64,
        (refused, now_ns): (bool, u64),
        text: impl FnOnce(&mut TextBuf),
    ) {
        let slot = match self.find(hash) {
            Some(i) => i,
            None if self.used < CAPACITY => self.enter(hash, text),
            None => {
                self.skipped += 1;
                if self.skipped < ENTER_EVERY {
                    return;
                }
                self.enter(hash, text)
            }
        };
        self.totals[slot] = self.totals[slot].saturating_add(1);
        let e = &mut self.entries[slot];
        if refused {
            e.refused = e.refused.saturating_add(1);
            e.last_refused = now_ns;
        } else {
            e.admitted = e.admitted.saturating_add(1);
        }
    }

    /// A free counter, or the smallest one's (its count becomes the newcomer's error).
    #[cold]
    fn enter(&mut self, hash: u64, text: impl FnOnce(&mut TextBuf)) -> usize {
        let (slot, error) = if self.used < CAPACITY {
            self.used += 1;
            (self.used - 1, self.skipped)
        } else {
            let mut min = 0;
            for (i, &t) in self.totals.iter().enumerate() {
                if t < self.totals[min] {
                    min = i;
                }
            }
            // The smallest counter's key leaves.
            self.unindex(min);
            (min, self.totals[min].saturating_add(self.skipped))
        };
        self.skipped = 0;
        self.totals[slot] = error;
        let mut buf = TextBuf::default();
        text(&mut buf);
        self.hashes[slot] = hash;
        self.index_insert(slot);
        self.entries[slot] = Entry {
            admitted: 0,
            refused: 0,
            error,
            last_refused: 0,
            text: buf.bytes,
            len: buf.len,
        };
        slot
    }

    /// Every counter in use, with its key's hash.
    pub fn entries(&self) -> impl Iterator<Item = (u64, &Entry)> {
        self.hashes[..self.used]
            .iter()
            .copied()
            .zip(&self.entries[..self.used])
    }

    pub fn clear(&mut self) {
        self.used = 0;
        self.skipped = 0;
        self.index = [0; INDEX_SLOTS];
    }

    /// Where `hash` first probes: the multiplication spreads any hash's bits to the top.
    #[inline]
    fn home(hash: u64) -> usize {
        (hash.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 57) as usize
    }

    /// The counter holding `hash`.
    #[inline]
    fn find(&self, hash: u64) -> Option<usize> {
        let mut i = Self::home(hash);
        loop {
            let held = usize::from(self.index[i]);
            if held == 0 {
                return None;
            }
            if self.hashes[held - 1] == hash {
                return Some(held - 1);
            }
            i = (i + 1) % INDEX_SLOTS;
        }
    }

    fn index_insert(&mut self, slot: usize) {
        let mut i = Self::home(self.hashes[slot]);
        while self.index[i] != 0 {
            i = (i + 1) % INDEX_SLOTS;
        }
        self.index[i] = slot as u8 + 1;
    }

    /// The index position naming `slot`.
    fn position_of(&self, slot: usize) -> Option<usize> {
        let mut i = Self::home(self.hashes[slot]);
        loop {
            match usize::from(self.index[i]) {
                0 => return None,
                held if held == slot + 1 => return Some(i),
                _ => i = (i + 1) % INDEX_SLOTS,
            }
        }
    }

    /// Takes `slot` out of the index, moving later entries of its probe run back so
    /// that every remaining hash is still found from its home (backward-shift deletion).
    fn unindex(&mut self, slot: usize) {
        let Some(mut hole) = self.position_of(slot) else {
            return;
        };
        let mut next = hole;
        loop {
            next = (next + 1) % INDEX_SLOTS;
            let held = usize::from(self.index[next]);
            if held == 0 {
                break;
            }
            let home = Self::home(self.hashes[held - 1]);
            // The entry at `next` may move to `hole` unless its home lies after the hole,
            // up to `next` (cyclically): then it would be found before reaching the hole.
            let stays = if hole <= next {
                hole < home && home <= next
            } else {
                hole < home || home <= next
            };
            if !stays {
                self.index[hole] = self.index[next];
                hole = next;
            }
        }
        self.index[hole] = 0;
    }
}

/// Where a key's text is written when it enters: up to [`TEXT_BYTES`], whole characters.
pub struct TextBuf {
    bytes: [u8; TEXT_BYTES],
    len: u8,
}

impl Default for TextBuf {
    fn default() -> Self {
        Self {
            bytes: [0; TEXT_BYTES],
            len: 0,
        }
    }
}

impl TextBuf {
    /// Appends `s`, as much of it as fits.
    pub fn push(&mut self, s: &str) {
        let room = TEXT_BYTES - usize::from(self.len);
        let mut take = s.len().min(room);
        while !s.is_char_boundary(take) {
            take -= 1;
        }
        let at = usize::from(self.len);
        self.bytes[at..at + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take as u8;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A Zipf-like stream (key k seen about n/k times), shuffled deterministically.
    fn zipf(keys: u64, n: u64) -> Vec<u64> {
        let mut stream = Vec::new();
        for k in 1..=keys {
            for _ in 0..(n / k).max(1) {
                stream.push(k);
            }
        }
        // A fixed-seed xorshift shuffle.
        let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
        for i in (1..stream.len()).rev() {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            stream.swap(i, (x % (i as u64 + 1)) as usize);
        }
        stream
    }

    #[test]
    fn the_heaviest_keys_are_found_with_bounded_counts() {
        let stream = zipf(20_000, 5_000);
        let mut exact = std::collections::HashMap::new();
        let mut s = Sketch::default();
        for &k in &stream {
            *exact.entry(k).or_insert(0u64) += 1;
            s.record(k, (true, 1), |t| t.push(&format!("key-{k}")));
        }
        let total = stream.len() as u64;
        let mut top: Vec<_> = s.entries().collect();
        top.sort_by_key(|(_, e)| std::cmp::Reverse(e.refused));
        let (hash, e) = top[0];
        assert_eq!(hash, 1, "the heaviest key comes first");
        assert_eq!(e.text(), "key-1");
        // Its true count lies within [refused, refused + error].
        let truth = exact[&1];
        assert!(
            u64::from(e.refused) <= truth && truth <= u64::from(e.refused) + u64::from(e.error)
        );
        // Every key seen well above total / CAPACITY times is in it, with an honest bound.
        for (&k, &c) in &exact {
            if c > 2 * total / CAPACITY as u64 {
                let (_, e) = s
                    .entries()
                    .find(|(h, _)| *h == k)
                    .unwrap_or_else(|| panic!("key {k} ({c} of {total}) is kept"));
                assert!(
                    u64::from(e.refused) <= c && c <= u64::from(e.refused) + u64::from(e.error),
                    "key {k}: {c} within its bound"
                );
            }
        }
        assert!(s.entries().count() <= CAPACITY);
    }

    #[test]
    fn text_is_cut_at_a_character_boundary() {
        let mut t = TextBuf::default();
        t.push(&"é".repeat(40));
        let mut s = Sketch::default();
        s.record(7, (false, 1), |buf| *buf = t);
        let text = s.entries().next().expect("one").1.text().to_owned();
        assert_eq!(text, "é".repeat(TEXT_BYTES / 2));
    }

    /// The same rules with a linear scan in place of the index: what the sketch must
    /// keep, counter for counter.
    #[derive(Default)]
    struct Model {
        keys: Vec<(u64, u32, u32, u32, u32)>,
        skipped: u32,
    }

    impl Model {
        fn record(&mut self, hash: u64, refused: bool) {
            let slot = match self.keys.iter().position(|k| k.0 == hash) {
                Some(i) => i,
                None => {
                    if self.keys.len() == CAPACITY {
                        self.skipped += 1;
                        if self.skipped < ENTER_EVERY {
                            return;
                        }
                    }
                    let error = if self.keys.len() < CAPACITY {
                        self.keys.push((hash, 0, 0, self.skipped, self.skipped));
                        self.keys.len() - 1
                    } else {
                        let mut min = 0;
                        for (i, k) in self.keys.iter().enumerate() {
                            if k.4 < self.keys[min].4 {
                                min = i;
                            }
                        }
                        let error = self.keys[min].4 + self.skipped;
                        self.keys[min] = (hash, 0, 0, error, error);
                        min
                    };
                    self.skipped = 0;
                    error
                }
            };
            let k = &mut self.keys[slot];
            k.4 += 1;
            if refused {
                k.2 += 1;
            } else {
                k.1 += 1;
            }
        }
    }

    proptest::proptest! {
        #[test]
        fn the_index_finds_what_a_scan_finds(
            pool in proptest::collection::vec(proptest::prelude::any::<u64>(), 1..300),
            picks in proptest::collection::vec((0usize..300, proptest::prelude::any::<bool>()), 1..4_000),
        ) {
            let mut sketch = Sketch::default();
            let mut model = Model::default();
            for (pick, refused) in picks {
                let hash = pool[pick % pool.len()];
                sketch.record(hash, (refused, 1), |t| t.push("k"));
                model.record(hash, refused);
            }
            let got: Vec<_> = sketch
                .entries()
                .map(|(h, e)| (h, e.admitted, e.refused, e.error))
                .collect();
            let want: Vec<_> = model.keys.iter().map(|k| (k.0, k.1, k.2, k.3)).collect();
            proptest::prop_assert_eq!(got, want);
            for &(hash, ..) in &model.keys {
                proptest::prop_assert!(sketch.find(hash).is_some());
            }
        }
    }
}
