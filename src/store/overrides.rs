//! Per-key limits set at run time, as the request path looks them up: by the key's
//! store hash, so composite keys are overridden as easily as single ones. Built whole by
//! the runtime-override manager and swapped in; empty (one relaxed load per tier) when
//! none is set.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::clock::Clock;
use crate::config::compile::Applied;

/// One key's runtime limit and when it stops applying (wall-clock ms, `None`: never).
#[derive(Debug, Clone, Copy)]
pub struct KeyOverride {
    pub applied: Applied,
    pub expires_at_ms: Option<u64>,
}

/// The runtime overrides in effect, by store key hash.
#[derive(Default)]
pub struct KeyOverrides {
    active: AtomicBool,
    table: ArcSwap<HashMap<u64, KeyOverride>>,
}

impl KeyOverrides {
    /// Puts `table` in effect for every request decided from now on.
    pub fn replace(&self, table: HashMap<u64, KeyOverride>) {
        let active = !table.is_empty();
        self.table.store(Arc::new(table));
        self.active.store(active, Ordering::Release);
    }

    /// The runtime limit of `key`, unless none is set or it has expired.
    pub fn get(&self, key: u64, clock: &dyn Clock) -> Option<Applied> {
        if !self.active.load(Ordering::Acquire) {
            return None;
        }
        let hit = *self.table.load().get(&key)?;
        match hit.expires_at_ms {
            Some(at) if clock.wall_ms() >= at => None,
            _ => Some(hit.applied),
        }
    }
}
