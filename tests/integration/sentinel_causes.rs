//! A Sentinel store that finds no master says why, from the first failed call: what the
//! Sentinels said (they refused the credentials, they monitor no master of that name)
//! and what the network did (none answers) are three causes an operator acts on
//! differently, in `/readyz`, `/admin/stats`, the metrics and the log.

use std::time::Duration;

use crate::support::*;

/// Starts the binary on `store` (a `[store]` table's body) and waits until its store's
/// last error names `cause`; returns the store's state then and `/readyz`'s answer.
async fn cause_of(store: String, cause: &str) -> (serde_json::Value, Got, String) {
    let up = Upstream::start().await;
    let (_dir, gw) = super::store_health::gateway_on(store, &up);
    let admin = gw.admin.expect("admin");
    let stats = || async move {
        get(&format!("http://{admin}/admin/stats"), &[])
            .await
            .json()["store"]
            .clone()
    };
    let named = eventually_async(Duration::from_secs(20), || async {
        // A request fails as the calls do.
        get(&format!("http://{}/", gw.addr), &[("x-k", "a")]).await;
        stats().await["last_error"]["cause"] == cause
    })
    .await;
    let store = stats().await;
    assert!(named, "not {cause}: {store}\n{}", gw.log());
    let ready = get(&format!("http://{admin}/readyz"), &[]).await;
    (store, ready, gw.log())
}

fn sentinel_store(urls: &str, master: &str) -> String {
    format!(
        "backend = \"redis\"\nsentinels = {urls}\nmaster = \"{master}\"\ntimeout = \"100ms\"\nkey_secret = \"a-fleet-secret-of-enough-bytes\"\n"
    )
}

#[tokio::test]
async fn a_master_name_the_sentinels_do_not_monitor_is_named_so() {
    let set = SentinelSet::start();
    let store = sentinel_store(&set.urls_toml(), "no-such-master");
    let (state, ready, log) = cause_of(store, "unknown_master").await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert!(ready.text().contains("unknown_master"), "{}", ready.text());
    let message = state["last_error"]["message"].as_str().unwrap_or_default();
    assert!(message.contains("\"no-such-master\""), "{state}");
    assert!(
        !log.contains("no Redis Sentinel answers"),
        "they did: {log}"
    );
}

#[tokio::test]
async fn sentinel_credentials_refused_are_named_so() {
    let set = SentinelSet::start();
    // The Sentinels have no password: each refuses the one sent.
    let urls = set
        .urls_toml()
        .replace("redis://", "redis://:wrong-password@");
    let (_state, ready, log) = cause_of(sentinel_store(&urls, MASTER), "authentication").await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert!(ready.text().contains("authentication"), "{}", ready.text());
    assert!(!log.contains("wrong-password"), "no credentials in the log");
}

#[tokio::test]
async fn sentinels_that_do_not_listen_are_named_so() {
    let urls = format!("[\"redis://127.0.0.1:{}\"]", free_port());
    let (_state, ready, log) = cause_of(sentinel_store(&urls, MASTER), "connection_refused").await;
    assert_eq!(ready.status, 503, "{}", ready.text());
    assert!(log.contains("no Redis Sentinel answers"), "{log}");
}
