//! What the admin API reads through the limiter: a key's TAT, the slots held and waited
//! for; what a reset, a reload or the fleet's version move forgets (a key's state,
//! remembered refusals, the slices held); and the leased slices given back.
use super::Limiter;
use crate::store::error::StoreError;
use crate::store::keys::StoreKey;
use crate::store::rate::settle::{PendingSettle, ResetMarks};

impl Limiter {
    /// The key's TAT and the `now` it is relative to (the store's clock for Redis, whose
    /// TATs are reported on a base that plays "now"), and with Redis its now in Unix ns.
    /// `quota`: the key is a calendar quota's (on Redis, a rate reads a quota's usage
    /// as idle).
    pub async fn peek(
        &self,
        key: &StoreKey,
        now: u64,
        quota: bool,
    ) -> Result<(u64, u64, Option<u64>), StoreError> {
        match (self.remote(), &key.redis) {
            (Some(remote), Some(redis_key)) => {
                let keys = [(redis_key.key.as_str(), quota)];
                let (debts, server_now) = crate::store::rate::redis::debts(remote, &keys).await?;
                let debt = debts.first().copied().unwrap_or(0);
                let base = crate::store::rate::snapshot::BASE;
                let tat = if debt == 0 { 0 } else { base + debt };
                Ok((tat, base, Some(server_now)))
            }
            (Some(_), None) => Err(StoreError::NotConnected),
            (None, _) => {
                use crate::limit::TatTable;
                Ok((self.local().peek(key.hash), now, None))
            }
        }
    }

    /// Forgets a rate or quota key's state (its debt, its usage) where the store keeps it,
    /// and what this gateway remembers Redis refused. `quota_end`: the key is a calendar
    /// quota's whose window ends then (local clock): in memory it is written with no
    /// usage rather than forgotten (see [`crate::store::memory::MemoryStore::reset_quota`]);
    /// Redis has no floor, and an absent key there has used nothing. `hold`: how long a
    /// request decided before may still move the key (a settle, a Cluster rollback): in
    /// Redis the key's reset marker is kept that long, and none of them takes back out of
    /// the usage made since. `now`: the clock's reading as the reset is asked (a reset that
    /// reaches Redis too late resets nothing).
    pub async fn forget(
        &self,
        key: &StoreKey,
        quota_end: Option<u64>,
        (hold, now): (std::time::Duration, u64),
    ) -> Result<(), StoreError> {
        match (self.remote(), &key.redis) {
            (Some(remote), Some(redis_key)) => {
                let reset = crate::store::rate::reset::reset_remote;
                reset(remote, &redis_key.key, hold, now).await?;
            }
            (Some(_), None) => return Err(StoreError::NotConnected),
            (None, _) => {
                // Noted before and after: a settle between the two finds the first (its
                // refund would come out of what a request decided after the forget
                // charged), and one admitted between them finds the second (its charge
                // was forgotten).
                self.resets.note(key.hash);
                match quota_end {
                    Some(end) => self.local().reset_quota(key.hash, end),
                    None => self.local().forget(key.hash),
                }
                self.resets.note(key.hash);
            }
        }
        self.forget_refusals();
        Ok(())
    }

    /// Where resets stand: read before a decision, kept by its pending settles.
    #[inline]
    pub fn reset_marks(&self) -> ResetMarks {
        ResetMarks {
            local: self.resets.mark(),
            remote: self.remote().map_or(0, |r| r.losses()),
        }
    }

    /// Whether `pending`'s key was reset, or lost with Redis's data, since its admission.
    pub fn reset_since(&self, pending: &PendingSettle) -> bool {
        match (&pending.redis_key, self.remote()) {
            (Some(_), Some(remote)) => remote.losses() != pending.reset_mark,
            _ => self.resets.since(pending.key, pending.reset_mark),
        }
    }

    /// Requests of this gateway waiting for a slot on a concurrency key now (the admin API).
    pub fn slots_waiting(&self, hash: u64) -> usize {
        self.concurrency.waiting(hash)
    }

    /// Slots held on a concurrency key now (the admin API): from Redis when it holds them.
    pub async fn slots_held(&self, hash: u64, redis_key: Option<&str>) -> Result<u32, StoreError> {
        self.concurrency
            .held(self.remote().map(|r| &**r), hash, redis_key)
            .await
    }

    /// Forgets remembered refusals, and makes the slices held unusable: the numbers or
    /// the state behind them may have changed (a reload, a key reset or an override
    /// changed here or anywhere in the fleet). A slice of a reset key spent after the
    /// reset would come on top of the fresh burst; each is given back (where its key was
    /// not reset) and fetched anew on its key's next request.
    pub fn forget_refusals(&self) {
        self.rates.refusals.clear();
        self.slices.invalidate();
    }

    /// Gives back the leased slices idle for a while (all of them with `all`: reload,
    /// shutdown) and updates the held-units gauge.
    pub async fn give_back_slices(&self, now: u64, all: bool) {
        if let Some(remote) = self.remote() {
            self.slices.give_back(remote, &self.metrics, now, all).await;
        }
    }
}
