//! What can go wrong when the limiter asks its store. Only Redis can fail; the embedded
//! store always answers.

use std::time::Duration;

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
    #[error("the store call was cut short: the gateway is shutting down")]
    Cancelled,
    #[error("this gateway's wall clock is a calendar window or more off the store's: its calendar quotas are not decided (check its time sync)")]
    CalendarSkew,
    #[error("fewer than {0} Redis replicas acknowledged the decision in time (replica_ack)")]
    NotAcknowledged(u32),
    /// No master to call: the Redis Sentinels named none, or the one they named does not
    /// answer as one; `cause` says why in one word (see `health::cause`).
    #[error("no Redis master: {detail}")]
    NoMaster { cause: &'static str, detail: String },
    /// The Redis Cluster was never reached: `cause` is what the last attempt met, in one
    /// word (see `health::cause`).
    #[error("the Redis Cluster is not connected yet: {detail}")]
    ClusterUnreached { cause: &'static str, detail: String },
}

/// Every [`StoreError::kind`].
pub const KINDS: [&str; 8] = [
    "timeout",
    "not_connected",
    "breaker_open",
    "error",
    "reply",
    "not_acknowledged",
    "cancelled",
    "calendar_skew",
];

impl StoreError {
    /// A short label for metrics.
    pub fn kind(&self) -> &'static str {
        KINDS[self.kind_index()]
    }

    /// Where [`StoreError::kind`] stands in [`KINDS`] (the metrics keep a series a kind).
    pub fn kind_index(&self) -> usize {
        match self {
            StoreError::Timeout(_) => 0,
            StoreError::NotConnected
            | StoreError::NoMaster { .. }
            | StoreError::ClusterUnreached { .. } => 1,
            StoreError::BreakerOpen => 2,
            StoreError::Redis(_) => 3,
            StoreError::Reply => 4,
            StoreError::NotAcknowledged(_) => 5,
            StoreError::Cancelled => 6,
            StoreError::CalendarSkew => 7,
        }
    }
}
