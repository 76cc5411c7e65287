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

mod apply;
mod describe;
mod follow;
mod journal;
mod set;
mod shared;
mod stored;

use std::collections::HashMap;
use std::sync::Arc;

use parking_lot::Mutex;
use std::time::Duration;

use crate::config::override_spec::{OverrideProblem, OverrideSpec};
use crate::config::{Applied, Config};
use crate::store::Limiter;

pub use describe::{describe_file, Page};
pub use journal::FileError;
use journal::{Change, Journal};
use set::OverrideSet;
pub use shared::touch as announce_reset;
pub use stored::{OverrideId, Stored, MAX_KEY_PART, MAX_OVERRIDES};

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
    #[error("a key part of an override is at most {MAX_KEY_PART} bytes")]
    KeyTooLong,
}

/// What one gateway holds: the set, and with Redis which field names which override.
#[derive(Default)]
struct State {
    set: OverrideSet,
    /// With Redis: the field of each override read from (or written to) Redis.
    fields: HashMap<String, OverrideId>,
    /// With Redis: the version of the shared set last read.
    seen: Option<String>,
    /// With Redis: whether the overrides an earlier version kept there were looked for.
    imported: bool,
    /// With Redis: its data losses seen (`RedisStore::losses`) when it was last read.
    losses_seen: u64,
}

/// The runtime overrides of this gateway: what is set, and what is in effect. Each change
/// costs O(log n) here, one appended line in the file and one script call with Redis.
pub struct Overrides {
    state: Mutex<State>,
    /// Changes one at a time end to end, so the file and Redis see them in order.
    changes: tokio::sync::Mutex<()>,
    journal: Option<Arc<Mutex<Journal>>>,
}

impl Overrides {
    /// Starts with what `file` held (read by [`Overrides::read_file`]).
    pub fn new(file: Option<(std::path::PathBuf, journal::Read)>) -> Self {
        let (initial, journal) = match file {
            Some((path, read)) => {
                let journal = Journal::new(path, &read);
                (read.overrides, Some(Arc::new(Mutex::new(journal))))
            }
            None => (Vec::new(), None),
        };
        Self {
            state: Mutex::new(State {
                set: OverrideSet::new(initial),
                ..State::default()
            }),
            changes: tokio::sync::Mutex::new(()),
            journal,
        }
    }

    /// What `path` holds; nothing when it does not exist yet.
    pub fn read_file(path: &std::path::Path) -> Result<journal::Read, FileError> {
        journal::read(path)
    }

    /// Puts the set overrides in effect for the running config (after start-up and after
    /// every reload). `current` gives the running config: it is read once no change is
    /// under way, so a reload racing a `PUT` still ends with both in effect.
    pub async fn reapply(&self, current: impl Fn() -> Arc<Config>, limiter: &Limiter, now_ms: u64) {
        let _one_at_a_time = self.changes.lock().await;
        self.apply_all(&current(), limiter, now_ms);
    }

    /// Resolves every override against `next`, a config about to run, and then puts it
    /// in place (`swap`), both under the changes' lock: no request sees the new config
    /// with overrides resolved against the old one (an override the new numbers refuse
    /// still applying), and no change resolves against the old config after the swap.
    pub async fn reapply_then(
        &self,
        next: &Config,
        limiter: &Limiter,
        now_ms: u64,
        swap: impl FnOnce(),
    ) {
        let _one_at_a_time = self.changes.lock().await;
        self.apply_all(next, limiter, now_ms);
        swap();
    }

    fn apply_all(&self, config: &Config, limiter: &Limiter, now_ms: u64) {
        let mut state = self.state.lock();
        apply::all(config, limiter, &mut state.set, now_ms);
        for (id, problems) in state.set.inactive() {
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
        apply::log_refusing(config, &state.set, now_ms);
    }

    /// Sets (or replaces) one override; in effect when this returns. `now_ms`: the wall
    /// clock its TTL counts from; `clock`: read as it goes to Redis (a change that reaches
    /// Redis too late is not made there).
    pub async fn put(
        &self,
        current: impl Fn() -> Arc<Config>,
        limiter: &Limiter,
        id: OverrideId,
        set: OverrideSpec,
        ttl: Option<Duration>,
        (now_ms, clock): (u64, &dyn crate::clock::Clock),
    ) -> Result<Applied, ChangeError> {
        let _one_at_a_time = self.changes.lock().await;
        let config = current();
        apply::check_id(&config, &id)?;
        {
            let state = self.state.lock();
            if state.set.len() >= MAX_OVERRIDES && !state.set.contains(&id) {
                return Err(ChangeError::TooMany);
            }
        }
        let applied = apply::resolve(&config, &id, &set).map_err(ChangeError::Invalid)?;
        let stored = Stored {
            keyed_by: config.policy(&id.policy).map(|p| p.key_sources()),
            id,
            set,
            expires_at_ms: ttl
                .map(|t| now_ms.saturating_add(u64::try_from(t.as_millis()).unwrap_or(u64::MAX))),
        };
        if let Some(remote) = limiter.remote() {
            shared::put(remote, &stored, Some(clock.now_ns())).await?;
        }
        {
            let mut state = self.state.lock();
            if let Some(fleet) = limiter.remote().and_then(|r| r.fleet().key()) {
                state
                    .fields
                    .insert(shared::field(&fleet, &stored.id), stored.id.clone());
            }
            state.set.insert(stored.clone());
            apply::one(&config, limiter, &mut state.set, &stored);
        }
        self.record(vec![Change::Put(stored)], false).await?;
        Ok(applied)
    }

    /// Removes one override; whether there was one. `clock`: as for [`Self::put`].
    pub async fn delete(
        &self,
        _current: impl Fn() -> Arc<Config>,
        limiter: &Limiter,
        id: &OverrideId,
        (now_ms, clock): (u64, &dyn crate::clock::Clock),
    ) -> Result<bool, ChangeError> {
        let _one_at_a_time = self.changes.lock().await;
        // With Redis, one set through another gateway and not read here yet exists too.
        let mut existed = false;
        if let Some(remote) = limiter.remote() {
            let ids = std::slice::from_ref(id);
            let sent_ns = Some(clock.now_ns());
            existed = shared::remove(remote, ids, (now_ms, sent_ns), false).await? > 0;
        }
        let removed = forget(&mut self.state.lock(), limiter, id);
        existed |= removed.as_ref().is_some_and(|s| !s.expired(now_ms));
        if removed.is_some() {
            self.record(vec![Change::Del(id.clone())], false).await?;
        } else if self.journal.as_ref().is_some_and(|j| j.lock().behind()) {
            // Nothing to remove here, but an earlier change was answered as not written
            // (this removal, most likely): repeating it is how the operator makes it
            // stick at the next start, so the file is written whole now.
            self.record(Vec::new(), true).await?;
        }
        Ok(existed)
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
        let expired = self.state.lock().set.expired(now_ms);
        let (mut changes, mut whole) = (Vec::new(), false);
        if let Some(remote) = limiter.remote() {
            if !expired.is_empty() {
                // Whoever notices first removes them; an override set again since stays.
                if let Err(e) = shared::remove(remote, &expired, (now_ms, None), true).await {
                    tracing::debug!(error = %e, "expired overrides not removed from Redis yet");
                }
            }
            self.import_first_version(remote).await;
            let (seen, losses_seen) = {
                let state = self.state.lock();
                (state.seen.clone(), state.losses_seen)
            };
            // Read whole after a loss the upkeep saw (a restart, a fail-over): a count put
            // back by it, then bumped to where this gateway read, reads as unchanged.
            let losses = remote.losses();
            let asked = (losses == losses_seen).then_some(seen.as_deref()).flatten();
            match shared::changes(remote, asked).await {
                Ok(read) => {
                    self.state.lock().losses_seen = losses;
                    if self.lost_by_redis(&read, seen.as_deref(), now_ms) {
                        self.put_back(remote, now_ms).await;
                    } else {
                        (changes, whole) = self.follow(&current(), limiter, read, now_ms);
                    }
                }
                Err(e) => tracing::debug!(error = %e, "runtime overrides not read from Redis"),
            }
        }
        {
            let mut state = self.state.lock();
            for id in &expired {
                // Set again (with a later expiry) by a change just read: kept.
                if state.set.get(id).is_some_and(|s| s.expired(now_ms)) {
                    forget(&mut state, limiter, id);
                    changes.push(Change::Del(id.clone()));
                }
            }
        }
        let changed = whole || !changes.is_empty();
        if changed {
            if let Err(e) = self.record(changes, whole).await {
                tracing::warn!(error = %e, "the overrides file was not updated");
            }
        }
        changed
    }

    /// Whether `read` finds no overrides hash in Redis at all (no epoch: never made, or
    /// lost — a restart without persistence, a `FLUSHALL`, an eviction) while this gateway
    /// holds overrides: read whole, or unchanged since a read that found none (this
    /// gateway's own change was lost before it read it back). Deleting the last override
    /// keeps the hash and its epoch, so this is never a fleet's deliberate emptying.
    /// So is a hash made again since this gateway read it ([`shared::made_again`]: a change
    /// landed just after the loss): following it would drop what the loss took.
    fn lost_by_redis(&self, read: &shared::Changes, seen: Option<&str>, now_ms: u64) -> bool {
        let none = |version: &str| version.starts_with("none:");
        let found_none = match read {
            shared::Changes::Full { version, all } => {
                (none(version) && all.is_empty()) || shared::made_again(seen, version)
            }
            shared::Changes::Unchanged => seen.is_some_and(none),
            shared::Changes::Delta { .. } => false,
        };
        found_none && self.state.lock().set.values().any(|s| !s.expired(now_ms))
    }

    /// Puts this gateway's overrides back into Redis, which lost them (or never had them:
    /// a gateway moving to Redis with its overrides file). Dropping them instead emptied
    /// every gateway's set and file, the only copy. The next read takes them from Redis
    /// as any change (the whole fleet's, when several put theirs back).
    async fn put_back(&self, remote: &crate::store::RedisStore, now_ms: u64) {
        let kept: Vec<Stored> = {
            let state = self.state.lock();
            let live = state.set.values().filter(|s| !s.expired(now_ms));
            live.cloned().collect()
        };
        tracing::warn!(
            overrides = kept.len(),
            "Redis holds no runtime overrides (its data lost, or this fleet new to Redis): this gateway's are put back"
        );
        for stored in &kept {
            if let Err(e) = shared::put(remote, stored, None).await {
                tracing::warn!(error = %e, "runtime overrides not all put back into Redis yet: tried again next second");
                return;
            }
        }
    }

    /// Once per process with Redis: moves what an earlier version kept there.
    async fn import_first_version(&self, remote: &crate::store::RedisStore) {
        if self.state.lock().imported {
            return;
        }
        match shared::import_first_version(remote).await {
            Ok(n) => {
                if n > 0 {
                    tracing::info!(
                        moved = n,
                        "runtime overrides of an earlier version moved to the sealed form"
                    );
                }
                self.state.lock().imported = true;
            }
            Err(e) => {
                tracing::debug!(error = %e, "runtime overrides of an earlier version not looked for yet")
            }
        }
    }

    /// Writes `changes` to the file, when there is one: appended, or the file written
    /// whole when the journal is due for compaction.
    async fn record(&self, changes: Vec<Change>, whole: bool) -> Result<(), FileError> {
        let Some(journal) = self.journal.clone() else {
            return Ok(());
        };
        let all = {
            let state = self.state.lock();
            let compacts = whole || journal.lock().compacts(state.set.len());
            compacts.then(|| state.set.values().cloned().collect::<Vec<_>>())
        };
        tokio::task::spawn_blocking(move || journal.lock().record(&changes, all.as_deref()))
            .await
            .map_err(|e| FileError::Task(e.to_string()))?
    }
}

/// Takes `id`'s override out of effect and out of `state`; the one it was.
fn forget(state: &mut State, limiter: &Limiter, id: &OverrideId) -> Option<Stored> {
    apply::remove(limiter, id);
    if let Some(fleet) = limiter.remote().and_then(|r| r.fleet().key()) {
        state.fields.remove(&shared::field(&fleet, id));
    }
    state.set.remove(id)
}
