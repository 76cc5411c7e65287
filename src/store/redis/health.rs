//! What an operator needs to see of the store: the last failure and its cause, and how
//! many calls failed. Written only when a call fails (never on a success), read by
//! `/admin/stats`, the status page and `/readyz`. Credentials never appear: a Redis
//! error's text names no password, and addresses come from the connection, not the URL.

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Mutex;

use crate::store::error::StoreError;

/// The last failure of a store call.
#[derive(Debug, Clone)]
pub struct LastError {
    /// One word: see [`cause`].
    pub cause: &'static str,
    pub message: String,
    /// When it happened.
    pub at: tokio::time::Instant,
}

#[derive(Debug, Default)]
pub struct Health {
    last: Mutex<Option<LastError>>,
    failed: AtomicU64,
    /// Whether the store is known to be unreachable (the background probe failed twice in
    /// a row, or the breaker of a single node opened): its going away and coming back are
    /// each logged once.
    down: std::sync::atomic::AtomicBool,
    /// Background probes failed in a row.
    missed: std::sync::atomic::AtomicU32,
    /// The last cause, as 1 + its index in [`CAUSES`] (0: none yet): read by every
    /// request that fails during an outage, so an atomic rather than the lock.
    last_cause: AtomicUsize,
}

/// Every cause [`cause`] gives.
/// Every cause a failed call is counted under.
pub const CAUSES: [&str; 17] = [
    "connection_refused",
    "timed_out",
    "connection_lost",
    "authentication",
    "readonly",
    "out_of_memory",
    "noreplicas",
    "clusterdown",
    "script_error",
    "not_connected",
    "unknown_master",
    "breaker_open",
    "script_reply",
    "no_replica_ack",
    "shutting_down",
    "clock_skew",
    "other",
];

impl Health {
    pub fn record(&self, e: &StoreError) {
        self.failed.fetch_add(1, Ordering::Relaxed);
        if let Ok(mut last) = self.last.lock() {
            // A timeout says less than the cause a fresh connection found a moment ago
            // (a refused connection shows as a timeout once the client retries it).
            let vaguer = cause(e) == "timed_out"
                && last.as_ref().is_some_and(|l| {
                    l.cause != "timed_out" && l.at.elapsed() < std::time::Duration::from_secs(2)
                });
            if vaguer {
                return;
            }
            let code = CAUSES
                .iter()
                .position(|c| *c == cause(e))
                .map_or(0, |i| i + 1);
            self.last_cause.store(code, Ordering::Relaxed);
            *last = Some(LastError {
                cause: cause(e),
                message: e.to_string(),
                at: tokio::time::Instant::now(),
            });
        }
    }

    /// The store went away: `true` when it was not known to be (log it then).
    pub fn went_down(&self) -> bool {
        !self.down.swap(true, Ordering::AcqRel)
    }

    /// The store answers: `true` when it was known to be down (log it then).
    pub fn came_back(&self) -> bool {
        self.missed.store(0, Ordering::Relaxed);
        self.down.swap(false, Ordering::AcqRel)
    }

    /// A background probe answered: a run of misses is over, whether or not the store
    /// is back (a breaker may still be open).
    pub fn answered(&self) {
        self.missed.store(0, Ordering::Relaxed);
    }

    /// Whether the store is known to be unreachable.
    pub fn is_down(&self) -> bool {
        self.down.load(Ordering::Acquire)
    }

    /// A background probe failed: how many in a row now.
    pub fn missed_probe(&self) -> u32 {
        self.missed.fetch_add(1, Ordering::AcqRel) + 1
    }

    /// The last failure's cause, when the caller's own error says less (a timeout, an
    /// open breaker) than what was seen.
    pub fn last_cause(&self) -> Option<&'static str> {
        let code = self.last_cause.load(Ordering::Relaxed);
        code.checked_sub(1).and_then(|i| CAUSES.get(i).copied())
    }

    pub fn last(&self) -> Option<LastError> {
        self.last.lock().ok().and_then(|l| l.clone())
    }

    /// Store calls that failed since start.
    pub fn failed(&self) -> u64 {
        self.failed.load(Ordering::Relaxed)
    }
}

/// Why a store call failed, in one word an operator can act on: `connection_refused`
/// (nothing listens), `timed_out`, `connection_lost`, `authentication`, `readonly` (a
/// replica or demoted master), `out_of_memory` (`maxmemory` reached under
/// `noeviction`), `noreplicas`, `clusterdown`, `script_error`,
/// `not_connected` (no connection yet, or the fleet's secret not known yet),
/// `unknown_master` (the Redis Sentinels monitor no master of the configured name),
/// `breaker_open` (not attempted), `script_reply`, `no_replica_ack`, `shutting_down` (a
/// call cut short by the gateway's own shutdown), `clock_skew` (a calendar quota's window
/// a window or more off the server's clock), `other`.
pub fn cause(e: &StoreError) -> &'static str {
    match e {
        StoreError::Timeout(_) => "timed_out",
        StoreError::NotConnected => "not_connected",
        StoreError::NoMaster { cause, .. } | StoreError::ClusterUnreached { cause, .. } => cause,
        StoreError::BreakerOpen => "breaker_open",
        StoreError::Reply => "script_reply",
        StoreError::NotAcknowledged(_) => "no_replica_ack",
        StoreError::Cancelled => "shutting_down",
        StoreError::CalendarSkew => "clock_skew",
        StoreError::Redis(r) => redis_cause(r),
    }
}

pub(super) fn redis_cause(r: &redis::RedisError) -> &'static str {
    if r.is_connection_refusal() {
        return "connection_refused";
    }
    if r.is_timeout() {
        return "timed_out";
    }
    match r.code() {
        Some("READONLY") => return "readonly",
        // Also when a script's write was refused: its message names the script too.
        Some("OOM") => return "out_of_memory",
        Some("NOREPLICAS") => return "noreplicas",
        Some("CLUSTERDOWN") => return "clusterdown",
        Some("NOAUTH" | "WRONGPASS" | "NOPERM") => return "authentication",
        Some("NOSCRIPT" | "BUSY") => return "script_error",
        _ => {}
    }
    let text = r.to_string();
    match r.kind() {
        redis::ErrorKind::AuthenticationFailed => "authentication",
        // The Cluster client's first connection says its nodes' refusals only in words
        // ("Failed to create initial connections - Io: Connection refused").
        _ if text.contains("Connection refused") => "connection_refused",
        _ if r.is_connection_dropped() || r.is_io_error() => "connection_lost",
        _ => {
            if text.contains("script") || text.contains("Script") {
                "script_error"
            } else {
                "other"
            }
        }
    }
}

/// The hosts and ports of `urls`, credentials left out.
pub fn addresses(urls: &[String]) -> String {
    use redis::IntoConnectionInfo;
    urls.iter()
        .filter_map(|u| u.as_str().into_connection_info().ok())
        .map(|info| info.addr().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

impl super::RedisStore {
    /// A decision that could not be asked (the fleet's key is not known yet: Redis has
    /// not answered since the start) fails as a call to Redis would: refused at once while
    /// a single node's breaker is open, else counted as a failed call and toward that
    /// breaker — so what the operator is shown (failed calls, the breaker) is true from
    /// the first request. The cause a call or probe found is kept (this error says less).
    pub fn unasked(&self, now_ns: u64) -> StoreError {
        let single = (self.breakers.len() == 1).then(|| self.breakers.get(0));
        if single.is_some_and(|b| !b.allow(now_ns)) {
            return StoreError::BreakerOpen;
        }
        let e = StoreError::NotConnected;
        if self.health.last_cause().is_some() {
            self.health.failed.fetch_add(1, Ordering::Relaxed);
        } else {
            self.health.record(&e);
        }
        if single.is_some_and(|b| b.failure(now_ns)) && self.health.went_down() {
            tracing::warn!(address = %self.address(), "the fleet's key secret is not known yet (Redis has not answered); breaker open, decisions follow on_error until it answers");
        }
        e
    }

    /// What a fresh connection to the node says (within four timeouts): the cause a
    /// timed-out call hid. `None` when it connects (or for a Cluster, whose client
    /// reports its own errors).
    pub async fn diagnose(&self) -> Option<StoreError> {
        let client = match &self.connection {
            super::Connection::Sentinel(link) => link.master_client()?,
            super::Connection::Single(_) => self.single_client.clone()?,
            super::Connection::Cluster(_) => return None,
        };
        // Time for a connection's handshake, but not so long that a store that hangs
        // keeps `/readyz` waiting: at most half a second past a call's own timeout.
        let limit = (self.timeout * 4).min(self.timeout.max(std::time::Duration::from_millis(500)));
        match tokio::time::timeout(limit, client.get_multiplexed_async_connection()).await {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(StoreError::Redis(e)),
            Err(_) => Some(StoreError::Timeout(limit)),
        }
    }
}

/// Why the store is not ready, for `/readyz`: `None` when it is.
pub fn unready(store: &super::RedisStore) -> Option<String> {
    let why = || {
        store
            .health
            .last()
            .map(|l| format!("{} ({})", l.cause, l.message))
    };
    if store.fleet().key().is_none() {
        let why = why().unwrap_or_else(|| "Redis has not answered".to_owned());
        return Some(format!(
            "store unavailable: {}: {why}; the fleet's key secret is not known yet",
            store.address()
        ));
    }
    if !store.breakers.all_open() && !store.health.is_down() {
        return None;
    }
    let why = why().unwrap_or_else(|| "failing".to_owned());
    let state = if store.breakers.all_open() {
        "breaker open"
    } else {
        "a node does not answer"
    };
    Some(format!(
        "store unavailable: {}: {why}; {state}",
        store.address()
    ))
}

/// The store's state for `/admin/stats` and the status page, at `now_ns`.
pub fn report(store: &super::RedisStore) -> serde_json::Value {
    let last = store.health.last().map(|l| {
        serde_json::json!({
            "cause": l.cause,
            "message": l.message,
            "seconds_ago": l.at.elapsed().as_secs(),
        })
    });
    let open_groups = store.breakers.open().count();
    let sentinels = match &store.connection {
        super::Connection::Sentinel(link) => {
            let (answering, of) = link.sentinels_answering();
            Some(serde_json::json!({"answering": answering, "of": of}))
        }
        _ => None,
    };
    let mut report = serde_json::json!({
        "backend": "redis",
        "address": store.address(),
        "reachable": !store.health.is_down(),
        "breaker": match (open_groups, store.breakers.len()) {
            (0, _) => "closed".to_owned(),
            (n, all) if n == all => "open".to_owned(),
            (n, all) => format!("open for {n} of {all} slot groups"),
        },
        "ready": unready(store).is_none(),
        "failed_calls": store.health.failed(),
        "last_error": last,
    });
    if let Some(sentinels) = sentinels {
        // With none answering the master still serves; a failover cannot be followed.
        report["sentinels"] = sentinels;
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn causes_are_one_word_each() {
        let refused =
            redis::RedisError::from(std::io::Error::from(std::io::ErrorKind::ConnectionRefused));
        assert_eq!(cause(&StoreError::Redis(refused)), "connection_refused");
        assert_eq!(
            cause(&StoreError::Timeout(std::time::Duration::from_millis(50))),
            "timed_out"
        );
        assert_eq!(cause(&StoreError::NotConnected), "not_connected");
        let h = Health::default();
        h.record(&StoreError::NotConnected);
        h.record(&StoreError::Reply);
        let last = h.last().expect("recorded");
        assert_eq!((last.cause, h.failed()), ("script_reply", 2));
        assert_eq!(h.last_cause(), Some("script_reply"));
        assert_eq!(Health::default().last_cause(), None);
    }
}
