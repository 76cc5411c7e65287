//! How a set override takes effect: checked against the running config with the rules of
//! the file's overrides, then put in the limiter's table under its key's hash — one at a
//! time for a change, all at once after a reload.

use std::collections::HashMap;

use super::set::OverrideSet;
use super::stored::{OverrideId, Stored};
use super::ChangeError;
use crate::config::compile::runtime::{check_override, refused_routes};
use crate::config::override_spec::{OverrideProblem, OverrideSpec};
use crate::config::Applied;
use crate::config::Config;
use crate::store::overrides::KeyOverride;
use crate::store::Limiter;

/// Puts `stored` in effect (or takes its key's override out, when the config refuses
/// it, recording why): O(1) in the number of overrides.
pub fn one(config: &Config, limiter: &Limiter, set: &mut OverrideSet, stored: &Stored) {
    let hash = limiter.keys().hash_of(&stored.id.policy, &stored.id.key);
    match resolve_stored(config, stored) {
        Ok(applied) => {
            limiter.overrides().set(
                hash,
                Some(KeyOverride {
                    applied,
                    expires_at_ms: stored.expires_at_ms,
                }),
            );
            set.set_problems(&stored.id, None);
        }
        Err(problems) => {
            limiter.overrides().set(hash, None);
            set.set_problems(&stored.id, Some(problems));
        }
    }
}

/// Says, after a reload, which overrides in effect some route refuses for good (their
/// burst below its cost: `refused_routes`): the first [`LOGGED_REFUSING`] one line each,
/// then one line for them all (an operator may keep many keys off an expensive route on
/// purpose).
pub fn log_refusing(config: &Config, set: &OverrideSet, now_ms: u64) {
    let active = set
        .values()
        .filter(|s| !s.expired(now_ms) && set.problems(&s.id).is_empty());
    let refusing: Vec<(&Stored, Vec<String>)> = active
        .filter_map(|s| Some((s, refused_by(config, s)?)))
        .collect();
    for (s, routes) in refusing.iter().take(LOGGED_REFUSING) {
        let (id, word) = (&s.id, bound_field(config, &s.id.policy));
        tracing::warn!(policy = %id.policy, key = %id.key.join("/"), routes = %routes.join(","), "runtime override applied; its {word} is below these routes' cost: they refuse its key (429 cost_above_burst)");
    }
    if refusing.len() > LOGGED_REFUSING {
        tracing::warn!(count = refusing.len(), "runtime overrides applied with routes refusing their key (429 cost_above_burst): the first {LOGGED_REFUSING} logged, GET /admin/overrides lists each");
    }
}

/// Overrides a reload names one line each when routes refuse their key.
const LOGGED_REFUSING: usize = 10;

/// The field `policy`'s overrides bound a key in ([`LimitKind::bound_field`]).
///
/// [`LimitKind::bound_field`]: crate::config::LimitKind::bound_field
pub fn bound_field(config: &Config, policy: &str) -> &'static str {
    config
        .policy(policy)
        .map_or("burst", |p| p.kind().bound_field())
}

/// The routes that refuse `stored`'s key for good under `config`, if any.
pub fn refused_by(config: &Config, stored: &Stored) -> Option<Vec<String>> {
    let applied = resolve_stored(config, stored).ok()?;
    let policy = config.policy(&stored.id.policy)?;
    let routes = refused_routes(config, policy, &applied);
    (!routes.is_empty()).then_some(routes)
}

/// Takes `id`'s override out of effect.
pub fn remove(limiter: &Limiter, id: &OverrideId) {
    limiter
        .overrides()
        .set(limiter.keys().hash_of(&id.policy, &id.key), None);
}

/// Every override of `set` checked against `config`: the ones that fit in effect, the
/// others kept aside with their reasons (after a reload, or a whole new set).
pub fn all(config: &Config, limiter: &Limiter, set: &mut OverrideSet, now_ms: u64) {
    let mut table = HashMap::with_capacity(set.len());
    let mut refused = Vec::new();
    for stored in set.values().filter(|s| !s.expired(now_ms)) {
        match resolve_stored(config, stored) {
            Ok(applied) => {
                let hash = limiter.keys().hash_of(&stored.id.policy, &stored.id.key);
                table.insert(
                    hash,
                    KeyOverride {
                        applied,
                        expires_at_ms: stored.expires_at_ms,
                    },
                );
            }
            Err(problems) => refused.push((stored.id.clone(), problems)),
        }
    }
    limiter.overrides().replace(table);
    let ids: Vec<OverrideId> = set.values().map(|s| s.id.clone()).collect();
    for id in &ids {
        set.set_problems(id, None);
    }
    for (id, problems) in refused {
        set.set_problems(&id, Some(problems));
    }
}

/// The policy exists and the key has one part per key source, none over
/// [`MAX_KEY_PART`](super::MAX_KEY_PART) bytes.
pub fn check_id(config: &Config, id: &OverrideId) -> Result<(), ChangeError> {
    let policy = config
        .policy(&id.policy)
        .ok_or_else(|| ChangeError::UnknownPolicy(id.policy.clone()))?;
    if id.key.iter().any(|part| part.len() > super::MAX_KEY_PART) {
        return Err(ChangeError::KeyTooLong);
    }
    crate::store::keys::key_shape(policy, &id.key).map_err(|expected| ChangeError::BadKey {
        policy: id.policy.clone(),
        expected,
    })
}

/// What `stored` makes of its key's limit under `config` ([`resolve`]); refused when the
/// policy is keyed by other sources than when it was set: the same text is then another
/// client's key (an `x-api-key` equal to the tenant id the override was set for).
pub fn resolve_stored(config: &Config, stored: &Stored) -> Result<Applied, Vec<OverrideProblem>> {
    // The key's own checks first: they say how to spell it now (`ip` reloaded as `ip/64`).
    let applied = resolve(config, &stored.id, &stored.set)?;
    let policy = config.policy(&stored.id.policy);
    if let (Some(was), Some(policy)) = (&stored.keyed_by, policy) {
        let now = policy.key_sources();
        if *was != now {
            return Err(vec![OverrideProblem {
                message: format!(
                    "set for a key of `{}` when policy `{}` was keyed by {}; it is keyed by {} now",
                    stored.id.key.join("/"),
                    stored.id.policy,
                    was.join("/"),
                    now.join("/")
                ),
                hint: Some(
                    "set the override again for the key as the policy makes it now and DELETE this one"
                        .to_owned(),
                ),
            }]);
        }
    }
    Ok(applied)
}

/// What `set` makes of `id`'s limit under `config`, or why it cannot apply.
pub fn resolve(
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
    // Kept from before addresses were matched in one spelling, or from the policy's
    // earlier key (`ip` reloaded as `ip/64`): it names no key a request makes.
    if let Err(expected) = crate::store::keys::key_shape(policy, &id.key) {
        return Err(problem(
            format!(
                "policy `{}` is keyed by {expected} now: {} names no one key of it",
                id.policy,
                id.key.join("/")
            ),
            "set the override again with the key's new parts and DELETE this one",
        ));
    }
    let mut spelled = id.key.clone();
    crate::store::keys::spelled_key(policy, &mut spelled);
    if spelled != id.key {
        return Err(problem(
            format!(
                "policy `{}` keys requests as {}; this override's key is written {}",
                id.policy,
                spelled.join("/"),
                id.key.join("/")
            ),
            "set the override again with the key as requests make it and DELETE this one",
        ));
    }
    check_override(config, policy, set)
}
