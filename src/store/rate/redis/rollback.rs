//! What a request's earlier Cluster groups charged, given back when a later group refuses
//! or fails — or when the request is dropped between two groups (its client hung up or
//! reset its stream: the request's future stops at whichever await it was in). The
//! rollback runs on a task of its own, so it completes whatever happens to the request
//! that asked for it: a client cannot spend a shared tier (a route's, a tenant's) by
//! hanging up after its group was charged and before its own key's group was asked.

use std::sync::{Arc, LazyLock};

use arrayvec::ArrayVec;
use redis::{Script, ScriptInvocation};

use super::{key_of, tat_stamp, Group, Reply};
use crate::limit::{calendar, MAX_DECISIONS};
use crate::store::redis::RedisStore;
use crate::store::tiers::RateTier;

static ROLLBACK: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("../rollback.lua")));

/// The groups a check charged so far: kept once the request is admitted
/// ([`Written::keep`]), rolled back otherwise, when dropped included.
pub(super) struct Written<'c> {
    remote: &'c Arc<RedisStore>,
    tiers: &'c [RateTier],
    groups: &'c [Group],
    cost: u64,
    charged: ArrayVec<(usize, Reply), MAX_DECISIONS>,
}

impl<'c> Written<'c> {
    pub fn new(
        remote: &'c Arc<RedisStore>,
        tiers: &'c [RateTier],
        groups: &'c [Group],
        cost: u64,
    ) -> Self {
        Self {
            remote,
            tiers,
            groups,
            cost,
            charged: ArrayVec::new(),
        }
    }

    /// Group `g` charged, as `reply` says.
    pub fn push(&mut self, g: usize, reply: Reply) {
        self.charged.push((g, reply));
    }

    /// The request is admitted: what was charged stays.
    pub fn keep(&mut self) {
        self.charged.clear();
    }

    /// Gives back every group charged, and waits until Redis has (on a task of its own:
    /// were the request dropped meanwhile, it still completes, and only once).
    pub async fn roll_back(&mut self) {
        let undo = self.take_invocations();
        if undo.is_empty() {
            return;
        }
        let _ = tokio::spawn(run(self.remote.clone(), undo)).await;
    }

    /// The scripts that give back what was charged, each group's once.
    fn take_invocations(&mut self) -> Vec<ScriptInvocation<'static>> {
        let charged = std::mem::take(&mut self.charged);
        charged
            .iter()
            .filter_map(|(g, reply)| self.undo(&self.groups[*g], reply))
            .collect()
    }

    /// The script that takes back what `group` wrote, as `reply` says it did; `None` when
    /// it wrote nothing.
    fn undo(&self, group: &Group, reply: &Reply) -> Option<ScriptInvocation<'static>> {
        let mut inv = ROLLBACK.prepare_invoke();
        let mut any = false;
        for (&i, &debt) in group.iter().zip(&reply.debts) {
            let tier = &self.tiers[i].tier;
            if tier.max_delay_ns == u64::MAX {
                // A usage report (`RequestTiers::force_last`): usage already spent stays
                // charged whatever the rest of the call does — a later group failing, or
                // the caller resetting its call between two groups (Envoy's own timeout
                // does), would otherwise let it pay less than it used.
                continue;
            }
            let q = tier.quota;
            let increment = tier.cost(self.cost).saturating_mul(q.interval_ns());
            let now = reply.now_abs();
            // A quota is measured from its window's end (as gcra.lua placed it).
            let basis = self.tiers[i]
                .bounds
                .map_or(0, |b| b.until_end(u64::try_from(now).unwrap_or(u64::MAX)));
            let quota = self.tiers[i].bounds.is_some();
            // What the key owed or had used, as gcra.lua read it (a quota's TAT of another
            // calendar: nothing used).
            let over = if quota {
                calendar::used(debt, basis)
            } else {
                debt
            };
            if over.saturating_add(increment) > q.tolerance_ns().saturating_add(tier.max_delay_ns) {
                continue; // a shadow tier that did not admit wrote nothing
            }
            let mut ahead = basis.saturating_add(over).saturating_add(increment);
            // As gcra.lua wrote it: a forced quota's TAT capped below another calendar's.
            if quota {
                ahead = ahead.min(calendar::max_tat(basis));
            }
            let increment = ahead.saturating_sub(basis).saturating_sub(over);
            let old = if debt == 0 {
                String::new()
            } else {
                tat_stamp(now + u128::from(debt), quota)
            };
            // The window the charge went into (gcra.lua's, from the same server time).
            let window_end = self.tiers[i].bounds.map_or(0, |b| {
                b.holding(u64::try_from(now).unwrap_or(u64::MAX)).end.max(1)
            });
            inv.key(key_of(&self.tiers[i]))
                .key(crate::store::rate::reset::marker(key_of(&self.tiers[i])))
                .arg(tat_stamp(now + u128::from(ahead), quota))
                .arg(old)
                .arg(debt.div_ceil(1_000_000))
                .arg(increment)
                .arg(now / 1_000)
                .arg(window_end);
            any = true;
        }
        // Once only: the Cluster client may send it again after a dropped connection.
        if let Some(&first) = group.first() {
            inv.key(crate::store::rate::settle::once(key_of(&self.tiers[first])))
                .arg(crate::store::rate::settle::once_ms(self.remote));
        }
        any.then_some(inv)
    }
}

impl Drop for Written<'_> {
    /// Dropped with groups still charged: the request was dropped mid-check. Their
    /// rollback is spawned (no one is left to wait for it).
    fn drop(&mut self) {
        let undo = self.take_invocations();
        if undo.is_empty() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(run(self.remote.clone(), undo));
        }
    }
}

/// Runs `undo` in order.
async fn run(remote: Arc<RedisStore>, undo: Vec<ScriptInvocation<'static>>) {
    for inv in &undo {
        let undone: Result<redis::Value, _> = remote.invoke(inv).await;
        if let Err(e) = undone {
            tracing::warn!(error = %e, "could not roll back an admission in another slot");
        }
    }
}
