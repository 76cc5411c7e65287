//! The two limiters the store benchmarks compare, built the same way everywhere: tollgate's
//! embedded store deciding one rate tier a key, and `governor`'s keyed limiter (dashmap).

use std::num::NonZeroU32;

use governor::{Quota as GQuota, RateLimiter};
use tollgate::clock::{Clock, MonotonicClock};
use tollgate::key::{KeyHasher, KeyPart};
use tollgate::limit::{evaluate, Mode, Quota, Tier};
use tollgate::store::MemoryStore;

pub type Governor = governor::DefaultKeyedRateLimiter<u64>;

/// Everything is admitted in both (here and in [`Tollgate`]): the benchmark measures the decision, not denials.
pub fn governor() -> Governor {
    let rate = NonZeroU32::new(u32::MAX).expect("nonzero");
    RateLimiter::dashmap(
        GQuota::per_second(rate).allow_burst(NonZeroU32::new(1_000).expect("nonzero")),
    )
}

/// tollgate's store, its clock and one quota: a decision on a key as the proxy makes it
/// (the key hashed with the store's keyed hasher on every call, from the policy's hash
/// state worked out once, as a config version's policy plan holds it).
pub struct Tollgate {
    pub store: MemoryStore,
    clock: MonotonicClock,
    quota: Quota,
    policy: KeyHasher<ahash::AHasher>,
}

impl Tollgate {
    pub fn new(max_keys: usize) -> Self {
        let store = MemoryStore::new(max_keys);
        let policy = KeyHasher::new(store.key_hasher(), "bench");
        Self {
            store,
            clock: MonotonicClock::new(),
            quota: Quota::new(1_000_000_000, 1_000_000_000, 1_000).expect("quota"),
            policy,
        }
    }

    #[inline]
    pub fn check(&self, key: u64) -> bool {
        let mut h = self.policy.clone();
        h.part(&KeyPart::Bytes(key.to_le_bytes()[..].into()));
        let tier = [Tier {
            window: None,
            reserve: None,
            overflow: 0,
            quota: self.quota,
            mode: Mode::Enforce,
            max_delay_ns: 0,
            key: h.finish(),
        }];
        evaluate(&self.store, &tier, self.clock.now_ns(), 1).admitted
    }
}
