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
const AREA_SHIFT: u32 = 64 - AREA_BITS;
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
    /// own again unless another took it meanwhile. More quota policies than areas share the rate
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
                        self.start_over(*area);
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
                self.start_over(area);
            }
            return Some(area);
        }
        let remembered = |a: usize| released.values().any(|&(r, _)| r == a);
        let area = (1..AREAS)
            .find(|&a| !taken(a) && !remembered(a))
            .or_else(|| (1..AREAS).find(|&a| !taken(a)))?;
        // Given to another policy: the one that left it would find another's keys.
        released.retain(|_, (a, _)| *a != area);
        let given = &self.quotas[area - 1];
        given.floor.store(0, Ordering::Relaxed);
        if given.held.swap(true, Ordering::Relaxed) {
            given
                .stale
                .fetch_max(Stale::OtherPolicy as u8, Ordering::Relaxed);
        }
        Some(area)
    }

    /// `area`'s keys are another calendar's: no floor, and the store empties it.
    fn start_over(&self, area: usize) {
        self.quotas[area - 1].floor.store(0, Ordering::Relaxed);
        (self.quotas[area - 1].stale).fetch_max(Stale::OtherCalendar as u8, Ordering::Relaxed);
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn quota_policies_share_half_the_bound_and_keep_their_areas() {
        let areas = Areas::new(1024, 16);
        assert_eq!(
            areas.shard_cap(0),
            64,
            "no quota: every key may be a rate key"
        );
        areas.arrange(&[("monthly", "month".into()), ("daily", "day".into())]);
        let (m, d) = (areas.tag("monthly"), areas.tag("daily"));
        assert!(m != 0 && d != 0 && m != d);
        assert_eq!(areas.tag("rate"), 0);
        assert_eq!(areas.shard_cap(area_of(m)), 1024 / 2 / 2 / QUOTA_SHARDS);
        assert_eq!(areas.shard_cap(0), 512 / 16);
        areas.raise_floor(area_of(m), 77);
        areas.arrange(&[("monthly", "month".into())]);
        assert_eq!(areas.tag("monthly"), m, "kept across a reload");
        assert_eq!(areas.tag("daily"), 0, "freed");
        assert_eq!(areas.floor(area_of(m)), 77);
        areas.arrange(&[("monthly", "day".into())]);
        assert_eq!(
            areas.floor(area_of(m)),
            0,
            "a new calendar starts without a floor"
        );
    }

    /// A quota policy taken out by one reload and put back by a later one, another
    /// policy added between: it gets its own area back, floor and keys as they were, not
    /// the next free one (where every key would start over). In another order too.
    #[test]
    fn a_policy_that_comes_back_finds_its_area() {
        let areas = Areas::new(1024, 16);
        let month = || "month".to_owned();
        areas.arrange(&[("trial", month()), ("pro", month())]);
        let trial = area_of(areas.tag("trial"));
        areas.raise_floor(trial, 42);
        areas.arrange(&[("pro", month())]);
        areas.arrange(&[("pro", month()), ("enterprise", month())]);
        assert_ne!(
            area_of(areas.tag("enterprise")),
            trial,
            "a remembered area waits"
        );
        areas.arrange(&[
            ("trial", month()),
            ("enterprise", month()),
            ("pro", month()),
        ]);
        assert_eq!(area_of(areas.tag("trial")), trial);
        assert_eq!(areas.floor(trial), 42);
        assert_eq!(areas.take_stale(trial), None, "its keys are its own");
        // Back under another calendar: its area, started over.
        areas.arrange(&[("pro", month())]);
        areas.arrange(&[("pro", month()), ("trial", "day".into())]);
        assert_eq!(area_of(areas.tag("trial")), trial);
        assert_eq!(areas.floor(trial), 0);
        assert_eq!(areas.take_stale(trial), Some(Stale::OtherCalendar));
    }

    /// Every free area remembered by a policy that left: a new policy takes one, and the
    /// policy that held it, coming back, gets another that is started over.
    #[test]
    fn a_remembered_area_given_away_is_forgotten() {
        let areas = Areas::new(1024, 16);
        let all: Vec<(String, String)> = (1..AREAS)
            .map(|i| (format!("q{i}"), "month".to_owned()))
            .collect();
        let named = |skip: &str, extra: Option<&'static str>| {
            let mut list: Vec<(&str, String)> = (all.iter())
                .filter(|(n, _)| n != skip)
                .map(|(n, c)| (n.as_str(), c.clone()))
                .collect();
            list.extend(extra.map(|n| (n, "month".to_owned())));
            list
        };
        areas.arrange(&named("", None));
        let first = area_of(areas.tag("q1"));
        areas.raise_floor(first, 9);
        areas.arrange(&named("q1", None));
        areas.arrange(&named("q1", Some("new")));
        assert_eq!(area_of(areas.tag("new")), first, "the only free area");
        assert_eq!(areas.floor(first), 0);
        assert_eq!(areas.take_stale(first), Some(Stale::OtherPolicy));
        areas.arrange(&named("new", Some("q1")));
        assert_eq!(
            area_of(areas.tag("q1")),
            first,
            "free again, but started over"
        );
        assert_eq!(areas.take_stale(first), Some(Stale::OtherPolicy));
        assert_eq!(areas.floor(first), 0);
    }

    /// Every area held; two policies leave; one comes back in the reload that adds a new
    /// one listed before it: the one coming back gets its own area, the new one the
    /// other free area (the lowest free area is the one coming back's).
    #[test]
    fn a_policy_coming_back_is_served_before_a_new_one() {
        let areas = Areas::new(1024, 16);
        let all: Vec<String> = (1..AREAS).map(|i| format!("q{i}")).collect();
        let month = || "month".to_owned();
        let arrange = |names: &[&str]| {
            let list: Vec<(&str, String)> = names.iter().map(|n| (*n, month())).collect();
            areas.arrange(&list);
        };
        let every: Vec<&str> = all.iter().map(String::as_str).collect();
        arrange(&every);
        let (q1, q2) = (area_of(areas.tag("q1")), area_of(areas.tag("q2")));
        assert!(q1 < q2);
        areas.raise_floor(q1, 7);
        arrange(&every[2..]);
        let mut back = vec!["new", "q1"];
        back.extend_from_slice(&every[2..]);
        arrange(&back);
        assert_eq!(
            area_of(areas.tag("q1")),
            q1,
            "its own, though `new` came first"
        );
        assert_eq!(areas.floor(q1), 7);
        assert_eq!(areas.take_stale(q1), None);
        assert_eq!(
            area_of(areas.tag("new")),
            q2,
            "the area nobody came back for"
        );
    }

    #[test]
    fn a_hash_keeps_its_low_bits_in_an_area() {
        let h = 0xdead_beef_cafe_f00d;
        let tagged = in_area(h, 5 << AREA_SHIFT);
        assert_eq!(area_of(tagged), 5);
        assert_eq!(tagged & !AREA_MASK, h & !AREA_MASK);
        assert_eq!(area_of(in_area(h, 0)), 0);
    }
}
