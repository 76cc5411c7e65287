//! `/admin/overrides`: runtime per-key limits. `GET /admin/overrides` lists them
//! (`overrides_list`);
//! `PUT /admin/overrides/{policy}/{key parts…}` with a JSON body (`limit`, `period`,
//! `burst` or `max_in_flight`, and `ttl`) sets one, `DELETE` on the same path removes it.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use http::{Method, Request, Response, StatusCode};
use http_body_util::{BodyExt, Limited};
use hyper::body::Incoming;
use serde_json::json;

use super::answer::{json_ok, key_path};
use crate::config::compile::runtime::{override_spec, refused_routes};
use crate::config::override_spec::OverrideProblem;
use crate::config::Applied;
use crate::overrides::{ChangeError, OverrideId};
use crate::proxy::snapshot::Shared;
use crate::reply::{json_error, Body};

/// An override's body is a handful of fields.
const MAX_BODY: usize = 16 * 1024;
/// A client that starts a body must finish it within this.
const BODY_TIMEOUT: Duration = Duration::from_secs(10);

pub async fn handle(
    shared: &Arc<Shared>,
    method: &Method,
    rest: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    let now_ms = shared.clock.wall_ms();
    if rest.is_empty() {
        // Not a GET: the list's GET is `overrides_list`'s.
        return super::answer::method_not_allowed("GET");
    }
    let (policy, typed) = match key_path(rest) {
        Ok(named) => named,
        Err(refused) => return *refused,
    };
    let current = || shared.config();
    // Stored as requests spell the key (an address in its canonical text, under `ip/64`
    // its network), so the override applies to them and a DELETE finds it however typed.
    let mut key = typed.clone();
    if let Some(p) = current().policy(&policy) {
        if crate::store::keys::key_shape(p, &key).is_ok() {
            crate::store::keys::spelled_key(p, &mut key);
        }
    }
    let id = OverrideId { policy, key };
    match *method {
        Method::PUT => put(shared, id, req).await,
        // Exactly as typed first: one stored in another spelling (before spellings were
        // matched, or under the policy's earlier key) is still removable.
        Method::DELETE => match delete_typed_or_spelled(shared, &id, typed, now_ms).await {
            Ok(Some(removed)) => {
                super::answer::tell_quota_streams(
                    shared,
                    (&removed.policy, &removed.key),
                    crate::proxy::snapshot::KeyChange::Renumbered,
                );
                json_ok(json!({"status": "ok", "policy": removed.policy, "key": removed.key}))
            }
            Ok(None) => json_error(
                StatusCode::NOT_FOUND,
                "no_override",
                &[("policy", id.policy.into())],
            ),
            Err(e) => refused(e),
        },
        _ => super::answer::method_not_allowed("PUT, DELETE"),
    }
}

/// `PUT /admin/overrides/POLICY/KEY…`: sets the override `id` from the request's body.
async fn put(shared: &Arc<Shared>, id: OverrideId, req: Request<Incoming>) -> Response<Body> {
    let (set, ttl) = match read_body(req).await {
        Ok(fields) => fields,
        Err(resp) => return resp,
    };
    // A TTL counts from when the body was read, not from when it began to come.
    let now_ms = shared.clock.wall_ms();
    let current = || shared.config();
    let limiter = &shared.limiter;
    let put = shared.overrides.put(
        current,
        limiter,
        id.clone(),
        set.clone(),
        ttl,
        (now_ms, &*shared.clock),
    );
    match put.await {
        Ok(applied) => {
            super::answer::tell_quota_streams(
                shared,
                (&id.policy, &id.key),
                crate::proxy::snapshot::KeyChange::Renumbered,
            );
            let config = current();
            let policy = config.policy(&id.policy).map(|p| &**p);
            let mut answer = json!({
                "status": "ok",
                "policy": id.policy,
                "key": id.key,
                "applied": written_json(policy, &set, &applied),
                "expires_in_ms": ttl.map(|t| u64::try_from(t.as_millis()).unwrap_or(u64::MAX)),
            });
            // Set as asked, and told: these routes refuse the key whenever it comes.
            let refused = policy.map(|p| refused_routes(&config, p, &applied));
            if let Some(routes) = refused.filter(|r| !r.is_empty()) {
                answer["refused_routes"] = json!(routes);
            }
            json_ok(answer)
        }
        Err(e) => refused(e),
    }
}

/// Deletes the override named `typed` if there is one, else `id` (its spelling): the one
/// removed, if any.
async fn delete_typed_or_spelled(
    shared: &Shared,
    id: &OverrideId,
    typed: Vec<String>,
    now_ms: u64,
) -> Result<Option<OverrideId>, crate::overrides::ChangeError> {
    let current = || shared.config();
    let limiter = &shared.limiter;
    let as_typed = OverrideId {
        policy: id.policy.clone(),
        key: typed,
    };
    let overrides = &shared.overrides;
    if as_typed != *id
        && overrides
            .delete(current, limiter, &as_typed, (now_ms, &*shared.clock))
            .await?
    {
        return Ok(Some(as_typed));
    }
    let removed = overrides
        .delete(current, limiter, id, (now_ms, &*shared.clock))
        .await?;
    Ok(removed.then(|| id.clone()))
}

/// The body's override fields and its `ttl`, or the answer refusing it.
async fn read_body(
    req: Request<Incoming>,
) -> Result<(crate::config::override_spec::OverrideSpec, Option<Duration>), Response<Body>> {
    let bad = |problems: Vec<OverrideProblem>| {
        json_error(
            StatusCode::BAD_REQUEST,
            "invalid_override",
            &[("problems", json!(problems))],
        )
    };
    let one = |message: String, hint: &str| {
        bad(vec![OverrideProblem {
            message,
            hint: Some(hint.to_owned()),
        }])
    };
    let body = Limited::new(req.into_body(), MAX_BODY).collect();
    let bytes: Bytes = match tokio::time::timeout(BODY_TIMEOUT, body).await {
        Ok(Ok(collected)) => collected.to_bytes(),
        Ok(Err(e)) => {
            return Err(one(
                format!("the body could not be read: {e}"),
                "send at most 16 KiB of JSON",
            ))
        }
        Err(_) => {
            return Err(one(
                "the body did not arrive in time".into(),
                "send the whole body at once",
            ))
        }
    };
    let mut fields = match serde_json::from_slice::<serde_json::Value>(&bytes) {
        Ok(serde_json::Value::Object(fields)) => fields,
        Ok(_) => {
            return Err(one(
                "the body is not a JSON object".into(),
                "send e.g. {\"limit\": 1000, \"period\": \"1m\", \"ttl\": \"1h\"}",
            ))
        }
        Err(e) => {
            return Err(one(
                format!("the body is not JSON: {e}"),
                "send e.g. {\"limit\": 1000, \"period\": \"1m\", \"ttl\": \"1h\"}",
            ))
        }
    };
    let ttl = match fields.remove("ttl") {
        None | Some(serde_json::Value::Null) => None,
        Some(serde_json::Value::String(text)) => match humantime::parse_duration(text.trim()) {
            Ok(d) if d >= Duration::from_secs(1) => Some(d),
            Ok(_) => {
                return Err(one(
                    "ttl must be at least 1s".into(),
                    "leave ttl out for an override that stays until deleted",
                ))
            }
            Err(e) => {
                return Err(one(
                    format!("ttl `{text}` is not a duration: {e}"),
                    "use a number and a unit: \"30m\", \"1h\", \"7d\"",
                ))
            }
        },
        Some(_) => {
            return Err(one(
                "ttl must be a string".into(),
                "a duration with its unit, in quotes: \"1h\"",
            ))
        }
    };
    let set = override_spec(fields).map_err(bad)?;
    Ok((set, ttl))
}

fn refused(e: ChangeError) -> Response<Body> {
    match e {
        ChangeError::UnknownPolicy(policy) => json_error(
            StatusCode::NOT_FOUND,
            "unknown_policy",
            &[("policy", policy.into())],
        ),
        ChangeError::BadKey { expected, .. } => json_error(
            StatusCode::BAD_REQUEST,
            "bad_key",
            &[("expected_parts", expected.into())],
        ),
        ChangeError::Invalid(problems) => json_error(
            StatusCode::BAD_REQUEST,
            "invalid_override",
            &[("problems", json!(problems))],
        ),
        ChangeError::Store(e) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            &[("detail", e.to_string().into())],
        ),
        ChangeError::KeyTooLong => json_error(
            StatusCode::BAD_REQUEST,
            "key_too_long",
            &[("max_bytes", crate::overrides::MAX_KEY_PART.into())],
        ),
        ChangeError::TooMany => json_error(
            StatusCode::CONFLICT,
            "too_many_overrides",
            &[("max", crate::overrides::MAX_OVERRIDES.into())],
        ),
        // In effect, but a restart would not find it: the operator must know.
        ChangeError::File(e) => json_error(
            StatusCode::INTERNAL_SERVER_ERROR,
            "overrides_file_not_written",
            &[("detail", e.to_string().into())],
        ),
    }
}

/// What an override makes of its key's limit in the policy's own words, as the file would
/// write it: a quota's `quota` and calendar, a rate's `limit`, `period` and `burst` (with
/// `t_ns` and `tau_ns` beside them, as `/admin/config` shows a rate), a cap's
/// `max_in_flight`. Fields the override leaves out are the policy's.
pub fn written_json(
    policy: Option<&crate::config::Policy>,
    set: &crate::config::override_spec::OverrideSpec,
    applied: &Applied,
) -> serde_json::Value {
    let rate = policy.and_then(|p| p.rate());
    match (applied, rate) {
        (Applied::Rate(q), Some(r)) => match &r.calendar {
            Some(c) => json!({
                "kind": "quota",
                "quota": q.burst(),
                "window": c.calendar.period_name(),
                "timezone": c.calendar.zone_name,
            }),
            None => json!({
                "kind": "rate",
                "limit": set.limit.map_or(r.limit, |l| l.unsigned_abs()),
                "period": set.period.clone().unwrap_or_else(|| {
                    humantime::format_duration(r.period).to_string()
                }),
                "burst": q.burst(),
                "t_ns": q.interval_ns(),
                "tau_ns": q.tolerance_ns(),
            }),
        },
        _ => applied.describe(),
    }
}
