//! A concurrency slot held in Redis: a lease refreshed every third of its ttl while the
//! request is in flight, and given back when dropped. A gateway that dies stops refreshing,
//! so its slots expire within the ttl.

use std::sync::Arc;
use std::time::Duration;

use prometheus_client::metrics::gauge::Gauge;

use redis::Script;

use super::full::FullKeys;
use crate::store::error::StoreError;
use crate::store::redis::RedisStore;

static SLOT_LEASE: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new(include_str!("slot_lease.lua")));

/// What a call on a lease set does.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LeaseOp {
    Take,
    Refresh,
    Give,
    Count,
}

impl LeaseOp {
    fn as_str(self) -> &'static str {
        match self {
            LeaseOp::Take => "take",
            LeaseOp::Refresh => "refresh",
            LeaseOp::Give => "give",
            LeaseOp::Count => "count",
        }
    }
}

/// One call on a concurrency key's lease set (see slot_lease.lua): `(done, held)`. A
/// take waits on it, so callers put takes through the breaker (`RedisStore::guarded`);
/// refreshes and give-backs run in the background outside it.
pub async fn call(
    remote: &RedisStore,
    key: &str,
    op: LeaseOp,
    id: &str,
    max: u32,
    ttl: Duration,
) -> Result<(bool, u32), StoreError> {
    let mut inv = SLOT_LEASE.prepare_invoke();
    inv.key(key)
        .arg(op.as_str())
        .arg(id)
        .arg(max)
        .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
    let reply: Vec<i64> = remote.invoke(&inv).await?;
    match reply.as_slice() {
        [done, held] => Ok((*done == 1, u32::try_from(*held).unwrap_or(u32::MAX))),
        _ => Err(StoreError::Reply),
    }
}

/// One lease on a key's lease set.
pub struct Lease {
    store: Arc<RedisStore>,
    key: String,
    id: String,
    refresher: tokio::task::AbortHandle,
    gauge: Gauge,
    /// Told once the slot is back: the key is not full, its poller asks again.
    full: (Arc<FullKeys>, u64),
}

/// Who holds a lease (the key's lease set and the lease's id) and what to tell when it
/// goes back.
pub struct Holder {
    pub key: String,
    pub id: String,
    pub full: (Arc<FullKeys>, u64),
}

impl Lease {
    /// Starts holding the lease (already taken) of `holder`.
    pub fn hold(store: Arc<RedisStore>, holder: Holder, ttl: Duration, gauge: Gauge) -> Self {
        let Holder { key, id, full } = holder;
        gauge.inc();
        let (s, k, i) = (store.clone(), key.clone(), id.clone());
        let refresher = tokio::spawn(async move {
            let every = (ttl / 3).max(Duration::from_millis(100));
            loop {
                tokio::time::sleep(every).await;
                match call(&s, &k, LeaseOp::Refresh, &i, 0, ttl).await {
                    Ok((true, _)) => {}
                    Ok((false, held)) => {
                        tracing::warn!(key = %k, held, "a concurrency lease was gone from Redis while its request was in flight (Redis restarted or failed over and lost it, or was unreachable for longer than lease_ttl): taken again, as its request is still in flight");
                    }
                    Err(e) => tracing::warn!(error = %e, "could not refresh a concurrency lease"),
                }
            }
        })
        .abort_handle();
        Self {
            store,
            key,
            id,
            refresher,
            gauge,
            full,
        }
    }
}

impl Drop for Lease {
    fn drop(&mut self) {
        self.refresher.abort();
        self.gauge.dec();
        let (store, key, id) = (
            self.store.clone(),
            std::mem::take(&mut self.key),
            std::mem::take(&mut self.id),
        );
        let (full, hash) = (self.full.0.clone(), self.full.1);
        // Given back in the background; if that fails, the lease expires by itself.
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                match call(&store, &key, LeaseOp::Give, &id, 0, Duration::ZERO).await {
                    Ok(_) => full.freed(hash),
                    Err(e) => tracing::debug!(error = %e, "could not give a concurrency lease back; it will expire"),
                }
            });
        }
    }
}

/// A lease that may be held because a Take was sent: if the answer never comes (timeout,
/// the request cancelled) Redis may still have added it, so unless [`PendingLease::settled`]
/// is called, dropping this gives the id back rather than leave it taken for `lease_ttl`.
pub struct PendingLease<'a> {
    store: &'a Arc<RedisStore>,
    key: &'a str,
    id: &'a str,
    settled: bool,
}

impl<'a> PendingLease<'a> {
    pub fn new(store: &'a Arc<RedisStore>, key: &'a str, id: &'a str) -> Self {
        Self {
            store,
            key,
            id,
            settled: false,
        }
    }

    /// The answer came: a held lease now has its own guard, a refused one holds nothing.
    pub fn settled(mut self) {
        self.settled = true;
    }
}

impl Drop for PendingLease<'_> {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let (store, key, id) = (self.store.clone(), self.key.to_owned(), self.id.to_owned());
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = call(&store, &key, LeaseOp::Give, &id, 0, Duration::ZERO).await;
            });
        }
    }
}
