//! `GET /admin/top?policy=NAME&n=N`: who is limited right now on this gateway — the keys
//! its tiers decided most often over `top_window`, ranked by the refusals surely counted
//! (`refused_at_least`; `refused_at_most` adds what may have gone uncounted), each with its
//! current state (remaining, next admit) as `/admin/limits` gives it.

use http::{Response, StatusCode};
use serde_json::json;

use crate::proxy::snapshot::Shared;
use crate::reply::{json_error, Body};

/// Keys shown when `n` is not given, and at most.
const DEFAULT_N: usize = 10;
const MAX_N: usize = 1_000;

pub async fn handle(shared: &Shared, query: Option<&str>) -> Response<Body> {
    let (mut policy, mut n) = (None, DEFAULT_N);
    for pair in query
        .unwrap_or_default()
        .split('&')
        .filter(|p| !p.is_empty())
    {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        let value = percent_encoding::percent_decode_str(value)
            .decode_utf8_lossy()
            .into_owned();
        match name {
            "policy" if !value.is_empty() => policy = Some(value),
            "n" => match value.parse::<usize>() {
                Ok(v) if (1..=MAX_N).contains(&v) => n = v,
                _ => {
                    return json_error(
                        StatusCode::BAD_REQUEST,
                        "bad_n",
                        &[(
                            "detail",
                            format!("n is a whole number from 1 to {MAX_N}").into(),
                        )],
                    )
                }
            },
            _ => {}
        }
    }
    let snapshot = shared.snapshot.load_full();
    let config = &snapshot.config;
    if let Some(p) = &policy {
        if config.policy(p).is_none() {
            return json_error(
                StatusCode::NOT_FOUND,
                "unknown_policy",
                &[("policy", p.as_str().into())],
            );
        }
    }
    let Some(top) = &snapshot.top else {
        return with_meta(crate::admin::answer::json_ok(json!([])), None);
    };
    let now = shared.clock.now_ns();
    let name_of = |route: usize, position: usize| tier_name(config, route, position);
    let keys = top.top(policy.as_deref(), n, now, name_of);
    let mut out = Vec::with_capacity(keys.len());
    for k in keys {
        out.push(row(shared, config, k).await);
    }
    with_meta(
        crate::admin::answer::json_ok(serde_json::Value::Array(out)),
        Some(top.covered_s(now)),
    )
}

/// One key's row: its counts and, for a key the admin API can name, its state now.
async fn row(
    shared: &Shared,
    config: &crate::config::Config,
    k: crate::top::TopKey,
) -> serde_json::Value {
    // The key new keys share while the store is full of keys that owe time: its
    // refusals are no one client's, and the text it was first counted with is the
    // new key that met it, not a key of its own.
    let policy = config.policy(&k.policy);
    let keys = shared.limiter.keys();
    let overflow = policy.is_some() && keys.policy(&k.policy).overflow == k.hash();
    // The parts shown name the key counted only where its bytes are their text: a key
    // value that is not UTF-8 is shown with U+FFFD, which names another key.
    let nameable = policy.is_some_and(|p| {
        !overflow
            && !k.truncated
            && crate::store::keys::key_shape(p, &k.parts).is_ok()
            && keys.hash_of(&k.policy, &k.parts) == k.hash()
    });
    let state = match policy {
        Some(p) if nameable => super::key_state::key_state(shared, p, &k.parts).await.ok(),
        _ => None,
    };
    let parts = if overflow { Vec::new() } else { k.parts };
    json!({
        "policy": k.policy,
        "key": parts,
        "overflow": overflow,
        "truncated": k.truncated,
        "nameable": nameable,
        "refused": k.refused,
        "refused_at_least": k.refused,
        "refused_at_most": k.refused.saturating_add(k.error),
        "admitted": k.admitted,
        "uncounted_at_most": k.error,
        "remaining": state.as_ref().and_then(|s| s.get("remaining").or_else(|| s.get("free")).cloned()),
        "next_admit_ms": state.as_ref().and_then(|s| s.get("next_admit_ms").cloned()),
        "last_refused": (k.last_refused > 0)
            .then(|| crate::clock::rfc3339(shared.clock.unix_ns_at(k.last_refused))),
    })
}

/// The answer is the array of keys (the contract's shape); what describes it goes in
/// headers: the seconds the counts cover (the window, less after a start or a reload;
/// `off` when top keys are off) and the scope.
fn with_meta(mut response: Response<Body>, window_s: Option<u64>) -> Response<Body> {
    let headers = response.headers_mut();
    let window = window_s.map_or_else(|| "off".to_owned(), |s| s.to_string());
    if let Ok(v) = http::HeaderValue::from_str(&window) {
        headers.insert(WINDOW_HEADER, v);
    }
    headers.insert(
        "x-tollgate-top-scope",
        http::HeaderValue::from_static("this gateway"),
    );
    response
}

/// The header naming the window the counts cover (`off`: top keys are off).
pub const WINDOW_HEADER: &str = "x-tollgate-top-window";

/// The policy of a sketch's tier: a route's, past the routes a rate limit service rule's,
/// then a quota service bucket's (see `Snapshot::build`).
fn tier_name(config: &crate::config::Config, route: usize, position: usize) -> String {
    if let Some(r) = config.routes.get(route) {
        return r.policies[position].name.clone();
    }
    let rls = config.rls.as_ref();
    let policy = match route - config.routes.len() {
        0 => rls.and_then(|rls| rls.rules.get(position)?.policy.as_ref()),
        _ => rls.and_then(|rls| rls.buckets.get(position)?.rule.policy.as_ref()),
    };
    policy.map_or_else(String::new, |p| p.name.clone())
}
