//! Drawing units for a body as it streams (`request_bytes` / `response_bytes` tiers): in
//! the process-local table, or in Redis (`draw.lua`), a chunk at a time, never taking the
//! key's TAT further ahead of now than its bound (the burst and `max_debt`).

use std::sync::LazyLock;

use redis::Script;

use super::settle::PendingSettle;
use crate::limit::settle::{draw, Drawn};
use crate::limit::{Decision, TatTable};
use crate::store::error::StoreError;
use crate::store::memory::MemoryStore;
use crate::store::redis::RedisStore;

static DRAW: LazyLock<Script> = LazyLock::new(|| super::script(include_str!("draw.lua")));

/// What a draw got, as the metered body reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Draw {
    /// `units` drawn; the key's TAT is now `ahead_ns` ahead of now.
    Granted { units: u64, ahead_ns: u64 },
    /// `units` let through without a charge to the key's store: it failed, and
    /// `on_error = "allow"` granted them or the local table (`"local"`) did.
    Unchecked { units: u64 },
    /// Not even the units needed fit: they will in `wait_ns`.
    Wait { wait_ns: u64 },
}

/// What a bytes tier needs before a body that has moved `bytes` in all may pass them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Need {
    /// Already paid for.
    Paid,
    /// At least `need` more units, `want` to draw a chunk ahead.
    Draw { want: u64, need: u64 },
    /// More than `max_cost`: the body is cut.
    OverMaxCost,
}

/// Bytes a tier draws for at least, per call: with Redis one call moves at least this
/// much (or an eighth of the burst, when larger).
pub const CHUNK_BYTES: u64 = 64 * 1024;

impl PendingSettle {
    /// What this tier needs for `bytes` moved in all (see [`Need`]).
    pub fn need(&self, bytes: u64) -> Need {
        let settle = self.settle();
        let moved = bytes.div_ceil(settle.unit.get());
        if moved > settle.max_cost {
            return Need::OverMaxCost;
        }
        let charged = self.covered();
        if moved <= charged {
            return Need::Paid;
        }
        let need = moved - charged;
        let burst = self.tau_ns / self.t_ns.max(1);
        let chunk = CHUNK_BYTES.div_ceil(settle.unit.get()).max(burst / 8);
        let want = need.max(chunk).min(settle.max_cost.saturating_sub(charged));
        Need::Draw { want, need }
    }
}

/// Draws between `need` and `want` units on `pending`'s key in the local table at `now`.
pub fn draw_local(
    local: &MemoryStore,
    pending: &PendingSettle,
    want: u64,
    need: u64,
    now: u64,
) -> Draw {
    let bound = pending.bound_ns();
    let mut drawn = Drawn::Wait { wait_ns: 0 };
    local.apply(pending.key, |tat| {
        drawn = draw(tat, now, pending.t_ns, want, need, bound);
        match drawn {
            Drawn::Granted { units, tat: after } => Decision {
                admitted: units > 0,
                tat: after,
                remaining: 0,
                wait_ns: 0,
                delay_ns: 0,
                until_idle_ns: 0,
            },
            Drawn::Wait { .. } => Decision {
                admitted: false,
                tat,
                remaining: 0,
                wait_ns: 0,
                delay_ns: 0,
                until_idle_ns: 0,
            },
        }
    });
    match drawn {
        Drawn::Granted { units, tat } => Draw::Granted {
            units,
            ahead_ns: tat.saturating_sub(now),
        },
        Drawn::Wait { wait_ns } => Draw::Wait { wait_ns },
    }
}

/// The same on `pending`'s Redis key `key`, on Redis's clock.
pub async fn draw_remote(
    remote: &RedisStore,
    key: &str,
    pending: &PendingSettle,
    want: u64,
    need: u64,
) -> Result<Draw, StoreError> {
    let mut inv = DRAW.prepare_invoke();
    inv.key(key)
        .arg(pending.t_ns)
        .arg(pending.bound_ns())
        .arg(want)
        .arg(need);
    let reply: Vec<i64> = remote.invoke(&inv).await?;
    let nonneg = |v: i64| u64::try_from(v).map_err(|_| StoreError::Reply);
    match reply.as_slice() {
        [0, wait] if need > 0 => Ok(Draw::Wait {
            wait_ns: nonneg(*wait)?,
        }),
        [units, debt] => Ok(Draw::Granted {
            units: nonneg(*units)?,
            ahead_ns: nonneg(*debt)?,
        }),
        _ => Err(StoreError::Reply),
    }
}
