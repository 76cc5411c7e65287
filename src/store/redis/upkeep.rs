//! The connection's upkeep: the start (`prepare`: said at once when Redis cannot be
//! reached), then one turn every half second (sooner when woken): follows the Sentinels'
//! master, connects a Cluster, keeps the fleet's secret, probes its open breakers, and
//! watches the masters for data-loss events (the store's liveness, on a timer of its own,
//! is `liveness.rs`).

use crate::store::error::StoreError;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use redis::cluster_routing::{MultipleNodeRoutingInfo, RoutingInfo};

use super::events::NodeState;
use super::{secret, Connection, RedisStore};
use crate::key::redis_key::PREFIX;
use crate::metrics::{EventLabels, Metrics};

/// The time between two turns.
const TURN: Duration = Duration::from_millis(500);
/// A gateway silent in the membership for this long no longer counts.
const MEMBERSHIP_MS: u64 = 30_000;

/// A heartbeat: `ARGV[1]` (the gateway's id) scored by Redis's time in ms, those older
/// than `ARGV[2]` ms dropped; answers how many are left.
static MEMBERSHIP: std::sync::LazyLock<redis::Script> = std::sync::LazyLock::new(|| {
    redis::Script::new(
        "local t = redis.call('TIME')
         local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
         redis.call('ZADD', KEYS[1], now, ARGV[1])
         redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - tonumber(ARGV[2]))
         return redis.call('ZCARD', KEYS[1])",
    )
});

impl RedisStore {
    /// Background upkeep until the process stops. `wall_ms` gives the wall clock events
    /// are dated with.
    pub async fn maintain(self: Arc<Self>, metrics: Arc<Metrics>, wall_ms: impl Fn() -> u64) {
        if let Connection::Sentinel(link) = &self.connection {
            tokio::spawn(link.clone().follow_switches(self.wake.clone()));
        }
        for turn in 0u64.. {
            if let Connection::Sentinel(link) = &self.connection {
                link.refresh(self.timeout * 20).await;
            }
            self.connect_cluster().await;
            let restarted = self.watch_events(&metrics, wall_ms()).await;
            // Every turn until the fleet's secret is known, then every 5 s, and at once
            // after a restart (so a gateway starting now finds the fleet's again).
            if restarted || self.fleet.key().is_none() || turn % 10 == 0 {
                secret::keep(&self).await;
            }
            if turn % 10 == 0 {
                self.keep_membership().await;
            }
            self.probe_open().await;
            tokio::select! {
                _ = tokio::time::sleep(TURN) => {}
                _ = self.wake.notified() => {}
            }
        }
    }

    /// At start: connects a Cluster and learns the fleet's key secret, waiting at most
    /// `within` (the gateway starts while Redis is down, and `maintain` goes on trying).
    pub async fn prepare(&self, within: Duration) {
        // A Cluster's PING needs its connection, Sentinel's the master they name: found
        // first, or every Cluster and Sentinel store would be reported unreachable at
        // start (and its first requests refused while the fleet's secret was unknown).
        let found = async {
            if let Connection::Sentinel(link) = &self.connection {
                link.refresh(within).await;
            }
            self.connect_cluster().await;
        };
        let _ = tokio::time::timeout(within, found).await;
        // Said at once, with where and why: a Redis that cannot be reached is the first
        // thing an operator must know (the gateway starts all the same).
        let ping = redis::cmd("PING");
        match tokio::time::timeout(within, self.command::<String>(&ping)).await {
            Ok(Ok(_)) => {}
            Ok(Err(e)) => {
                let e = self.explain(e).await;
                // Recorded as any failed call: what the operator is shown is true from
                // the first call, also before the fleet's secret is known.
                self.health.record(&e);
                self.health.went_down();
                tracing::warn!(
                    address = %self.address(),
                    cause = super::health::cause(&e),
                    error = %e,
                    "Redis cannot be reached at start; decisions follow on_error until it answers"
                );
            }
            Err(_) => {
                self.health.record(&StoreError::Timeout(within));
                self.health.went_down();
                tracing::warn!(
                    address = %self.address(),
                    cause = "timed_out",
                    "Redis did not answer PING at start; decisions follow on_error until it answers"
                )
            }
        }
        let ready = async {
            self.connect_cluster().await;
            secret::keep(self).await;
            self.warn_settings().await;
        };
        if tokio::time::timeout(within, ready).await.is_err() {
            tracing::warn!(
                address = %self.address(),
                "Redis did not answer at start; decisions follow on_error until it does"
            );
        }
    }

    /// Probes every open breaker group with a write to a key of its own, closing those
    /// whose node takes it: the store recovers by itself, even with no traffic.
    async fn probe_open(&self) {
        // A Cluster not reached yet has every group open and nothing to probe them on:
        // its connection (tried every turn) closes them all.
        if let Connection::Cluster(slot) = &self.connection {
            if slot.load().is_none() {
                return;
            }
        }
        let open: Vec<usize> = self.breakers.open().collect();
        for group in open {
            let probed = self.write_probe(group).await;
            // Without the fleet's key secret no decision can be asked, whatever the probe
            // says: the breaker stays open (it closes at the first turn after the secret
            // is learned), not closed and opened again by every third request.
            if probed.is_ok() && self.fleet.key().is_none() {
                continue;
            }
            if let Err(e) = probed {
                self.health.record(&self.explain(e).await);
                continue;
            }
            {
                self.breakers.get(group).success();
                if self.breakers.len() == 1 {
                    if self.health.came_back() {
                        tracing::info!(address = %self.address(), "store reachable again; breaker closed");
                    }
                } else {
                    tracing::info!(
                        group,
                        "store reachable again for this group of hash slots; breaker closed"
                    );
                }
            }
        }
    }
    /// This gateway's heartbeat in the fleet's membership (a sorted set of gateway ids by
    /// the time they last wrote, on Redis's clock), and the count of those seen in the
    /// last 30 s. On Redis's clock, not the gateways': a gateway whose clock ran 30 s
    /// ahead would drop every other heartbeat and count a fleet of one (enforcing the
    /// whole limit alone under `on_error = "local"` while the others took a share each),
    /// and one behind would be dropped by the others.
    async fn keep_membership(&self) {
        let key = format!("{PREFIX}:{{fleet}}");
        let mut beat = MEMBERSHIP.prepare_invoke();
        beat.key(&key).arg(&self.member_id).arg(MEMBERSHIP_MS);
        if let Ok(n) = self.invoke::<u32>(&beat).await {
            self.members
                .store(n.max(1), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// At start: warns of the Redis settings that weaken the fleet's bound under faults
    /// (docs/reliability.md). A Redis that does not allow `CONFIG GET` (a managed one)
    /// is not judged.
    pub(super) async fn warn_settings(&self) {
        let get = |name: &str| redis::cmd("CONFIG").arg("GET").arg(name).to_owned();
        let value = |reply: Result<Vec<String>, _>| reply.ok().and_then(|v| v.get(1).cloned());
        if value(self.command(&get("appendonly")).await).as_deref() == Some("no") {
            tracing::warn!("Redis runs with appendonly no: a restart loses every key, and each admits up to one burst per key again; set appendonly yes to make restarts lose nothing");
        }
        match &self.connection {
            Connection::Sentinel(_) => {
                let min = value(self.command(&get("min-replicas-to-write")).await);
                if min.as_deref() == Some("0") && self.acker.is_none() {
                    tracing::warn!("Redis replicates asynchronously (min-replicas-to-write 0, no replica_ack): a failover may lose the last admissions, up to one burst per key; set [store] replica_ack = 1 to lose none");
                }
            }
            Connection::Cluster(_) => {
                let full = value(self.command(&get("cluster-require-full-coverage")).await);
                if full.as_deref() == Some("yes") {
                    tracing::warn!("Redis Cluster runs with cluster-require-full-coverage yes: a master down without a replica stops every slot, not only its own; set it to no");
                }
            }
            Connection::Single(_) => {}
        }
    }

    /// Reads the masters and records what changed; whether one restarted.
    async fn watch_events(&self, metrics: &Metrics, now_ms: u64) -> bool {
        let Some(masters) = self.masters().await else {
            return false;
        };
        let events = self.events.observe(masters, now_ms);
        if !events.is_empty() {
            // Keys may be gone: refunds admitted before would come out of later usage.
            self.losses
                .fetch_add(1, std::sync::atomic::Ordering::AcqRel);
        }
        for e in &events {
            metrics
                .store_events
                .get_or_create(&EventLabels {
                    kind: e.kind.as_str(),
                })
                .inc();
        }
        events
            .iter()
            .any(|e| e.kind == super::events::EventKind::Restart)
    }

    /// Every master by address, as its `INFO` describes it; `None` when one cannot be read
    /// (nothing is concluded from a turn that saw part of the store).
    async fn masters(&self) -> Option<BTreeMap<String, NodeState>> {
        let info = redis::cmd("INFO");
        match &self.connection {
            Connection::Single(_) => {
                let text: String = self.command(&info).await.ok()?;
                let node = NodeState::from_info(&text)?;
                // A single node's address is the store's (health::addresses).
                Some(BTreeMap::from([(self.address.clone(), node)]))
            }
            Connection::Sentinel(link) => {
                let addr = link.master_addr()?;
                let text: String = self.command(&info).await.ok()?;
                Some(BTreeMap::from([(addr, NodeState::from_info(&text)?)]))
            }
            Connection::Cluster(slot) => {
                let mut c = self.cluster(slot).ok()?;
                let all = RoutingInfo::MultiNode((MultipleNodeRoutingInfo::AllMasters, None));
                let reply = tokio::time::timeout(self.timeout, c.route_command(info, all))
                    .await
                    .ok()?
                    .ok()?;
                per_node(reply)
            }
        }
    }
}

/// A Cluster's per-node replies (a map, or pairs) read as `INFO` of each master.
fn per_node(reply: redis::Value) -> Option<BTreeMap<String, NodeState>> {
    let pairs: Vec<(redis::Value, redis::Value)> = match reply {
        redis::Value::Map(pairs) => pairs,
        redis::Value::Array(items) => items
            .into_iter()
            .filter_map(|item| match item {
                redis::Value::Array(mut pair) if pair.len() == 2 => {
                    let v = pair.pop()?;
                    Some((pair.pop()?, v))
                }
                _ => None,
            })
            .collect(),
        _ => return None,
    };
    let text = |v: redis::Value| redis::from_redis_value::<String>(v).ok();
    pairs
        .into_iter()
        .map(|(addr, info)| Some((text(addr)?, NodeState::from_info(&text(info)?)?)))
        .collect()
}
