//! docs/cookbook.md's first task run as written against the binary: its config, the
//! answers it says a client sees, the access log line, the admin API's key state, the
//! metric query it names, and the runtime override of task 5; and task 2, the login
//! example keyed by its form's username.

use std::time::Duration;

use crate::support::*;

/// The first fenced block of `lang` in the cookbook after `heading`.
fn block_after(doc: &str, heading: &str, lang: &str) -> String {
    let from = doc
        .find(heading)
        .unwrap_or_else(|| panic!("no {heading:?}"));
    let fence = format!("```{lang}\n");
    let start = doc[from..].find(&fence).expect("a block") + from + fence.len();
    let end = doc[start..].find("```").expect("closed") + start;
    doc[start..end].to_owned()
}

/// A config of the cookbook's on free ports, in front of `up` (its listeners on 8080 and
/// 9901, its upstream on 3000).
fn on_free_ports(config: &str, up: &Upstream) -> String {
    config
        .replace("127.0.0.1:8080", "127.0.0.1:0")
        .replace("127.0.0.1:9901", "127.0.0.1:0")
        .replace("http://127.0.0.1:3000", &up.url())
}

#[tokio::test]
async fn the_cookbooks_per_key_limit_answers_as_it_says() {
    let doc = std::fs::read_to_string("docs/cookbook.md").expect("cookbook");
    let up = Upstream::start().await;
    let config = on_free_ports(&block_after(&doc, "## 1. A limit per API key", "toml"), &up);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("api-key.toml");
    std::fs::write(&path, &config).expect("write");
    let (passed, said) = check_config(&path);
    assert!(passed, "{said}");
    let gw = Process::run(&path);
    let url = format!("http://{}/v1/items", gw.addr);

    let first = get(&url, &[("x-api-key", "k-123")]).await;
    assert_eq!(first.status, 200);
    assert_eq!(
        first.header("ratelimit-policy"),
        Some("\"api-key\";q=200;w=2")
    );
    assert_eq!(first.num("x-ratelimit-remaining"), 199);
    let anonymous = get(&url, &[]).await;
    assert_eq!(anonymous.status, 400);
    assert_eq!(
        anonymous.json(),
        serde_json::json!({"error":"missing_key","policy":"api-key"})
    );
    let refused = spend_the_burst(&url).await;
    assert!(refused.header("retry-after").is_some());

    let line = eventually(Duration::from_secs(5), || {
        gw.log().lines().any(|l| {
            l.contains("tollgate::access")
                && l.contains("route=\"api\"")
                && l.contains("decision=\"denied\"")
                && l.contains("policy=\"api-key\"")
                && l.contains("key=[\"k-123\"]")
                && l.contains("status=429")
        })
    })
    .await;
    assert!(
        line,
        "the access log line the cookbook shows:\n{}",
        gw.log()
    );

    let admin = gw.admin.expect("admin");
    let state = get(&format!("http://{admin}/admin/limits/api-key/k-123"), &[])
        .await
        .json();
    for field in ["remaining", "next_admit_ms", "tracked"] {
        assert!(state.get(field).is_some(), "{field}: {state}");
    }
    let metrics = get(&format!("http://{admin}/metrics"), &[]).await.text();
    let denied = metric(
        &metrics,
        "tollgate_decisions_total{route=\"api\",policy=\"api-key\",outcome=\"denied\"}",
    );
    assert!(
        denied >= 1.0,
        "the cookbook's query finds the refusals: {denied}"
    );

    task_five(admin, &url).await;
}

/// Spends key `k-123`'s burst until a refusal, which it returns. In batches of 50 at once:
/// one at a time, a busy machine may send slower than the key refills (100 a second).
async fn spend_the_burst(url: &str) -> Got {
    let mut refused = None;
    for _ in 0..40 {
        let batch: Vec<_> = (0..50)
            .map(|_| {
                let url = url.to_owned();
                tokio::spawn(async move { get(&url, &[("x-api-key", "k-123")]).await })
            })
            .collect();
        for r in batch {
            let r = r.await.expect("request");
            if r.status == 429 && refused.is_none() {
                refused = Some(r);
            }
        }
        if refused.is_some() {
            break;
        }
    }
    refused.expect("a 429 within 2,000 requests of a 200 burst")
}

/// Task 5: the runtime override, as its curl sends it, applies at once.
async fn task_five(admin: std::net::SocketAddr, url: &str) {
    // Task 5: the runtime override, as its curl sends it.
    let body = r#"{"limit": 1000, "period": "1s", "burst": 2000, "ttl": "2h"}"#;
    let put = send(
        &http1(),
        "PUT",
        &format!("http://{admin}/admin/overrides/api-key/k-123"),
        &[],
        body.as_bytes().to_vec().leak(),
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text());
    let answer = put.json();
    assert_eq!(answer["status"], "ok", "{answer}");
    assert_eq!(answer["expires_in_ms"], 7_200_000, "{answer}");
    let after = get(url, &[("x-api-key", "k-123")]).await;
    assert_eq!(after.status, 200, "the override applies at once");
}

/// Task 2: examples/login-bruteforce.toml keyed by the login form's own `username` field.
#[tokio::test]
async fn the_cookbooks_login_limit_reads_the_forms_username() {
    let doc = std::fs::read_to_string("docs/cookbook.md").expect("cookbook");
    let curl = block_after(&doc, "## 2. Protect a login", "sh");
    assert!(curl.contains("-d 'username=alice&password=x'"), "{curl}");
    let up = Upstream::start().await;
    let example = std::fs::read_to_string("examples/login-bruteforce.toml").expect("example");
    let config = on_free_ports(&example, &up);
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("login.toml");
    std::fs::write(&path, &config).expect("write");
    let gw = Process::run(&path);
    let url = format!("http://{}/login", gw.addr);
    let form = |from: &str, body: &str| {
        let (url, from) = (url.clone(), from.to_owned());
        let body = bytes::Bytes::from(body.to_owned());
        async move {
            let headers = [
                ("content-type", "application/x-www-form-urlencoded"),
                ("x-forwarded-for", from.as_str()),
            ];
            send_bytes(&http1(), "POST", &url, &headers, body).await
        }
    };
    // curl -d, seven times from one address: five at once, then two minutes apart.
    let mut statuses = Vec::new();
    for _ in 0..7 {
        let r = form("192.0.2.1", "username=alice&password=x").await;
        if r.status == 429 {
            assert_eq!(r.header("retry-after"), Some("120"));
        }
        statuses.push(r.status.as_u16());
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429]);
    // From a new address each time (a botnet): ten tries at `bob` in all, whatever body
    // or spelling carries the name.
    for i in 0..10 {
        let r = form(&format!("198.51.100.{i}"), "password=x&username=bob").await;
        assert_eq!(r.status, 200, "try {i}: {}", r.text());
    }
    let r = form("203.0.113.1", "username%5B%5D=bob&password=y").await;
    assert_eq!(r.status, 429, "{}", r.text());
    assert_eq!(r.json()["policy"], "login-user");
    // No username: refused, nothing charged.
    let r = form("203.0.113.2", "password=x").await;
    assert_eq!(r.status, 400, "{}", r.text());
    assert_eq!(r.json()["error"], "missing_key");
}
