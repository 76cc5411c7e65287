//! A key reset in Redis, for the whole fleet: its state forgotten and a marker left that
//! every gateway's settle and rollback reads, so neither a refund of a reservation charged
//! before the reset nor the rollback of such a charge comes out of the usage made after
//! it (`settle.lua`, `rollback.lua`).

use std::time::Duration;

use crate::store::error::StoreError;
use crate::store::redis::RedisStore;

static RESET_SCRIPT: std::sync::LazyLock<redis::Script> =
    std::sync::LazyLock::new(|| super::script(include_str!("reset.lua")));

/// The name of `key`'s reset marker: in its hash slot (the hash tag comes first).
pub fn marker(key: &str) -> String {
    format!("{key}:reset")
}

/// Forgets `key` in Redis and leaves its reset marker for `hold` (how long a request
/// decided before may still move the key: a settle, a Cluster rollback). `sent_ns`: when
/// it is sent, on the gateway's clock. A reset run after its deadline (a frozen Redis
/// resumed, a held network drained) resets nothing: the operator was answered that it
/// failed, and a key refreshed later, unasked, is a fresh burst nobody meant to give.
pub async fn reset_remote(
    remote: &RedisStore,
    key: &str,
    hold: Duration,
    sent_ns: u64,
) -> Result<(), StoreError> {
    let hold_ms = u64::try_from(hold.as_millis()).unwrap_or(u64::MAX).max(1);
    let mut call = RESET_SCRIPT.prepare_invoke();
    call.key(key).key(marker(key)).arg(hold_ms);
    let tag = crate::key::redis_key::tag_of(key);
    if let Some(deadline) = remote.server_deadline_arg(tag, sent_ns) {
        call.arg(deadline);
    }
    let done: i64 = remote.invoke(&call).await?;
    if done == 2 {
        return Err(StoreError::Timeout(remote.timeout()));
    }
    Ok(())
}
