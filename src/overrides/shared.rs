//! The fleet's runtime overrides in Redis (one hash; with Cluster, one slot): every
//! change bumps a version, and each gateway re-reads the hash only when the version it
//! last saw has moved.

use std::sync::LazyLock;

use redis::Script;

use super::{OverrideId, Stored};
use crate::key::redis_key::PREFIX;
use crate::store::redis::RedisStore;
use crate::store::StoreError;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("shared.lua")));

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
        .arg(field(&stored.id))
        .arg(value);
    remote.invoke::<i64>(&call).await.map(drop)
}

pub async fn delete(remote: &RedisStore, ids: &[OverrideId]) -> Result<(), StoreError> {
    let mut call = SCRIPT.prepare_invoke();
    call.key(hash_key()).arg("del");
    for id in ids {
        call.arg(field(id));
    }
    remote.invoke::<i64>(&call).await.map(drop)
}

/// The whole set and its version, unless the version is still `seen`. An entry that
/// does not parse (written by another version of tollgate) is skipped and logged.
pub async fn read_if_changed(
    remote: &RedisStore,
    seen: Option<i64>,
) -> Result<Option<(i64, Vec<Stored>)>, StoreError> {
    let mut call = SCRIPT.prepare_invoke();
    call.key(hash_key())
        .arg("read")
        .arg(seen.map_or_else(|| "none".to_owned(), |v| v.to_string()));
    let reply: Vec<String> = remote.invoke(&call).await?;
    let Some((version, pairs)) = reply.split_first() else {
        return Err(StoreError::Reply);
    };
    let version: i64 = version.parse().map_err(|_| StoreError::Reply)?;
    if pairs.is_empty() && Some(version) == seen {
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
    Ok(Some((version, all)))
}
