//! Runtime overrides: per-key limits set, listed and removed through the admin API
//! (`/admin/overrides/{policy}/{key parts…}`), applied to the next request, kept across
//! reloads, expiring at their `ttl`. With Redis they live in Redis and every gateway of
//! the fleet follows them; otherwise in this process, and in `[server] overrides_file`
//! when set, so a restart keeps them.
//!
//! Each override is checked against the running config with the rules of the file's
//! overrides, at `PUT` and again after every reload; one that no longer fits (its policy
//! gone or changed kind, a route's cost above its burst) is kept but inactive, and listed
//! with the reason.

mod file;
mod shared;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::config::compile::{check_override, Applied, OverrideProblem, OverrideSpec};
use crate::config::Config;
use crate::store::overrides::KeyOverride;
use crate::store::Limiter;

pub use file::FileError;

/// Which key of which policy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OverrideId {
    pub policy: String,
    /// One part per key source, as in `/admin/limits`.
    pub key: Vec<String>,
}

/// One runtime override as kept in the file and in Redis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    #[serde(flatten)]
    pub id: OverrideId,
    pub set: OverrideSpec,
    /// Wall-clock milliseconds since the Unix epoch; absent: until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
}

impl Stored {
    fn expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| now_ms >= at)
    }
}

/// Why a change was refused.
#[derive(Debug, thiserror::Error)]
pub enum ChangeError {
    #[error("no policy `{0}` in the running config")]
    UnknownPolicy(String),
    #[error("policy `{policy}` is keyed by {expected}: give one path segment per part")]
    BadKey { policy: String, expected: String },
    #[error("the override is refused")]
    Invalid(Vec<OverrideProblem>),
    #[error("the shared store did not take the change: {0}")]
    Store(#[from] crate::store::StoreError),
    #[error("the overrides file could not be written: {0}")]
    File(#[from] FileError),
    #[error("{MAX_OVERRIDES} runtime overrides are set already")]
    TooMany,
}

/// Runtime overrides one gateway keeps at most: each costs a look-up table entry and a
/// line in the file; a fleet needing more wants them in the config's overrides.
pub const MAX_OVERRIDES: usize = 100_000;

/// The runtime overrides of this gateway: what is set, and what is in effect.
pub struct Overrides {
    set: Mutex<BTreeMap<OverrideId, Stored>>,
    /// Why an override is not in effect, by override.
    inactive: Mutex<HashMap<OverrideId, Vec<OverrideProblem>>>,
    /// Changes one at a time end to end, so the file and Redis see them in order.
    changes: tokio::sync::Mutex<()>,
    file: Option<std::path::PathBuf>,
    /// With Redis: the version of the shared set last read.
    seen: Mutex<Option<String>>,
}

impl Overrides {
    /// Starts with what `file` holds (read by [`Overrides::read_file`]).
    pub fn new(file: Option<std::path::PathBuf>, initial: Vec<Stored>) -> Self {
        Self {
            set: Mutex::new(initial.into_iter().map(|s| (s.id.clone(), s)).collect()),
            inactive: Mutex::default(),
            changes: tokio::sync::Mutex::new(()),
            file,
            seen: Mutex::new(None),
        }
    }

    /// The overrides kept in `path`; none when it does not exist yet.
    pub fn read_file(path: &std::path::Path) -> Result<Vec<Stored>, FileError> {
        file::read(path)
    }

    /// Puts the set overrides in effect for the running config (after start-up and after
    /// every reload). `current` gives the running config: it is read once no change is
    /// under way, so a reload racing a `PUT` still ends with both in effect.
    pub async fn reapply(&self, current: impl Fn() -> Arc<Config>, limiter: &Limiter, now_ms: u64) {
        let _one_at_a_time = self.changes.lock().await;
        self.apply(&current(), limiter, now_ms);
        for (id, problems) in lock(&self.inactive).iter() {
            for p in problems {
                tracing::warn!(
                    policy = %id.policy,
                    key = %id.key.join("/"),
                    hint = p.hint.as_deref().unwrap_or(""),
                    "runtime override not applied: {}",
                    p.message
                );
            }
        }
    }

    /// Each set override checked against `config`: the ones that fit applied by key
    /// hash, the others kept aside with their reasons.
    fn apply(&self, config: &Config, limiter: &Limiter, now_ms: u64) {
        let set = lock(&self.set).clone();
        let mut table = HashMap::with_capacity(set.len());
        let mut inactive = HashMap::new();
        for (id, stored) in set {
            if stored.expired(now_ms) {
                continue;
            }
            match resolve(config, &id, &stored.set) {
                Ok(applied) => {
                    let hash = limiter.keys().key_of(&id.policy, &id.key).hash;
                    table.insert(
                        hash,
                        KeyOverride {
                            applied,
                            expires_at_ms: stored.expires_at_ms,
                        },
                    );
                }
                Err(problems) => {
                    inactive.insert(id, problems);
                }
            }
        }
        limiter.overrides().replace(table);
        *lock(&self.inactive) = inactive;
    }

    /// Sets (or replaces) one override; in effect when this returns.
    pub async fn put(
        &self,
        current: impl Fn() -> Arc<Config>,
        limiter: &Limiter,
        id: OverrideId,
        set: OverrideSpec,
        ttl: Option<Duration>,
        now_ms: u64,
    ) -> Result<Applied, ChangeError> {
        let _one_at_a_time = self.changes.lock().await;
        let config = current();
        check_id(&config, &id)?;
        {
            let set = lock(&self.set);
            if set.len() >= MAX_OVERRIDES && !set.contains_key(&id) {
                return Err(ChangeError::TooMany);
            }
        }
        let applied = resolve(&config, &id, &set).map_err(ChangeError::Invalid)?;
        let stored = Stored {
            id: id.clone(),
            set,
            expires_at_ms: ttl
                .map(|t| now_ms.saturating_add(u64::try_from(t.as_millis()).unwrap_or(u64::MAX))),
        };
        if let Some(remote) = limiter.remote() {
            shared::put(remote, &stored).await?;
        }
        lock(&self.set).insert(id, stored);
        self.apply(&config, limiter, now_ms);
        self.persist().await?;
        Ok(applied)
    }

    /// Removes one override; whether there was one.
    pub async fn delete(
        &self,
        current: impl Fn() -> Arc<Config>,
        limiter: &Limiter,
        id: &OverrideId,
        now_ms: u64,
    ) -> Result<bool, ChangeError> {
        let _one_at_a_time = self.changes.lock().await;
        let config = current();
        // With Redis, one set through another gateway and not read here yet exists too.
        let mut existed = false;
        if let Some(remote) = limiter.remote() {
            existed = shared::delete(remote, std::slice::from_ref(id), now_ms).await? > 0;
        }
        existed |= lock(&self.set)
            .remove(id)
            .is_some_and(|s| !s.expired(now_ms));
        self.apply(&config, limiter, now_ms);
        self.persist().await?;
        Ok(existed)
    }

    /// Every override set and not expired, with whether it is in effect.
    pub fn list(&self, now_ms: u64) -> Vec<Listed> {
        let inactive = lock(&self.inactive).clone();
        lock(&self.set)
            .values()
            .filter(|s| !s.expired(now_ms))
            .map(|s| Listed {
                policy: s.id.policy.clone(),
                key: s.id.key.clone(),
                set: s.set.clone(),
                expires_at_ms: s.expires_at_ms,
                expires_in_ms: s.expires_at_ms.map(|at| at.saturating_sub(now_ms)),
                active: !inactive.contains_key(&s.id),
                problems: inactive.get(&s.id).cloned().unwrap_or_default(),
            })
            .collect()
    }

    /// Upkeep, once a second: drops expired overrides (from Redis too), and with Redis
    /// follows the fleet's changes. Returns whether what is in effect changed.
    pub async fn tick(
        &self,
        current: impl Fn() -> Arc<Config>,
        limiter: &Limiter,
        now_ms: u64,
    ) -> bool {
        let _one_at_a_time = self.changes.lock().await;
        let expired: Vec<OverrideId> = lock(&self.set)
            .values()
            .filter(|s| s.expired(now_ms))
            .map(|s| s.id.clone())
            .collect();
        let mut changed = !expired.is_empty();
        let mut read = None;
        if let Some(remote) = limiter.remote() {
            if !expired.is_empty() {
                // Whoever notices first removes them; an override set again since stays.
                if let Err(e) = shared::expire(remote, &expired, now_ms).await {
                    tracing::debug!(error = %e, "expired overrides not removed from Redis yet");
                }
            }
            let seen = lock(&self.seen).clone();
            match shared::read_if_changed(remote, seen.as_deref()).await {
                Ok(Some((version, all))) => {
                    *lock(&self.seen) = Some(version);
                    read = Some(all);
                }
                Ok(None) => {}
                Err(e) => tracing::debug!(error = %e, "runtime overrides not read from Redis"),
            }
        }
        {
            let mut set = lock(&self.set);
            if let Some(all) = read {
                if all.is_empty() && !set.is_empty() {
                    tracing::warn!(
                        dropped = set.len(),
                        "Redis holds no runtime overrides: the ones this gateway had are dropped"
                    );
                }
                *set = all.into_iter().map(|s| (s.id.clone(), s)).collect();
                changed = true;
            }
            set.retain(|_, s| !s.expired(now_ms));
        }
        if changed {
            self.apply(&current(), limiter, now_ms);
            if let Err(e) = self.persist().await {
                tracing::warn!(error = %e, "the overrides file was not updated");
            }
        }
        changed
    }

    /// Writes the set overrides to the file, when there is one (replaced atomically).
    async fn persist(&self) -> Result<(), FileError> {
        let Some(path) = self.file.clone() else {
            return Ok(());
        };
        let all: Vec<Stored> = lock(&self.set).values().cloned().collect();
        tokio::task::spawn_blocking(move || file::write(&path, &all))
            .await
            .map_err(|e| FileError::Task(e.to_string()))?
    }
}

/// One override as `GET /admin/overrides` lists it.
#[derive(Debug, Serialize)]
pub struct Listed {
    pub policy: String,
    pub key: Vec<String>,
    pub set: OverrideSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
    /// Whether requests see it: `false` when the running config refuses it (`problems`).
    pub active: bool,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<OverrideProblem>,
}

/// The policy exists and the key has one part per key source.
fn check_id(config: &Config, id: &OverrideId) -> Result<(), ChangeError> {
    let policy = config
        .policy(&id.policy)
        .ok_or_else(|| ChangeError::UnknownPolicy(id.policy.clone()))?;
    crate::store::keys::key_shape(policy, &id.key).map_err(|expected| ChangeError::BadKey {
        policy: id.policy.clone(),
        expected,
    })
}

fn resolve(
    config: &Config,
    id: &OverrideId,
    set: &OverrideSpec,
) -> Result<Applied, Vec<OverrideProblem>> {
    let problem = |message: String, hint: &str| {
        vec![OverrideProblem {
            message,
            hint: Some(hint.to_owned()),
        }]
    };
    let Some(policy) = config.policy(&id.policy) else {
        return Err(problem(
            format!("no policy `{}` in the running config", id.policy),
            "it applies again once a reload brings the policy back; DELETE it otherwise",
        ));
    };
    if id.key.len() != policy.key.len() {
        return Err(problem(
            format!(
                "policy `{}` is keyed by {} part(s) now",
                id.policy,
                policy.key.len()
            ),
            "set the override again with the key's new parts and DELETE this one",
        ));
    }
    check_override(config, policy, set)
}

/// A poisoned lock still holds consistent data here: every writer replaces whole values.
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// `tollgate check`'s word on `[server] overrides_file`: how many overrides it holds and
/// which of them this config would not apply. A file that does not parse is an error.
pub fn describe_file(config: &Config, now_ms: u64) -> Result<Option<String>, FileError> {
    use std::fmt::Write;
    let Some(path) = &config.server.overrides_file else {
        return Ok(None);
    };
    let all = file::read(path)?;
    let live: Vec<&Stored> = all.iter().filter(|s| !s.expired(now_ms)).collect();
    let mut out = format!(
        "\nruntime overrides: {} in {}\n",
        live.len(),
        path.display()
    );
    for stored in live {
        if let Err(problems) = resolve(config, &stored.id, &stored.set) {
            for p in problems {
                let _ = writeln!(
                    out,
                    "  {}/{} - warning: not applied: {}{}",
                    stored.id.policy,
                    stored.id.key.join("/"),
                    p.message,
                    p.hint.map(|h| format!(" ({h})")).unwrap_or_default()
                );
            }
        }
    }
    Ok(Some(out))
}
