//! A leased key's next slice, asked of Redis on a task of its own. The call gives back
//! the old slice and charges the new one in one script: were it made by the request's own
//! future, a client hanging up mid-call (its future dropped at the await) would leave the
//! new slice charged in Redis and never put in the table, and the old one drained here —
//! up to a quarter of the key's burst lost to every honest client of the key, for the
//! price of one request. The task finishes whatever happens to the request: the slice
//! goes into the table, and the units taken for a request that is gone go back into it.

use std::sync::Arc;

use super::protocol::{debt_from_wait, Leased};
use super::script::{ask_slice, SliceAnswer, SliceAsk};
use super::{Held, Return, Slices, Taken, MAX_SLICES};
use crate::limit::slice::Slice;
use crate::limit::Quota;
use crate::metrics::Metrics;
use crate::store::error::StoreError;
use crate::store::key_locks::KeyGuard;
use crate::store::rate::remote::Remote;
use crate::store::redis::RedisStore;
use crate::store::tiers::RateTier;

/// One slice fetch, owning what it needs to finish without the request that started it.
struct Fetch {
    slices: Arc<Slices>,
    store: Arc<RedisStore>,
    metrics: Arc<Metrics>,
    key: u64,
    quota: Quota,
    redis_key: String,
    ask: SliceAsk,
    /// The old slice's unused units, given back in the same call.
    back: Option<Return>,
    units: u64,
    now: u64,
    /// The table's epoch before the call: moved meanwhile (a reset during the call), the
    /// slice serves nothing.
    epoch: u64,
    /// The key's fetch lock: held until the new slice is in the table (and the units of
    /// a request gone meanwhile are back in it), so the requests queued behind it take
    /// from that slice instead of fetching another.
    _one_fetch: KeyGuard,
}

/// A slice Redis granted (the `Granted` answer's fields).
struct Grant {
    granted: u64,
    ahead: u64,
    left: u64,
    end: String,
}

impl Slices {
    /// Asks Redis for a slice of `tier`'s key, giving back what is left of the old one,
    /// and takes `units` from it.
    pub(super) async fn fetch(
        self: &Arc<Self>,
        remote: &Remote<'_>,
        tier: &RateTier,
        units: u64,
    ) -> Result<Leased, StoreError> {
        let (quota, key) = (tier.tier.quota, tier.tier.key);
        let one_fetch = self.fetches.lock(key).await;
        // Another request may have fetched one meanwhile, or been refused: over the limit,
        // the requests queued here are then refused without a call each.
        let now = remote.clock.now_ns();
        if let Some(t) = self.take(&tier.tier, units, now) {
            return Ok(Leased::Taken(t));
        }
        if let Some(v) = remote
            .refusals
            .refuse(std::slice::from_ref(&tier.tier), now, units)
        {
            return Ok(Leased::Refused { wait: v.wait_ns });
        }
        let (back, ask) = self.retire(key, now, &quota, self.len());
        let mut fetch = Fetch {
            slices: self.clone(),
            store: remote.store.clone(),
            metrics: remote.metrics.clone(),
            key,
            quota,
            redis_key: tier
                .redis
                .as_ref()
                .map_or("", |k| k.key.as_str())
                .to_owned(),
            ask: SliceAsk {
                want: ask.want.max(units),
                need: units,
                lead: ask.lead,
            },
            back,
            units,
            now,
            epoch: self.epoch(),
            _one_fetch: one_fetch,
        };
        let (tx, rx) = tokio::sync::oneshot::channel();
        tokio::spawn(async move {
            let answer = fetch.run().await;
            if let Err(Ok(Leased::Taken(got))) = tx.send(answer) {
                // The request is gone: its units stay in the slice.
                fetch.slices.untake(fetch.key, fetch.units, &got);
            }
        });
        // No answer only when the task could not finish: the runtime is shutting down.
        let answer = rx.await.map_err(|_| StoreError::Cancelled)?;
        if let Ok(Leased::Refused { wait }) = &answer {
            let debt = debt_from_wait(&tier.tier, units, *wait);
            remote.refusals.remember(key, now.saturating_add(debt));
        }
        answer
    }

    /// Takes `units` from a slice Redis granted and keeps the rest in the table (unless
    /// the table is full).
    fn keep(
        &self,
        (key, quota, epoch): (u64, Quota, u64),
        redis_key: String,
        grant: Grant,
        units: u64,
        now: u64,
    ) -> Result<Taken, StoreError> {
        let mut slice = Slice::new(now, grant.ahead, grant.granted, quota.interval_ns(), 0);
        let local = slice.take(units, now).ok_or(StoreError::Reply)?;
        // A full table takes no more: the request used what it was granted (one
        // request's worth, when full), and the key stays exact.
        let full = local == 0 && self.len() >= MAX_SLICES;
        let id = if full {
            0
        } else {
            self.install(
                key,
                Held {
                    id: 0,
                    quota,
                    epoch,
                    slice,
                    redis_key,
                    end: grant.end,
                    left: grant.left,
                    last_use: now,
                    uses: units,
                    since: now,
                },
            )
        };
        Ok(Taken {
            local,
            store: grant.left,
            slice: id,
            last: units,
            p: now.saturating_add(grant.ahead),
        })
    }
}

impl Fetch {
    /// The call, and the slice it brings into the table.
    async fn run(&mut self) -> Result<Leased, StoreError> {
        let back = self.back.as_ref().map(|b| (b.ns, b.end.as_str()));
        let (quota, now) = (self.quota, self.now);
        let answer = ask_slice(&self.store, &self.redis_key, &quota, self.ask, back, now).await;
        let metrics = &self.metrics;
        match answer {
            Ok(SliceAnswer::Granted {
                granted,
                ahead,
                left,
                end,
            }) => {
                metrics.lease_calls("granted");
                metrics.lease_units("granted", granted);
                let grant = Grant {
                    granted,
                    ahead,
                    left,
                    end,
                };
                let redis_key = std::mem::take(&mut self.redis_key);
                self.slices
                    .keep(
                        (self.key, quota, self.epoch),
                        redis_key,
                        grant,
                        self.units,
                        now,
                    )
                    .map(Leased::Taken)
            }
            Ok(SliceAnswer::Refused { wait }) => {
                metrics.lease_calls("refused");
                Ok(Leased::Refused { wait })
            }
            Err(e) => {
                metrics.lease_calls("error");
                Err(e)
            }
        }
    }
}
