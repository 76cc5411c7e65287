//! Redis Sentinel: the master is asked of the Sentinels, and asked again when a call to
//! it fails (a multiplexed connection does not follow a failover by itself) — so after a
//! failover the gateway moves to the new master within a call or two, and in between the
//! outage is answered per `on_error`.

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
    master: ArcSwapOption<Master>,
    /// A call failed: ask the Sentinels again.
    stale: AtomicBool,
    config: ConnectionManagerConfig,
}

struct Master {
    addr: String,
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

    /// Asks the Sentinels for the master when none is known or a call failed, within
    /// `limit`; moves to it when it changed.
    pub async fn refresh(&self, limit: Duration) {
        if !self.stale.load(Ordering::Relaxed) {
            return;
        }
        let asked = async {
            let mut sentinels = self.sentinels.lock().await;
            sentinels.async_get_client().await
        };
        let client = match tokio::time::timeout(limit, asked).await {
            Ok(Ok(client)) => client,
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "Redis Sentinel did not name a master");
                return;
            }
            Err(_) => {
                tracing::warn!("Redis Sentinel did not answer in time");
                return;
            }
        };
        let addr = client.get_connection_info().addr().to_string();
        self.stale.store(false, Ordering::Relaxed);
        if self.master.load().as_ref().is_some_and(|m| m.addr == addr) {
            return;
        }
        match ConnectionManager::new_lazy_with_config(client, self.config.clone()) {
            Ok(connection) => {
                tracing::info!(master = %addr, "following the master Redis Sentinel names");
                self.master
                    .store(Some(Arc::new(Master { addr, connection })));
            }
            Err(e) => {
                self.stale.store(true, Ordering::Relaxed);
                tracing::warn!(error = %e, "cannot connect to the master Sentinel names");
            }
        }
    }
}
