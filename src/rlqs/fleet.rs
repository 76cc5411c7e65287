//! The holders of a key across a fleet of tollgate servers on one Redis: each server
//! records its streams' demand for the key in one hash, and the tokens each was told in
//! another (`holders.lua`); it splits by the demand of every server's Envoys, so two servers do
//! not each hand out the whole key, and leaves room for what the other servers' Envoys
//! were told, as it does for its own. Another server's newcomer is seen at this server's
//! next report of the key (within Envoy's 5 s); this server's own newcomers re-size its
//! streams at once (`holders.rs`).

use std::sync::LazyLock;

use redis::Script;

use crate::key::redis_key::PREFIX;
use crate::store::redis::RedisStore;
use crate::store::StoreError;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("holders.lua")));

/// One stream's place among a key's holders, as recorded in Redis.
pub struct Place<'a> {
    /// Its name among every server's streams (`Holders::field`).
    pub field: &'a str,
    /// Its server's prefix of that name (`Holders::server_prefix`).
    pub server: &'a str,
    pub demand: f64,
    /// The tokens it was last told to hold.
    pub told: u64,
}

/// What the fleet holds of a key.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FleetHolders {
    /// The live demand of every server's holders.
    pub demand: f64,
    /// The tokens the other servers' live holders were told.
    pub others_told: u64,
}

/// Records `place` for `key` until `ttl_ms` from now and returns what the fleet holds.
pub async fn hold(
    remote: &RedisStore,
    key: &str,
    place: Place<'_>,
    ttl_ms: u64,
) -> Result<FleetHolders, StoreError> {
    let (holders, told) = names(remote, key)?;
    let mut call = SCRIPT.prepare_invoke();
    call.key(holders)
        .key(told)
        .arg(place.field)
        .arg(format!("{:.3}", place.demand))
        .arg(ttl_ms)
        .arg(place.told)
        .arg(place.server);
    let answer: String = remote.invoke(&call).await?;
    parse(&answer).ok_or(StoreError::Reply)
}

/// Forgets the tokens the stream named `field` was told for `key` (it ended: an Envoy
/// reconnecting through another server is not cut by its own old stream's tokens).
pub async fn forget_told(remote: &RedisStore, key: &str, field: &str) -> Result<(), StoreError> {
    let (_, told) = names(remote, key)?;
    remote
        .command(redis::cmd("HDEL").arg(told).arg(field))
        .await
}

/// The names in Redis of `key`'s holders hash and of its told tokens hash: a keyed hash
/// of the key (bucket values are the Envoys' clients'), one slot for both.
fn names(remote: &RedisStore, key: &str) -> Result<(String, String), StoreError> {
    let fleet = remote.fleet().key().ok_or(StoreError::NotConnected)?;
    let holders = format!("{PREFIX}:rlqs:{{{}}}", fleet.field(key.as_bytes()));
    let told = format!("{holders}:told");
    Ok((holders, told))
}

/// The script's answer: the demand, a space, the other servers' told tokens.
fn parse(answer: &str) -> Option<FleetHolders> {
    let (demand, told) = answer.split_once(' ')?;
    Some(FleetHolders {
        demand: demand.parse().ok()?,
        others_told: told.parse().ok()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_scripts_answer_reads_as_demand_and_tokens() {
        let read = parse("3.5 120").expect("read");
        assert_eq!(read.demand, 3.5);
        assert_eq!(read.others_told, 120);
        assert_eq!(parse("2 0").map(|h| h.others_told), Some(0));
        assert_eq!(parse("3.5"), None);
        assert_eq!(parse("x 1"), None);
    }
}
