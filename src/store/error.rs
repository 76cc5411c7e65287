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
        match self {
            StoreError::Timeout(_) => "timeout",
            StoreError::NotConnected => "not_connected",
            StoreError::BreakerOpen => "breaker_open",
            StoreError::Redis(_) => "error",
            StoreError::Reply => "reply",
            StoreError::NotAcknowledged(_) => "not_acknowledged",
            StoreError::Cancelled => "cancelled",
            StoreError::CalendarSkew => "calendar_skew",
        }
    }
}
