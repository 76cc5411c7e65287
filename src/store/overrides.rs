//! Per-key limits set at run time, as the request path looks them up: by the key's
//! store hash, so composite keys are overridden as easily as single ones. A change costs
//! the same at any number of overrides: it lands in a small delta layer over a base
//! table (both swapped in whole, readers never wait), and the delta is folded into the
//! base once it holds [`MAX_DELTA`] changes, a cost of O(n / MAX_DELTA) per change. Empty
//! (one relaxed load per tier) when none is set.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::clock::Clock;
use crate::config::Applied;

/// One key's runtime limit and when it stops applying (wall-clock ms, `None`: never).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct KeyOverride {
    pub applied: Applied,
    pub expires_at_ms: Option<u64>,
}

/// Changes the delta layer holds before it is folded into the base (copying the delta
/// per change costs O(MAX_DELTA); folding it, O(n) once per MAX_DELTA changes).
pub const MAX_DELTA: usize = 512;

#[derive(Default)]
struct Layers {
    base: Arc<HashMap<u64, KeyOverride>>,
    /// Changes since the base was made: `None` removes the base's entry.
    delta: HashMap<u64, Option<KeyOverride>>,
    /// Keys with an override, the two layers read together.
    len: usize,
}

impl Layers {
    fn get(&self, key: u64) -> Option<KeyOverride> {
        if !self.delta.is_empty() {
            if let Some(changed) = self.delta.get(&key) {
                return *changed;
            }
        }
        self.base.get(&key).copied()
    }
}

/// The runtime overrides in effect, by store key hash. One writer at a time (the runtime
/// override manager); any number of readers.
#[derive(Default)]
pub struct KeyOverrides {
    active: AtomicBool,
    table: ArcSwap<Layers>,
}

impl KeyOverrides {
    /// Puts `table` in effect for every request decided from now on.
    pub fn replace(&self, table: HashMap<u64, KeyOverride>) {
        self.swap(Layers {
            len: table.len(),
            base: Arc::new(table),
            delta: HashMap::new(),
        });
    }

    /// Sets (`Some`) or removes (`None`) one key's override, in effect for every request
    /// decided from now on.
    pub fn set(&self, key: u64, value: Option<KeyOverride>) {
        let now = self.table.load();
        let len = now.len + usize::from(value.is_some()) - usize::from(now.get(key).is_some());
        let mut delta = now.delta.clone();
        delta.insert(key, value);
        let next = if delta.len() > MAX_DELTA {
            let mut base = HashMap::clone(&now.base);
            for (k, v) in delta {
                match v {
                    Some(v) => base.insert(k, v),
                    None => base.remove(&k),
                };
            }
            Layers {
                base: Arc::new(base),
                delta: HashMap::new(),
                len,
            }
        } else {
            Layers {
                base: now.base.clone(),
                delta,
                len,
            }
        };
        self.swap(next);
    }

    fn swap(&self, layers: Layers) {
        let active = layers.len > 0;
        self.table.store(Arc::new(layers));
        self.active.store(active, Ordering::Release);
    }

    /// Whether any runtime override is set (expired ones included): one flag's load.
    #[inline]
    pub fn any(&self) -> bool {
        self.active.load(Ordering::Acquire)
    }

    /// The runtime limit of `key`, unless none is set or it has expired.
    ///
    /// Inlined: every tier of every request asks, and most gateways have no override
    /// set, so the answer is one flag's load in the caller; the look-up is out of line.
    #[inline]
    pub fn get(&self, key: u64, clock: &dyn Clock) -> Option<Applied> {
        if !self.any() {
            return None;
        }
        self.look_up(key, clock)
    }

    /// [`KeyOverrides::get`] once some override is set: the key's, unless it expired.
    #[inline(never)]
    fn look_up(&self, key: u64, clock: &dyn Clock) -> Option<Applied> {
        let hit = self.table.load().get(key)?;
        match hit.expires_at_ms {
            Some(at) if clock.wall_ms() >= at => None,
            _ => Some(hit.applied),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::FakeClock;

    fn one(n: u64) -> KeyOverride {
        KeyOverride {
            applied: Applied::Concurrency(n as u32),
            expires_at_ms: None,
        }
    }

    /// Against a plain map: every set and removal reads back the same, across folds.
    #[test]
    fn layers_read_like_one_map() {
        let clock = FakeClock::default();
        let table = KeyOverrides::default();
        let mut model: HashMap<u64, KeyOverride> = HashMap::new();
        table.replace((0..100).map(|k| (k, one(k))).collect());
        model.extend((0..100).map(|k| (k, one(k))));
        for i in 0..5_000u64 {
            let key = (i * 7919) % 700;
            if i % 3 == 0 {
                table.set(key, None);
                model.remove(&key);
            } else {
                table.set(key, Some(one(i)));
                model.insert(key, one(i));
            }
            assert!(table.table.load().delta.len() <= MAX_DELTA);
            assert_eq!(table.table.load().len, model.len());
            if i % 97 == 0 {
                for k in 0..700 {
                    let want = model.get(&k).map(|o| o.applied);
                    assert_eq!(table.get(k, &clock), want, "key {k} after {i} changes");
                }
            }
        }
        for k in 0..700 {
            table.set(k, None);
        }
        assert!(
            !table.active.load(Ordering::Acquire),
            "empty once all are removed"
        );
    }
}
