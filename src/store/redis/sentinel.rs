//! Redis Sentinel: the master is asked of the Sentinels at every upkeep turn (half a
//! second), at once when a call to it fails (a multiplexed connection does not follow a
//! failover by itself), and at once when a Sentinel announces `+switch-master` (each
//! Sentinel's announcements are followed on a subscription of their own). A node that
//! does not say it is a master (`ROLE`) is never written to. So a whole fleet leaves a
//! replaced master within moments of its replacement — even while the old one still
//! takes writes, which Sentinel discards when it demotes it — and no two gateways keep
//! deciding on two masters.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::sentinel::{SentinelClient, SentinelNodeConnectionInfo, SentinelServerType};
use redis::{IntoConnectionInfo, TlsMode};

use crate::config::SentinelMaster;
use crate::store::StoreError;

/// The master's connection, as the Sentinels last named it.
pub struct SentinelLink {
    sentinels: tokio::sync::Mutex<SentinelClient>,
    /// The Sentinels' URLs and the master's name, for the `+switch-master` subscriptions.
    urls: Vec<String>,
    name: String,
    master: ArcSwapOption<Master>,
    /// A call failed: ask the Sentinels again.
    stale: AtomicBool,
    config: ConnectionManagerConfig,
}

struct Master {
    addr: String,
    client: redis::Client,
    connection: ConnectionManager,
}

impl SentinelLink {
    pub fn new(
        sentinels: &[String],
        master: &SentinelMaster,
        config: ConnectionManagerConfig,
    ) -> Result<Self, StoreError> {
        let mut node = SentinelNodeConnectionInfo::default();
        if let Some(url) = &master.url {
            let info = url.as_str().into_connection_info()?;
            node = node.set_redis_connection_info(info.redis_settings().clone());
            if url.starts_with("rediss://") {
                node = node.set_tls_mode(TlsMode::Secure);
            }
        }
        let client = SentinelClient::build(
            sentinels.to_vec(),
            master.name.clone(),
            Some(node),
            SentinelServerType::Master,
        )?;
        Ok(Self {
            sentinels: tokio::sync::Mutex::new(client),
            urls: sentinels.to_vec(),
            name: master.name.clone(),
            master: ArcSwapOption::empty(),
            stale: AtomicBool::new(true),
            config,
        })
    }

    /// The master's connection, once one was found.
    pub fn connection(&self) -> Result<ConnectionManager, StoreError> {
        self.master
            .load()
            .as_ref()
            .map(|m| m.connection.clone())
            .ok_or(StoreError::NotConnected)
    }

    /// A call to the master failed: the next upkeep asks the Sentinels again.
    pub fn failed(&self) {
        self.stale.store(true, Ordering::Relaxed);
    }

    /// The master's client, for a connection of one's own.
    pub fn master_client(&self) -> Option<redis::Client> {
        self.master.load().as_ref().map(|m| m.client.clone())
    }

    /// The address of the master in use.
    pub fn master_addr(&self) -> Option<String> {
        self.master.load().as_ref().map(|m| m.addr.clone())
    }

    /// Asks the Sentinels for the master, within `limit`, and moves to it when it changed
    /// and says it is a master. The new address when it moved.
    pub async fn refresh(&self, limit: Duration) -> Option<String> {
        let asked = async {
            let mut sentinels = self.sentinels.lock().await;
            sentinels.async_get_client().await
        };
        let client = match tokio::time::timeout(limit, asked).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "Redis Sentinel did not name a master");
                return None;
            }
            Err(_) => {
                tracing::warn!("Redis Sentinel did not answer in time");
                return None;
            }
        };
        let addr = client.get_connection_info().addr().to_string();
        self.stale.store(false, Ordering::Relaxed);
        if self.master.load().as_ref().is_some_and(|m| m.addr == addr) {
            return None;
        }
        let connection =
            match ConnectionManager::new_lazy_with_config(client.clone(), self.config.clone()) {
                Ok(connection) => connection,
                Err(e) => {
                    self.stale.store(true, Ordering::Relaxed);
                    tracing::warn!(error = %e, "cannot connect to the master Sentinel names");
                    return None;
                }
            };
        if !says_master(&connection, limit).await {
            // Named before it was promoted, or still a replica: stop writing to the old
            // master all the same (Sentinel has replaced it), and ask again next turn.
            self.stale.store(true, Ordering::Relaxed);
            self.master.store(None);
            tracing::warn!(master = %addr, "the node Sentinel names does not say it is a master yet");
            return None;
        }
        tracing::info!(master = %addr, "following the master Redis Sentinel names");
        self.master.store(Some(Arc::new(Master {
            addr: addr.clone(),
            client,
            connection,
        })));
        Some(addr)
    }

    /// Follows each Sentinel's `+switch-master` announcements for this master, calling
    /// `switched` at each, until the process ends (reconnecting after a second when a
    /// Sentinel goes away).
    pub async fn follow_switches(self: Arc<Self>, switched: Arc<tokio::sync::Notify>) {
        let watchers = self.urls.clone().into_iter().map(|url| {
            let (link, switched) = (self.clone(), switched.clone());
            tokio::spawn(async move { link.follow_one(&url, &switched).await })
        });
        for w in watchers.collect::<Vec<_>>() {
            let _ = w.await;
        }
    }

    async fn follow_one(&self, url: &str, switched: &tokio::sync::Notify) {
        use futures_util::StreamExt;
        loop {
            let subscribed = async {
                let mut pubsub = redis::Client::open(url)?.get_async_pubsub().await?;
                pubsub.subscribe("+switch-master").await?;
                Ok::<_, redis::RedisError>(pubsub)
            };
            if let Ok(mut pubsub) = subscribed.await {
                let mut messages = pubsub.on_message();
                while let Some(msg) = messages.next().await {
                    let text: String = msg.get_payload().unwrap_or_default();
                    // "<name> <old ip> <old port> <new ip> <new port>"
                    if text.split(' ').next() == Some(self.name.as_str()) {
                        tracing::warn!(announcement = %text, "Redis Sentinel switched the master");
                        self.failed();
                        switched.notify_one();
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Whether the node behind `connection` answers `ROLE` as a master, within `limit`.
async fn says_master(connection: &ConnectionManager, limit: Duration) -> bool {
    let mut c = connection.clone();
    let cmd = redis::cmd("ROLE");
    let role = cmd.query_async::<redis::Value>(&mut c);
    match tokio::time::timeout(limit, role).await {
        Ok(Ok(redis::Value::Array(items))) => matches!(
            items.first(),
            Some(redis::Value::BulkString(b)) if b.as_slice() == b"master"
        ),
        _ => false,
    }
}
