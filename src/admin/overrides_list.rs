//! `GET /admin/overrides[?policy=NAME][&limit=N][&after=POLICY/KEY…]`: the runtime
//! overrides set, in order (policy, then key) — all of them, or a page. A page cut short
//! names where the next one starts (`next`), so a fleet's 100,000 overrides can be read
//! a thousand at a time instead of as one answer of tens of megabytes.

use http::{Response, StatusCode};
use percent_encoding::{utf8_percent_encode, NON_ALPHANUMERIC};
use serde_json::json;

use super::answer::{json_ok, key_path};
use crate::overrides::{OverrideId, Page};
use crate::proxy::snapshot::Shared;
use crate::reply::{json_error, Body};

/// The most a page may hold.
const MAX_LIMIT: usize = 10_000;

pub fn handle(shared: &Shared, query: Option<&str>) -> Response<Body> {
    let page = match page_of(query.unwrap_or_default()) {
        Ok(page) => page,
        Err(refused) => return *refused,
    };
    let now_ms = shared.clock.wall_ms();
    let (listed, last) = shared.overrides.list(&shared.config(), now_ms, &page);
    match last {
        Some(last) => json_ok(json!({ "overrides": listed, "next": next_page(&page, &last) })),
        None => json_ok(json!({ "overrides": listed })),
    }
}

/// The page a query asks for; a `400` saying what is wrong with it.
fn page_of(query: &str) -> Result<Page, Box<Response<Body>>> {
    let mut page = Page::default();
    for pair in query.split('&').filter(|p| !p.is_empty()) {
        let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
        match name {
            "policy" => {
                let (policy, _) = key_path(value)?;
                page.policy = Some(policy);
            }
            "limit" => match value.parse::<usize>() {
                Ok(n) if (1..=MAX_LIMIT).contains(&n) => page.limit = Some(n),
                _ => {
                    let detail = format!("limit is a whole number from 1 to {MAX_LIMIT}");
                    return Err(bad("bad_limit", detail));
                }
            },
            // Split at `/` before decoding, as the key paths are: a part may hold a `/`.
            "after" => {
                let (policy, key) = key_path(value)?;
                page.after = Some(OverrideId { policy, key });
            }
            other => {
                let detail = format!(
                    "`{other}` is not a parameter of /admin/overrides: policy, limit and after are"
                );
                return Err(bad("unknown_parameter", detail));
            }
        }
    }
    Ok(page)
}

fn bad(code: &str, detail: String) -> Box<Response<Body>> {
    Box::new(json_error(
        StatusCode::BAD_REQUEST,
        code,
        &[("detail", detail.into())],
    ))
}

/// The path of the page after the one that ended with `last`, asking as `page` did.
fn next_page(page: &Page, last: &OverrideId) -> String {
    let segment = |s: &str| utf8_percent_encode(s, NON_ALPHANUMERIC).to_string();
    let mut after = segment(&last.policy);
    for part in &last.key {
        after.push('/');
        after.push_str(&segment(part));
    }
    let mut next = format!("/admin/overrides?after={after}");
    if let Some(limit) = page.limit {
        next.push_str(&format!("&limit={limit}"));
    }
    if let Some(policy) = &page.policy {
        next.push_str(&format!("&policy={}", segment(policy)));
    }
    next
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_query_names_its_page_and_the_next_page_reads_back_as_it() {
        let page = page_of("policy=tenant&limit=2").expect("a page");
        assert_eq!(page.policy.as_deref(), Some("tenant"));
        assert_eq!(page.limit, Some(2));
        let last = OverrideId {
            policy: "tenant".into(),
            key: vec!["a/b&c=d".into(), "caf\u{e9}".into()],
        };
        let next = next_page(&page, &last);
        assert_eq!(
            next,
            "/admin/overrides?after=tenant/a%2Fb%26c%3Dd/caf%C3%A9&limit=2&policy=tenant"
        );
        let again = page_of(next.split_once('?').expect("a query").1).expect("a page");
        assert_eq!(again.after, Some(last));
        assert_eq!(again.limit, Some(2));
        assert_eq!(again.policy.as_deref(), Some("tenant"));
    }

    #[tokio::test]
    async fn a_bad_query_is_refused_saying_why() {
        use http_body_util::BodyExt;
        for (query, code) in [
            ("limit=0", "bad_limit"),
            ("limit=10001", "bad_limit"),
            ("limit=ten", "bad_limit"),
            ("limt=10", "unknown_parameter"),
            ("after=tenant/caf%E9", "key_not_text"),
            ("policy=caf%E9", "key_not_text"),
        ] {
            let refused = page_of(query).expect_err(query);
            assert_eq!(refused.status(), StatusCode::BAD_REQUEST, "{query}");
            let body = refused.into_body().collect().await.expect("a body");
            let body: serde_json::Value = serde_json::from_slice(&body.to_bytes()).expect("JSON");
            assert_eq!(body["error"], code, "{query}");
        }
    }
}
