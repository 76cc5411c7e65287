//! Areas of the embedded store: rate keys in one, each calendar quota policy's keys in an
//! area of its own, so that no policy's keys can take another's room.
//!
//! A rate key goes idle within its τ, but a quota key holds its usage until its window
//! ends: a month. Were they in one table, a client inventing values of a quota's key could
//! fill the store for a month and send every new key of every other policy to its
//! overflow key. So each quota policy's keys live in their own area with their own bound
//! (half of `max_keys` is shared among the quota policies), and a full area makes room
//! the way a Space-Saving sketch does: it drops its least-used keys and raises the area's
//! floor to the usage of the most-used one it dropped. A key not in the area is read at
//! that floor, so a dropped key that comes back is charged at least what it had used —
//! memory is bounded and nobody gains units by being forgotten; a new key pays the floor,
//! which a flood of one-unit keys leaves at one unit.
//!
//! The area is carried in a key's hash (its top [`AREA_BITS`] bits), so every operation on
//! a key finds its area without being told: `0` for rate keys, `1..AREAS` for quota
//! policies, assigned by name and kept for the life of the process (a reload keeps them;
//! the state file names them).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicU8, AtomicUsize, Ordering};

use parking_lot::Mutex;

/// Bits of a key's hash that name its area: the ones the key hasher leaves clear.
pub const AREA_BITS: u32 = crate::key::compose::STORE_BITS;
pub(super) const AREA_SHIFT: u32 = 64 - AREA_BITS;
/// Every bit that names an area.
pub const AREA_MASK: u64 = ((1 << AREA_BITS) - 1) << AREA_SHIFT;
/// Areas: the rate keys' and one per quota policy (at most `AREAS - 1` of them).
pub const AREAS: usize = 1 << AREA_BITS;
/// Shards of a quota policy's area: few keys change at once in one policy.
pub const QUOTA_SHARDS: usize = 8;

/// The area a key's hash names.
#[inline]
pub fn area_of(key: u64) -> usize {
    (key >> AREA_SHIFT) as usize
}

/// `hash` placed in area `tag` (as returned by [`Areas::tag`]).
#[inline]
pub fn in_area(hash: u64, tag: u64) -> u64 {
    (hash & !AREA_MASK) | tag
}

/// One quota policy's area: its bound per shard and its floor.
struct Area {
    shard_cap: AtomicUsize,
    /// The highest TAT dropped to make room: a key absent from the area is read at it.
    floor: AtomicU64,
    /// Its keys are another calendar's (its policy's changed) or another policy's (it
    /// was freed and given again): a [`Stale`] as a number (0: neither), which the store
    /// empties it by ([`Areas::take_stale`]).
    stale: AtomicU8,
    /// A policy has held it in this process.
    held: AtomicBool,
}

/// Which policy holds which area, each area's bound and floor, and the rate keys' bound.
pub struct Areas {
    max_keys: usize,
    rate_shards: usize,
    rate_shard_cap: AtomicUsize,
    quotas: Box<[Area]>,
    /// Which policy holds which area, and which area a policy that left held.
    names: Mutex<Names>,
    /// A state file of the format before areas was read: its quota keys sit among the
    /// rate keys until each is next used, and is then moved to its area.
    legacy: AtomicBool,
}

/// Why an area's keys are not its policy's usage now.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stale {
    /// Its policy's calendar changed: the keys of a window both calendars share are
    /// still its usage, the others not.
    OtherCalendar = 1,
    /// It went to another policy: no key in it is the new policy's.
    OtherPolicy = 2,
}

/// Policy name → area, and each area's calendar as the config writes it: of the policies
/// the config names (`held`), and of those that left (`released`), so that one that comes
/// back finds its area — its keys and floor — rather than starting every key over in
/// another. A released area given to another policy is forgotten.
#[derive(Default)]
struct Names {
    held: HashMap<String, (usize, String)>,
    released: HashMap<String, (usize, String)>,
}

impl Areas {
    pub fn new(max_keys: usize, rate_shards: usize) -> Self {
        Self {
            max_keys,
            rate_shards,
            rate_shard_cap: AtomicUsize::new((max_keys / rate_shards).max(1)),
            quotas: (1..AREAS)
                .map(|_| Area {
                    shard_cap: AtomicUsize::new(1),
                    floor: AtomicU64::new(0),
                    stale: AtomicU8::new(0),
                    held: AtomicBool::new(false),
                })
                .collect(),
            names: Mutex::new(Names::default()),
            legacy: AtomicBool::new(false),
        }
    }

    /// The area tag (hash bits) of `policy`: its own when it is a quota policy the
    /// store was arranged for, else the rate keys' (0).
    pub fn tag(&self, policy: &str) -> u64 {
        self.names
            .lock()
            .held
            .get(policy)
            .map_or(0, |&(area, _)| (area as u64) << AREA_SHIFT)
    }

    /// The area of each quota policy by name, for the state file.
    pub fn named(&self) -> Vec<(String, usize)> {
        self.names
            .lock()
            .held
            .iter()
            .map(|(name, &(area, _))| (name.clone(), area))
            .collect()
    }

    /// Gives each of `quotas` (policy name, its calendar as written) an area — the one it
    /// had, or a free one — and splits the bound: half of `max_keys` among the quota
    /// policies, the rest to rate keys. A policy whose calendar changed starts with no
    /// floor and its area is marked stale, as is a freed area given to another policy:
    /// their keys are another calendar's usage, which making room would otherwise weigh
    /// against the new calendar's (a floor raised to a TAT the new calendar reads as no
    /// usage at all). Areas of policies no longer named are freed (their keys stay until idle, in
    /// an area nobody's keys hash to) and remembered: a policy that comes back gets its
    /// own again unless another took it meanwhile (not one that left for another kind:
    /// [`Self::forget_turned`]). More quota policies than areas share the rate
    /// keys' area, as before areas; that is logged.
    pub fn arrange(&self, quotas: &[(&str, String)]) {
        let mut names = self.names.lock();
        let Names { held, released } = &mut *names;
        let gone: Vec<String> = (held.keys())
            .filter(|name| !quotas.iter().any(|(q, _)| q == name))
            .cloned()
            .collect();
        for name in gone {
            if let Some(area) = held.remove(&name) {
                released.insert(name, area);
            }
        }
        let mut arriving = Vec::new();
        for (name, calendar) in quotas {
            match held.get_mut(*name) {
                Some((area, kept)) => {
                    if kept != calendar {
                        self.start_over(*area, Some(Stale::OtherCalendar));
                        calendar.clone_into(kept);
                    }
                }
                None => arriving.push((*name, calendar)),
            }
        }
        // Policies coming back first: a new one listed before them must not take their
        // area while another is free.
        arriving.sort_by_key(|(name, _)| !released.contains_key(*name));
        for (name, calendar) in arriving {
            let Some(area) = self.area_for(name, calendar, held, released) else {
                tracing::warn!(policy = %name, "more than {} calendar quota policies: this one's keys share the rate keys' area of the memory store", AREAS - 1);
                continue;
            };
            held.insert(name.to_owned(), (area, calendar.clone()));
        }
        let q = held.len();
        let each = (self.max_keys / 2).checked_div(q).unwrap_or(0);
        for &(area, _) in held.values() {
            self.quotas[area - 1]
                .shard_cap
                .store((each / QUOTA_SHARDS).max(1), Ordering::Relaxed);
        }
        let rate = self.max_keys - each * q;
        self.rate_shard_cap
            .store((rate / self.rate_shards).max(1), Ordering::Relaxed);
    }

    /// Forgets the areas remembered for `names`: policies that left the quotas for another
    /// kind (a rate, a cap). Turned back into a quota, such a policy starts its keys afresh
    /// — as the reload's warning says, and as its keys do on Redis — instead of finding the
    /// usage it left: its old area, given to anyone, is then another policy's and emptied.
    /// A policy removed and restored keeps finding its own.
    pub fn forget_turned<'a>(&self, names: impl IntoIterator<Item = &'a str>) {
        let mut all = self.names.lock();
        for name in names {
            all.released.remove(name);
        }
    }

    /// The area for a quota policy that holds none: the one it held before it left (its
    /// keys and floor still there, untouched since), else a free one no policy that left
    /// held, else the lowest free one — none when every area is held.
    fn area_for(
        &self,
        name: &str,
        calendar: &str,
        held: &HashMap<String, (usize, String)>,
        released: &mut HashMap<String, (usize, String)>,
    ) -> Option<usize> {
        let taken = |a: usize| held.values().any(|&(h, _)| h == a);
        if let Some((area, kept)) = released.remove(name).filter(|&(a, _)| !taken(a)) {
            if kept != calendar {
                self.start_over(area, Some(Stale::OtherCalendar));
            }
            return Some(area);
        }
        let remembered = |a: usize| released.values().any(|&(r, _)| r == a);
        let area = (1..AREAS)
            .find(|&a| !taken(a) && !remembered(a))
            .or_else(|| (1..AREAS).find(|&a| !taken(a)))?;
        // Given to another policy: the one that left it would find another's keys.
        released.retain(|_, (a, _)| *a != area);
        let held_before = self.quotas[area - 1].held.swap(true, Ordering::Relaxed);
        self.start_over(area, held_before.then_some(Stale::OtherPolicy));
        Some(area)
    }

    /// Forgets `area`'s floor: it went to another policy, whose keys owe nothing of the
    /// old one's. Asked again when the store empties the area, which a settle of the old
    /// policy's or a full area making room may have raised meanwhile.
    pub fn clear_floor(&self, area: usize) {
        if area > 0 {
            self.quotas[area - 1].floor.store(0, Ordering::Relaxed);
        }
    }

    /// `area` starts over: no floor, and, when its keys are `stale` (another calendar's
    /// or another policy's), the store empties it.
    fn start_over(&self, area: usize, stale: Option<Stale>) {
        self.clear_floor(area);
        if let Some(why) = stale {
            (self.quotas[area - 1].stale).fetch_max(why as u8, Ordering::Relaxed);
        }
    }

    /// How many keys one shard of `area` may hold.
    #[inline]
    pub fn shard_cap(&self, area: usize) -> usize {
        match area {
            0 => self.rate_shard_cap.load(Ordering::Relaxed),
            a => self.quotas[a - 1].shard_cap.load(Ordering::Relaxed),
        }
    }

    /// The TAT a key absent from `area` is read at: 0 (idle) for rate keys.
    #[inline]
    pub fn floor(&self, area: usize) -> u64 {
        match area {
            0 => 0,
            a => self.quotas[a - 1].floor.load(Ordering::Relaxed),
        }
    }

    /// Raises `area`'s floor to `tat` (the highest TAT dropped to make room, or a state
    /// file's floor at start).
    pub fn raise_floor(&self, area: usize, tat: u64) {
        if area > 0 {
            self.quotas[area - 1]
                .floor
                .fetch_max(tat, Ordering::Relaxed);
        }
    }

    /// Why `area` (a quota policy's) was marked stale since last asked, if it was;
    /// asking clears the mark.
    pub fn take_stale(&self, area: usize) -> Option<Stale> {
        let marked = match area {
            0 => 0,
            a => self.quotas[a - 1].stale.swap(0, Ordering::Relaxed),
        };
        match marked {
            0 => None,
            1 => Some(Stale::OtherCalendar),
            _ => Some(Stale::OtherPolicy),
        }
    }

    pub fn set_legacy(&self) {
        self.legacy.store(true, Ordering::Relaxed);
    }

    /// Whether quota keys may still sit among the rate keys (see [`Areas::set_legacy`]).
    #[inline]
    pub fn legacy(&self) -> bool {
        self.legacy.load(Ordering::Relaxed)
    }
}
