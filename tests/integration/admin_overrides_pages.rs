//! `GET /admin/overrides` a page at a time: the pages, followed by their `next`, list
//! every override once and in the whole list's order, also when the override a page
//! ended with is removed before the next page is asked for; `policy` keeps to one
//! policy's, across pages too; a bad query is a 400 saying what is wrong.

use serde_json::Value;

use super::admin::{delete, put_ok};
use crate::support::*;

fn config() -> String {
    Fixture::new()
        .policy("tenant", "header:x-tenant-id", 1, "1s", 3)
        .policy("user", "header:x-user", 1, "1s", 3)
        .route("api", "/", "api", &["tenant", "user"])
        .build()
}

/// The (policy, key part) of each override in `answer`'s list.
fn ids(answer: &Value) -> Vec<(String, String)> {
    let list = answer["overrides"].as_array().expect("a list");
    list.iter()
        .map(|o| {
            let policy = o["policy"].as_str().expect("a policy");
            (
                policy.to_owned(),
                o["key"][0].as_str().expect("a key").to_owned(),
            )
        })
        .collect()
}

/// Every page from `first` on, following `next`: what each listed.
async fn pages(gw: &TestGateway, first: &str) -> Vec<Vec<(String, String)>> {
    let (mut out, mut path) = (Vec::new(), Some(first.to_owned()));
    while let Some(at) = path.take() {
        let got = get(&gw.admin_url(&at), &[]).await;
        assert_eq!(got.status, 200, "{at}: {}", got.text());
        let answer = got.json();
        out.push(ids(&answer));
        path = answer["next"].as_str().map(str::to_owned);
        assert!(out.len() <= 10, "the pages go on: {out:?}");
    }
    out
}

fn id(policy: &str, key: &str) -> (String, String) {
    (policy.to_owned(), key.to_owned())
}

#[tokio::test]
async fn the_pages_list_every_override_once_in_order() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(), &up.url()).await;
    // A key part holding a slash, an ampersand and an equals sign: the cursor must carry it.
    for path in [
        "/admin/overrides/user/u2",
        "/admin/overrides/tenant/z",
        "/admin/overrides/tenant/b%2Fc%26d%3De",
        "/admin/overrides/user/u1",
        "/admin/overrides/tenant/a",
    ] {
        put_ok(&gw.admin_url(path), br#"{"burst": 10}"#).await;
    }
    let whole = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    let all = vec![
        id("tenant", "a"),
        id("tenant", "b/c&d=e"),
        id("tenant", "z"),
        id("user", "u1"),
        id("user", "u2"),
    ];
    assert_eq!(ids(&whole), all, "{whole}");
    assert!(
        whole.get("next").is_none(),
        "the whole list has no next page"
    );

    let by_two = pages(&gw, "/admin/overrides?limit=2").await;
    assert_eq!(by_two.len(), 3, "{by_two:?}");
    assert_eq!(by_two.concat(), all);

    // Exactly as many as the limit: no empty page after it.
    let by_five = pages(&gw, "/admin/overrides?limit=5").await;
    assert_eq!(by_five, vec![all.clone()]);

    let users = pages(&gw, "/admin/overrides?policy=user&limit=1").await;
    assert_eq!(users, vec![vec![id("user", "u1")], vec![id("user", "u2")]]);
    let tenants = pages(&gw, "/admin/overrides?policy=tenant").await;
    assert_eq!(tenants, vec![all[..3].to_vec()]);
    let none = pages(&gw, "/admin/overrides?policy=nobody").await;
    assert_eq!(none, vec![Vec::new()]);
}

#[tokio::test]
async fn a_page_goes_on_after_its_last_override_is_removed() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(), &up.url()).await;
    for path in [
        "/admin/overrides/tenant/a",
        "/admin/overrides/tenant/b",
        "/admin/overrides/tenant/c",
    ] {
        put_ok(&gw.admin_url(path), br#"{"burst": 10}"#).await;
    }
    let first = get(&gw.admin_url("/admin/overrides?limit=2"), &[])
        .await
        .json();
    assert_eq!(ids(&first), vec![id("tenant", "a"), id("tenant", "b")]);
    let next = first["next"].as_str().expect("a next page").to_owned();
    let removed = delete(&gw.admin_url("/admin/overrides/tenant/b")).await;
    assert_eq!(removed.status, 200, "{}", removed.text());
    let second = get(&gw.admin_url(&next), &[]).await.json();
    assert_eq!(ids(&second), vec![id("tenant", "c")], "{second}");
    assert!(second.get("next").is_none(), "{second}");
}

#[tokio::test]
async fn a_bad_page_query_is_refused_saying_why() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&config(), &up.url()).await;
    for (query, code) in [
        ("limit=0", "bad_limit"),
        ("limit=10001", "bad_limit"),
        ("limit=-1", "bad_limit"),
        ("limt=10", "unknown_parameter"),
        ("after=tenant/caf%E9", "key_not_text"),
    ] {
        let got = get(&gw.admin_url(&format!("/admin/overrides?{query}")), &[]).await;
        assert_eq!(got.status, 400, "{query}: {}", got.text());
        assert_eq!(got.json()["error"], code, "{query}");
    }
}
