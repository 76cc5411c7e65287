//! The fleet's runtime overrides in Redis (one hash; with Cluster, one slot): every
//! change bumps a version (an epoch and a counter), and each gateway re-reads the hash
//! only when the version it last saw has changed.

use std::sync::LazyLock;

use redis::Script;

use super::{OverrideId, Stored};
use crate::key::redis_key::PREFIX;
use crate::store::redis::RedisStore;
use crate::store::StoreError;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("shared.lua")));

/// The epoch this gateway proposes when it is the first to write the hash: a lost hash
/// that starts over gets a new one, so nobody mistakes it for the old.
static EPOCH: LazyLock<String> = LazyLock::new(|| {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    format!("{:016x}", h.finish())
});

fn hash_key() -> String {
    format!("{PREFIX}:{{overrides}}")
}

fn field(id: &OverrideId) -> String {
    serde_json::to_string(id).unwrap_or_default()
}

pub async fn put(remote: &RedisStore, stored: &Stored) -> Result<(), StoreError> {
    let value = serde_json::to_string(stored).map_err(|_| StoreError::Reply)?;
    let mut call = SCRIPT.prepare_invoke();
    call.key(hash_key())
        .arg("put")
        .arg(EPOCH.as_str())
        .arg(field(&stored.id))
        .arg(value);
    remote.invoke::<String>(&call).await.map(drop)
}

/// Removes `ids`; how many of them were set and not expired by `now_ms`, whichever
/// gateway set them (this one may not have read them yet).
pub async fn delete(
    remote: &RedisStore,
    ids: &[OverrideId],
    now_ms: u64,
) -> Result<u64, StoreError> {
    let mut call = SCRIPT.prepare_invoke();
    call.key(hash_key())
        .arg("del")
        .arg(EPOCH.as_str())
        .arg(now_ms);
    for id in ids {
        call.arg(field(id));
    }
    let (_version, removed): (String, u64) = remote.invoke(&call).await?;
    Ok(removed)
}

/// Removes `ids` where the stored override has expired by `now_ms` (one set again since
/// is kept).
pub async fn expire(
    remote: &RedisStore,
    ids: &[OverrideId],
    now_ms: u64,
) -> Result<(), StoreError> {
    let mut call = SCRIPT.prepare_invoke();
    call.key(hash_key())
        .arg("expire")
        .arg(EPOCH.as_str())
        .arg(now_ms);
    for id in ids {
        call.arg(field(id));
    }
    remote.invoke::<String>(&call).await.map(drop)
}

/// The whole set and its version, unless the version is still `seen`. An entry that
/// does not parse (written by another version of tollgate) is skipped and logged.
pub async fn read_if_changed(
    remote: &RedisStore,
    seen: Option<&str>,
) -> Result<Option<(String, Vec<Stored>)>, StoreError> {
    let mut call = SCRIPT.prepare_invoke();
    call.key(hash_key()).arg("read").arg(seen.unwrap_or(""));
    let reply: Vec<String> = remote.invoke(&call).await?;
    let Some((version, pairs)) = reply.split_first() else {
        return Err(StoreError::Reply);
    };
    if pairs.is_empty() && Some(version.as_str()) == seen {
        return Ok(None);
    }
    let mut all = Vec::with_capacity(pairs.len() / 2);
    for pair in pairs.chunks(2) {
        match pair.get(1).map(|v| serde_json::from_str::<Stored>(v)) {
            Some(Ok(stored)) => all.push(stored),
            _ => {
                tracing::warn!(field = %pair[0], "a runtime override in Redis does not parse; skipped")
            }
        }
    }
    Ok(Some((version.clone(), all)))
}
