//! The shared store: Redis or Redis Cluster. Each request's tiers are decided by one Lua
//! script per slot, atomically, on Redis's clock; across slots, later denials roll the
//! earlier slots back. The verdict is then computed by the same `evaluate` as in memory,
//! from the TATs the script saw, so answers are identical to the embedded store's.

use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use arrayvec::ArrayVec;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::Script;

use super::breaker::Breaker;
use super::sentinel::SentinelLink;
use super::snapshot::{SnapshotTable, BASE};
use crate::config::SentinelMaster;
use crate::key::RedisKey;
use crate::limit::{evaluate, Mode, Tier, Verdict, MAX_DECISIONS};

const NANOS: u128 = 1_000_000_000;

#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    #[error("the store did not answer within {0:?}")]
    Timeout(Duration),
    #[error("the store is not connected yet")]
    NotConnected,
    #[error("the store is failing; calls are paused (circuit breaker open)")]
    BreakerOpen,
    #[error("redis: {0}")]
    Redis(#[from] redis::RedisError),
    #[error("unexpected reply from the store script")]
    Reply,
}

impl StoreError {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::NotConnected => "not_connected",
            StoreError::BreakerOpen => "breaker_open",
            StoreError::Redis(_) => "error",
            StoreError::Reply => "reply",
        }
    }
}

#[derive(Clone)]
enum Connection {
    Single(ConnectionManager),
    /// Filled by the background task once the cluster answers (start-up never waits).
    Cluster(Arc<ArcSwapOption<ClusterConnection>>),
    /// The master Redis Sentinel names, followed across failovers.
    Sentinel(Arc<SentinelLink>),
}

pub struct RedisStore {
    connection: Connection,
    cluster_client: Option<redis::cluster::ClusterClient>,
    timeout: Duration,
    pub breaker: Breaker,
    gcra: Script,
    rollback: Script,
    peek: Script,
    slot_lease: Script,
    slice: Script,
}

/// What a gateway asks of a slice: `want` units, at least `need`, the first slot
/// beginning `lead` ns ahead where the key has room (see `limit::slice::grant`).
#[derive(Debug, Clone, Copy)]
pub struct SliceAsk {
    pub want: u64,
    pub need: u64,
    pub lead: u64,
}

/// What Redis answered a request for a slice (`slice.lua`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SliceAnswer {
    /// `granted` units; the key is now `ahead` ns past Redis's now, with `left` units
    /// still free; `end` is the stored TAT, for a later give-back.
    Granted {
        granted: u64,
        ahead: u64,
        left: u64,
        end: String,
    },
    /// Not `need` units free: they will be after `wait` ns.
    Refused { wait: u64 },
}

/// Tiers decided before the Redis call (leased slices): each one's debt as the verdict
/// should see it, and whether any of them refused.
#[derive(Debug, Default)]
pub struct Decided {
    pub debts: ArrayVec<(usize, u64), MAX_DECISIONS>,
    pub refused: bool,
}

/// What one script call answered: the server's now and each tier's debt (TAT − now).
struct Reply {
    now_s: u64,
    now_ns: u64,
    admitted: bool,
    debts: ArrayVec<u64, MAX_DECISIONS>,
}

impl Reply {
    fn parse(values: &[i64], n: usize, with_flag: bool) -> Result<Self, StoreError> {
        let head = if with_flag { 3 } else { 2 };
        if values.len() != head + n {
            return Err(StoreError::Reply);
        }
        let nonneg = |v: i64| u64::try_from(v).map_err(|_| StoreError::Reply);
        Ok(Self {
            now_s: nonneg(values[0])?,
            now_ns: nonneg(values[1])?,
            admitted: !with_flag || values[2] == 1,
            debts: values[head..]
                .iter()
                .map(|&v| nonneg(v))
                .collect::<Result<_, _>>()?,
        })
    }

    fn now_abs(&self) -> u128 {
        u128::from(self.now_s) * NANOS + u128::from(self.now_ns)
    }
}

fn stamp(abs_ns: u128) -> String {
    format!("{}:{:09}", abs_ns / NANOS, abs_ns % NANOS)
}

impl RedisStore {
    /// Prepares clients for `urls` (a single Redis, or Cluster seed nodes).
    /// Connects lazily: the gateway starts even while Redis is down.
    pub fn new(
        urls: &[String],
        cluster: bool,
        sentinel: Option<&SentinelMaster>,
        timeout: Duration,
    ) -> Result<Self, StoreError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let (connection, cluster_client) = if let Some(master) = sentinel {
            (
                Connection::Sentinel(Arc::new(SentinelLink::new(urls, master, config)?)),
                None,
            )
        } else if !cluster {
            let client = redis::Client::open(urls[0].as_str())?;
            (
                Connection::Single(ConnectionManager::new_lazy_with_config(client, config)?),
                None,
            )
        } else {
            let client = redis::cluster::ClusterClient::builder(urls.to_vec())
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .retries(2)
                .build()?;
            (
                Connection::Cluster(Arc::new(ArcSwapOption::empty())),
                Some(client),
            )
        };
        Ok(Self {
            connection,
            cluster_client,
            timeout,
            breaker: Breaker::default(),
            gcra: Script::new(include_str!("gcra.lua")),
            rollback: Script::new(include_str!("rollback.lua")),
            peek: Script::new(include_str!("peek.lua")),
            slot_lease: Script::new(include_str!("slot_lease.lua")),
            slice: Script::new(include_str!("slice.lua")),
        })
    }

    /// Background upkeep until the process stops: connects a cluster as soon as it
    /// answers, and while the breaker is open probes with PING so the store recovers by
    /// itself, even with no traffic.
    pub async fn maintain(self: Arc<Self>) {
        loop {
            if let Connection::Sentinel(link) = &self.connection {
                link.refresh(self.timeout * 20).await;
            }
            if let (Connection::Cluster(slot), Some(client)) =
                (&self.connection, &self.cluster_client)
            {
                if slot.load().is_none() {
                    match tokio::time::timeout(self.timeout * 20, client.get_async_connection())
                        .await
                    {
                        Ok(Ok(conn)) => {
                            slot.store(Some(Arc::new(conn)));
                            tracing::info!("connected to the Redis Cluster");
                        }
                        Ok(Err(e)) => tracing::warn!(error = %e, "Redis Cluster not reachable yet"),
                        Err(_) => tracing::warn!("Redis Cluster did not answer in time"),
                    }
                }
            }
            if self.breaker.is_open() && self.ping().await.is_ok() {
                self.breaker.success();
                tracing::info!("store reachable again; breaker closed");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// A cheap probe: the read-only script with no keys (and it proves scripting works).
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.run(&self.peek.prepare_invoke()).await.map(|_| ())
    }

    async fn bounded<T>(
        &self,
        fut: impl std::future::Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, fut).await {
            // The client's own response timeout is the same limit: count it as one.
            Ok(Err(e)) if e.is_timeout() => Err(StoreError::Timeout(self.timeout)),
            Ok(r) => r.map_err(StoreError::from),
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }

    async fn run(&self, invocation: &redis::ScriptInvocation<'_>) -> Result<Vec<i64>, StoreError> {
        self.invoke(invocation).await
    }

    /// Runs one script that is not a limiter decision (runtime overrides), bounded by
    /// the store timeout like every call.
    pub async fn invoke<T: redis::FromRedisValue>(
        &self,
        invocation: &redis::ScriptInvocation<'_>,
    ) -> Result<T, StoreError> {
        match &self.connection {
            Connection::Single(c) => {
                let mut c = c.clone();
                self.bounded(invocation.invoke_async(&mut c)).await
            }
            Connection::Sentinel(link) => {
                let mut c = link.connection()?;
                let result = self.bounded(invocation.invoke_async(&mut c)).await;
                if result.is_err() {
                    // The master may have moved (or been demoted: READONLY).
                    link.failed();
                }
                result
            }
            Connection::Cluster(slot) => {
                let mut c = slot
                    .load_full()
                    .ok_or(StoreError::NotConnected)?
                    .as_ref()
                    .clone();
                self.bounded(invocation.invoke_async(&mut c)).await
            }
        }
    }

    /// Decides `tiers` (keys in `keys`, same order). `now_ns` is the local clock, used only
    /// for the breaker.
    pub async fn check(
        &self,
        tiers: &[Tier],
        keys: &[RedisKey],
        cost: u64,
        now_ns: u64,
    ) -> Result<Verdict, StoreError> {
        self.check_with(tiers, keys, cost, now_ns, &Decided::default())
            .await
    }

    /// Like [`RedisStore::check`], with some tiers already decided elsewhere (leased
    /// slices): their debts go into the verdict as given and they are not sent. When one of
    /// them refused, the others are only read.
    pub async fn check_with(
        &self,
        tiers: &[Tier],
        keys: &[RedisKey],
        cost: u64,
        now_ns: u64,
        decided: &Decided,
    ) -> Result<Verdict, StoreError> {
        if decided.debts.len() >= tiers.len() {
            // Every tier was decided from slices: Redis is not asked, so neither held nor
            // told anything by the breaker.
            let snapshot = SnapshotTable::default();
            for &(i, debt) in &decided.debts {
                snapshot.insert(tiers[i].key, debt);
            }
            return Ok(evaluate(&snapshot, tiers, BASE, cost));
        }
        if !self.breaker.allow(now_ns) {
            return Err(StoreError::BreakerOpen);
        }
        match self.check_inner(tiers, keys, cost, decided).await {
            Ok(v) => {
                self.breaker.success();
                Ok(v)
            }
            Err(e) => {
                if self.breaker.failure(now_ns) {
                    tracing::warn!(error = %e, "store failing; breaker open");
                }
                Err(e)
            }
        }
    }

    /// Whether the tiers of one request may take several script calls (one per hash tag),
    /// rolled back across them when a later one refuses.
    pub fn is_cluster(&self) -> bool {
        matches!(self.connection, Connection::Cluster(_))
    }

    async fn check_inner(
        &self,
        tiers: &[Tier],
        keys: &[RedisKey],
        cost: u64,
        decided: &Decided,
    ) -> Result<Verdict, StoreError> {
        // One script call per group. A single Redis takes all tiers at once (one round trip,
        // one `now`); a Cluster needs one group per hash tag, in order of first appearance.
        let single = !self.is_cluster();
        let mut groups: ArrayVec<ArrayVec<usize, MAX_DECISIONS>, MAX_DECISIONS> = ArrayVec::new();
        for (i, key) in keys.iter().enumerate().take(tiers.len()) {
            if decided.debts.iter().any(|&(d, _)| d == i) {
                continue;
            }
            match groups
                .iter_mut()
                .find(|g| single || keys[g[0]].tag == key.tag)
            {
                Some(g) => g.push(i),
                None => groups.push(std::iter::once(i).collect()),
            }
        }
        let snapshot = SnapshotTable::default();
        for &(i, debt) in &decided.debts {
            snapshot.insert(tiers[i].key, debt);
        }
        let mut written: ArrayVec<(usize, Reply), MAX_DECISIONS> = ArrayVec::new();
        // A tier decided elsewhere refused: nothing is charged, the others are only read.
        let mut denied_at = decided.refused.then_some(0);
        for (g, group) in groups.iter().enumerate() {
            if decided.refused {
                break;
            }
            let mut inv = self.gcra.prepare_invoke();
            for &i in group {
                let q = tiers[i].quota;
                inv.key(keys[i].key.as_str())
                    .arg(q.interval_ns())
                    .arg(q.tolerance_ns())
                    .arg(tiers[i].max_delay_ns)
                    .arg(if tiers[i].mode == Mode::Shadow {
                        "1"
                    } else {
                        "0"
                    })
                    .arg(tiers[i].cost(cost));
            }
            let reply = match self
                .run(&inv)
                .await
                .and_then(|v| Reply::parse(&v, group.len(), true))
            {
                Ok(r) => r,
                Err(e) => {
                    self.roll_back(&groups, &written, tiers, keys, cost).await;
                    return Err(e);
                }
            };
            for (&i, &debt) in group.iter().zip(&reply.debts) {
                snapshot.insert(tiers[i].key, debt);
            }
            let admitted = reply.admitted;
            written.push((g, reply));
            if !admitted {
                denied_at = Some(g);
                break;
            }
        }
        if let Some(g) = denied_at {
            // The denying group wrote nothing; later groups are only read, for the wait.
            let first_read = if decided.refused {
                0
            } else {
                written.pop();
                g + 1
            };
            for group in &groups[first_read..] {
                let mut inv = self.peek.prepare_invoke();
                for &i in group {
                    inv.key(keys[i].key.as_str());
                }
                if let Ok(reply) = self
                    .run(&inv)
                    .await
                    .and_then(|v| Reply::parse(&v, group.len(), false))
                {
                    for (&i, &debt) in group.iter().zip(&reply.debts) {
                        snapshot.insert(tiers[i].key, debt);
                    }
                }
            }
        }
        let verdict = evaluate(&snapshot, tiers, BASE, cost);
        if !verdict.admitted && !written.is_empty() {
            self.roll_back(&groups, &written, tiers, keys, cost).await;
        }
        Ok(verdict)
    }

    /// Takes back what earlier slots wrote for a request that was denied after all.
    async fn roll_back(
        &self,
        groups: &[ArrayVec<usize, MAX_DECISIONS>],
        written: &[(usize, Reply)],
        tiers: &[Tier],
        keys: &[RedisKey],
        cost: u64,
    ) {
        for (g, reply) in written {
            let mut inv = self.rollback.prepare_invoke();
            let mut any = false;
            for (&i, &debt) in groups[*g].iter().zip(&reply.debts) {
                let q = tiers[i].quota;
                let increment = tiers[i].cost(cost).saturating_mul(q.interval_ns());
                let ahead = debt.saturating_add(increment);
                if ahead > q.tolerance_ns().saturating_add(tiers[i].max_delay_ns) {
                    continue; // a shadow tier that did not admit wrote nothing
                }
                let now = reply.now_abs();
                let old = if debt == 0 {
                    String::new()
                } else {
                    stamp(now + u128::from(debt))
                };
                inv.key(keys[i].key.as_str())
                    .arg(stamp(now + u128::from(ahead)))
                    .arg(old)
                    .arg(debt.div_ceil(1_000_000))
                    .arg(increment);
                any = true;
            }
            if any {
                if let Err(e) = self.run(&inv).await {
                    tracing::warn!(error = %e, "could not roll back an admission in another slot");
                }
            }
        }
    }

    /// Asks for the slice `ask` of `key`, giving back `back` (unused time and the stamp
    /// the old slice left) first. Counts for the breaker like a decision.
    pub async fn slice(
        &self,
        key: &str,
        quota: &crate::limit::Quota,
        ask: SliceAsk,
        back: Option<(u64, &str)>,
        now_ns: u64,
    ) -> Result<SliceAnswer, StoreError> {
        let SliceAsk { want, need, lead } = ask;
        if need > 0 && !self.breaker.allow(now_ns) {
            return Err(StoreError::BreakerOpen);
        }
        let (give_ns, give_end) = back.unwrap_or((0, ""));
        let mut inv = self.slice.prepare_invoke();
        inv.key(key)
            .arg(quota.interval_ns())
            .arg(quota.tolerance_ns())
            .arg(want)
            .arg(need)
            .arg(give_ns)
            .arg(give_end)
            .arg(lead);
        let reply: Result<redis::Value, _> = self.invoke(&inv).await;
        let answer = reply.and_then(|v| parse_slice(&v));
        match &answer {
            Ok(_) => self.breaker.success(),
            Err(e) => {
                if need > 0 && self.breaker.failure(now_ns) {
                    tracing::warn!(error = %e, "store failing; breaker open");
                }
            }
        }
        answer
    }

    /// Gives back `ns` of a slice that left `end` on `key` (only while it still is the
    /// key's last reservation). Outside the breaker: nothing waits on it.
    pub async fn give_back_slice(&self, key: &str, ns: u64, end: &str) -> Result<(), StoreError> {
        let mut inv = self.slice.prepare_invoke();
        inv.key(key).arg(1).arg(0).arg(0).arg(0).arg(ns).arg(end);
        let _: redis::Value = self.invoke(&inv).await?;
        Ok(())
    }

    /// Current debts (TAT − now, ns; 0 = idle) of `keys`, for the admin API.
    pub async fn debts(&self, keys: &[RedisKey]) -> Result<Vec<u64>, StoreError> {
        let mut inv = self.peek.prepare_invoke();
        for k in keys {
            inv.key(k.key.as_str());
        }
        let reply = Reply::parse(&self.run(&inv).await?, keys.len(), false)?;
        Ok(reply.debts.to_vec())
    }

    /// One call on a concurrency key's lease set (see slot_lease.lua): `(done, held)`.
    /// Counts for the breaker like a decision.
    pub async fn lease(
        &self,
        key: &str,
        op: LeaseOp,
        id: &str,
        max: u32,
        ttl: Duration,
        now_ns: u64,
    ) -> Result<(bool, u32), StoreError> {
        if !self.breaker.allow(now_ns) {
            return Err(StoreError::BreakerOpen);
        }
        let mut inv = self.slot_lease.prepare_invoke();
        inv.key(key)
            .arg(op.as_str())
            .arg(id)
            .arg(max)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        match self.run(&inv).await {
            Ok(reply) => {
                self.breaker.success();
                match reply.as_slice() {
                    [done, held] => Ok((*done == 1, u32::try_from(*held).unwrap_or(u32::MAX))),
                    _ => Err(StoreError::Reply),
                }
            }
            Err(e) => {
                if self.breaker.failure(now_ns) {
                    tracing::warn!(error = %e, "store failing; breaker open");
                }
                Err(e)
            }
        }
    }
}

impl RedisStore {
    /// A lease call in the background (refresh, give back), outside the breaker: its
    /// failures are the request path's business only when a request waits for them.
    pub async fn lease_unguarded(
        &self,
        key: &str,
        op: LeaseOp,
        id: &str,
        ttl: Duration,
    ) -> Result<(bool, u32), StoreError> {
        let mut inv = self.slot_lease.prepare_invoke();
        inv.key(key)
            .arg(op.as_str())
            .arg(id)
            .arg(0)
            .arg(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX));
        match self.run(&inv).await?.as_slice() {
            [done, held] => Ok((*done == 1, u32::try_from(*held).unwrap_or(u32::MAX))),
            _ => Err(StoreError::Reply),
        }
    }
}

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

/// `{granted, ahead, left, end}` or `{0, wait}`.
fn parse_slice(value: &redis::Value) -> Result<SliceAnswer, StoreError> {
    let redis::Value::Array(items) = value else {
        return Err(StoreError::Reply);
    };
    let int = |v: &redis::Value| match v {
        redis::Value::Int(n) => u64::try_from(*n).map_err(|_| StoreError::Reply),
        _ => Err(StoreError::Reply),
    };
    match items.as_slice() {
        [granted, ahead, left, redis::Value::BulkString(end)] => Ok(SliceAnswer::Granted {
            granted: int(granted)?,
            ahead: int(ahead)?,
            left: int(left)?,
            end: String::from_utf8(end.clone()).map_err(|_| StoreError::Reply)?,
        }),
        [zero, wait] if int(zero)? == 0 => Ok(SliceAnswer::Refused { wait: int(wait)? }),
        _ => Err(StoreError::Reply),
    }
}
