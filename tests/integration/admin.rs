//! The admin API's guard (the bearer token), through the real admin listener; its runtime
//! overrides are `admin_overrides.rs` (applied, refused, reloaded) and
//! `admin_overrides_kept.rs` (across restarts and a fleet).

use crate::support::*;

pub(super) const TOKEN: &str = "s3cret-token-for-tests-0123456789";

pub(super) fn bearer(token: &str) -> String {
    format!("Bearer {token}")
}

/// Each tenant: 3 at once, then one a second; the admin API guarded by `server` lines.
pub(super) fn tenant_config(server: &str) -> String {
    Fixture::new()
        .server(server)
        .policy("tenant", "header:x-tenant-id", 1, "1s", 3)
        .route("api", "/", "api", &["tenant"])
        .build()
}

pub(super) async fn delete(url: &str) -> Got {
    send(&http1(), "DELETE", url, &[], b"").await
}

/// `POST /admin/reload` on `gw`, without a token.
pub(super) async fn reload(gw: &TestGateway) -> Got {
    send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await
}

/// A `PUT` without a token that must succeed.
pub(super) async fn put_ok(url: &str, body: &'static [u8]) -> Got {
    let put = put_json(url, None, body).await;
    assert_eq!(put.status, 200, "{}", put.text());
    put
}

pub(super) async fn put_json(url: &str, auth: Option<&str>, body: &'static [u8]) -> Got {
    let mut headers = vec![("content-type", "application/json")];
    let auth = auth.map(bearer);
    if let Some(a) = &auth {
        headers.push(("authorization", a.as_str()));
    }
    send(&http1(), "PUT", url, &headers, body).await
}

#[tokio::test]
async fn with_a_token_every_admin_call_needs_it_and_probes_stay_open() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(
        &tenant_config(&format!("admin_token = \"{TOKEN}\"\n")),
        &up.url(),
    )
    .await;
    for path in [
        "/admin/config",
        "/admin/stats",
        "/admin/overrides",
        "/admin/limits/tenant/acme",
    ] {
        let none = get(&gw.admin_url(path), &[]).await;
        assert_eq!(none.status, 401, "{path} without a token");
        assert_eq!(
            none.header("www-authenticate"),
            Some("Bearer realm=\"tollgate admin\"")
        );
        assert_eq!(none.header("cache-control"), Some("no-store"));
        let wrong = get(
            &gw.admin_url(path),
            &[("authorization", "Bearer s3cret-token-for-tests-012345678X")],
        )
        .await;
        assert_eq!(wrong.status, 401, "{path} with a wrong token");
        let basic = get(
            &gw.admin_url(path),
            &[("authorization", &format!("Basic {TOKEN}"))],
        )
        .await;
        assert_eq!(basic.status, 401, "{path}: only the Bearer scheme");
        let ok = get(&gw.admin_url(path), &[("authorization", &bearer(TOKEN))]).await;
        assert_eq!(ok.status, 200, "{path} with the token: {}", ok.text());
    }
    let reloaded = reload(&gw).await;
    assert_eq!(reloaded.status, 401);
    for path in ["/healthz", "/readyz", "/metrics", "/"] {
        assert_eq!(
            get(&gw.admin_url(path), &[]).await.status,
            200,
            "{path} stays open"
        );
    }
    let config = get(
        &gw.admin_url("/admin/config"),
        &[("authorization", &bearer(TOKEN))],
    )
    .await;
    assert_eq!(config.json()["server"]["admin_token"], true);
    assert!(!config.text().contains(TOKEN), "the token is never shown");
}

#[tokio::test]
async fn a_token_file_is_read_again_on_reload() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("admin.token"), "first-token-0123456789\n").unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        tenant_config("admin_token_file = \"admin.token\"\n").replace("{upstream}", &up.url()),
    )
    .unwrap();
    let config = tollgate::config::load(&path).expect("config with a token file");
    let gw = tollgate::gateway::Gateway::start_with(
        config,
        std::sync::Arc::new(tollgate::clock::MonotonicClock::new()),
    )
    .await
    .expect("starts");
    let admin = |p: &str| format!("http://{}{p}", gw.admin_addr().unwrap());
    let first = [("authorization", "Bearer first-token-0123456789")];
    assert_eq!(get(&admin("/admin/config"), &first).await.status, 200);
    std::fs::write(dir.path().join("admin.token"), "second-token-0123456789\n").unwrap();
    let reloaded = send(&http1(), "POST", &admin("/admin/reload"), &first, b"").await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.text());
    assert_eq!(
        get(&admin("/admin/config"), &first).await.status,
        401,
        "the old token stops working"
    );
    let second = [("authorization", "Bearer second-token-0123456789")];
    assert_eq!(get(&admin("/admin/config"), &second).await.status, 200);
    gw.shutdown().await;
}

#[tokio::test]
async fn without_a_token_a_rebound_name_reads_nothing() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&tenant_config(""), &up.url()).await;
    let rebound = [("host", "rebound.attacker.example")];
    for path in [
        "/admin/overrides",
        "/admin/config",
        "/admin/limits/tenant/acme",
    ] {
        let r = get(&gw.admin_url(path), &rebound).await;
        assert_eq!(r.status, 403, "{path}: {}", r.text());
        assert!(r.text().contains("IP address or localhost"), "{}", r.text());
        assert_eq!(
            get(&gw.admin_url(path), &[]).await.status,
            200,
            "{path} by address"
        );
    }
    for open in ["/healthz", "/readyz", "/metrics", "/"] {
        assert_eq!(
            get(&gw.admin_url(open), &rebound).await.status,
            200,
            "{open}"
        );
    }
    drop(gw);
}

#[tokio::test]
async fn a_weak_or_oversized_token_is_refused_and_the_running_one_kept() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().unwrap();
    let token_file = dir.path().join("admin.token");
    std::fs::write(&token_file, "first-token-0123456789\n").unwrap();
    let path = dir.path().join("tollgate.toml");
    std::fs::write(
        &path,
        tenant_config("admin_token_file = \"admin.token\"\n").replace("{upstream}", &up.url()),
    )
    .unwrap();
    let config = tollgate::config::load(&path).expect("config with a token file");
    let gw = tollgate::gateway::Gateway::start_with(
        config,
        std::sync::Arc::new(tollgate::clock::MonotonicClock::new()),
    )
    .await
    .expect("starts");
    let admin = |p: &str| format!("http://{}{p}", gw.admin_addr().unwrap());
    let first = [("authorization", "Bearer first-token-0123456789")];
    for (bad, problem) in [
        ("short\n".to_owned(), "too short"),
        ("x".repeat(2 << 20), "longer than"),
    ] {
        std::fs::write(&token_file, &bad).unwrap();
        let e = tollgate::config::load(&path).expect_err("refused at start and by check");
        assert!(e.to_string().contains(problem), "{e}");
        assert!(e.to_string().contains("tollgate.toml:"), "located: {e}");
        let reloaded = send(&http1(), "POST", &admin("/admin/reload"), &first, b"").await;
        assert_eq!(reloaded.status, 422, "{}", reloaded.text());
        assert!(reloaded.text().contains(problem), "{}", reloaded.text());
        assert_eq!(
            get(&admin("/admin/config"), &first).await.status,
            200,
            "old token kept"
        );
    }
    gw.shutdown().await;
}

/// A local account with write access to the overrides file's folder plants a link where
/// the file is: the gateway writes nothing through it (the victim keeps its contents) and
/// says why; a start with the link in place is refused.
#[tokio::test]
async fn the_overrides_file_is_never_written_through_a_planted_link() {
    let up = Upstream::start().await;
    let keep = tempfile::tempdir().unwrap();
    let file = keep.path().join("overrides.json");
    let victim = keep.path().join("victim");
    std::fs::write(&victim, "x".repeat(1200)).unwrap();
    let toml = tenant_config(&format!(
        "overrides_file = {:?}\n",
        file.display().to_string()
    ));
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.admin_url("/admin/overrides/tenant/acme");
    put_ok(&url, br#"{"burst": 10}"#).await;
    std::fs::remove_file(&file).unwrap();
    std::os::unix::fs::symlink(&victim, &file).unwrap();
    // Whether the change would be appended or the file written whole, the link is refused.
    for burst in [&br#"{"burst": 4}"#[..], br#"{"burst": 5}"#] {
        let r = put_json(&url, None, burst).await;
        assert_eq!(r.status, 500, "{}", r.text());
        assert!(r.text().contains("symbolic link"), "{}", r.text());
    }
    assert_eq!(std::fs::read_to_string(&victim).unwrap(), "x".repeat(1200));
    // No temporary file was left beside it either.
    assert_eq!(std::fs::read_dir(keep.path()).unwrap().count(), 2);
    drop(gw);
    let path = keep.path().join("tollgate.toml");
    std::fs::write(&path, toml.replace("{upstream}", &up.url())).unwrap();
    let refused = tollgate::gateway::Gateway::start_with(
        tollgate::config::load(&path).unwrap(),
        std::sync::Arc::new(tollgate::clock::MonotonicClock::new()),
    )
    .await;
    let e = refused.err().expect("refused").to_string();
    assert!(e.contains("symbolic link"), "{e}");
}

/// A reload that drops the admin token while the admin listener is beyond loopback opens
/// its read-only endpoints live: the reload's own report says so (as `tollgate check` and
/// the start do), not only a start-up log line no reload repeats.
#[tokio::test]
async fn a_reload_that_drops_the_admin_token_warns_that_the_listener_is_open() {
    let up = Upstream::start().await;
    let token = "a-long-enough-admin-token-0123";
    let on_all = |lines: &str| {
        Fixture::new()
            .server(lines)
            .route("open", "/", "api", &[])
            .build()
            .replace(
                "admin_listen = \"127.0.0.1:0\"",
                "admin_listen = \"0.0.0.0:0\"",
            )
    };
    let gw = TestGateway::start(&on_all(&format!("admin_token = \"{token}\"\n")), &up.url()).await;
    let admin = gw.admin.expect("admin listener").port();
    let reload_url = format!("http://127.0.0.1:{admin}/admin/reload");
    let bearer = format!("Bearer {token}");
    let auth = [("authorization", bearer.as_str())];
    let quiet = send(&http1(), "POST", &reload_url, &auth, b"").await;
    assert_eq!(quiet.status, 200, "{}", quiet.text());
    assert!(
        quiet.json()["report"]["warnings"].is_null(),
        "a token guards it: {}",
        quiet.text()
    );
    gw.rewrite(&on_all(""), &up.url());
    let open = send(&http1(), "POST", &reload_url, &auth, b"").await;
    assert_eq!(open.status, 200, "{}", open.text());
    let warnings = open.json()["report"]["warnings"].to_string();
    assert!(
        warnings
            .contains("admin_listen 0.0.0.0:0 is not a loopback address and no admin_token is set"),
        "{warnings}"
    );
}

/// A key whose bytes are not UTF-8 (`x-tenant-id: caf\xE9`) is charged as its own key,
/// but the admin API names keys by their text: `caf%E9` read as text was `caf\u{FFFD}`,
/// another key, and an inspection said it was unused, a reset said it was done and an
/// override was set, each on that other key. Now each is a `400` that says why.
#[tokio::test]
async fn a_key_path_that_is_not_text_is_refused_not_read_as_another_key() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&tenant_config(""), &up.url()).await;
    let raw_get = |key: &'static [u8]| {
        let mut bytes = b"GET / HTTP/1.1\r\nhost: t\r\nconnection: close\r\nx-tenant-id: ".to_vec();
        bytes.extend_from_slice(key);
        bytes.extend_from_slice(b"\r\n\r\n");
        let addr = gw.addr;
        async move { raw_status(&raw(addr, &bytes).await.0) }
    };
    for _ in 0..3 {
        assert_eq!(raw_get(b"caf\xe9").await, 200);
    }
    assert_eq!(raw_get(b"caf\xe9").await, 429, "its own key, spent");
    let (h2, _) = crate::spellings::h2_get(gw.addr, "t", "/", &[("x-tenant-id", b"caf\xe9")]).await;
    assert_eq!(h2, 429, "the same key over HTTP/2");
    assert_eq!(
        raw_get("caf\u{FFFD}".as_bytes()).await,
        200,
        "the text's key is another"
    );
    let refused = [
        get(&gw.admin_url("/admin/limits/tenant/caf%E9"), &[]).await,
        send(
            &http1(),
            "POST",
            &gw.admin_url("/admin/reset/tenant/caf%E9"),
            &[],
            b"",
        )
        .await,
        put_json(
            &gw.admin_url("/admin/overrides/tenant/caf%E9"),
            None,
            br#"{"burst": 100}"#,
        )
        .await,
    ];
    for answer in refused {
        assert_eq!(answer.status, 400, "{}", answer.text());
        let body = answer.json();
        assert_eq!(body["error"], "key_not_text", "{body}");
        assert!(
            body["detail"].as_str().unwrap_or("").contains("`caf%E9`"),
            "{body}"
        );
    }
    let listed = get(&gw.admin_url("/admin/overrides"), &[]).await.json();
    assert_eq!(
        listed["overrides"],
        serde_json::json!([]),
        "nothing was set"
    );
    assert_eq!(raw_get(b"caf\xe9").await, 429, "nothing was reset");
    // The top-keys view shows it as text it is not (beside the key that text is): it says
    // so, and tells no state read under that text (the other key's: `remaining: 2`).
    let top = get(&gw.admin_url("/admin/top?policy=tenant"), &[])
        .await
        .json();
    let rows = top.as_array().expect("a list");
    let shown = |nameable: bool| {
        (rows.iter())
            .find(|k| k["key"] == serde_json::json!(["caf\u{FFFD}"]) && k["nameable"] == nameable)
            .unwrap_or_else(|| panic!("nameable {nameable} in {top}"))
    };
    let spent = shown(false);
    assert_eq!(
        (&spent["admitted"], &spent["refused"]),
        (&3.into(), &3.into()),
        "{spent}"
    );
    assert_eq!(spent["remaining"], serde_json::Value::Null, "{spent}");
    assert_eq!(shown(true)["remaining"], 2, "the text's own key");
}

/// A key whose path is up to 64 KiB (60 KiB in a header, under `max_header_bytes`) can be
/// inspected and reset: the admin listener's head held 16 KiB, and such a key got `431`.
/// A longer path is `414` (hyper reads no longer request target).
#[tokio::test]
async fn a_key_path_of_up_to_64_kib_can_be_inspected_and_reset() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&tenant_config(""), &up.url()).await;
    let longer = format!(
        "GET /admin/limits/tenant/{} HTTP/1.1\r\nhost: a\r\n\r\n",
        "%20".repeat(22 * 1024)
    );
    let admin = gw.admin.expect("admin listener");
    assert_eq!(raw_status(&raw(admin, longer.as_bytes()).await.0), 414);
    let key = "k".repeat(60 * 1024);
    let (url, headers) = (gw.url("/"), [("x-tenant-id", key.as_str())]);
    for client in [http1(), http2()] {
        let spend = || send(&client, "GET", &url, &headers, b"");
        let mut admitted = 0;
        while admitted < 10 && spend().await.status == 200 {
            admitted += 1;
        }
        assert!(
            (1..=3).contains(&admitted),
            "{admitted} admitted of a burst of 3"
        );
        let state = get(&gw.admin_url(&format!("/admin/limits/tenant/{key}")), &[]).await;
        assert_eq!(state.status, 200, "{}", state.text());
        assert_eq!(state.json()["remaining"], 0, "the spent key");
        let reset = format!("/admin/reset/tenant/{key}");
        let reset = send(&http1(), "POST", &gw.admin_url(&reset), &[], b"").await;
        assert_eq!(reset.status, 200, "{}", reset.text());
        assert_eq!(spend().await.status, 200, "whole again");
    }
}
