//! Circuit breakers for the remote store: after a few consecutive failures requests stop
//! waiting on the store for a while and take the `on_error` path at once. A single Redis
//! (or Sentinel's master) has one; a Cluster has one per group of hash slots
//! ([`Breakers`]), so a dead master opens only the breakers of its own slots and the
//! others' requests go on.

use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::time::Duration;

/// Consecutive failures that open the breaker.
pub const TRIP_AFTER: u32 = 3;
/// How long it stays open before one request (or the background probe) tries again.
pub const OPEN_FOR: Duration = Duration::from_secs(1);

#[derive(Debug, Default)]
pub struct Breaker {
    failures: AtomicU32,
    /// Clock nanoseconds until which calls are refused; 0 when closed.
    open_until: AtomicU64,
}

impl Breaker {
    pub fn is_open(&self) -> bool {
        self.open_until.load(Ordering::Acquire) != 0
    }

    /// Whether a call may go to the store now. When the open period has passed, exactly
    /// one caller is let through as a probe (and the period is extended for the rest).
    pub fn allow(&self, now_ns: u64) -> bool {
        let until = self.open_until.load(Ordering::Acquire);
        if until == 0 {
            return true;
        }
        if now_ns < until {
            return false;
        }
        let next = now_ns.saturating_add(OPEN_FOR.as_nanos() as u64);
        self.open_until
            .compare_exchange(until, next, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }

    pub fn success(&self) {
        self.failures.store(0, Ordering::Release);
        self.open_until.store(0, Ordering::Release);
    }

    /// Opens the breaker until a probe closes it ([`Breaker::success`]): the background
    /// probe found the store unreachable. Returns true when it was closed.
    pub fn trip(&self) -> bool {
        self.failures.store(TRIP_AFTER, Ordering::Release);
        self.open_until.swap(u64::MAX, Ordering::AcqRel) == 0
    }

    /// Records a failure; returns true when this one opened the breaker.
    pub fn failure(&self, now_ns: u64) -> bool {
        let failures = self.failures.fetch_add(1, Ordering::AcqRel) + 1;
        if failures >= TRIP_AFTER && self.open_until.load(Ordering::Acquire) == 0 {
            let until = now_ns.saturating_add(OPEN_FOR.as_nanos() as u64).max(1);
            return self
                .open_until
                .compare_exchange(0, until, Ordering::AcqRel, Ordering::Acquire)
                .is_ok();
        }
        false
    }
}

/// Hash slots per breaker group in a Cluster: 64 groups of 256 slots. A master's slot
/// range spans whole groups except at its two ends, so a dead master costs the others
/// at most two shared groups (~3 % of their slots) while it is down.
pub const SLOTS_PER_GROUP: u16 = 256;
const GROUPS: usize = 16_384 / SLOTS_PER_GROUP as usize;

/// The breakers of one store.
pub struct Breakers {
    groups: Vec<Breaker>,
}

impl Breakers {
    /// One breaker, or with `cluster` one per group of hash slots.
    pub fn new(cluster: bool) -> Self {
        let n = if cluster { GROUPS } else { 1 };
        Self {
            groups: (0..n).map(|_| Breaker::default()).collect(),
        }
    }

    /// The group of a hash tag (0 for a single Redis).
    pub fn group_of(&self, tag: &str) -> usize {
        if self.groups.len() == 1 {
            return 0;
        }
        usize::from(slot(tag.as_bytes()) / SLOTS_PER_GROUP)
    }

    pub fn get(&self, group: usize) -> &Breaker {
        &self.groups[group.min(self.groups.len() - 1)]
    }

    /// The groups open now.
    pub fn open(&self) -> impl Iterator<Item = usize> + '_ {
        (0..self.groups.len()).filter(|&g| self.groups[g].is_open())
    }

    /// Whether every group is open (the store answers nothing).
    pub fn all_open(&self) -> bool {
        self.groups.iter().all(Breaker::is_open)
    }

    pub fn any_open(&self) -> bool {
        self.groups.iter().any(Breaker::is_open)
    }

    /// Opens every group until each is closed: a Cluster never reached answers for none
    /// of its slots, and its breakers say so from the first attempt (not "closed" until
    /// three requests of one group have failed).
    pub fn trip_all(&self) {
        for breaker in &self.groups {
            breaker.trip();
        }
    }

    /// Closes every group: the Cluster [`Breakers::trip_all`] opened has been reached.
    pub fn close_all(&self) {
        for breaker in &self.groups {
            breaker.success();
        }
    }

    pub fn len(&self) -> usize {
        self.groups.len()
    }

    pub fn is_empty(&self) -> bool {
        self.groups.is_empty()
    }
}

/// The Redis Cluster hash slot of a hash tag: CRC16 (XMODEM) mod 16,384.
pub fn slot(tag: &[u8]) -> u16 {
    let mut crc: u16 = 0;
    for &b in tag {
        crc ^= u16::from(b) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc % 16_384
}

/// A hash tag whose slot lies in `first..=last`, for a write to the master serving them;
/// `None` for no slot.
pub fn tag_in_slots(first: u16, last: u16) -> Option<String> {
    if first > last || last >= 16_384 {
        return None;
    }
    // Every slot has a tag among the first few hundred thousand (CRC16 spreads them).
    (0u64..1_000_000)
        .map(|n| format!("probe-{n}"))
        .find(|t| (first..=last).contains(&slot(t.as_bytes())))
}

/// A hash tag whose slot falls in `group`, for probing that group's master.
pub fn tag_in_group(group: usize) -> String {
    let first = u16::try_from(group).map_or(u16::MAX, |g| g.saturating_mul(SLOTS_PER_GROUP));
    tag_in_slots(first, first.saturating_add(SLOTS_PER_GROUP - 1)).unwrap_or_default()
}

/// The key the breaker's probe writes on the node holding hash tag `tag`.
pub fn probe_key(tag: &str) -> String {
    format!("{}:{{{tag}}}:probe", crate::key::redis_key::PREFIX)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn opens_after_consecutive_failures_and_probes_once() {
        let b = Breaker::default();
        let s = 1_000_000_000;
        assert!(!b.failure(s));
        assert!(!b.failure(s));
        assert!(b.allow(s));
        assert!(b.failure(s), "third failure opens");
        assert!(!b.allow(s + 1));
        assert!(b.allow(2 * s), "one probe after the open period");
        assert!(!b.allow(2 * s), "only one");
        b.success();
        assert!(b.allow(2 * s) && !b.is_open());
    }

    #[test]
    fn cluster_groups_follow_hash_slots() {
        // Known slots (redis-cli CLUSTER KEYSLOT): "foo" 12182, "bar" 5061.
        assert_eq!(slot(b"foo"), 12182);
        assert_eq!(slot(b"bar"), 5061);
        let b = Breakers::new(true);
        assert_eq!(b.len(), 64);
        assert_eq!(b.group_of("foo"), 12182 / 256);
        assert_eq!(Breakers::new(false).group_of("foo"), 0);
        for g in [0, 17, 63] {
            assert_eq!(b.group_of(&tag_in_group(g)), g);
        }
        let s = 1_000_000_000;
        for _ in 0..TRIP_AFTER {
            b.get(47).failure(s);
        }
        assert_eq!(b.open().collect::<Vec<_>>(), vec![47]);
        assert!(b.any_open() && !b.all_open());
    }
}
