//! The state file's bytes: what [`super`] writes and reads.
//!
//! ```text
//! "tollgate state\n" 0x03     16 bytes: what the file is, and its version
//! seeds                       4 × u64: the key hasher's
//! written at                  u64: the writer's Unix ns when it wrote the file
//! areas                       u64, then each quota policy's area of the store:
//!   area, unix floor, length  3 × u64
//!   name                      `length` bytes (UTF-8)
//! count                       u64
//! count × (key, unix TAT)     2 × u64 each: 16 bytes a key
//! checksum                    u64: FNV-1a of everything before it
//! ```
//! All integers little-endian. A key's hash names its area (`memory::areas`); the next
//! process finds each area by its policy's name, so keys of a quota policy removed meanwhile
//! are left out. Version 1 (before areas) is read too: its keys go among the rate keys,
//! and a quota key among them moves to its area when it is next used; so is version 2
//! (before the time of writing), whose TATs are taken on the reader's clock as they are.

const MAGIC: &[u8; 16] = b"tollgate state\n\x03";
/// The second version's: no time of writing.
const MAGIC_V2: &[u8; 16] = b"tollgate state\n\x02";
/// The first version's: no areas, no time of writing.
const MAGIC_V1: &[u8; 16] = b"tollgate state\n\x01";
/// Magic and seeds.
const HEAD: usize = 16 + 32;
/// The most areas a file may name (the store has 63).
const MAX_AREAS: u64 = 1024;

/// What a state file holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Saved {
    pub seeds: [u64; 4],
    /// Each quota policy's area, by name, with its floor (Unix ns).
    pub areas: Vec<SavedArea>,
    /// Key hash and TAT in Unix nanoseconds.
    pub keys: Vec<(u64, u64)>,
    /// The writer's Unix nanoseconds when it wrote the file (none before version 3): what
    /// each TAT leads by is counted from it, so a reader whose clock is behind the
    /// writer's does not find every key that far ahead.
    pub written_at: Option<u64>,
    /// Written by the first version: quota keys among the rate keys.
    pub legacy: bool,
}

/// One quota policy's area as a state file names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SavedArea {
    pub name: String,
    pub area: usize,
    pub floor: u64,
}

fn fnv1a(bytes: &[u8]) -> u64 {
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for &b in bytes {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    h
}

fn word(bytes: &[u8], at: usize) -> u64 {
    let mut w = [0u8; 8];
    w.copy_from_slice(&bytes[at..at + 8]);
    u64::from_le_bytes(w)
}

/// `Err(None)`: not a state file; `Err(Some(what))`: a damaged one.
pub(super) fn decode(bytes: &[u8]) -> Result<Saved, Option<&'static str>> {
    let (legacy, timed) = match bytes.get(..MAGIC.len()) {
        Some(m) if m == MAGIC => (false, true),
        Some(m) if m == MAGIC_V2 => (false, false),
        Some(m) if m == MAGIC_V1 => (true, false),
        _ => return Err(None),
    };
    if bytes.len() < HEAD + 16 {
        return Err(Some("cut short"));
    }
    let end = bytes.len() - 8;
    let body = &bytes[..end];
    let seeds = [
        word(bytes, 16),
        word(bytes, 24),
        word(bytes, 32),
        word(bytes, 40),
    ];
    let mut at = HEAD;
    let next = |at: &mut usize| -> Result<u64, Option<&'static str>> {
        let w = body.get(*at..*at + 8).ok_or(Some("cut short"))?;
        *at += 8;
        Ok(word(w, 0))
    };
    let written_at = if timed { Some(next(&mut at)?) } else { None };
    let mut areas = Vec::new();
    if !legacy {
        let n = next(&mut at)?;
        if n > MAX_AREAS {
            return Err(Some("bad area count"));
        }
        for _ in 0..n {
            let area = usize::try_from(next(&mut at)?).map_err(|_| Some("bad area"))?;
            let floor = next(&mut at)?;
            let len = usize::try_from(next(&mut at)?).map_err(|_| Some("bad name"))?;
            let name = body
                .get(at..at.saturating_add(len))
                .and_then(|b| std::str::from_utf8(b).ok())
                .ok_or(Some("bad area name"))?;
            at += len;
            areas.push(SavedArea {
                name: name.to_owned(),
                area,
                floor,
            });
        }
    }
    let count = usize::try_from(next(&mut at)?).map_err(|_| Some("bad count"))?;
    if count.checked_mul(16) != Some(body.len() - at) {
        return Err(Some("its length does not match its count"));
    }
    if fnv1a(body) != word(bytes, end) {
        return Err(Some("checksum mismatch"));
    }
    let keys = (0..count)
        .map(|i| (word(body, at + 16 * i), word(body, at + 16 * i + 8)))
        .collect();
    Ok(Saved {
        seeds,
        areas,
        keys,
        legacy,
        written_at,
    })
}

/// The file's bytes for `seeds`, `areas` and `keys` (key hash, Unix TAT), written at
/// Unix nanoseconds `written_at`.
pub(super) fn encode(
    seeds: [u64; 4],
    written_at: u64,
    areas: &[SavedArea],
    keys: &[(u64, u64)],
) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD + 16 + 64 * areas.len() + 8 + 16 * keys.len() + 8);
    out.extend_from_slice(MAGIC);
    let put = |out: &mut Vec<u8>, w: u64| out.extend_from_slice(&w.to_le_bytes());
    for s in seeds {
        put(&mut out, s);
    }
    put(&mut out, written_at);
    put(&mut out, areas.len() as u64);
    for a in areas {
        put(&mut out, a.area as u64);
        put(&mut out, a.floor);
        put(&mut out, a.name.len() as u64);
        out.extend_from_slice(a.name.as_bytes());
    }
    put(&mut out, keys.len() as u64);
    for &(k, tat) in keys {
        put(&mut out, k);
        put(&mut out, tat);
    }
    let sum = fnv1a(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_reads_back_as_written_and_damage_is_named() {
        let keys = vec![(1, 10), (u64::MAX, 2_000_000_000_000_000_000)];
        let areas = vec![SavedArea {
            name: "monthly".into(),
            area: 3,
            floor: 7,
        }];
        let bytes = encode([1, 2, 3, 4], 77, &areas, &keys);
        assert_eq!(
            bytes.len(),
            HEAD + 8 + 8 + (24 + 7) + 8 + 32 + 8,
            "16 bytes a key"
        );
        let saved = decode(&bytes).expect("reads");
        assert_eq!(
            saved,
            Saved {
                seeds: [1, 2, 3, 4],
                areas,
                keys,
                legacy: false,
                written_at: Some(77),
            }
        );
        let mut flipped = bytes.clone();
        let tat_byte = bytes.len() - 8 - 3;
        flipped[tat_byte] ^= 1;
        assert_eq!(decode(&flipped), Err(Some("checksum mismatch")));
        assert_eq!(
            decode(&bytes[..bytes.len() - 1]),
            Err(Some("its length does not match its count"))
        );
        assert_eq!(decode(b"[server]\nlisten = 1"), Err(None));
    }

    #[test]
    fn a_first_version_file_still_reads() {
        let mut v1 = MAGIC_V1.to_vec();
        for w in [1u64, 2, 3, 4, 1, 42, 99] {
            v1.extend_from_slice(&w.to_le_bytes());
        }
        let sum = fnv1a(&v1);
        v1.extend_from_slice(&sum.to_le_bytes());
        let saved = decode(&v1).expect("reads");
        assert!(saved.legacy);
        assert_eq!(saved.keys, vec![(42, 99)]);
        assert!(saved.areas.is_empty());
        assert_eq!(saved.written_at, None);
    }

    /// A second-version file (areas, no time of writing) reads as it did.
    #[test]
    fn a_second_version_file_still_reads() {
        let mut v2 = MAGIC_V2.to_vec();
        for w in [1u64, 2, 3, 4, 0, 1, 42, 99] {
            v2.extend_from_slice(&w.to_le_bytes());
        }
        let sum = fnv1a(&v2);
        v2.extend_from_slice(&sum.to_le_bytes());
        let saved = decode(&v2).expect("reads");
        assert!(!saved.legacy);
        assert_eq!((saved.keys, saved.written_at), (vec![(42, 99)], None));
    }
}
