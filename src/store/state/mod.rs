//! The embedded store's state across restarts (`[store] state_file`): every key that
//! carries information (a TAT ahead of now: a rate debt, a quota's usage) with its TAT in
//! Unix nanoseconds, so the time a restart takes counts as elapsed, and the key hasher's
//! seeds, so a key hashes the same in the next process. Written atomically (see
//! [`crate::files`]); read once at start.
//!
//! Its layout is [`format`]'s. At start, a quota key (or an area's floor) whose usage is
//! not of the window its policy is in now is left out: the file was written under
//! another calendar.

use std::io::Write;
use std::path::{Path, PathBuf};

use super::memory::areas::{area_of, in_area};
use super::memory::MemoryStore;
use crate::clock::Clock;
use crate::limit::calendar::usage_of;

mod format;

use format::{decode, encode};
pub use format::{Saved, SavedArea};

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

/// What restoring a state file did.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Restored {
    pub keys: usize,
    /// Keys of quota policies the config no longer has.
    pub dropped: usize,
    /// Quota keys written under another calendar than their policy's now.
    pub foreign: usize,
}

/// What writing one took.
#[derive(Debug, Clone, Copy)]
pub struct Written {
    pub keys: usize,
    pub bytes: usize,
}

/// Reads `path`: `None` when it does not exist (an empty state).
pub fn read(path: &Path) -> Result<Option<Saved>, StateError> {
    let read_own = || -> std::io::Result<Vec<u8>> {
        use std::io::Read as _;
        let mut bytes = Vec::new();
        crate::files::open_own(path)?.read_to_end(&mut bytes)?;
        Ok(bytes)
    };
    let bytes = match read_own() {
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
    let areas: Vec<SavedArea> = store
        .areas()
        .named()
        .into_iter()
        .map(|(name, area)| SavedArea {
            name,
            area,
            floor: match store.areas().floor(area) {
                0 => 0,
                floor => clock.unix_ns_at(floor),
            },
        })
        .collect();
    let bytes = encode(seeds, clock.unix_ns_at(now), &areas, &keys);
    crate::files::replace(path, |out| out.write_all(&bytes))?;
    Ok(Written {
        keys: keys.len(),
        bytes: bytes.len(),
    })
}

/// Puts `saved`'s keys into `store` (its areas arranged for the running config), each TAT
/// moved onto `clock`'s timeline, each quota key into its policy's area now. Left out:
/// keys whose TAT has passed meanwhile (idle), keys of quota policies the config no longer
/// has, and a quota key or area floor that is no usage of the window `end_of(area)` says
/// its policy is in now — the file was written under another calendar, and such a TAT,
/// restored, would be weighed against this calendar's usage when the area makes room (a
/// floor that high would stop it rising to what a dropped key had used).
///
/// A rate TAT leads by what it led by when the file was written, less the time since: a
/// reader whose clock is behind the writer's (a clock wrong at the writer's boot, corrected
/// since) counts no time as elapsed rather than finding each key that much further
/// ahead — a year's error would otherwise lock every key out for a year. A quota key's TAT
/// and an area's floor are its window's end plus its usage, and a window ends at an
/// instant of the calendar, not of either clock: they are read on this clock as written.
/// Moved with the rate keys, a reader a millisecond behind would take a million units off
/// every key (a unit is a nanosecond) and drop those below as another calendar's; a writer
/// ahead by a year wrote another window, which `end_of` leaves out.
pub fn restore(
    saved: &Saved,
    store: &MemoryStore,
    clock: &dyn Clock,
    end_of: impl Fn(usize) -> Option<u64>,
) -> Restored {
    let now = clock.now_ns();
    let rate_on_this_clock = on_this_clock(saved.written_at, clock);
    let at_its_instant = on_this_clock(None, clock);
    let areas = store.areas();
    let this_window = |area: usize, tat: u64| end_of(area).is_some_and(|end| usage_of(tat, end));
    // The file's area → this process's area tag (hash bits), by policy name.
    let mut moved: std::collections::HashMap<usize, u64> = std::collections::HashMap::new();
    for a in &saved.areas {
        let tag = areas.tag(&a.name);
        moved.insert(a.area, tag);
        let floor = at_its_instant(a.floor);
        if tag != 0 && a.floor != 0 && this_window(area_of(tag), floor) {
            areas.raise_floor(area_of(tag), floor);
        }
    }
    let mut restored = Restored::default();
    for &(key, unix_tat) in &saved.keys {
        // The file's area of the key: none for a rate key (or any key of a file before
        // areas), which counts no time elapsed for a reader behind the writer.
        let quota_area = Some(area_of(key)).filter(|&area| area != 0 && !saved.legacy);
        let tat = match quota_area {
            None => rate_on_this_clock(unix_tat),
            Some(_) => at_its_instant(unix_tat),
        };
        if tat <= now {
            continue;
        }
        let key = match quota_area.map(|area| moved.get(&area)) {
            None => in_area(key, 0),
            Some(Some(&tag)) if tag != 0 => in_area(key, tag),
            Some(_) => {
                restored.dropped += 1;
                continue;
            }
        };
        if area_of(key) != 0 && !this_window(area_of(key), tat) {
            restored.foreign += 1;
            continue;
        }
        store.restore(key, tat);
        restored.keys += 1;
    }
    if saved.legacy && restored.keys > 0 {
        areas.set_legacy();
    }
    restored
}

/// Unix nanoseconds of a file → this process's monotonic timeline, the time since writing
/// counted from the later of the writer's now (`written_at`) and this clock's.
fn on_this_clock(written_at: Option<u64>, clock: &dyn Clock) -> impl Fn(u64) -> u64 + '_ {
    let now = clock.now_ns();
    let base = clock.unix_ns_at(now).max(written_at.unwrap_or(0));
    move |unix| match unix.checked_sub(base) {
        Some(lead) => now.saturating_add(lead),
        None => now.saturating_sub(base - unix),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A file written under another calendar (a policy's window went from a month to a
    /// day between the processes) restores none of the month's usage nor its floor: the
    /// floor would sit above every TAT the day's calendar writes, so making room could
    /// no longer raise it, and a key dropped would come back at no usage. Usage of the
    /// window both calendars share, and the rate keys, come back.
    #[test]
    fn a_file_of_another_calendar_restores_only_this_windows_usage() {
        use crate::clock::FakeClock;
        use crate::limit::TatTable;
        const S: u64 = 1_000_000_000;
        let clock = FakeClock::at(100 * S);
        let now = clock.now_ns();
        let (day_end, month_end) = (now + 86_400 * S, now + 30 * 86_400 * S);
        let unix = |mono: u64| clock.unix_ns_at(mono);
        // Area 5 in the writing process.
        let file_tag = 5u64 << (64 - super::super::memory::areas::AREA_BITS);
        let (monthly, shared, rate) = (0x11, 0x12, 0x13);
        let saved = Saved {
            seeds: [1, 2, 3, 4],
            areas: vec![SavedArea {
                name: "plan".into(),
                area: 5,
                floor: unix(month_end + 5),
            }],
            keys: vec![
                (in_area(monthly, file_tag), unix(month_end + 7)),
                (in_area(shared, file_tag), unix(day_end + 3)),
                (rate, unix(now + S)),
            ],
            legacy: false,
            written_at: Some(unix(now)),
        };
        // The file restored into a store whose "plan" runs `calendar`, in its window
        // ending at `end`: the store, the policy's area tag, what restoring did.
        let restored_under = |calendar: &str, end: u64| {
            let (store, tag) = MemoryStore::with_area(256, "plan", calendar);
            let end_of = |area| (area == area_of(tag)).then_some(end);
            let restored = restore(&saved, &store, &clock, end_of);
            (store, tag, restored)
        };
        let (store, tag, restored) = restored_under("Day UTC", day_end);
        assert_eq!(
            restored,
            Restored {
                keys: 2,
                dropped: 0,
                foreign: 1
            }
        );
        assert_eq!(
            store.areas().floor(area_of(tag)),
            0,
            "the month's floor stays out"
        );
        assert_eq!(
            store.peek(in_area(monthly, tag)),
            0,
            "the month's usage is no day's"
        );
        assert_eq!(store.peek(in_area(shared, tag)), day_end + 3);
        assert_eq!(store.peek(rate), now + S);
        // The same file under the calendar it was written with restores it whole.
        let (store, tag, restored) = restored_under("Month UTC", month_end);
        assert_eq!(
            (restored.keys, restored.foreign),
            (2, 1),
            "the day's key is no month's"
        );
        assert_eq!(store.areas().floor(area_of(tag)), month_end + 5);
        assert_eq!(store.peek(in_area(monthly, tag)), month_end + 7);
    }

    /// A file written by a process whose clock ran a year ahead (wrong at its boot) and
    /// read on a clock put right: each key leads by what it led by when written, not by
    /// a year more. The writer's own elapsed time still counts when the reader is later.
    #[test]
    fn a_writer_clock_ahead_of_the_readers_locks_no_key_out() {
        use crate::clock::FakeClock;
        use crate::limit::TatTable;
        const S: u64 = 1_000_000_000;
        const YEAR: u64 = 365 * 86_400 * S;
        let clock = FakeClock::at(100 * S);
        let now = clock.now_ns();
        let written_at = clock.unix_ns_at(now) + YEAR;
        let saved = Saved {
            seeds: [1, 2, 3, 4],
            areas: Vec::new(),
            keys: vec![(0x21, written_at + 10 * S), (0x22, written_at - S)],
            legacy: false,
            written_at: Some(written_at),
        };
        let store = MemoryStore::new(256);
        let restored = restore(&saved, &store, &clock, |_| None);
        assert_eq!(restored.keys, 1, "a key idle when written stays out");
        assert_eq!(
            store.peek(0x21),
            now + 10 * S,
            "ten seconds ahead, not a year"
        );
        // Read 4 s after it was written, on a right clock: 6 s of the lead remain.
        let saved = Saved {
            written_at: Some(clock.unix_ns_at(now) - 4 * S),
            keys: vec![(0x23, clock.unix_ns_at(now) + 6 * S)],
            ..saved
        };
        restore(&saved, &store, &clock, |_| None);
        assert_eq!(store.peek(0x23), now + 6 * S);
    }

    /// A reader whose clock is a millisecond behind the file's `written_at` (a step back
    /// before the restart): a quota key's usage and its area's floor come back whole. A
    /// window's end is the calendar's instant, so moving them with the rate keys would take
    /// a million units off each and drop every key that had used fewer.
    #[test]
    fn a_reader_clock_behind_the_writers_keeps_every_quota_unit() {
        use crate::clock::FakeClock;
        use crate::limit::TatTable;
        const S: u64 = 1_000_000_000;
        let clock = FakeClock::at(100 * S);
        let now = clock.now_ns();
        let end = now + 86_400 * S;
        let unix = |mono: u64| clock.unix_ns_at(mono);
        let (store, tag) = MemoryStore::with_area(256, "plan", "Day UTC");
        let file_tag = 3u64 << (64 - super::super::memory::areas::AREA_BITS);
        let saved = Saved {
            seeds: [1, 2, 3, 4],
            areas: vec![SavedArea {
                name: "plan".into(),
                area: 3,
                floor: unix(end + 2),
            }],
            keys: vec![
                (in_area(0x31, file_tag), unix(end + 5)),
                (0x32, unix(now + S)),
            ],
            legacy: false,
            written_at: Some(unix(now) + 1_000_000),
        };
        let end_of = |area| (area == area_of(tag)).then_some(end);
        let restored = restore(&saved, &store, &clock, end_of);
        assert_eq!((restored.keys, restored.foreign), (2, 0));
        assert_eq!(store.peek(in_area(0x31, tag)), end + 5, "five units used");
        assert_eq!(store.areas().floor(area_of(tag)), end + 2);
        // A rate key counts no time elapsed for the millisecond the reader is behind.
        assert_eq!(store.peek(0x32), now + S - 1_000_000);
    }
}
