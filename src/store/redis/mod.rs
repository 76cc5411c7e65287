//! The connection to the shared store: one Redis, a Redis Cluster, or the master Redis
//! Sentinel names. Every call is bounded by the store timeout; decisions go through the
//! circuit breaker ([`RedisStore::guarded`]). What the calls do is each limit kind's own
//! business: the rate scripts in `store::rate`, slot leases in `store::concurrency`,
//! slices in `store::rate::lease`.

pub mod ack;
pub mod breaker;
pub mod events;
pub mod health;
mod liveness;
pub mod secret;
pub mod sentinel;
mod sentinel_ask;
mod server_clock;
pub use server_clock::stamp;
mod upkeep;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::Script;

use crate::clock::Clock;
use crate::config::SentinelMaster;
use crate::key::FleetSecret;
use crate::store::error::StoreError;
use breaker::Breakers;
use sentinel::SentinelLink;

#[derive(Clone)]
pub(super) enum Connection {
    Single(ConnectionManager),
    /// Filled by the background task once the cluster answers (start-up never waits).
    Cluster(Arc<ArcSwapOption<ClusterConnection>>),
    /// The master Redis Sentinel names, followed across failovers.
    Sentinel(Arc<SentinelLink>),
}

pub struct RedisStore {
    pub(super) connection: Connection,
    cluster_client: Option<redis::cluster::ClusterClient>,
    /// Why the Cluster is not connected yet (its cause in one word, and the error), once an
    /// attempt failed: what a call before the first connection fails with.
    cluster_unreached: parking_lot::Mutex<Option<(&'static str, String)>>,
    pub(super) timeout: Duration,
    /// One breaker, or one per group of Cluster hash slots.
    pub breakers: Breakers,
    /// A key in each breaker group, for its probe.
    pub(super) probe_keys: Vec<String>,
    /// The fleet's key secret Redis keys are made with.
    pub(super) fleet: Arc<FleetSecret>,
    /// Data-loss events seen by the upkeep.
    pub events: events::Watch,
    /// Wakes the upkeep before its next turn (a Sentinel switched the master, a call to
    /// it failed).
    pub(super) wake: Arc<tokio::sync::Notify>,
    /// `[store] fleet_size`, and else the gateways with a heartbeat in Redis.
    fleet_size: Option<u32>,
    pub(super) members: std::sync::atomic::AtomicU32,
    /// The last failure and the count of failed calls, for operators.
    pub health: health::Health,
    /// Where it connects, for operators (no credentials).
    pub(super) address: String,
    /// This gateway's name in the membership.
    pub(super) member_id: String,
    /// The server's clock against this gateway's monotonic clock, as the replies showed
    /// it; it dates the deadline a call carries. One per slot group (each master's clock
    /// its own: one shared estimate flipped between masters whose clocks differ, and
    /// every call to the one ahead read late).
    node_clocks: Box<[server_clock::NodeClock]>,
    /// This gateway's clock, which the requests' instants are read on: a reply's arrival
    /// is read on it too.
    clock: Arc<dyn Clock>,
    /// Restarts and failovers seen (each may have lost keys): a refund admitted before
    /// one gives nothing back, as it would come out of the usage made since.
    losses: std::sync::atomic::AtomicU64,
    /// `[store] replica_ack`: what waits for the replicas' acknowledgements.
    acker: Option<Arc<ack::Acker>>,
    /// A single Redis's client, for the acker's connection of its own.
    single_client: Option<redis::Client>,
}

/// The breaker's probe: proves the node answers, runs scripts and takes writes (a demoted
/// master, or one refusing writes for lack of replicas, fails it).
pub(super) static PROBE: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new("return redis.call('SET', KEYS[1], '1', 'PX', 2000)"));

impl RedisStore {
    /// Prepares clients for `urls` (a single Redis, or Cluster seed nodes).
    /// Connects lazily: the gateway starts even while Redis is down.
    pub fn new(
        urls: &[String],
        cluster: bool,
        sentinel: Option<&SentinelMaster>,
        timeout: Duration,
        (fleet, clock): (Arc<FleetSecret>, Arc<dyn Clock>),
    ) -> Result<Self, StoreError> {
        let config = ConnectionManagerConfig::new()
            .set_connection_timeout(Some(timeout))
            .set_response_timeout(Some(timeout))
            .set_number_of_retries(1)
            .set_max_delay(Duration::from_secs(1));
        let mut single_client = None;
        let (connection, cluster_client) = if let Some(master) = sentinel {
            (
                Connection::Sentinel(Arc::new(SentinelLink::new(urls, master, config)?)),
                None,
            )
        } else if !cluster {
            let client = redis::Client::open(urls[0].as_str())?;
            single_client = Some(client.clone());
            (
                Connection::Single(ConnectionManager::new_lazy_with_config(client, config)?),
                None,
            )
        } else {
            // Its retries wait within the call's timeout: the client's default waits (1.28 s
            // at least) outlasted every timeout, so a CLUSTERDOWN or a refused connection
            // held each call the whole timeout and was told as one, its cause hidden. A
            // long timeout waits no longer than that default.
            let ms = u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX);
            let client = redis::cluster::ClusterClient::builder(urls.to_vec())
                .connection_timeout(timeout)
                .response_timeout(timeout)
                .retries(2)
                .min_retry_wait((ms / 10).clamp(1, 1_280))
                .max_retry_wait((ms / 4).clamp(2, 2_560))
                .build()?;
            (
                Connection::Cluster(Arc::new(ArcSwapOption::empty())),
                Some(client),
            )
        };
        let breakers = Breakers::new(cluster);
        let groups = breakers.len();
        Ok(Self {
            connection,
            cluster_client,
            cluster_unreached: parking_lot::Mutex::new(None),
            timeout,
            breakers,
            probe_keys: (0..groups)
                .map(|g| breaker::probe_key(&breaker::tag_in_group(g)))
                .collect(),
            fleet,
            events: events::Watch::default(),
            wake: Arc::new(tokio::sync::Notify::new()),
            fleet_size: None,
            members: std::sync::atomic::AtomicU32::new(1),
            health: health::Health::default(),
            address: health::addresses(urls),
            member_id: crate::random::suffix(),
            node_clocks: (0..groups).map(|_| Default::default()).collect(),
            clock,
            losses: std::sync::atomic::AtomicU64::new(0),
            acker: None,
            single_client,
        })
    }

    /// With `replicas`, every admission waits until that many replicas acknowledge it
    /// (`[store] replica_ack`).
    pub fn with_replica_ack(mut self, replicas: Option<u32>) -> Self {
        self.acker = replicas.map(|n| Arc::new(ack::Acker::new(n, self.timeout)));
        self
    }

    pub fn acker(&self) -> Option<&Arc<ack::Acker>> {
        self.acker.as_ref()
    }

    /// Where this store connects, without credentials: the node, the Cluster's seed
    /// nodes, or the master Sentinel names now.
    pub fn address(&self) -> String {
        match &self.connection {
            Connection::Sentinel(link) => format!(
                "{} (named by the Sentinels {})",
                link.master_addr().unwrap_or_else(|| "no master".to_owned()),
                self.address
            ),
            _ => self.address.clone(),
        }
    }

    pub fn timeout(&self) -> Duration {
        self.timeout
    }

    /// Restarts and failovers of the store seen so far.
    #[inline]
    pub fn losses(&self) -> u64 {
        self.losses.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The number of gateways `on_error = "local"` divides each limit among, when set in
    /// the config (`[store] fleet_size`); else they are counted in Redis.
    pub fn with_fleet_size(mut self, fleet_size: Option<u32>) -> Self {
        self.fleet_size = fleet_size;
        self
    }

    /// How many gateways share each limit: `fleet_size`, or those seen in Redis lately
    /// (the last count known when Redis is unreachable; 1 before any).
    pub fn fleet_share(&self) -> u64 {
        u64::from(
            self.fleet_size
                .unwrap_or_else(|| self.members.load(std::sync::atomic::Ordering::Relaxed))
                .max(1),
        )
    }

    /// The fleet's key secret.
    pub fn fleet(&self) -> &Arc<FleetSecret> {
        &self.fleet
    }

    /// Connects to the Cluster when that has not happened yet.
    pub(super) async fn connect_cluster(&self) {
        let (Connection::Cluster(slot), Some(client)) = (&self.connection, &self.cluster_client)
        else {
            return;
        };
        if slot.load().is_some() {
            return;
        }
        let why = match tokio::time::timeout(self.timeout * 20, client.get_async_connection()).await
        {
            Ok(Ok(conn)) => {
                slot.store(Some(Arc::new(conn)));
                *self.cluster_unreached.lock() = None;
                self.breakers.close_all();
                tracing::info!("connected to the Redis Cluster");
                return;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "Redis Cluster not reachable yet");
                (health::redis_cause(&e), e.to_string())
            }
            Err(_) => {
                tracing::warn!("Redis Cluster did not answer in time");
                let detail = format!("no seed node answered within {:?}", self.timeout * 20);
                ("timed_out", detail)
            }
        };
        // Told from the first attempt, calls or none (`/admin/stats`, `/readyz`).
        let unreached = StoreError::ClusterUnreached {
            cause: why.0,
            detail: why.1.clone(),
        };
        self.health.record(&unreached);
        *self.cluster_unreached.lock() = Some(why);
        // No slot of it answers: its requests take `on_error` at once, as a single
        // node's do once its breaker is open, and the breaker shown is true.
        self.breakers.trip_all();
    }

    async fn bounded<T>(
        &self,
        fut: impl Future<Output = redis::RedisResult<T>>,
    ) -> Result<T, StoreError> {
        match tokio::time::timeout(self.timeout, fut).await {
            // The client's own response timeout is the same limit: count it as one.
            Ok(Err(e)) if e.is_timeout() => Err(StoreError::Timeout(self.timeout)),
            Ok(r) => r.map_err(StoreError::from),
            Err(_) => Err(StoreError::Timeout(self.timeout)),
        }
    }

    /// Runs one script, bounded by the store timeout like every call.
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
                self.sentinel_answered(link, result)
            }
            Connection::Cluster(slot) => {
                let mut c = self.cluster(slot)?;
                self.bounded(invocation.invoke_async(&mut c)).await
            }
        }
    }

    /// Runs one command (upkeep, never a decision), bounded like every call.
    pub async fn command<T: redis::FromRedisValue>(
        &self,
        command: &redis::Cmd,
    ) -> Result<T, StoreError> {
        match &self.connection {
            Connection::Single(c) => {
                let mut c = c.clone();
                self.bounded(command.query_async(&mut c)).await
            }
            Connection::Sentinel(link) => {
                let mut c = link.connection()?;
                let result = self.bounded(command.query_async(&mut c)).await;
                self.sentinel_answered(link, result)
            }
            Connection::Cluster(slot) => {
                let mut c = self.cluster(slot)?;
                self.bounded(command.query_async(&mut c)).await
            }
        }
    }

    /// What a call to a Sentinel-followed master answered: on a failure the master may
    /// have moved (or been demoted: READONLY), so the link is marked and the upkeep woken
    /// to ask the Sentinels at once.
    fn sentinel_answered<T>(
        &self,
        link: &SentinelLink,
        result: Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        if result.is_err() {
            link.failed();
            self.wake.notify_one();
        }
        result
    }

    pub(super) fn cluster(
        &self,
        slot: &ArcSwapOption<ClusterConnection>,
    ) -> Result<ClusterConnection, StoreError> {
        let Some(connection) = slot.load_full() else {
            return Err(match self.cluster_unreached.lock().clone() {
                Some((cause, detail)) => StoreError::ClusterUnreached { cause, detail },
                None => StoreError::NotConnected,
            });
        };
        Ok(connection.as_ref().clone())
    }

    /// Runs `call` (a decision: a request waits on it, on the node holding hash tag `tag`)
    /// through that node's circuit breaker: refused at once while it is open, and its
    /// outcome counted. `now_ns` is the local clock, read only by the breaker.
    pub async fn guarded<T>(
        &self,
        tag: &str,
        now_ns: u64,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        let group = self.breakers.group_of(tag);
        let breaker = self.breakers.get(group);
        if !breaker.allow(now_ns) {
            return Err(StoreError::BreakerOpen);
        }
        match call.await {
            Ok(v) => {
                breaker.success();
                Ok(v)
            }
            Err(e) => {
                self.health.record(&e);
                if breaker.failure(now_ns) {
                    if self.breakers.len() == 1 {
                        if self.health.went_down() {
                            tracing::warn!(address = %self.address(), cause = health::cause(&e), error = %e, "store failing; breaker open, decisions follow on_error until it answers");
                        }
                    } else {
                        tracing::warn!(error = %e, group, "store failing for this group of hash slots; its breaker open");
                    }
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
}
