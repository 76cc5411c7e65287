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
    text: [u8; TEXT_BYTES],
    len: u8,
}

impl Entry {
    pub fn text(&self) -> &str {
        // Only whole characters are ever stored.
        std::str::from_utf8(&self.text[..usize::from(self.len)]).unwrap_or("")
    }
}

/// The sketch: key hashes scanned as one array (a cache-friendly search), counters beside.
#[derive(Clone)]
pub struct Sketch {
    hashes: [u64; CAPACITY],
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
            totals: [0; CAPACITY],
            skipped: 0,
            entries: [Entry {
                admitted: 0,
                refused: 0,
                error: 0,
                text: [0; TEXT_BYTES],
                len: 0,
            }; CAPACITY],
            used: 0,
        }
    }
}

impl Sketch {
    /// Counts one decision of the key `hash`; `text` is asked only when the key enters.
    #[inline]
    pub fn record(&mut self, hash: u64, refused: bool, text: impl FnOnce(&mut TextBuf)) {
        let slot = match self.hashes[..self.used].iter().position(|&h| h == hash) {
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
            (min, self.totals[min].saturating_add(self.skipped))
        };
        self.skipped = 0;
        self.totals[slot] = error;
        let mut buf = TextBuf::default();
        text(&mut buf);
        self.hashes[slot] = hash;
        self.entries[slot] = Entry {
            admitted: 0,
            refused: 0,
            error,
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
            s.record(k, true, |t| t.push(&format!("key-{k}")));
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
        s.record(7, false, |buf| *buf = t);
        let text = s.entries().next().expect("one").1.text().to_owned();
        assert_eq!(text, "é".repeat(TEXT_BYTES / 2));
    }
}
