//! The rate limit service as an operator sees it, through the binary: the ready file names
//! its address, `tollgate check` lists where each descriptor goes, and each call gets an
//! access log line (`front = "rls"`) under the same `access_log` mode and `log_keys` as a
//! proxied request — a refused call's line naming the refusing descriptor, its limit and
//! its key parts, and `"refused"` keeping a call let through without a store; and
//! `[rls.tls]` serves gRPC over TLS to a client that trusts it.

use std::time::Duration;

use crate::support::*;

pub(super) fn config(dir: &std::path::Path, up: &Upstream, logging: &str) -> std::path::PathBuf {
    config_on(dir, up, logging, None)
}

/// [`config`] on a `[store]` of its own (its table's body).
fn config_on(
    dir: &std::path::Path,
    up: &Upstream,
    logging: &str,
    store: Option<String>,
) -> std::path::PathBuf {
    let path = dir.join("tollgate.toml");
    let fixture = Fixture::new();
    let fixture = match store {
        Some(store) => fixture.store(store),
        None => fixture,
    };
    let text = fixture
        .server(format!("workers = 1\n{logging}"))
        .policy("tenant", "header:x-tenant", 1, "1h", 1)
        .raw("[rls]\nlisten = \"127.0.0.1:0\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", { kind = \"api\" }]\npolicy = \"tenant\"\n")
        .build_for(&up.url())
        .replace("access_log = false\n", "");
    std::fs::write(&path, text).expect("write");
    path
}

pub(super) fn rls_lines(gw: &Process) -> Vec<String> {
    gw.log()
        .lines()
        .filter(|l| l.contains("tollgate::access") && l.contains("rls"))
        .map(str::to_owned)
        .collect()
}

/// The gateway's RLS access log lines, once there are at least `n` (within 10 s).
async fn rls_lines_once(gw: &Process, n: usize) -> Vec<String> {
    let found = eventually(Duration::from_secs(10), || rls_lines(gw).len() >= n).await;
    let lines = rls_lines(gw);
    assert!(found, "{n} lines: {lines:?}");
    lines
}

async fn two_calls(gw: &Process) {
    let mut rls = RlsClient::connect(gw.rls.expect("the ready file names the rls address")).await;
    let d = || {
        vec![
            descriptor(&[("tenant", "acme corp")]),
            descriptor(&[("tenant", "x"), ("kind", "api")]),
        ]
    };
    assert_eq!(rls.ask("edge", d()).await.overall_code, OK);
    assert_eq!(rls.ask("edge", d()).await.overall_code, OVER_LIMIT);
}

#[tokio::test]
async fn each_call_has_a_line_and_a_refused_one_names_who_refused_it() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = Process::run(&config(dir.path(), &up, ""));
    two_calls(&gw).await;
    let lines = rls_lines_once(&gw, 2).await;
    assert!(
        lines[0].contains("decision=\"ok\"") && lines[0].contains("descriptor=-1"),
        "{}",
        lines[0]
    );
    let refused = &lines[1];
    // The wait is the hour's rest, by the real clock: 3,599,… ms.
    let parts = [
        "front=\"rls\"",
        "domain=\"edge\"",
        "descriptors=2",
        "decision=\"over_limit\"",
        "policy=\"tenant\"",
        "descriptor=1",
        "key=[\"x\"]",
        "wait_ms=359",
    ];
    for part in parts {
        assert!(refused.contains(part), "{part} in {refused}");
    }
    assert!(refused.contains("over_limit"), "{refused}");
}

/// A call no wait admits (here a cost of 5 against a burst of 1) is logged with the wait
/// it was told, none, not the limiter's "never" as milliseconds.
#[tokio::test]
async fn a_call_no_wait_admits_is_logged_with_no_wait() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = Process::run(&config(dir.path(), &up, ""));
    let mut rls = RlsClient::connect(gw.rls.expect("the ready file names the rls address")).await;
    let costly = descriptor_costing(&[("tenant", "x"), ("kind", "api")], 5);
    let r = rls.ask("edge", vec![costly]).await;
    assert_eq!(
        (r.overall_code, r.header("retry-after")),
        (OVER_LIMIT, None)
    );
    let lines = rls_lines_once(&gw, 1).await;
    assert!(
        lines[0].contains("decision=\"over_limit\"") && lines[0].contains("wait_ms=0 "),
        "{}",
        lines[0]
    );
}

#[tokio::test]
async fn refused_only_and_hashed_keys_apply_to_rls_lines_too() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let gw = Process::run(&config(
        dir.path(),
        &up,
        "access_log = \"refused\"\nlog_keys = \"hash\"",
    ));
    two_calls(&gw).await;
    let lines = rls_lines_once(&gw, 1).await;
    assert!(lines.len() == 1, "only the refused call: {lines:?}");
    assert!(
        lines[0].contains("over_limit") && !lines[0].contains("key=[\"x\"]"),
        "{}",
        lines[0]
    );
}

/// A call let through by `on_error = "allow"` while Redis cannot answer is no ordinary
/// admission: `access_log = "refused"` keeps its line, as it keeps a proxied request's.
#[tokio::test]
async fn refused_only_keeps_a_call_let_through_without_a_store() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"200ms\"\non_error = \"allow\"",
        redis.url()
    );
    let gw = Process::run(&config_on(
        dir.path(),
        &up,
        "access_log = \"refused\"",
        Some(store),
    ));
    let readyz = format!("http://{}/readyz", gw.admin.expect("admin"));
    let ready = eventually_async(Duration::from_secs(30), || async {
        send(&http1(), "GET", &readyz, &[], b"").await.status == 200
    })
    .await;
    assert!(ready, "{}", gw.log());
    let mut rls = RlsClient::connect(gw.rls.expect("rls")).await;
    let call = |t: &str| vec![descriptor(&[("tenant", t), ("kind", "api")])];
    assert_eq!(rls.ask("edge", call("acme")).await.overall_code, OK);
    redis.kill();
    let down = eventually_async(Duration::from_secs(30), || async {
        send(&http1(), "GET", &readyz, &[], b"").await.status == 503
    })
    .await;
    assert!(down, "{}", gw.log());
    // Let through without a decision. (A spent key's refusal is remembered from its
    // admission: `acme` would be refused without asking Redis.)
    assert_eq!(rls.ask("edge", call("globex")).await.overall_code, OK);
    let lines = rls_lines_once(&gw, 1).await;
    assert!(lines.len() == 1, "{lines:?}");
    assert!(
        lines[0].contains("decision=\"store_unavailable_allowed\""),
        "{}",
        lines[0]
    );
}

#[test]
fn check_lists_where_each_descriptor_goes() {
    let text = Fixture::new()
        .policy("tenant", "header:x-tenant", 1, "1h", 1)
        .raw("[rls]\nlisten = \"127.0.0.1:8081\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", { kind = \"api\" }]\npolicy = \"tenant\"\n")
        .build_for("http://127.0.0.1:9");
    let (ok, out) = check_text(&text);
    assert!(ok, "{out}");
    assert!(
        out.contains("rate limit service (RLS v3) on 127.0.0.1:8081, unmatched descriptors: ok"),
        "{out}"
    );
    assert!(out.contains("edge: tenant, kind=api"), "{out}");
    assert!(out.contains("-> tenant"), "{out}");
}

#[test]
fn check_lists_the_quota_buckets_and_the_bound_on_their_streams() {
    let text = Fixture::new()
        .policy("tenant", "header:x-tenant", 1, "1h", 1)
        .raw("[rls]\nlisten = \"127.0.0.1:8081\"\nmax_quota_streams = 300\n[[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\n")
        .build_for("http://127.0.0.1:9");
    let (ok, out) = check_text(&text);
    assert!(ok, "{out}");
    assert!(out.contains("quota bucket edge: tenant"), "{out}");
    assert!(
        out.contains("at most 300 quota streams open at once (max_quota_streams)"),
        "{out}"
    );
}

/// A gateway whose rate limit service speaks TLS with a certificate `ca` signed (and,
/// with `callers`, asks for a client certificate that CA signed): `tenant`, `burst` an
/// hour, per descriptor `tenant` of domain `edge`. The folder holds its files.
async fn tls_gateway(
    ca: &Ca,
    burst: u64,
    callers: Option<&Ca>,
) -> (tempfile::TempDir, Upstream, TestGateway) {
    let dir = tempfile::tempdir().expect("tempdir");
    let (cert, key) = ca.leaf(&["localhost", "127.0.0.1"], "rls");
    std::fs::write(dir.path().join("rls.pem"), cert).expect("write");
    std::fs::write(dir.path().join("rls.key"), key).expect("write");
    let d = dir.path().display();
    let mut tls = format!("[rls.tls]\ncert = \"{d}/rls.pem\"\nkey = \"{d}/rls.key\"\n");
    if let Some(callers) = callers {
        std::fs::write(dir.path().join("callers.pem"), callers.pem()).expect("write");
        tls.push_str(&format!("client_ca = \"{d}/callers.pem\"\n"));
    }
    let toml = Fixture::new()
        .policy("tenant", "header:x-tenant", burst, "1h", burst)
        .raw(format!(
            "[rls]\nlisten = \"127.0.0.1:0\"\n{tls}\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tenant\"\n"
        ))
        .build();
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml, &up.url()).await;
    (dir, up, gw)
}

#[tokio::test]
async fn with_rls_tls_calls_are_answered_over_tls_and_only_over_tls() {
    let ca = Ca::new("rls test ca");
    let (_dir, _up, gw) = tls_gateway(&ca, 1, None).await;
    let addr = gw.rls.expect("rls");
    let mut rls = RlsClient::connect_tls(addr, &ca.pem()).await;
    assert_eq!(
        rls.ask("edge", vec![descriptor(&[("tenant", "a")])])
            .await
            .codes(),
        [(OK, 0)]
    );
    assert_eq!(
        rls.ask("edge", vec![descriptor(&[("tenant", "a")])])
            .await
            .overall_code,
        OVER_LIMIT
    );
    // Cleartext HTTP/2 to the TLS listener gets no answer.
    let plain = tonic::transport::Channel::from_shared(format!("http://{addr}"))
        .expect("url")
        .connect_timeout(Duration::from_secs(5))
        .timeout(Duration::from_secs(5))
        .connect()
        .await;
    if let Ok(channel) = plain {
        let mut grpc = tonic::client::Grpc::new(channel);
        let path = http::uri::PathAndQuery::from_static(
            "/envoy.service.ratelimit.v3.RateLimitService/ShouldRateLimit",
        );
        let req = RlsRequest {
            domain: "edge".into(),
            descriptors: vec![descriptor(&[("tenant", "b")])],
            hits_addend: 0,
        };
        let codec = tonic_prost::ProstCodec::<RlsRequest, RlsResponse>::default();
        let answered = match grpc.ready().await {
            Ok(()) => grpc
                .unary(tonic::Request::new(req), path, codec)
                .await
                .is_ok(),
            Err(_) => false,
        };
        assert!(
            !answered,
            "a cleartext call is not answered by a TLS listener"
        );
    }
    // Tenant b was never charged by it.
    assert_eq!(
        rls.ask("edge", vec![descriptor(&[("tenant", "b")])])
            .await
            .codes(),
        [(OK, 0)]
    );
}

#[tokio::test]
async fn the_tenant_the_service_refuses_most_tops_admin_top() {
    let toml = Fixture::new()
        .policy("tenant", "header:x-tenant", 1, "1h", 1)
        .raw("[rls]\nlisten = \"127.0.0.1:0\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tenant\"\n")
        .build();
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut rls = RlsClient::connect(gw.rls.expect("rls")).await;
    for i in 0..20 {
        rls.ask(
            "edge",
            vec![descriptor(&[("tenant", &format!("quiet-{i}"))])],
        )
        .await;
    }
    for _ in 0..30 {
        rls.ask("edge", vec![descriptor(&[("tenant", "noisy")])])
            .await;
    }
    let top = send(
        &http1(),
        "GET",
        &gw.admin_url("/admin/top?policy=tenant&n=3"),
        &[],
        b"",
    )
    .await;
    assert_eq!(top.status, 200, "{}", top.text());
    let keys: serde_json::Value = serde_json::from_slice(&top.body).expect("JSON");
    let first = &keys[0];
    assert_eq!(first["policy"], "tenant", "{keys}");
    assert_eq!(first["key"], serde_json::json!(["noisy"]), "{keys}");
    assert_eq!(first["refused"], 29, "{keys}");
    assert_eq!(first["admitted"], 1, "{keys}");
    assert_eq!(first["remaining"], 0, "{keys}");
}

#[tokio::test]
async fn with_client_ca_only_callers_with_a_certificate_it_signed_are_answered() {
    let (server_ca, callers, strangers) =
        (Ca::new("rls ca"), Ca::new("callers"), Ca::new("strangers"));
    let (_dir, _up, gw) = tls_gateway(&server_ca, 5, Some(&callers)).await;
    let addr = gw.rls.expect("rls");
    let call = || RlsRequest {
        domain: "edge".into(),
        descriptors: vec![descriptor(&[("tenant", "a")])],
        hits_addend: 0,
    };
    let envoy = callers.leaf(&["envoy"], "envoy");
    let mut trusted =
        RlsClient::try_connect_tls(addr, &server_ca.pem(), Some((&envoy.0, &envoy.1)))
            .await
            .expect("a caller the CA signed connects");
    assert_eq!(
        trusted.call(call()).await.expect("answered").codes(),
        [(OK, 4)]
    );
    // No certificate, or one another CA signed: no call is answered, nothing is charged.
    let stranger = strangers.leaf(&["envoy"], "envoy");
    for identity in [None, Some((stranger.0.as_str(), stranger.1.as_str()))] {
        let answered = match RlsClient::try_connect_tls(addr, &server_ca.pem(), identity).await {
            Some(mut client) => client.call(call()).await.is_ok(),
            None => false,
        };
        assert!(
            !answered,
            "with {:?}",
            identity.map(|_| "a stranger's certificate")
        );
    }
    assert_eq!(
        trusted.call(call()).await.expect("answered").codes(),
        [(OK, 3)]
    );
}
