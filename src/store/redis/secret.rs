//! The fleet's key secret kept in Redis, for a fleet whose config names none: the first
//! gateway to reach Redis draws one at random and stores it, every other gateway reads it.
//! Each gateway keeps checking: when Redis lost it (a restart without persistence), the
//! first to notice stores the one the fleet used again; a gateway that finds another (one
//! drawn while the old was missing) takes it up, and its keys start over, as they did
//! with the data Redis lost.

use super::RedisStore;
use crate::key::redis_key::PREFIX;
use crate::key::KeySecret;

pub fn secret_key() -> String {
    format!("{PREFIX}:{{secret}}")
}

/// One turn of the upkeep: learns the fleet's secret, or stores this gateway's.
pub async fn keep(store: &RedisStore) {
    let fleet = store.fleet();
    if fleet.is_configured() {
        return;
    }
    let known = fleet.key().map(|k| k.secret().clone());
    let proposal = known.clone().unwrap_or_else(KeySecret::random);
    let (text, stored) = match read_or_store(store, &proposal).await {
        Ok(read) => read,
        Err(e) => {
            if known.is_none() {
                tracing::debug!(error = %e, "the fleet's key secret not read from Redis yet");
            }
            return;
        }
    };
    let secret = match KeySecret::parse(&text) {
        Ok(secret) => secret,
        Err(problem) => {
            tracing::error!(
                key = %secret_key(),
                "the fleet's key secret in Redis is unusable ({problem}): delete the key, or set [store] key_secret_file"
            );
            return;
        }
    };
    if fleet.learn(secret) {
        match known {
            None if stored => tracing::info!(
                "the fleet's key secret drawn by this gateway and stored in Redis (the first of the fleet there)"
            ),
            None => tracing::info!("the fleet's key secret read from Redis"),
            Some(_) => tracing::warn!(
                "the fleet's key secret in Redis changed (Redis lost it and another gateway drew a new one): Redis keys start over; set [store] key_secret_file to keep them"
            ),
        }
    }
}

/// The secret stored in Redis, storing `proposal` first when there is none. Plain
/// commands, not a script: upkeep stays out of the decisions' script counts. When two
/// gateways race, the SET NX of one loses and the GET after it reads the winner's.
async fn read_or_store(
    store: &RedisStore,
    proposal: &KeySecret,
) -> Result<(String, bool), crate::store::error::StoreError> {
    let get = || redis::cmd("GET").arg(secret_key()).to_owned();
    if let Some(text) = store.command::<Option<String>>(&get()).await? {
        return Ok((text, false));
    }
    let mut set = redis::cmd("SET");
    set.arg(secret_key()).arg(proposal.as_bytes()).arg("NX");
    // "OK" when this gateway's proposal was stored; none when another's won the race.
    let stored = store.command::<Option<String>>(&set).await?.is_some();
    let text = store.command::<Option<String>>(&get()).await?;
    Ok((text.ok_or(crate::store::error::StoreError::Reply)?, stored))
}
