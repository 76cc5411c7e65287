//! The admin listener's routes. Never served on the data plane.

use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use http::header::CACHE_CONTROL;
use http::{HeaderValue, Method, Request, Response, StatusCode};
use hyper::body::Incoming;
use serde_json::json;

use super::answer::{json_ok, json_status, key_path, method_not_allowed, text};
use crate::config::Policy;
use crate::proxy::snapshot::Shared;
use crate::reply::{json_error, Body};

const STATUS_PAGE: &str = include_str!("page/index.html");

pub async fn handle(
    shared: Arc<Shared>,
    req: Request<Incoming>,
) -> Result<Response<Body>, Infallible> {
    let path = req.uri().path().to_owned();
    // HEAD is GET without a body (load balancers probe with it); hyper drops the body.
    let method = if req.method() == Method::HEAD {
        Method::GET
    } else {
        req.method().clone()
    };
    let refused = crate::admin::auth::refuse(&shared.config(), &method, req.uri(), req.headers());
    let mut resp = match refused {
        Some(refusal) => refusal,
        None => route(&shared, &method, &path, req).await,
    };
    // Every admin answer, errors included, describes a moment: never cached.
    resp.headers_mut()
        .insert(CACHE_CONTROL, HeaderValue::from_static("no-store"));
    // And says it is the admin listener's, for the command line to check before it sends
    // a token.
    resp.headers_mut().insert(
        http::HeaderName::from_static(crate::reply::ADMIN_IDENTITY),
        HeaderValue::from_static("1"),
    );
    Ok(resp)
}

async fn route(
    shared: &Arc<Shared>,
    method: &Method,
    path: &str,
    req: Request<Incoming>,
) -> Response<Body> {
    match (method, path) {
        (&Method::GET, "/healthz") => text(StatusCode::OK, "text/plain", "ok\n"),
        (&Method::GET, "/readyz") => match shared.limiter.unready() {
            None => text(StatusCode::OK, "text/plain", "ready\n"),
            Some(why) => text(
                StatusCode::SERVICE_UNAVAILABLE,
                "text/plain",
                format!("{why}\n"),
            ),
        },
        (&Method::GET, "/metrics") => {
            // Set at the scrape: a breaker closed by the background probe moves no request.
            if let Some(r) = shared.limiter.remote() {
                shared
                    .metrics
                    .store_breaker_open
                    .set(i64::from(r.breakers.any_open()));
            }
            if let Some(m) = shared.limiter.memory() {
                shared
                    .metrics
                    .keys_tracked
                    .set(i64::try_from(m.len()).unwrap_or(i64::MAX));
            }
            text(
                StatusCode::OK,
                "application/openmetrics-text; version=1.0.0; charset=utf-8",
                shared.metrics.encode(),
            )
        }
        (&Method::GET, "/") => text(StatusCode::OK, "text/html; charset=utf-8", STATUS_PAGE),
        (&Method::GET, "/admin/config") => json_ok(config_json(shared)),
        (&Method::GET, "/admin/stats") => json_ok(stats_json(shared)),
        (&Method::POST, "/admin/reload") => match (shared.reload)(shared).await {
            Ok(report) => json_ok(json!({"status": "ok", "report": report})),
            Err(e) => json_status(
                StatusCode::UNPROCESSABLE_ENTITY,
                json!({"status": "error", "errors": e.to_string().lines().collect::<Vec<_>>()}),
            ),
        },
        (&Method::GET, "/admin/top") => super::top::handle(shared, req.uri().query()).await,
        (&Method::POST, p) if p.starts_with("/admin/reset/") => {
            reset_json(shared, &p["/admin/reset/".len()..]).await
        }
        (&Method::GET, p) if p.starts_with("/admin/limits/") => {
            limit_json(shared, &p["/admin/limits/".len()..]).await
        }
        (&Method::GET, "/admin/overrides" | "/admin/overrides/") => {
            super::overrides_list::handle(shared, req.uri().query())
        }
        (_, "/admin/overrides") => super::overrides::handle(shared, method, "", req).await,
        (_, p) if p.starts_with("/admin/overrides/") => {
            super::overrides::handle(shared, method, &p["/admin/overrides/".len()..], req).await
        }
        (_, p) => match allowed_methods(p) {
            Some(allow) => method_not_allowed(allow),
            None => json_error(StatusCode::NOT_FOUND, "not_found", &[]),
        },
    }
}

/// The methods a path of the admin API takes (beside the overrides', which answer their
/// own 405), for the 405 of another.
fn allowed_methods(path: &str) -> Option<&'static str> {
    match path {
        "/healthz" | "/readyz" | "/metrics" | "/" | "/admin/config" | "/admin/stats"
        | "/admin/top" => Some("GET"),
        "/admin/reload" => Some("POST"),
        p if p.starts_with("/admin/reset/") => Some("POST"),
        p if p.starts_with("/admin/limits/") => Some("GET"),
        _ => None,
    }
}

/// A policy of the running config and one key's parts.
type NamedKey = (Arc<crate::config::Policy>, Vec<String>);

/// `{policy}/{part}[/{part}…]` of the running config: the policy and the key's parts,
/// or the answer that says why not (404 unknown policy, 400 a key of the wrong shape).
fn named_key(shared: &Shared, rest: &str) -> Result<NamedKey, Box<Response<Body>>> {
    let (policy_name, mut parts) = key_path(rest)?;
    let config = shared.config();
    let Some(policy) = config.policy(&policy_name) else {
        return Err(Box::new(json_error(
            StatusCode::NOT_FOUND,
            "unknown_policy",
            &[("policy", policy_name.into())],
        )));
    };
    if let Err(expected) = crate::store::keys::key_shape(policy, &parts) {
        return Err(Box::new(json_error(
            StatusCode::BAD_REQUEST,
            "bad_key",
            &[("expected_parts", expected.into())],
        )));
    }
    crate::store::keys::spelled_key(policy, &mut parts);
    Ok((policy.clone(), parts))
}

/// `POST /admin/reset/{policy}/{part}[/{part}…]`: forgets one key's usage or debt.
async fn reset_json(shared: &Shared, rest: &str) -> Response<Body> {
    let (policy, parts) = match named_key(shared, rest) {
        Ok(named) => named,
        Err(refused) => return *refused,
    };
    let policy = &*policy;
    if policy.kind().held_in_flight() {
        return json_error(
            StatusCode::CONFLICT,
            "not_resettable",
            &[(
                "detail",
                "the key's state is its requests in flight, which end on their own".into(),
            )],
        );
    }
    let key = shared.limiter.keys().key_of(&policy.name, &parts);
    // A quota key's window end, placed on the local clock as a decision places it
    // (`RequestTiers::place_windows`): in memory the key is reset to no usage there (a
    // key of a full area would otherwise read at the area's floor).
    let unix_now = shared.clock.unix_ns_at(shared.clock.now_ns());
    let window = policy
        .rate()
        .and_then(|r| r.calendar.as_deref())
        .map(|calendar| calendar.bounds(unix_now));
    let quota_end = window.map(|w| shared.clock.mono_ns_at(w.end_at(unix_now)));
    // A quota's settle can move the key until the window after the current one ends.
    let next_end_in = window.map(|w| {
        let secs = u64::try_from(w.next).unwrap_or(0);
        Duration::from_secs(secs.saturating_sub(unix_now / 1_000_000_000))
    });
    let hold = marker_hold(policy, &parts, next_end_in);
    let now = shared.clock.now_ns();
    match shared.limiter.forget(&key, quota_end, (hold, now)).await {
        Ok(()) => {
            let mut answer =
                serde_json::json!({"status": "reset", "policy": policy.name, "key": parts});
            if let Some(remote) = shared.limiter.remote() {
                // The other gateways may remember a refusal of this key: tell them, and
                // the caller whether they were told.
                answer["fleet"] = match crate::overrides::announce_reset(remote).await {
                    Ok(()) => "told".into(),
                    Err(e) => {
                        tracing::warn!(error = %e, "a key was reset in Redis, but the other gateways were not told: they may refuse it from memory until its wait passes");
                        answer["fleet_detail"] = format!("the other gateways were not told ({e}): they may refuse the key from memory until its wait passes; reset again").into();
                        "not_told".into()
                    }
                };
            }
            super::answer::tell_quota_streams(
                shared,
                (&policy.name, &parts),
                crate::proxy::snapshot::KeyChange::Reset,
            );
            tracing::info!(policy = %policy.name, "a key's state was reset through the admin API");
            json_ok(answer)
        }
        Err(e) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            &[("detail", e.to_string().into())],
        ),
    }
}

/// How long after now a request of `policy`'s key decided before now may still move it:
/// a reset's marker in Redis is kept that long (`Limiter::forget`). A settled quota's
/// refund ends with the window after the current one (`next_end_in`, and a minute); a
/// settled rate's with its reservation's time (the key's burst and debt bound), kept
/// twice over and at least an hour, for an override that raised it since; otherwise a
/// Cluster request's rollback, within a minute.
fn marker_hold(policy: &Policy, parts: &[String], next_end_in: Option<Duration>) -> Duration {
    let minute = Duration::from_secs(60);
    let Some((rate, settle)) = policy.rate().and_then(|r| Some((r, r.settle.as_ref()?))) else {
        return minute;
    };
    if let Some(left) = next_end_in {
        return left.saturating_add(minute);
    }
    let quota = rate.quota_for(parts.first().map(String::as_str));
    // The bound and one unit more, twice over.
    let bound = settle
        .bound_ns(quota.tolerance_ns(), quota.interval_ns())
        .saturating_add(quota.interval_ns());
    Duration::from_nanos(bound.saturating_mul(2)).max(Duration::from_secs(3600))
}

/// `GET /admin/limits/{policy}/{part}[/{part}…]`: one path segment per key source.
async fn limit_json(shared: &Shared, rest: &str) -> Response<Body> {
    let (policy, parts) = match named_key(shared, rest) {
        Ok(named) => named,
        Err(refused) => return *refused,
    };
    let policy = &*policy;
    match super::key_state::key_state(shared, policy, &parts).await {
        Ok(mut fields) => {
            if let Some(out) = fields.as_object_mut() {
                out.insert("policy".to_owned(), policy.name.as_str().into());
                out.insert("key".to_owned(), parts.into());
            }
            json_ok(fields)
        }
        Err(e) => json_error(
            StatusCode::SERVICE_UNAVAILABLE,
            "store_unavailable",
            &[("detail", e.to_string().into())],
        ),
    }
}

/// The running configuration; nothing secret is in it except store URLs, which are redacted.
fn config_json(shared: &Shared) -> serde_json::Value {
    let c = shared.config();
    let (redis_urls, sentinel_master) = match &c.store.backend {
        crate::config::Backend::Redis { urls, sentinel, .. } => (
            urls.iter().map(|u| crate::config::redact_url(u)).collect(),
            sentinel.as_ref().map(|s| s.name.clone()),
        ),
        crate::config::Backend::Memory => (Vec::new(), None),
    };
    json!({
        "path": c.path.display().to_string(),
        "server": {
            "listen": c.server.listen.to_string(),
            "admin_listen": c.server.admin_listen.map(|a| a.to_string()),
            "tls": c.server.tls.is_some(),
            "max_connections": c.server.max_connections,
            // Whether one is required, never the token itself.
            "admin_token": c.server.admin_token.is_some(),
            "overrides_file": c.server.overrides_file.as_ref().map(|p| p.display().to_string()),
        },
        "store": {
            "backend": if redis_urls.is_empty() { "memory" } else { "redis" },
            "urls": redis_urls,
            "sentinel_master": sentinel_master,
            "timeout_ms": c.store.timeout.as_millis() as u64,
            "on_error": c.store.on_error.as_str(),
            "max_keys": c.store.max_keys,
        },
        "upstreams": c.upstreams.iter().map(|u| json!({
            "name": u.name,
            "targets": u.targets.iter().map(|t| t.to_string()).collect::<Vec<_>>(),
        })).collect::<Vec<_>>(),
        "policies": c.policies.iter().map(|p| policy_json(shared, p)).collect::<Vec<_>>(),
        "routes": c.routes.iter().map(|r| json!({
            "name": r.name,
            "path": r.path,
            "host": r.host,
            "upstream": r.upstream.name,
            "policies": r.policies.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(),
            "cost": r.cost,
        })).collect::<Vec<_>>(),
    })
}

/// Cumulative decision counts per route and tier, for the status page's live rates.
fn stats_json(shared: &Shared) -> serde_json::Value {
    let snapshot = shared.snapshot.load_full();
    let routes: Vec<_> = snapshot
        .config
        .routes
        .iter()
        .zip(snapshot.routes.iter())
        .map(|(route, runtime)| {
            let counters = runtime.policies.iter().map(|p| &p.counters);
            json!({
                "route": route.name,
                "tiers": route.policies.iter().zip(counters).map(|(p, c)| json!({
                    "policy": p.name,
                    "admitted": c.admitted.get(),
                    "denied": c.denied.get(),
                    "shadow_denied": c.shadow_denied.get(),
                    "store_unavailable": c.store_unavailable.get(),
                    "store_unavailable_allowed": c.store_unavailable_allowed.get(),
                })).collect::<Vec<_>>(),
            })
        })
        .collect();
    json!({
        "routes": routes,
        "keys_tracked": shared.limiter.memory().map(|m| m.len()),
        "store_ready": shared.limiter.ready(),
        "store_events": shared.limiter.remote().map(|r| r.events.recent()).unwrap_or_default(),
        "fleet_share": shared.limiter.remote().map(|r| r.fleet_share()),
        "store": shared.limiter.remote().map_or_else(
            || json!({"backend": "memory", "ready": true}),
            |r| crate::store::redis::health::report(r),
        ),
    })
}

/// One policy in `/admin/config`: its name, key and mode, then its kind's numbers.
fn policy_json(shared: &Shared, p: &Arc<crate::config::Policy>) -> serde_json::Value {
    let mut out = json!({
        "name": p.name,
        "key": p.key.iter().map(|k| k.to_string()).collect::<Vec<_>>(),
        "mode": p.mode.as_str(),
        "max_delay_ms": p.max_delay.as_millis() as u64,
        "overrides": p.override_count(),
    });
    let unix_ns = shared.clock.unix_ns_at(shared.clock.now_ns());
    if let (Some(out), serde_json::Value::Object(fields)) =
        (out.as_object_mut(), p.kind.describe(unix_ns))
    {
        out.extend(fields);
    }
    out
}
