//! The connection to the shared store: one Redis, a Redis Cluster, or the master Redis
//! Sentinel names. Every call is bounded by the store timeout; decisions go through the
//! circuit breaker ([`RedisStore::guarded`]). What the calls do is each limit kind's own
//! business: the rate scripts in `store::rate`, slot leases in `store::concurrency`,
//! slices in `store::slices`.

pub mod breaker;
pub mod secret;
pub mod sentinel;

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::cluster_async::ClusterConnection;
use redis::Script;

use super::StoreError;
use crate::config::SentinelMaster;
use crate::key::FleetSecret;
use breaker::Breaker;
use sentinel::SentinelLink;

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
    /// The fleet's key secret Redis keys are made with.
    fleet: Arc<FleetSecret>,
}

/// The breaker's probe: proves the server answers and runs scripts.
static PROBE: std::sync::LazyLock<Script> =
    std::sync::LazyLock::new(|| Script::new("return redis.call('TIME')"));

impl RedisStore {
    /// Prepares clients for `urls` (a single Redis, or Cluster seed nodes).
    /// Connects lazily: the gateway starts even while Redis is down.
    pub fn new(
        urls: &[String],
        cluster: bool,
        sentinel: Option<&SentinelMaster>,
        timeout: Duration,
        fleet: Arc<FleetSecret>,
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
            fleet,
        })
    }

    /// The fleet's key secret.
    pub fn fleet(&self) -> &Arc<FleetSecret> {
        &self.fleet
    }

    /// Background upkeep until the process stops: follows the Sentinels' master,
    /// connects a cluster as soon as it answers, and while the breaker is open probes the
    /// store so it recovers by itself, even with no traffic.
    pub async fn maintain(self: Arc<Self>) {
        for turn in 0u64.. {
            if let Connection::Sentinel(link) = &self.connection {
                link.refresh(self.timeout * 20).await;
            }
            self.connect_cluster().await;
            // Every turn until the fleet's secret is known, then every 5 s.
            if self.fleet.key().is_none() || turn % 10 == 0 {
                secret::keep(&self).await;
            }
            if self.breaker.is_open() && self.ping().await.is_ok() {
                self.breaker.success();
                tracing::info!("store reachable again; breaker closed");
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
    }

    /// At start: connects a Cluster and learns the fleet's key secret, waiting at most
    /// `within` (the gateway starts while Redis is down, and `maintain` goes on trying).
    pub async fn prepare(&self, within: Duration) {
        let ready = async {
            self.connect_cluster().await;
            secret::keep(self).await;
        };
        if tokio::time::timeout(within, ready).await.is_err() {
            tracing::warn!(
                "Redis did not answer at start; decisions follow on_error until it does"
            );
        }
    }

    /// Connects to the Cluster when that has not happened yet.
    async fn connect_cluster(&self) {
        let (Connection::Cluster(slot), Some(client)) = (&self.connection, &self.cluster_client)
        else {
            return;
        };
        if slot.load().is_some() {
            return;
        }
        match tokio::time::timeout(self.timeout * 20, client.get_async_connection()).await {
            Ok(Ok(conn)) => {
                slot.store(Some(Arc::new(conn)));
                tracing::info!("connected to the Redis Cluster");
            }
            Ok(Err(e)) => tracing::warn!(error = %e, "Redis Cluster not reachable yet"),
            Err(_) => tracing::warn!("Redis Cluster did not answer in time"),
        }
    }

    /// A cheap probe: a script with no keys.
    pub async fn ping(&self) -> Result<(), StoreError> {
        self.invoke::<redis::Value>(&PROBE.prepare_invoke())
            .await
            .map(|_| ())
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
                if result.is_err() {
                    // The master may have moved (or been demoted: READONLY).
                    link.failed();
                }
                result
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
                if result.is_err() {
                    link.failed();
                }
                result
            }
            Connection::Cluster(slot) => {
                let mut c = self.cluster(slot)?;
                self.bounded(command.query_async(&mut c)).await
            }
        }
    }

    fn cluster(
        &self,
        slot: &ArcSwapOption<ClusterConnection>,
    ) -> Result<ClusterConnection, StoreError> {
        Ok(slot
            .load_full()
            .ok_or(StoreError::NotConnected)?
            .as_ref()
            .clone())
    }

    /// Runs `call` (a decision: a request waits on it) through the circuit breaker: refused
    /// at once while the breaker is open, and its outcome counted. `now_ns` is the local
    /// clock, read only by the breaker.
    pub async fn guarded<T>(
        &self,
        now_ns: u64,
        call: impl Future<Output = Result<T, StoreError>>,
    ) -> Result<T, StoreError> {
        if !self.breaker.allow(now_ns) {
            return Err(StoreError::BreakerOpen);
        }
        match call.await {
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
}
