//! The embedded store's state across restarts (`[store] state_file`): every key that
//! carries information (a TAT ahead of now: a rate debt, a quota's usage) with its TAT in
//! Unix nanoseconds, so the time a restart takes counts as elapsed, and the key hasher's
//! seeds, so a key hashes the same in the next process. Written atomically (see
//! [`crate::files`]); read once at start.
//!
//! ```text
//! "tollgate state\n" 0x01     16 bytes: what the file is, and its version
//! seeds                       4 × u64: the key hasher's
//! count                       u64
//! count × (key, unix TAT)     2 × u64 each: 16 bytes a key
//! checksum                    u64: FNV-1a of everything before it
//! ```
//! All integers little-endian.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::memory::MemoryStore;
use crate::clock::Clock;

const MAGIC: &[u8; 16] = b"tollgate state\n\x01";
const HEAD: usize = 16 + 32 + 8;

#[derive(Debug, thiserror::Error)]
pub enum StateError {
    #[error("cannot read the state file {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} is not a tollgate state file (or one of a version this build cannot read): move it away or name another state_file", .0.display())]
    Foreign(PathBuf),
    #[error("the state file {} is damaged ({what}): tollgate will not start on a partial state; move it away to start with an empty one", path.display())]
    Corrupt { path: PathBuf, what: &'static str },
    #[error(transparent)]
    Write(#[from] crate::files::WriteError),
}

/// What a state file holds.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Saved {
    pub seeds: [u64; 4],
    /// Key hash and TAT in Unix nanoseconds.
    pub keys: Vec<(u64, u64)>,
}

/// What writing one took.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub keys: usize,
    pub bytes: usize,
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

/// Reads `path`: `None` when it does not exist (an empty state).
pub fn read(path: &Path) -> Result<Option<Saved>, StateError> {
    let bytes = match std::fs::read(path) {
        Ok(b) => b,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(source) => {
            return Err(StateError::Read {
                path: path.to_owned(),
                source,
            })
        }
    };
    decode(&bytes).map(Some).map_err(|e| match e {
        None => StateError::Foreign(path.to_owned()),
        Some(what) => StateError::Corrupt {
            path: path.to_owned(),
            what,
        },
    })
}

/// `Err(None)`: not a state file; `Err(Some(what))`: a damaged one.
fn decode(bytes: &[u8]) -> Result<Saved, Option<&'static str>> {
    if bytes.len() < MAGIC.len() || &bytes[..MAGIC.len()] != MAGIC {
        return Err(None);
    }
    if bytes.len() < HEAD + 8 {
        return Err(Some("cut short"));
    }
    let count = usize::try_from(word(bytes, 48)).map_err(|_| Some("bad count"))?;
    let body = count.checked_mul(16).ok_or(Some("bad count"))?;
    if bytes.len() != HEAD + body + 8 {
        return Err(Some("its length does not match its count"));
    }
    let end = HEAD + body;
    if fnv1a(&bytes[..end]) != word(bytes, end) {
        return Err(Some("checksum mismatch"));
    }
    let seeds = [
        word(bytes, 16),
        word(bytes, 24),
        word(bytes, 32),
        word(bytes, 40),
    ];
    let keys = (0..count)
        .map(|i| (word(bytes, HEAD + 16 * i), word(bytes, HEAD + 16 * i + 8)))
        .collect();
    Ok(Saved { seeds, keys })
}

/// The file's bytes for `seeds` and `keys` (key hash, Unix TAT).
pub fn encode(seeds: [u64; 4], keys: &[(u64, u64)]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEAD + 16 * keys.len() + 8);
    out.extend_from_slice(MAGIC);
    for s in seeds {
        out.extend_from_slice(&s.to_le_bytes());
    }
    out.extend_from_slice(&(keys.len() as u64).to_le_bytes());
    for &(k, tat) in keys {
        out.extend_from_slice(&k.to_le_bytes());
        out.extend_from_slice(&tat.to_le_bytes());
    }
    let sum = fnv1a(&out);
    out.extend_from_slice(&sum.to_le_bytes());
    out
}

/// Writes every key of `store` that carries information at `clock`'s now to `path`.
/// Reads the table's atomics without a lock: requests go on meanwhile.
pub fn write(
    path: &Path,
    seeds: [u64; 4],
    store: &MemoryStore,
    clock: &dyn Clock,
) -> Result<Written, StateError> {
    let now = clock.now_ns();
    let mut keys = Vec::with_capacity(store.len());
    store.busy_keys(now, |key, tat| keys.push((key, clock.unix_ns_at(tat))));
    let bytes = encode(seeds, &keys);
    crate::files::replace(path, |out| out.write_all(&bytes))?;
    Ok(Written {
        keys: keys.len(),
        bytes: bytes.len(),
    })
}

/// Puts `saved`'s keys into `store`, each TAT moved onto `clock`'s timeline; keys whose
/// TAT has passed meanwhile are idle and left out. Returns how many were restored.
pub fn restore(saved: &Saved, store: &MemoryStore, clock: &dyn Clock) -> usize {
    let now = clock.now_ns();
    let mut restored = 0;
    for &(key, unix_tat) in &saved.keys {
        let tat = clock.mono_ns_at(unix_tat);
        if tat > now {
            store.restore(key, tat);
            restored += 1;
        }
    }
    restored
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_file_reads_back_as_written_and_damage_is_named() {
        let keys = vec![(1, 10), (u64::MAX, 2_000_000_000_000_000_000)];
        let bytes = encode([1, 2, 3, 4], &keys);
        assert_eq!(bytes.len(), HEAD + 32 + 8, "16 bytes a key");
        let saved = decode(&bytes).expect("reads");
        assert_eq!(
            saved,
            Saved {
                seeds: [1, 2, 3, 4],
                keys
            }
        );
        let mut flipped = bytes.clone();
        flipped[HEAD + 3] ^= 1;
        assert_eq!(decode(&flipped), Err(Some("checksum mismatch")));
        assert_eq!(
            decode(&bytes[..bytes.len() - 1]),
            Err(Some("its length does not match its count"))
        );
        assert_eq!(decode(b"[server]\nlisten = 1"), Err(None));
    }
}
