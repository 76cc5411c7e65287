//! Settling a reservation once the actual cost is known: the difference to what was
//! charged at admission is owed (a debt later requests wait off) or given back (at most
//! what of this request's reservation is still ahead of now), on the tier's own key,
//! with the `T` of the config that admitted the request.

use std::sync::Arc;

use super::{Limiter, Store, StoreError};
use crate::config::{Policy, Settle, MAX_SETTLED_DEBT_NS};
use crate::limit::gcra::{settle, Adjustment};
use crate::limit::TatTable;

/// One admitted tier whose cost is settled later.
#[derive(Debug, Clone)]
pub struct PendingSettle {
    /// The policy (its settle settings and name).
    pub policy: Arc<Policy>,
    /// The tier's index in the request's decisions (for its headers).
    pub tier: usize,
    /// The key the tier was decided on (its own or its overflow key).
    pub key: u64,
    /// Its Redis key, when Redis decided it; `None` when the local store did.
    pub redis_key: Option<String>,
    /// `T` of the admitting config, in ns.
    pub t_ns: u64,
    /// Units charged at admission.
    pub reserve: u64,
    /// How far the TAT was ahead of now right after the reservation, and when (local
    /// clock): what may be refunded shrinks as time passes.
    pub ahead_ns: u64,
    pub admitted_at: u64,
}

impl PendingSettle {
    pub fn settle(&self) -> &Settle {
        self.policy
            .rate()
            .and_then(|r| r.settle.as_ref())
            .expect("a pending settle belongs to a settled rate policy")
    }

    /// The change from reserve to `units`, as seen at `now`; `None` when they are equal.
    fn adjustment(&self, units: u64, now: u64) -> Option<Adjustment> {
        match units.cmp(&self.reserve) {
            std::cmp::Ordering::Equal => None,
            std::cmp::Ordering::Greater => Some(Adjustment::Debt {
                ns: (units - self.reserve).saturating_mul(self.t_ns),
            }),
            std::cmp::Ordering::Less => Some(Adjustment::Refund {
                ns: (self.reserve - units).saturating_mul(self.t_ns),
                room_ns: self
                    .ahead_ns
                    .saturating_sub(now.saturating_sub(self.admitted_at)),
            }),
        }
    }
}

impl Limiter {
    /// Settles `pending` at `units` when the local store holds its key: no wait. `None`
    /// when Redis does (call [`Limiter::settle`]); otherwise the debt (TAT − now) after.
    pub fn settle_local(&self, pending: &PendingSettle, units: u64, now: u64) -> Option<u64> {
        if pending.redis_key.is_some() {
            return None;
        }
        let local = self.local();
        let Some(adjustment) = pending.adjustment(units, now) else {
            return Some(local.peek(pending.key).saturating_sub(now));
        };
        let (prior, decision) = local.apply(pending.key, |tat| {
            let after = settle(tat, now, adjustment, MAX_SETTLED_DEBT_NS);
            crate::limit::Decision {
                admitted: after != tat,
                tat: after,
                remaining: 0,
                wait_ns: 0,
                delay_ns: 0,
                until_idle_ns: 0,
            }
        });
        let tat = if decision.admitted {
            decision.tat
        } else {
            prior
        };
        Some(tat.saturating_sub(now))
    }

    /// Settles `pending` at `units`, where its key lives. Returns the debt (TAT − now,
    /// on the store's clock) after settling.
    pub async fn settle(
        &self,
        pending: &PendingSettle,
        units: u64,
        now: u64,
    ) -> Result<u64, StoreError> {
        if let Some(debt) = self.settle_local(pending, units, now) {
            return Ok(debt);
        }
        let (Store::Redis { remote, .. }, Some(key)) = (&self.store, &pending.redis_key) else {
            return Err(StoreError::NotConnected);
        };
        let (op, ns, room) = match pending.adjustment(units, now) {
            None => ("refund", 0, 0),
            Some(Adjustment::Debt { ns }) => ("debt", ns, 0),
            Some(Adjustment::Refund { ns, room_ns }) => ("refund", ns, room_ns),
        };
        let mut call = SETTLE_SCRIPT.prepare_invoke();
        call.key(key.as_str())
            .arg(op)
            .arg(ns)
            .arg(room)
            .arg(MAX_SETTLED_DEBT_NS);
        let debt: i64 = remote.invoke(&call).await.inspect_err(|e| self.failed(e))?;
        u64::try_from(debt).map_err(|_| StoreError::Reply)
    }
}

static SETTLE_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| redis::Script::new(include_str!("settle.lua")));
