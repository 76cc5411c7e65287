//! The fleet's runtime overrides in Redis (with Cluster, one slot): every change bumps a
//! version, and each gateway asks only for what changed since the version it saw — a
//! change costs every gateway O(1), not a re-read of every override. No id is stored in
//! clear: a field is a keyed hash of its id, and the id itself is sealed
//! ([`FleetKey::seal`]) in the value, opened by each gateway to key its own table.

use std::sync::{Arc, LazyLock};

use redis::Script;
use serde::{Deserialize, Serialize};

use super::stored::{OverrideId, Stored};
use crate::config::override_spec::OverrideSpec;
use crate::key::redis_key::PREFIX;
use crate::key::FleetKey;
use crate::store::redis::RedisStore;
use crate::store::StoreError;

static SCRIPT: LazyLock<Script> = LazyLock::new(|| Script::new(include_str!("shared.lua")));

/// The epoch this gateway proposes when it is the first to write the hash: a lost hash
/// that starts over gets a new one, so nobody mistakes it for the old.
static EPOCH: LazyLock<String> = LazyLock::new(crate::random::suffix);

fn keys(call: &mut redis::ScriptInvocation<'_>) {
    call.key(format!("{PREFIX}:{{overrides}}:v2"))
        .key(format!("{PREFIX}:{{overrides}}:v2:puts"))
        .key(format!("{PREFIX}:{{overrides}}:v2:dels"));
}

/// An override as Redis keeps it: the id sealed, the rest in clear (the script reads the
/// expiry).
#[derive(Serialize, Deserialize)]
struct Sealed {
    id: String,
    set: OverrideSpec,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    expires_at_ms: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    keyed_by: Option<Vec<String>>,
}

/// The fleet's key, which every override call needs.
fn fleet(remote: &RedisStore) -> Result<Arc<FleetKey>, StoreError> {
    remote.fleet().key().ok_or(StoreError::NotConnected)
}

/// `id`'s field name under `fleet`.
pub fn field(fleet: &FleetKey, id: &OverrideId) -> String {
    fleet.field(&serde_json::to_vec(id).unwrap_or_default())
}

/// The deadline a change sent at `sent_ns` (the gateway's clock; `None`: none, for the
/// upkeep's own writes) carries: past it, the script changes nothing (`shared.lua`).
fn deadline(remote: &RedisStore, sent_ns: Option<u64>) -> String {
    sent_ns
        .and_then(|sent| remote.server_deadline_arg(TAG, sent))
        .unwrap_or_default()
}

/// The hash tag every override key carries (`keys`: one slot).
const TAG: &str = "overrides";

/// A change the script ran after its deadline made nothing: as the timeout its gateway
/// already answered.
fn in_time(remote: &RedisStore, version: &str) -> Result<(), StoreError> {
    match version {
        "late" => Err(StoreError::Timeout(remote.timeout())),
        _ => Ok(()),
    }
}

/// Sets `stored` for the fleet; `sent_ns`: when it is sent (the gateway's clock), for
/// its deadline.
pub async fn put(
    remote: &RedisStore,
    stored: &Stored,
    sent_ns: Option<u64>,
) -> Result<(), StoreError> {
    let fleet = fleet(remote)?;
    let id = serde_json::to_vec(&stored.id).map_err(|_| StoreError::Reply)?;
    let value = serde_json::to_string(&Sealed {
        id: fleet.seal(&id),
        set: stored.set.clone(),
        expires_at_ms: stored.expires_at_ms,
        keyed_by: stored.keyed_by.clone(),
    })
    .map_err(|_| StoreError::Reply)?;
    let mut call = SCRIPT.prepare_invoke();
    keys(&mut call);
    call.arg("put")
        .arg(EPOCH.as_str())
        .arg(field(&fleet, &stored.id))
        .arg(value)
        .arg(deadline(remote, sent_ns));
    let version: String = remote.invoke(&call).await?;
    in_time(remote, &version)
}

/// Tells the fleet that a key was reset: the version moves, so every gateway's next read
/// (within a second) sees a change and forgets the refusals it remembers.
pub async fn touch(remote: &RedisStore) -> Result<(), StoreError> {
    let mut call = SCRIPT.prepare_invoke();
    keys(&mut call);
    call.arg("touch").arg(EPOCH.as_str());
    remote.invoke::<String>(&call).await.map(drop)
}

/// Removes `ids` (all, or with `only_expired` those whose stored override has expired by
/// `now_ms`: one set again since is kept); how many of them were set and not expired,
/// whichever gateway set them (this one may not have read them yet). `sent_ns`: when a
/// deletion is sent (the gateway's clock), for its deadline.
pub async fn remove(
    remote: &RedisStore,
    ids: &[OverrideId],
    (now_ms, sent_ns): (u64, Option<u64>),
    only_expired: bool,
) -> Result<u64, StoreError> {
    let fleet = fleet(remote)?;
    let mut call = SCRIPT.prepare_invoke();
    keys(&mut call);
    call.arg(if only_expired { "expire" } else { "del" })
        .arg(EPOCH.as_str())
        .arg(now_ms)
        .arg(if only_expired {
            String::new()
        } else {
            deadline(remote, sent_ns)
        });
    for id in ids {
        call.arg(field(&fleet, id));
    }
    if only_expired {
        return remote.invoke::<String>(&call).await.map(|_| 0);
    }
    let (version, removed): (String, u64) = remote.invoke(&call).await?;
    in_time(remote, &version)?;
    Ok(removed)
}

/// What changed in Redis since a version.
pub enum Changes {
    Unchanged,
    /// Overrides set (or set again) and fields deleted since.
    Delta {
        version: String,
        puts: Vec<(String, Stored)>,
        deleted: Vec<String>,
    },
    /// Everything (the first read, another epoch, or deletions pruned since).
    Full {
        version: String,
        all: Vec<(String, Stored)>,
    },
}

/// What changed since `seen` (`None`: everything). An entry that cannot be opened
/// (sealed under another secret, or written by another version of tollgate) is skipped
/// and logged.
pub async fn changes(remote: &RedisStore, seen: Option<&str>) -> Result<Changes, StoreError> {
    let fleet = fleet(remote)?;
    let (epoch, counter) = seen.and_then(|s| s.split_once(':')).unwrap_or(("", "-1"));
    let mut call = SCRIPT.prepare_invoke();
    keys(&mut call);
    call.arg("read").arg(epoch).arg(counter);
    let reply: Vec<String> = remote.invoke(&call).await?;
    let [version, rest @ ..] = &reply[..] else {
        return Err(StoreError::Reply);
    };
    let [mode, count, rest @ ..] = rest else {
        return Ok(Changes::Unchanged);
    };
    let count: usize = count.parse().map_err(|_| StoreError::Reply)?;
    let (pairs, deleted) = rest.split_at(rest.len().min(2 * count));
    let opened: Vec<(String, Stored)> = pairs
        .chunks(2)
        .filter_map(|p| Some((p[0].clone(), open(&fleet, &p[0], p.get(1)?)?)))
        .collect();
    let version = version.clone();
    Ok(match mode.as_str() {
        "delta" => Changes::Delta {
            version,
            puts: opened,
            deleted: deleted.to_vec(),
        },
        _ => Changes::Full {
            version,
            all: opened,
        },
    })
}

/// One stored override, its id opened.
fn open(fleet: &FleetKey, field: &str, value: &str) -> Option<Stored> {
    let opened = serde_json::from_str::<Sealed>(value).ok().and_then(|s| {
        let id: OverrideId = serde_json::from_slice(&fleet.open(&s.id)?).ok()?;
        Some(Stored {
            id,
            set: s.set,
            expires_at_ms: s.expires_at_ms,
            keyed_by: s.keyed_by,
        })
    });
    if opened.is_none() && !value.is_empty() {
        tracing::warn!(
            field,
            "a runtime override in Redis cannot be opened (sealed under another key secret, or written by another version); skipped"
        );
    }
    opened
}

/// Moves the overrides an earlier version kept in Redis (ids in clear, in `tg:{overrides}`)
/// into this form; how many. Safe to run on every gateway at once: the old hash is renamed
/// aside atomically, and deleted only once all of it is stored again.
pub async fn import_first_version(remote: &RedisStore) -> Result<usize, StoreError> {
    let call = |op: &str| {
        let mut call = SCRIPT.prepare_invoke();
        call.key(format!("{PREFIX}:{{overrides}}"))
            .key(format!("{PREFIX}:{{overrides}}:import"))
            .arg(op);
        call
    };
    let old: Vec<String> = remote.invoke(&call("import")).await?;
    if old.is_empty() {
        return Ok(0);
    }
    let mut moved = 0;
    for pair in old.chunks(2) {
        match pair.get(1).map(|v| serde_json::from_str::<Stored>(v)) {
            Some(Ok(stored)) => {
                put(remote, &stored, None).await?;
                moved += 1;
            }
            _ => tracing::warn!("a runtime override of an earlier version does not parse; dropped"),
        }
    }
    remote.invoke::<i64>(&call("imported")).await?;
    Ok(moved)
}

/// Whether the hash read whole at `version` was made again since the read at `seen`
/// (both `epoch:count`): another epoch than a real one seen, or a lower count under it (a
/// gateway making it again keeps its process's epoch). An epoch is made only with the
/// hash, and its count never goes back while it lives: neither is a deliberate change.
pub(super) fn made_again(seen: Option<&str>, version: &str) -> bool {
    fn parse(v: &str) -> Option<(&str, u64)> {
        let (epoch, count) = v.rsplit_once(':')?;
        Some((epoch, count.parse().ok()?))
    }
    match (seen.and_then(parse), parse(version)) {
        (Some((seen_epoch, seen_count)), Some((epoch, count))) => {
            seen_epoch != "none" && (seen_epoch != epoch || count < seen_count)
        }
        _ => false,
    }
}
