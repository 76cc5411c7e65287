//! One key's state as the admin API shows it (`/admin/limits`, `/admin/top`): a rate
//! key's TAT and what it lets through, a concurrency key's slots.

use serde_json::json;

use crate::config::Applied;
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
    let calendar = policy.rate().and_then(|r| r.calendar.as_deref());
    match (policy.limit_for(runtime, || single), calendar) {
        (Applied::Concurrency(max), _) => concurrency_json(shared, &key, max).await,
        (Applied::Rate(quota), Some(calendar)) => quota_json(shared, &key, quota, calendar).await,
        (Applied::Rate(quota), None) => rate_json(shared, &key, quota).await,
    }
}

/// A quota key's usage in the current window and when it resets.
async fn quota_json(
    shared: &Shared,
    key: &crate::store::StoreKey,
    quota: crate::limit::Quota,
    calendar: &crate::config::CalendarQuota,
) -> Result<serde_json::Value, crate::store::StoreError> {
    let clock = &*shared.clock;
    let local_now = clock.now_ns();
    let (tat, now, server_now) = shared.limiter.peek(key, local_now, true).await?;
    // Redis's own now when it answered: usage is measured from the window's end to the
    // nanosecond, which this gateway's clock cannot place on Redis's.
    let unix_now = server_now.unwrap_or_else(|| clock.unix_ns_at(local_now));
    let bounds = calendar.bounds(unix_now);
    let until_end = bounds.until_end(unix_now);
    // The end on the timeline `tat` is on: `now` plays the local clock's now.
    let end = now.saturating_add(until_end);
    let used = crate::limit::calendar::used(tat, end);
    let limit = quota.burst();
    let left = limit.saturating_sub(used);
    Ok(json!({
        "kind": "quota",
        "quota": limit,
        "window": calendar.calendar.period_name(),
        "timezone": calendar.calendar.zone_name,
        "used": used,
        "left": left,
        "resets_at": crate::clock::rfc3339(unix_now.saturating_add(until_end)),
        "window_start": crate::clock::rfc3339(
            u64::try_from(bounds.start).unwrap_or(0).saturating_mul(1_000_000_000)),
        "remaining": left,
        "next_admit_ms": if left > 0 { 0 } else { ceil_millis(until_end) },
        "tracked": used > 0,
    }))
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
    let (tat, now, _) = shared
        .limiter
        .peek(key, shared.clock.now_ns(), false)
        .await?;
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
