//! A concurrency policy as run: requests in flight at once, and what the admin API and
//! `tollgate check` say of it.

use std::collections::HashMap;
use std::time::Duration;
#[derive(Debug, PartialEq)]
pub struct ConcurrencyLimit {
    pub max_in_flight: u32,
    /// Sent as `Retry-After` when refused: the real wait is unknowable.
    pub retry_after: Duration,
    /// Redis: how long a slot of a gateway that died stays taken.
    pub lease_ttl: Duration,
    /// Per-key `max_in_flight` for single-source keys, by the key's text.
    pub overrides: HashMap<String, u32>,
}

impl ConcurrencyLimit {
    /// The cap for a key: its override if it has one.
    pub fn max_for(&self, key_text: Option<&str>) -> u32 {
        match key_text {
            Some(k) if !self.overrides.is_empty() => {
                self.overrides.get(k).copied().unwrap_or(self.max_in_flight)
            }
            _ => self.max_in_flight,
        }
    }
}

impl ConcurrencyLimit {
    /// Its numbers as `/admin/config` shows them.
    pub(super) fn describe(&self) -> serde_json::Value {
        serde_json::json!({
            "kind": "concurrency",
            "max_in_flight": self.max_in_flight,
            "retry_after_ms": self.retry_after.as_millis() as u64,
            "lease_ttl_ms": self.lease_ttl.as_millis() as u64,
        })
    }

    /// Its numbers on `tollgate check`'s line.
    pub(super) fn numbers(&self) -> String {
        format!(
            "max_in_flight={}  retry_after={}",
            self.max_in_flight,
            humantime::format_duration(self.retry_after),
        )
    }

    /// Its `RateLimit-Policy` item and its limit.
    pub(super) fn header_item(&self, name: &str) -> (u64, Vec<u8>) {
        let max = self.max_in_flight;
        (u64::from(max), concurrency_item(name, max))
    }
}

/// A concurrency cap's `RateLimit-Policy` item, for the policy `name` capped at `max`
/// (its own cap or a key's override): its quota is requests in flight.
pub fn concurrency_item(name: &str, max: u32) -> Vec<u8> {
    format!("\"{name}\";q={max};qu=\"concurrent-requests\"").into_bytes()
}

/// A key's cap (`Applied::Concurrency`) as `/admin/config` shows it.
pub(super) fn describe_applied(max: u32) -> serde_json::Value {
    serde_json::json!({"kind": "concurrency", "max_in_flight": max})
}
