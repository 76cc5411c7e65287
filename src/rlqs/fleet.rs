//! The holders of a key across a fleet of tollgate servers on one Redis: each server
//! records its streams' demand for the key in one hash (`holders.lua`) and splits by the
//! demand of every server's Envoys, so two servers do not each hand out the whole key.
//! Another server's newcomer is seen at this server's next report of the key (within
//! Envoy's 5 s); this server's own newcomers re-size its streams at once (`holders.rs`).

use std::sync::LazyLock;

use redis::Script;

use crate::key::redis_key::PREFIX;
use crate::store::redis::RedisStore;
use crate::store::StoreError;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("holders.lua")));

/// Records the `demand` of the stream named `field` (see `Holders::field`) for `key`
/// until `ttl_ms` from now and returns the live demand of every server's holders of it.
pub async fn demand(
    remote: &RedisStore,
    key: &str,
    (field, demand): (&str, f64),
    ttl_ms: u64,
) -> Result<f64, StoreError> {
    // The key's name in Redis is a keyed hash: bucket values are the Envoys' clients'.
    let fleet = remote.fleet().key().ok_or(StoreError::NotConnected)?;
    let mut call = SCRIPT.prepare_invoke();
    call.key(format!("{PREFIX}:rlqs:{{{}}}", fleet.field(key.as_bytes())))
        .arg(field)
        .arg(format!("{demand:.3}"))
        .arg(ttl_ms);
    let total: String = remote.invoke(&call).await?;
    total.parse().map_err(|_| StoreError::Reply)
}
