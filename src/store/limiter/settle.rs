//! After the decision: settling a tier at its measured value, and drawing more of a key
//! while a metered body streams, in the store that holds the key.
use super::{Fallback, Limiter};
use crate::store::error::StoreError;
use crate::store::rate::draw::{draw_local, draw_remote, Draw};
use crate::store::rate::settle::{settle_local, settle_remote, PendingSettle};

/// What settling a tier did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Settled {
    /// The key's debt after it (TAT − now, on the store's clock).
    pub debt: u64,
    /// A refund was held: the key was reset (or lost with Redis's data) since admission.
    pub held: bool,
}

impl Limiter {
    /// Settles `pending` at `units` when the local store holds its key: no wait. `None`
    /// when Redis does (call [`Limiter::settle`]); otherwise what settling did.
    pub fn settle_local(&self, pending: &PendingSettle, units: u64, now: u64) -> Option<Settled> {
        let (units, held) = self.since_reset(pending, units);
        match pending.redis_key {
            Some(_) => None,
            None => Some(Settled {
                debt: settle_local(self.local(), pending, units, now),
                held,
            }),
        }
    }

    /// `units`, or what was charged when that is more and the key was reset (or lost
    /// with Redis's data) since admission (then `true`): a refund would come out of the
    /// usage after.
    fn since_reset(&self, pending: &PendingSettle, units: u64) -> (u64, bool) {
        let charged = pending.charged();
        match units < charged && self.reset_since(pending) {
            false => (units, false),
            true => (charged, true),
        }
    }

    /// Settles `pending` at `units`, where its key lives.
    pub async fn settle(
        &self,
        pending: &PendingSettle,
        units: u64,
        now: u64,
    ) -> Result<Settled, StoreError> {
        let (units, held) = self.since_reset(pending, units);
        let (Some(remote), Some(key)) = (self.remote(), &pending.redis_key) else {
            let debt = settle_local(self.local(), pending, units, now);
            return Ok(Settled { debt, held });
        };
        let (debt, marked) = settle_remote(remote, key, pending, units, now)
            .await
            .inspect_err(|e| self.failed(e))?;
        if units < pending.charged() && !marked {
            // A refund lowered the TAT: what this gateway remembers of a refusal is stale.
            self.rates.refusals.forget(pending.key);
        }
        Ok(Settled {
            debt,
            // The script holds only a refund that would have moved the key.
            held: held || marked,
        })
    }

    /// Draws between `need` and `want` units for `pending`'s streaming body, at `now`,
    /// when the local store holds its key: no wait. `None` when Redis does (call
    /// [`Limiter::draw`]).
    pub fn draw_local(
        &self,
        pending: &PendingSettle,
        want: u64,
        need: u64,
        now: u64,
    ) -> Option<Draw> {
        match pending.redis_key {
            Some(_) => None,
            None => Some(draw_local(self.local(), pending, want, need, now)),
        }
    }

    /// Draws for `pending`'s streaming body where its key lives. A failed store call is
    /// answered per `on_error`: `allow` grants what was wanted, `local` draws from this
    /// process's table, `deny` fails (the body is cut). What either grants is not the
    /// Redis key's ([`Draw::Unchecked`]): the settle there gives none of it back — a
    /// local draw refunded in Redis came out of usage Redis really holds. (A call that
    /// timed out may still have run there: then the body pays a chunk twice, the safe
    /// way.)
    pub async fn draw(
        &self,
        pending: &PendingSettle,
        want: u64,
        need: u64,
        now: u64,
    ) -> Result<Draw, StoreError> {
        let (Some(remote), Some(key)) = (self.remote(), &pending.redis_key) else {
            return Ok(draw_local(self.local(), pending, want, need, now));
        };
        match draw_remote(remote, key, pending, want, need).await {
            Ok(drawn) => Ok(drawn),
            Err(e) => match self.fallback(&e) {
                Fallback::Unchecked => Ok(Draw::Unchecked { units: want }),
                // On this gateway's share of the key, as the local table decides it.
                Fallback::Local => Ok(
                    match draw_local(
                        self.local(),
                        &pending.on_share(self.fleet_share()),
                        want,
                        need,
                        now,
                    ) {
                        Draw::Granted { units, .. } => Draw::Unchecked { units },
                        other => other,
                    },
                ),
                Fallback::Refuse => Err(e),
            },
        }
    }
}
