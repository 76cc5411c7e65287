//! `[store] replica_ack = N`: an admission counts only once `N` replicas have it, so a
//! failover to one of them loses no admission. One `WAIT` covers every write made before
//! it (it waits for the master's replication offset as of its connection's last write),
//! so the acknowledgements are batched: a decision that wrote waits for the next round of
//! `SET` + `WAIT N` on a connection of the acker's own (a `WAIT` blocks its connection),
//! and rounds run only while decisions wait for one.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::MultiplexedConnection;
use tokio::sync::{watch, Notify};

use crate::key::redis_key::PREFIX;
use crate::store::error::StoreError;

pub struct Acker {
    replicas: u32,
    timeout: Duration,
    /// The round under way (its number); a write made now is covered by the next.
    started: AtomicU64,
    /// The last round whose `WAIT` saw enough replicas.
    done: watch::Sender<u64>,
    /// Decisions waiting for a round.
    waiting: AtomicU64,
    wake: Notify,
}

impl Acker {
    pub fn new(replicas: u32, timeout: Duration) -> Self {
        Self {
            replicas,
            timeout,
            started: AtomicU64::new(0),
            done: watch::channel(0).0,
            waiting: AtomicU64::new(0),
            wake: Notify::new(),
        }
    }

    pub fn replicas(&self) -> u32 {
        self.replicas
    }

    /// Waits until a write this gateway made before the call is on `replicas` replicas,
    /// within the store timeout.
    pub async fn acked(&self) -> Result<(), StoreError> {
        let need = self.started.load(Ordering::Acquire) + 1;
        let mut done = self.done.subscribe();
        self.waiting.fetch_add(1, Ordering::AcqRel);
        self.wake.notify_one();
        let waited = tokio::time::timeout(self.timeout, done.wait_for(|&d| d >= need)).await;
        self.waiting.fetch_sub(1, Ordering::AcqRel);
        match waited {
            Ok(Ok(_)) => Ok(()),
            _ => Err(StoreError::NotAcknowledged(self.replicas)),
        }
    }

    /// Runs rounds while decisions wait, on connections `connect` makes to the master
    /// (again after a failure, and when `master` names another node than the one
    /// connected to: a promoted replica's writes are acknowledged by its own replicas),
    /// until the process ends.
    pub async fn run<F, Fut, M>(self: Arc<Self>, connect: F, master: M)
    where
        F: Fn() -> Fut,
        Fut: std::future::Future<Output = Option<(String, MultiplexedConnection)>>,
        M: Fn() -> Option<String>,
    {
        let mut connection: Option<(String, MultiplexedConnection)> = None;
        let mut short = Complaints::default();
        loop {
            if self.waiting.load(Ordering::Acquire) == 0 {
                self.wake.notified().await;
                continue;
            }
            let moved = match (&connection, master()) {
                (Some((addr, _)), Some(now)) => *addr != now,
                _ => false,
            };
            if connection.is_none() || moved {
                connection = connect().await;
                if connection.is_none() {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            }
            let Some((_, c)) = connection.as_mut() else {
                continue;
            };
            let round = self.started.fetch_add(1, Ordering::AcqRel) + 1;
            match self.round(c, round).await {
                Ok(acks) if acks >= i64::from(self.replicas) => {
                    self.done.send_replace(round);
                    short.recovered();
                }
                Ok(acks) => short.complain(acks, self.replicas),
                Err(e) => {
                    tracing::warn!(error = %e, "replica acknowledgement failed");
                    connection = None;
                }
            }
        }
    }

    async fn round(&self, c: &mut MultiplexedConnection, round: u64) -> redis::RedisResult<i64> {
        let ms = u64::try_from(self.timeout.as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let mut set = redis::cmd("SET");
        set.arg(format!("{PREFIX}:{{ack}}"))
            .arg(round)
            .arg("PX")
            .arg(60_000);
        let _: () = set.query_async(c).await?;
        redis::cmd("WAIT")
            .arg(self.replicas)
            .arg(ms)
            .query_async(c)
            .await
    }
}

impl super::RedisStore {
    /// A connection of its own to the master, for the acker, with the master's address.
    pub async fn own_connection(&self) -> Option<(String, redis::aio::MultiplexedConnection)> {
        let client = match &self.connection {
            super::Connection::Sentinel(link) => link.master_client()?,
            _ => self.single_client.clone()?,
        };
        let addr = client.get_connection_info().addr().to_string();
        let connection =
            tokio::time::timeout(self.timeout * 4, client.get_multiplexed_async_connection())
                .await
                .ok()?
                .ok()?;
        Some((addr, connection))
    }

    /// The master Sentinel names now (`None` for a single Redis or a Cluster).
    pub fn sentinel_master(&self) -> Option<String> {
        match &self.connection {
            super::Connection::Sentinel(link) => link.master_addr(),
            _ => None,
        }
    }
}

/// Short rounds, logged at most every 5 s (with how many there were), not once a round.
#[derive(Default)]
struct Complaints {
    since_logged: u64,
    logged_at: Option<tokio::time::Instant>,
}

impl Complaints {
    fn complain(&mut self, acks: i64, wanted: u32) {
        self.since_logged += 1;
        let due = self
            .logged_at
            .is_none_or(|at| at.elapsed() >= Duration::from_secs(5));
        if due {
            tracing::warn!(
                acks,
                wanted,
                rounds = self.since_logged,
                "Redis replicas did not acknowledge the decisions in time; they are answered per on_error"
            );
            self.since_logged = 0;
            self.logged_at = Some(tokio::time::Instant::now());
        }
    }

    fn recovered(&mut self) {
        if self.logged_at.take().is_some() {
            tracing::info!("Redis replicas acknowledge the decisions again");
        }
        self.since_logged = 0;
    }
}
