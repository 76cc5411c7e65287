//! A Space-Saving heavy-hitter sketch of a fixed number of counters: memory independent of
//! the number of keys, no allocation per record. A decision of a key not in a full sketch
//! is counted in a small filter of misses ([`Misses`]), and the key takes the smallest
//! counter as soon as the filter's bound on its decisions passes that counter's total
//! (filtered Space-Saving): a long tail of keys seen once costs two filter counters each,
//! not an entry and a copy of its text, and no order or cadence of arrivals keeps a key
//! seen often out. Its counts are exact from the moment it entered; like Space-Saving's,
//! its `error` is the total of the counter it took, which bounds what it was seen before
//! (it entered at its first miss past that total).
//!
//! What holds whatever the order: a counter's total is never below its key's decisions;
//! the totals add up to at most the decisions, so the smallest is at most 1/64 of them;
//! and a key not held was decided no more than the smallest total (at its last miss the
//! filter's bound, never below the truth, had not passed it; or it left as the smallest).
//! So every key decided more than 1/64 of the times is held.

use super::filter::Misses;
use super::PART_SEPARATOR;

/// Counters per sketch.
pub const CAPACITY: usize = 64;
/// Bytes of a key's text kept (longer texts are cut at a character boundary).
pub const TEXT_BYTES: usize = 48;

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
    /// The key's text did not fit whole.
    cut: bool,
}

impl Entry {
    pub fn text(&self) -> &str {
        // Only whole characters are ever stored.
        std::str::from_utf8(&self.text[..usize::from(self.len)]).unwrap_or("")
    }

    /// Whether [`Entry::text`] is only the start of the key's text.
    pub fn cut(&self) -> bool {
        self.cut
    }
}

/// Slots of the index: a power of two, at most half full.
const INDEX_SLOTS: usize = 2 * CAPACITY;

/// The sketch: key hashes in one array, found through a small open-addressing index
/// (linear probing, at most half full, so a lookup reads one or two bytes of it in the
/// common case instead of scanning every hash), counters beside, and the filter of what
/// a full sketch did not count.
#[derive(Clone)]
pub struct Sketch {
    hashes: [u64; CAPACITY],
    /// `slot + 1` of the counter whose hash probes here first (or later), 0 when empty.
    index: [u8; INDEX_SLOTS],
    /// Each counter's total (admitted + refused + error), for the smallest's search.
    totals: [u32; CAPACITY],
    entries: [Entry; CAPACITY],
    used: usize,
    /// At most the smallest total (in a full sketch totals only grow, and a newcomer's
    /// passes the one it replaces): a miss below it is let go without a scan.
    floor: u32,
    misses: Misses,
}

impl Default for Sketch {
    /// A sketch whose filter is unsalted (tests and benchmarks; the gateway salts each).
    fn default() -> Self {
        Self::new(0)
    }
}

impl Sketch {
    /// An empty sketch whose filter maps keys to its counters salted with `salt`.
    pub fn new(salt: u64) -> Self {
        Self {
            hashes: [0; CAPACITY],
            index: [0; INDEX_SLOTS],
            totals: [0; CAPACITY],
            floor: 0,
            misses: Misses::new(salt),
            entries: [Entry {
                admitted: 0,
                refused: 0,
                error: 0,
                last_refused: 0,
                text: [0; TEXT_BYTES],
                len: 0,
                cut: false,
            }; CAPACITY],
            used: 0,
        }
    }

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
            None if self.used < CAPACITY => {
                self.used += 1;
                // Nothing has left a sketch that was never full: a key not in it is new.
                self.fill(self.used - 1, hash, 0, text)
            }
            None => {
                let seen = self.misses.add(hash);
                if seen <= self.floor {
                    return;
                }
                match self.replace_smallest(hash, seen, text) {
                    Some(slot) => slot,
                    None => return,
                }
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

    /// The smallest counter goes to the key `hash`, seen `seen` times at most (this
    /// decision included), if that passes the counter's total; its key leaves, and the
    /// filter keeps that it was seen that many times at most.
    #[cold]
    fn replace_smallest(
        &mut self,
        hash: u64,
        seen: u32,
        text: impl FnOnce(&mut TextBuf),
    ) -> Option<usize> {
        let min = self.smallest();
        let total = self.totals[min];
        self.floor = total;
        if seen <= total {
            return None;
        }
        self.misses.left(self.hashes[min], total);
        self.unindex(min);
        // Its earlier misses never passed `total` (or it left with `total`): at most
        // `total` decisions before this one.
        Some(self.fill(min, hash, total, text))
    }

    /// The counter with the smallest total (the first of them): its value found first,
    /// which compiles to a vector scan, then its place.
    fn smallest(&self) -> usize {
        let min = self.totals.iter().copied().min().unwrap_or(0);
        self.totals.iter().position(|&t| t == min).unwrap_or(0)
    }

    /// The counter `slot` to the key `hash`, which may have been seen `error` times before.
    #[cold]
    fn fill(
        &mut self,
        slot: usize,
        hash: u64,
        error: u32,
        text: impl FnOnce(&mut TextBuf),
    ) -> usize {
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
            cut: buf.cut,
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

    /// How many decisions of the key `hash` this sketch may have seen and not counted:
    /// its error if it holds the key, else the smaller of the filter's bound and the
    /// smallest total (none when the sketch was never full: nothing has left it).
    pub fn uncounted_at_most(&self, hash: u64) -> u32 {
        match self.find(hash) {
            Some(i) => self.entries[i].error,
            None if self.used < CAPACITY => 0,
            None => self.misses.at_most(hash).min(self.totals[self.smallest()]),
        }
    }

    pub fn clear(&mut self) {
        self.used = 0;
        self.floor = 0;
        self.index = [0; INDEX_SLOTS];
        self.misses.clear();
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
    /// Something did not fit.
    cut: bool,
}

impl Default for TextBuf {
    fn default() -> Self {
        Self {
            bytes: [0; TEXT_BYTES],
            len: 0,
            cut: false,
        }
    }
}

impl TextBuf {
    /// Appends part `index` of a key (after the separator, unless it is the first): a
    /// separator inside the value (`?user=a%1Fb`) is written U+FFFD, so a client cannot
    /// split its row into parts that read as another key's.
    pub fn push_part(&mut self, index: usize, part: &str) {
        if index > 0 {
            self.push(PART_SEPARATOR.encode_utf8(&mut [0; 4]));
        }
        let mut pieces = part.split(PART_SEPARATOR);
        if let Some(first) = pieces.next() {
            self.push(first);
        }
        for piece in pieces {
            self.push("\u{fffd}");
            self.push(piece);
        }
    }

    /// Appends `s`, as much of it as fits.
    pub fn push(&mut self, s: &str) {
        let room = TEXT_BYTES - usize::from(self.len);
        let take = crate::clip::floor_char_boundary(s, room);
        let at = usize::from(self.len);
        self.bytes[at..at + take].copy_from_slice(&s.as_bytes()[..take]);
        self.len += take as u8;
        self.cut |= take < s.len();
    }
}

#[cfg(test)]
mod tests;
