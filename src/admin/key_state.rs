//! One key's state as the admin API shows it (`/admin/limits`, `/admin/top`): a rate
//! key's TAT and what it lets through, a concurrency key's slots.

use serde_json::json;

use crate::config::compile::Applied;
use crate::proxy::snapshot::Shared;
use crate::reply::ceil_millis;

/// One key's state in `policy` (its parts well-formed): a rate key's TAT and what it
/// lets through, a concurrency key's slots.
pub async fn key_state(
    shared: &Shared,
    policy: &crate::config::Policy,
    parts: &[String],
) -> Result<serde_json::Value, crate::store::StoreError> {
    let key = shared.limiter.keys().key_of(&policy.name, parts);
    let runtime = shared.limiter.overrides().get(key.hash, &*shared.clock);
    let single = (parts.len() == 1).then(|| std::borrow::Cow::Borrowed(parts[0].as_str()));
    match crate::store::limits::limit_for(policy, runtime, || single) {
        Applied::Concurrency(max) => concurrency_json(shared, &key, max).await,
        Applied::Rate(quota) => rate_json(shared, &key, quota).await,
    }
}

/// A concurrency key's slots: held (fleet-wide with Redis), free, waiting here.
async fn concurrency_json(
    shared: &Shared,
    key: &crate::store::StoreKey,
    max: u32,
) -> Result<serde_json::Value, crate::store::StoreError> {
    let redis_key = key.redis.as_ref().map(|r| r.key.as_str());
    let held = shared.limiter.slots_held(key.hash, redis_key).await?;
    Ok(json!({
        "kind": "concurrency",
        "max_in_flight": max,
        "in_flight": held,
        "free": max.saturating_sub(held),
        "waiting": shared.limiter.slots_waiting(key.hash),
        "tracked": held > 0,
    }))
}

/// A rate key's TAT, relative to now, and what it lets through.
async fn rate_json(
    shared: &Shared,
    key: &crate::store::StoreKey,
    quota: crate::limit::Quota,
) -> Result<serde_json::Value, crate::store::StoreError> {
    let (tat, now) = shared.limiter.peek(key, shared.clock.now_ns()).await?;
    let probe = quota.decide(tat, now, 1, 0);
    Ok(json!({
        "tat_ms": (tat.saturating_sub(now)) as f64 / 1e6,
        "burst": quota.burst(),
        "remaining": quota.remaining(tat, now),
        "next_admit_ms": ceil_millis(probe.wait_ns),
        "idle_ms": ceil_millis(tat.saturating_sub(now)),
        "tracked": tat > now,
    }))
}
