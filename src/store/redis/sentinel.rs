//! Redis Sentinel: the master is asked of every Sentinel at every upkeep turn (half a
//! second; the newest configuration wins, [`sentinel_ask`](super::sentinel_ask)), and a
//! Sentinel's `+switch-master` announcement (each Sentinel's followed on a subscription
//! of its own) moves the gateway at once. A node that does not say it is a master
//! (`ROLE`) is never written to, and a gateway never goes back to an older
//! configuration's master. So a whole fleet leaves a replaced master within moments of
//! its replacement — even while the old one still takes writes, which Sentinel discards
//! when it demotes it — and no two gateways keep deciding on two masters.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwapOption;
use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::IntoConnectionInfo;

use super::sentinel_ask::{NoMaster, Sentinels};

use crate::config::SentinelMaster;
use crate::store::error::StoreError;

/// The master's connection, as the Sentinels last named it.
pub struct SentinelLink {
    sentinels: Sentinels,
    /// The master's credentials, database and TLS, with some address (replaced by the
    /// address the Sentinels name).
    template: redis::ConnectionInfo,
    /// The configuration epoch of the master in use: an answer naming an older one is
    /// a Sentinel that has not heard of the failover yet.
    epoch: AtomicU64,
    /// The Sentinels' URLs and the master's name, for the `+switch-master` subscriptions.
    urls: Vec<String>,
    name: String,
    master: ArcSwapOption<Master>,
    /// A call failed: ask the Sentinels again.
    stale: AtomicBool,
    /// The new master's host and port of the last `+switch-master`, not yet tried.
    announced: std::sync::Mutex<Option<(String, u16)>>,
    config: ConnectionManagerConfig,
    /// Why there is no master in use, when the last search for one failed: what a call
    /// meanwhile fails with, so the operator is told the Sentinels' own reason.
    why: parking_lot::Mutex<Option<NoMaster>>,
}

struct Master {
    addr: String,
    client: redis::Client,
    connection: ConnectionManager,
}

impl SentinelLink {
    /// How many Sentinels named the master when last asked, of how many.
    pub fn sentinels_answering(&self) -> (usize, usize) {
        self.sentinels.answering()
    }

    pub fn new(
        sentinels: &[String],
        master: &SentinelMaster,
        config: ConnectionManagerConfig,
    ) -> Result<Self, StoreError> {
        let template = match &master.url {
            Some(url) => url.as_str().into_connection_info()?,
            None => "redis://127.0.0.1:6379".into_connection_info()?,
        };
        Ok(Self {
            sentinels: Sentinels::new(sentinels)?,
            template,
            epoch: AtomicU64::new(0),
            urls: sentinels.to_vec(),
            name: master.name.clone(),
            master: ArcSwapOption::empty(),
            stale: AtomicBool::new(true),
            announced: std::sync::Mutex::new(None),
            config,
            why: parking_lot::Mutex::new(None),
        })
    }

    /// The master's connection, once one was found.
    pub fn connection(&self) -> Result<ConnectionManager, StoreError> {
        self.master
            .load()
            .as_ref()
            .map(|m| m.connection.clone())
            .ok_or_else(|| match &*self.why.lock() {
                Some(why) => StoreError::NoMaster {
                    cause: why.cause,
                    detail: why.detail.clone(),
                },
                None => StoreError::NotConnected,
            })
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
    /// and says it is a master. The new address when it moved. A `+switch-master`
    /// announcement is tried first, as it came: the Sentinels that did not lead the
    /// failover may name the old master for seconds more.
    pub async fn refresh(&self, limit: Duration) -> Option<String> {
        if let Some(client) = self.announced_client() {
            if let Some(moved) = self.move_to(client, limit).await {
                // A failover raised the epoch: the Sentinels still naming the old
                // master answer with the old one.
                self.epoch.fetch_add(1, Ordering::Relaxed);
                return Some(moved);
            }
        }
        // None answering is said by `newest`, once.
        let named = match self.sentinels.newest(&self.name, limit).await {
            Ok(named) => named,
            Err(why) => {
                *self.why.lock() = Some(why);
                return None;
            }
        };
        let epoch = self.epoch.load(Ordering::Relaxed);
        if named.epoch < epoch && self.master.load().is_some() {
            // A Sentinel that has not heard of the failover this gateway followed (with
            // no master in use, any answer is better than none: a Sentinel set rebuilt
            // from scratch starts its epochs again).
            return None;
        }
        self.stale.store(false, Ordering::Relaxed);
        let addr = format!("{}:{}", named.host, named.port);
        if named.failing {
            self.fence(&addr);
            return None;
        }
        let client = self.client_for(named.host, named.port)?;
        let moved = self.move_to(client, limit).await;
        if moved.is_some() || self.master.load().is_some() {
            self.epoch.fetch_max(named.epoch, Ordering::Relaxed);
        }
        moved
    }

    /// Stops writing to `addr` while a Sentinel holds it down or is replacing it (what
    /// it takes meanwhile may be discarded at its demotion): requests get `on_error`
    /// until the Sentinels name the next master, or the same one again, recovered.
    fn fence(&self, addr: &str) {
        if self.master.load().as_ref().is_some_and(|m| m.addr == addr) {
            self.master.store(None);
            tracing::warn!(master = %addr, "Redis Sentinel holds the master down or is failing it over: not writing to it until the next master is named");
            *self.why.lock() = Some(NoMaster {
                cause: "not_connected",
                detail: format!("Redis Sentinel holds the master ({addr}) down or is failing it over: not writing to it until the next master is named"),
            });
        }
    }

    /// A client for the master at `host:port`, with the master's credentials, database
    /// and TLS.
    fn client_for(&self, host: String, port: u16) -> Option<redis::Client> {
        let addr = match self.template.addr() {
            redis::ConnectionAddr::TcpTls {
                insecure,
                tls_params,
                ..
            } => redis::ConnectionAddr::TcpTls {
                host,
                port,
                insecure: *insecure,
                tls_params: tls_params.clone(),
            },
            _ => redis::ConnectionAddr::Tcp(host, port),
        };
        redis::Client::open(self.template.clone().set_addr(addr)).ok()
    }

    /// A client for the master the last `+switch-master` announced, not yet tried.
    fn announced_client(&self) -> Option<redis::Client> {
        let (host, port) = self.announced.lock().ok()?.take()?;
        self.client_for(host, port)
    }

    /// Moves to `client`'s node when it is another than the current one and says it is
    /// a master; its address when it moved.
    async fn move_to(&self, client: redis::Client, limit: Duration) -> Option<String> {
        let addr = client.get_connection_info().addr().to_string();
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
        if let Err(why) = says_master(&connection, limit).await {
            // Named before it was promoted, still a replica, or not answering: stop
            // writing to the old master all the same (Sentinel has replaced it), and ask
            // again next turn.
            self.stale.store(true, Ordering::Relaxed);
            self.master.store(None);
            tracing::warn!(master = %addr, cause = why.cause, "{}", why.detail);
            *self.why.lock() = Some(NoMaster {
                detail: format!("the master Redis Sentinel names ({addr}): {}", why.detail),
                ..why
            });
            return None;
        }
        *self.why.lock() = None;
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
                    let parts: Vec<&str> = text.split(' ').collect();
                    if parts.first() == Some(&self.name.as_str()) {
                        tracing::warn!(announcement = %text, "Redis Sentinel switched the master");
                        if let (Some(host), Some(Ok(port))) =
                            (parts.get(3), parts.get(4).map(|p| p.parse::<u16>()))
                        {
                            if let Ok(mut announced) = self.announced.lock() {
                                *announced = Some(((*host).to_owned(), port));
                            }
                        }
                        self.failed();
                        switched.notify_one();
                    }
                }
            }
            tokio::time::sleep(Duration::from_secs(1)).await;
        }
    }
}

/// Whether the node behind `connection` answers `ROLE` as a master, within `limit`;
/// why not, if not.
async fn says_master(connection: &ConnectionManager, limit: Duration) -> Result<(), NoMaster> {
    let mut c = connection.clone();
    let cmd = redis::cmd("ROLE");
    let role = cmd.query_async::<redis::Value>(&mut c);
    match tokio::time::timeout(limit, role).await {
        Ok(Ok(redis::Value::Array(items))) if matches!(items.first(), Some(redis::Value::BulkString(b)) if b.as_slice() == b"master") => {
            Ok(())
        }
        Ok(Ok(_)) => Err(NoMaster {
            cause: "readonly",
            detail: "it does not say it is a master yet".to_owned(),
        }),
        Ok(Err(e)) => Err(NoMaster {
            cause: super::health::redis_cause(&e),
            detail: format!("it does not answer: {e}"),
        }),
        Err(_) => Err(NoMaster {
            cause: "timed_out",
            detail: format!("it did not answer within {limit:?}"),
        }),
    }
}
