//! envoyproxy/ratelimit's YAML beyond the basics, answered as that service answers it: a
//! blocking limit (`requests_per_unit: 0`), `quota_mode`, `metadata` and the metric flags
//! accepted, a shared wildcard (`share_threshold`), `replaces` of named limits only,
//! unlimited descriptors with all the room there is, nested branches walked greedily (a
//! value written without a limit exempting it; a `*` anywhere in a value, wildcards tried
//! in the order written),
//! `limit_remaining` 0 when over, a call with no descriptors refused, and two files of
//! one domain refused.

use crate::support::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ratelimit-asis");

fn toml(yaml: &str) -> String {
    toml_with(yaml, "")
}

/// [`toml`] with more `[rls]` lines.
fn toml_with(yaml: &str, rls: &str) -> String {
    Fixture::new()
        .raw(format!(
            "[rls]\nlisten = \"127.0.0.1:0\"\nratelimit_config = \"{yaml}\"\n{rls}"
        ))
        .build()
}

async fn start() -> (Upstream, TestGateway, RlsClient) {
    start_on(&toml(FIXTURES)).await
}

/// A gateway on `toml` and a client of its rate limit service.
async fn start_on(toml: &str) -> (Upstream, TestGateway, RlsClient) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(toml, &up.url()).await;
    let rls = RlsClient::connect(gw.rls.expect("rls")).await;
    (up, gw, rls)
}

#[tokio::test]
async fn a_blocking_limit_is_over_charges_nothing_else_and_can_be_replaced() {
    let (_up, gw, mut rls) = start().await;
    let (ok, out) = check_config(&gw.config_path());
    assert!(ok, "{out}");
    assert!(out.contains("quota_mode is not followed"), "{out}");
    for _ in 0..2 {
        let r = rls
            .ask(
                "asis",
                vec![
                    descriptor(&[("files", "shared/a")]),
                    descriptor(&[("source", "banned")]),
                ],
            )
            .await;
        assert_eq!(r.overall_code, OVER_LIMIT);
        assert_eq!(
            r.codes(),
            [(OK, 2), (OVER_LIMIT, 0)],
            "checked, not charged"
        );
        let limit = r.statuses[1].current_limit.clone().expect("its limit");
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("banned_limit", 0, MINUTE)
        );
        let reset = r.statuses[1].duration_until_reset.expect("a reset");
        assert_eq!((reset.seconds, reset.nanos), (60, 0));
        // Over in every minute: no wait helps, and none is told.
        assert_eq!(r.header("retry-after"), None);
        assert_eq!(
            r.metadata("policy"),
            Some(&prost_types::value::Kind::StringValue(
                "banned_limit".into()
            ))
        );
    }
    // `override` replaces the named `banned_limit`: not decided, OK.
    let r = rls
        .ask(
            "asis",
            vec![
                descriptor(&[("source", "banned")]),
                descriptor(&[("override", "o")]),
            ],
        )
        .await;
    assert_eq!(r.codes(), [(OK, 0), (OK, 1)]);
    assert_eq!(r.statuses[0].current_limit, None);
    // An unnamed limit is not replaced, even when its full key is named.
    let r = rls
        .ask(
            "asis",
            vec![
                descriptor(&[("source", "s1")]),
                descriptor(&[("unnamed_replacer", "u")]),
            ],
        )
        .await;
    assert_eq!(r.codes(), [(OK, 4), (OK, 1)]);
    // In shadow mode a blocking limit answers OK, and counts what it would have done.
    let r = rls
        .ask("asis", vec![descriptor(&[("source", "watched")])])
        .await;
    assert_eq!((r.overall_code, r.header("retry-after")), (OK, None));
    let metrics = send(&http1(), "GET", &gw.admin_url("/metrics"), &[], b"")
        .await
        .text();
    let blocked = "tollgate_rls_decisions_total{domain=\"asis\",policy=\"banned_limit\",outcome=\"over_limit\"} 2\n";
    assert!(metrics.contains(blocked), "{metrics}");
    let watched = "policy=\"asis.source_watched\",outcome=\"shadow_over_limit\"} 1\n";
    assert!(metrics.contains(watched), "{metrics}");
}

#[tokio::test]
async fn unlimited_shared_and_greedy_descriptors_answer_as_envoyproxy_ratelimit() {
    let (_up, gw, mut rls) = start().await;
    // Unlimited: OK with all the room there is, counted under its limit.
    for _ in 0..3 {
        let r = rls.ask("asis", vec![descriptor(&[("free", "x")])]).await;
        assert_eq!(r.codes(), [(OK, u32::MAX)]);
        assert_eq!(r.statuses[0].current_limit, None);
    }
    let metrics = send(&http1(), "GET", &gw.admin_url("/metrics"), &[], b"")
        .await
        .text();
    let free =
        "tollgate_rls_decisions_total{domain=\"asis\",policy=\"asis.free\",outcome=\"ok\"} 3\n";
    assert!(metrics.contains(free), "{metrics}");
    // share_threshold: every file under shared/ draws on one bucket of 2 a minute.
    let file = |f: &str| vec![descriptor(&[("files", f)])];
    assert_eq!(rls.ask("asis", file("shared/a")).await.codes(), [(OK, 1)]);
    assert_eq!(rls.ask("asis", file("shared/b")).await.codes(), [(OK, 0)]);
    assert_eq!(
        rls.ask("asis", file("shared/c")).await.codes(),
        [(OVER_LIMIT, 0)]
    );
    // Greedy: tenant=acme enters the acme branch, which has no limit for /b; the
    // any-tenant branch is not tried — OK, unmatched, never counted against 1 a minute.
    let call = |tenant: &str, path: &str| vec![descriptor(&[("tenant", tenant), ("path", path)])];
    for _ in 0..3 {
        let r = rls.ask("asis", call("acme", "/b")).await;
        assert_eq!(r.codes(), [(OK, 0)]);
        assert_eq!(r.statuses[0].current_limit, None);
    }
    assert_eq!(
        rls.ask("asis", call("acme", "/a")).await.codes(),
        [(OK, 99)]
    );
    assert_eq!(rls.ask("asis", call("bob", "/b")).await.codes(), [(OK, 0)]);
    assert_eq!(
        rls.ask("asis", call("bob", "/b")).await.codes(),
        [(OVER_LIMIT, 0)]
    );
    // A value written without a limit exempts it from its key's limit of 1 a minute.
    let address = |a: &str| vec![descriptor(&[("remote_address", a)])];
    for _ in 0..3 {
        let r = rls.ask("asis", address("10.0.0.1")).await;
        assert_eq!(r.codes(), [(OK, 0)]);
        assert_eq!(r.statuses[0].current_limit, None);
    }
    let once = rls.ask("asis", address("10.0.0.2")).await;
    assert_eq!(once.codes(), [(OK, 0)]);
    assert!(once.statuses[0].current_limit.is_some(), "its key's limit");
    assert_eq!(
        rls.ask("asis", address("10.0.0.2")).await.codes(),
        [(OVER_LIMIT, 0)]
    );
}

#[tokio::test]
async fn wildcards_anywhere_in_a_value_are_tried_in_the_order_written() {
    let (_up, _gw, mut rls) = start().await;
    // `/v1/*/users`: a `*` inside the value, 1 a minute.
    let path = |p: &str| vec![descriptor(&[("path", p)])];
    assert_eq!(
        rls.ask("asis", path("/v1/acme/users")).await.codes(),
        [(OK, 0)]
    );
    assert_eq!(
        rls.ask("asis", path("/v1/acme/users")).await.codes(),
        [(OVER_LIMIT, 0)]
    );
    assert_eq!(
        rls.ask("asis", path("/v1/bob/users")).await.codes(),
        [(OK, 0)],
        "every value the pattern takes is a key of its own"
    );
    let other = rls.ask("asis", path("/v1/users")).await;
    assert_eq!(other.codes(), [(OK, 0)]);
    assert_eq!(
        other.statuses[0].current_limit, None,
        "not taken: unmatched"
    );
    // `/v1/*` is written before `/v1/admin/*`: /v1/admin/x enters it, where any user
    // has 100 a minute — the later wildcard's 1 a minute for root is not reached.
    let root = || vec![descriptor(&[("area", "/v1/admin/x"), ("user", "root")])];
    for remaining in [99, 98, 97] {
        let r = rls.ask("asis", root()).await;
        assert_eq!(r.codes(), [(OK, remaining)]);
        let limit = r.statuses[0].current_limit.clone().expect("a limit");
        assert_eq!((limit.requests_per_unit, limit.unit), (100, MINUTE));
    }
    // Nor is it tried when the first has nothing below for the next key: `tier` is
    // written only under `/v1/admin/*` (1 a minute), and the walk never goes there.
    let tier = || vec![descriptor(&[("area", "/v1/admin/x"), ("tier", "gold")])];
    for _ in 0..3 {
        let r = rls.ask("asis", tier()).await;
        assert_eq!(r.codes(), [(OK, 0)]);
        assert_eq!(r.statuses[0].current_limit, None);
    }
}

/// Under `on_unmatched = "over_limit"` a value the YAML writes without a limit is still
/// exempt (envoyproxy/ratelimit answers it OK); a descriptor the YAML does not write is
/// refused, and a call it refuses is told no wait.
#[tokio::test]
async fn a_value_written_without_a_limit_is_exempt_whatever_on_unmatched_says() {
    let toml = toml_with(FIXTURES, "on_unmatched = \"over_limit\"\n");
    let (_up, _gw, mut rls) = start_on(&toml).await;
    for _ in 0..3 {
        let r = rls
            .ask("asis", vec![descriptor(&[("remote_address", "10.0.0.1")])])
            .await;
        assert_eq!(r.codes(), [(OK, 0)]);
    }
    let unwritten = rls.ask("asis", vec![descriptor(&[("nowhere", "x")])]).await;
    assert_eq!(unwritten.codes(), [(OVER_LIMIT, 0)]);
    // Blocked for a minute and unnamed: no wait admits the call, and none is told.
    let both = vec![
        descriptor(&[("source", "banned")]),
        descriptor(&[("nowhere", "x")]),
    ];
    let both = rls.ask("asis", both).await;
    assert_eq!(both.codes(), [(OVER_LIMIT, 0), (OVER_LIMIT, 0)]);
    assert_eq!(both.header("retry-after"), None);
}

#[tokio::test]
async fn over_means_nothing_left_and_a_call_without_descriptors_is_refused() {
    let (_up, _gw, mut rls) = start().await;
    // 5 a minute; a call of 7 is over, and says nothing is left for it (not the 5).
    let r = rls
        .ask("asis", vec![descriptor_costing(&[("source", "s3")], 7)])
        .await;
    assert_eq!(r.codes(), [(OVER_LIMIT, 0)]);
    assert_eq!(
        rls.ask("asis", vec![descriptor(&[("source", "s3")])])
            .await
            .codes(),
        [(OK, 4)],
        "the refused call charged nothing"
    );
    let refused = rls
        .call(RlsRequest {
            domain: "asis".into(),
            descriptors: Vec::new(),
            hits_addend: 0,
        })
        .await
        .expect_err("no descriptors");
    assert_eq!(refused.code(), tonic::Code::InvalidArgument);
    assert_eq!(refused.message(), "the call names no descriptors");
}

#[test]
fn two_files_of_one_domain_are_refused_as_envoyproxy_ratelimit_refuses_them() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limit = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n";
    std::fs::write(dir.path().join("a.yaml"), limit).expect("write");
    std::fs::write(dir.path().join("b.yaml"), limit).expect("write");
    let (ok, out) = check_text(&toml(&dir.path().display().to_string()));
    assert!(!ok, "{out}");
    assert!(out.contains("b.yaml: domain `d` is also in"), "{out}");
}

#[tokio::test]
async fn a_limit_removed_on_reload_leaves_metrics_with_its_series() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("config.yaml");
    let limit = |key: &str| {
        format!("  - key: {key}\n    rate_limit:\n      unit: minute\n      requests_per_unit: 5\n")
    };
    std::fs::write(
        &file,
        format!(
            "domain: d\ndescriptors:\n{}{}",
            limit("kept"),
            limit("gone")
        ),
    )
    .expect("write");
    let (_up, gw, mut rls) = start_on(&toml(&file.display().to_string())).await;
    for key in ["kept", "gone"] {
        assert_eq!(
            rls.ask("d", vec![descriptor(&[(key, "v")])])
                .await
                .overall_code,
            OK
        );
    }
    let series = |key: &str| {
        format!(
            "tollgate_rls_decisions_total{{domain=\"d\",policy=\"d.{key}\",outcome=\"ok\"}} 1\n"
        )
    };
    let metrics = || async {
        send(&http1(), "GET", &gw.admin_url("/metrics"), &[], b"")
            .await
            .text()
    };
    let before = metrics().await;
    assert!(
        before.contains(&series("kept")) && before.contains(&series("gone")),
        "{before}"
    );
    std::fs::write(&file, format!("domain: d\ndescriptors:\n{}", limit("kept"))).expect("write");
    gw.gw().reload().await.expect("reload");
    let after = metrics().await;
    assert!(after.contains(&series("kept")), "{after}");
    assert!(!after.contains("policy=\"d.gone\""), "{after}");
}

/// Under `refusal_body = "json"`, the body Envoy sends tells the wait `Retry-After` does:
/// none for a blocking limit, over in every unit (a unit's wait would only bring the same
/// refusal back).
#[tokio::test]
async fn a_blocking_limits_body_tells_no_wait_as_its_headers_do() {
    let toml = toml_with(FIXTURES, "refusal_body = \"json\"\n");
    let (_up, _gw, mut rls) = start_on(&toml).await;
    let r = rls
        .ask("asis", vec![descriptor(&[("source", "banned")])])
        .await;
    assert_eq!(r.overall_code, OVER_LIMIT);
    assert_eq!(r.header("retry-after"), None);
    let body: serde_json::Value = serde_json::from_slice(&r.raw_body).expect("a JSON body");
    assert_eq!(body["retry_after_ms"], 0, "{body}");
}

/// A YAML limit whose debt Redis cannot keep (a year; a month at one request) is refused
/// on the redis backend naming its unit and what to write instead — the YAML has no
/// burst or period to lower. The same limits load on the memory backend, and a month at
/// two requests on Redis.
#[test]
fn a_limit_too_long_for_redis_is_refused_naming_its_unit() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limit = |unit: &str, n: u32| {
        format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: {unit}\n      requests_per_unit: {n}\n")
    };
    let on = |store: &str, unit: &str, n: u32| {
        std::fs::write(dir.path().join("limits.yaml"), limit(unit, n)).expect("write");
        let text = toml(&dir.path().display().to_string())
            .replace("[rls]", &format!("{store}\n[rls]"))
            .replace("{upstream}", "http://127.0.0.1:9");
        check_text(&text)
    };
    let redis = "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n";
    for (unit, n) in [("year", 1000), ("month", 1)] {
        let (ok, out) = on(redis, unit, n);
        assert!(!ok, "{out}");
        assert!(
            out.contains(&format!("per {unit}, keeps a key's debt up to one {unit}")),
            "{out}"
        );
        assert!(out.contains("calendar quota"), "{out}");
        let (ok, out) = on("", unit, n);
        assert!(ok, "memory: {out}");
    }
    let (ok, out) = on(redis, "month", 2);
    assert!(ok, "{out}");
}
