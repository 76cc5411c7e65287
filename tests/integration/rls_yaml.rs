//! envoyproxy/ratelimit's YAML read as is (`[rls] ratelimit_config`, a folder of files):
//! key-only, nested, wildcard, unlimited, shadow and `replaces` limits answered as
//! docs/rls.md says, the 25-calls-against-20-a-minute case of envoyproxy/ratelimit's own
//! tests checked whole after each call (GCRA's remaining and reset), and a broken file
//! pointed at by file, line and column; every unit stated back in `current_limit` as written.

use crate::support::*;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/ratelimit");

fn toml(yaml: &str) -> String {
    Fixture::new()
        .raw(format!(
            "[rls]\nlisten = \"127.0.0.1:0\"\nratelimit_config = \"{yaml}\"\n"
        ))
        .build()
}

async fn start(yaml: &str) -> (Upstream, TestGateway, RlsClient) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml(yaml), &up.url()).await;
    let rls = RlsClient::connect(gw.rls.expect("rls")).await;
    (up, gw, rls)
}

#[tokio::test]
async fn twenty_five_calls_against_twenty_a_minute_each_answer_checked_whole() {
    let (_up, gw, mut rls) = start(FIXTURES).await;
    for n in 1..=25u32 {
        let r = rls
            .ask("api", vec![descriptor(&[("remote_address", "10.0.0.1")])])
            .await;
        let s = &r.statuses[0];
        let limit = s.current_limit.as_ref().expect("current_limit");
        assert_eq!(
            (limit.name.as_str(), limit.requests_per_unit, limit.unit),
            ("api.remote_address", 20, MINUTE)
        );
        let reset = s.duration_until_reset.expect("reset");
        if n <= 20 {
            // GCRA: one request back every 3 s, not all at a window's end.
            assert_eq!(
                (r.overall_code, s.code, s.limit_remaining),
                (OK, OK, 20 - n),
                "call {n}"
            );
            assert_eq!(reset.seconds, 3 * i64::from(n), "call {n}");
        } else {
            assert_eq!(
                (r.overall_code, s.code, s.limit_remaining),
                (OVER_LIMIT, OVER_LIMIT, 0),
                "call {n}"
            );
            assert_eq!(reset.seconds, 60, "call {n}");
            assert_eq!(r.header("retry-after"), Some("3"));
        }
    }
    // Three seconds later exactly one more; another address has its own bucket.
    gw.advance(3 * S);
    assert_eq!(
        rls.ask("api", vec![descriptor(&[("remote_address", "10.0.0.1")])])
            .await
            .codes(),
        [(OK, 0)]
    );
    assert_eq!(
        rls.ask("api", vec![descriptor(&[("remote_address", "10.0.0.2")])])
            .await
            .codes(),
        [(OK, 19)]
    );
}

#[tokio::test]
async fn nested_and_wildcard_limits_key_by_the_values_they_do_not_fix() {
    let (_up, _gw, mut rls) = start(FIXTURES).await;
    let user = |u: &str| descriptor(&[("tenant", "acme"), ("user", u)]);
    for left in [2, 1, 0] {
        assert_eq!(
            rls.ask("api", vec![user("ann")]).await.codes(),
            [(OK, left)]
        );
    }
    assert_eq!(
        rls.ask("api", vec![user("ann")]).await.overall_code,
        OVER_LIMIT
    );
    assert_eq!(rls.ask("api", vec![user("bob")]).await.codes(), [(OK, 2)]);
    // Another tenant has no limit here; nor has the tenant alone (the limit is a level down).
    let other = rls
        .ask(
            "api",
            vec![descriptor(&[("tenant", "globex"), ("user", "ann")])],
        )
        .await;
    assert_eq!(
        (other.codes(), other.statuses[0].current_limit.clone()),
        (vec![(OK, 0)], None)
    );
    assert_eq!(
        rls.ask("api", vec![descriptor(&[("tenant", "acme")])])
            .await
            .statuses[0]
            .current_limit,
        None
    );
    // /v1/* : each path its own 2 a second; /v2/x matches nothing.
    let path = |p: &str| descriptor(&[("path", p)]);
    assert_eq!(rls.ask("api", vec![path("/v1/a")]).await.codes(), [(OK, 1)]);
    assert_eq!(rls.ask("api", vec![path("/v1/a")]).await.codes(), [(OK, 0)]);
    assert_eq!(
        rls.ask("api", vec![path("/v1/a")]).await.overall_code,
        OVER_LIMIT
    );
    assert_eq!(rls.ask("api", vec![path("/v1/b")]).await.codes(), [(OK, 1)]);
    let name = rls.ask("api", vec![path("/v1/b")]).await.statuses[0]
        .current_limit
        .clone()
        .expect("limit")
        .name;
    assert_eq!(name, "api.path_/v1/*");
    assert_eq!(
        rls.ask("api", vec![path("/v2/x")]).await.statuses[0].current_limit,
        None
    );
}

#[tokio::test]
async fn unlimited_shadow_and_replaces_answer_as_documented() {
    let (_up, gw, mut rls) = start(FIXTURES).await;
    for _ in 0..5 {
        let r = rls
            .ask(
                "edge",
                vec![
                    descriptor(&[("internal", "x")]),
                    descriptor(&[("watched", "w")]),
                ],
            )
            .await;
        assert_eq!(r.overall_code, OK);
        assert_eq!(r.statuses[0].current_limit, None);
    }
    // `gold` replaces `everyone` when both apply: everyone's bucket (1 a minute) is not
    // charged, so it still has its one request afterwards.
    for left in [4, 3] {
        let both = rls
            .ask(
                "edge",
                vec![
                    descriptor(&[("plan", "gold")]),
                    descriptor(&[("everyone", "e")]),
                ],
            )
            .await;
        assert_eq!(both.codes(), [(OK, left), (OK, 0)]);
        assert_eq!(both.statuses[1].current_limit, None);
        assert_eq!(
            both.statuses[0]
                .current_limit
                .as_ref()
                .map(|l| l.name.as_str()),
            Some("gold")
        );
    }
    assert_eq!(
        rls.ask("edge", vec![descriptor(&[("everyone", "e")])])
            .await
            .codes(),
        [(OK, 0)]
    );
    assert_eq!(
        rls.ask("edge", vec![descriptor(&[("everyone", "e")])])
            .await
            .overall_code,
        OVER_LIMIT
    );
    let metrics = send(&http1(), "GET", &gw.admin_url("/metrics"), &[], b"")
        .await
        .text();
    let shadow = "tollgate_rls_decisions_total{domain=\"edge\",policy=\"edge.watched\",outcome=\"shadow_over_limit\"} 4\n";
    assert!(metrics.contains(shadow), "{metrics}");
}

#[tokio::test]
async fn a_broken_yaml_is_pointed_at_and_a_reload_keeps_the_running_rules() {
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("config.yaml");
    let good = "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: minute\n      requests_per_unit: 1\n";
    std::fs::write(&file, good).expect("write");
    let (up, gw, mut rls) = start(&file.display().to_string()).await;
    assert_eq!(
        rls.ask("d", vec![descriptor(&[("k", "v")])]).await.codes(),
        [(OK, 0)]
    );
    for (broken, expected) in [
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: fortnight\n      requests_per_unit: 1\n", "config.yaml:5:7: invalid rate limit unit `fortnight`"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limt:\n      unit: minute\n", "config.yaml:4:"),
        ("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unlimited: true\n      unit: minute\n", "config.yaml:5:7: an unlimited limit names no unit"),
    ] {
        std::fs::write(&file, broken).expect("write");
        let (ok, out) = check_config(&gw.config_path());
        assert!(!ok && out.contains(expected), "{expected:?} in:\n{out}");
        gw.rewrite(&toml(&file.display().to_string()), &up.url());
        let err = gw.gw().reload().await.expect_err("refused");
        assert!(err.to_string().contains(expected), "{err}");
        // The running rules still answer, the bucket as it was.
        assert_eq!(rls.ask("d", vec![descriptor(&[("k", "v")])]).await.overall_code, OVER_LIMIT);
    }
    std::fs::write(
        &file,
        good.replace("requests_per_unit: 1", "requests_per_unit: 2"),
    )
    .expect("write");
    gw.gw().reload().await.expect("reload");
    // The bucket kept its minute of debt: 30 s on, 2 a minute admit one (1 a minute would not).
    gw.advance(30 * S);
    assert_eq!(
        rls.ask("d", vec![descriptor(&[("k", "v")])]).await.codes(),
        [(OK, 0)]
    );
}

#[tokio::test]
async fn with_watch_config_a_changed_yaml_folder_reloads_by_itself() {
    let dir = tempfile::tempdir().expect("tempdir");
    let yaml = |n: u32| {
        format!("domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: hour\n      requests_per_unit: {n}\n")
    };
    std::fs::write(dir.path().join("limits.yaml"), yaml(1)).expect("write");
    let toml = Fixture::new()
        .server("watch_config = true")
        .raw(format!(
            "[rls]\nlisten = \"127.0.0.1:0\"\nratelimit_config = \"{}\"\n",
            dir.path().display()
        ))
        .build();
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut rls = RlsClient::connect(gw.rls.expect("rls")).await;
    let limit = |r: RlsResponse| {
        r.statuses[0]
            .current_limit
            .clone()
            .map(|l| l.requests_per_unit)
    };
    assert_eq!(
        limit(rls.ask("d", vec![descriptor(&[("k", "a")])]).await),
        Some(1)
    );
    // A ConfigMap-like swap: a new file written beside, renamed over the old one.
    std::fs::write(dir.path().join(".limits.tmp"), yaml(50)).expect("write");
    std::fs::rename(
        dir.path().join(".limits.tmp"),
        dir.path().join("limits.yaml"),
    )
    .expect("rename");
    let addr = gw.rls.expect("rls");
    let reloaded = eventually_async(std::time::Duration::from_secs(20), || async move {
        let mut rls = RlsClient::connect(addr).await;
        limit(rls.ask("d", vec![descriptor(&[("k", "b")])]).await) == Some(50)
    })
    .await;
    assert!(reloaded, "the YAML's change was reloaded");
}

#[tokio::test]
async fn every_unit_of_the_yaml_is_stated_back_as_written() {
    let dir = tempfile::tempdir().expect("tempdir");
    let mut yaml = String::from("domain: d\ndescriptors:\n");
    // 60/minute, 3,600/hour and 24/day are 1/second, 1/second and 1/hour too: stated
    // back per the unit written, as envoyproxy/ratelimit echoes its config.
    let units = [
        ("second", 10, 1),
        ("minute", 60, 2),
        ("hour", 3_600, 3),
        ("day", 24, 4),
        ("month", 10, 5),
        ("year", 3, 6),
        ("week", 1, 7),
    ];
    for (unit, n, _) in units {
        yaml.push_str(&format!(
            "  - key: {unit}\n    rate_limit:\n      unit: {unit}\n      requests_per_unit: {n}\n"
        ));
    }
    std::fs::write(dir.path().join("units.yaml"), yaml).expect("write");
    let (_up, _gw, mut rls) = start(&dir.path().display().to_string()).await;
    for (unit, n, code) in units {
        let r = rls.ask("d", vec![descriptor(&[(unit, "v")])]).await;
        let limit = r.statuses[0].current_limit.clone().expect("current_limit");
        assert_eq!(
            (
                limit.requests_per_unit,
                limit.unit,
                r.statuses[0].limit_remaining
            ),
            (n, code, n - 1),
            "{n} per {unit}"
        );
    }
}

/// A limit's policy name does not hang on the order the file lists limits in: a reload
/// adding `user_id` before `user id` (both named `user_id` once spaces are replaced)
/// leaves `user id`'s buckets with it, and the newcomer starts fresh.
#[tokio::test]
async fn a_reload_adding_a_limit_of_a_like_name_moves_no_bucket() {
    let dir = tempfile::tempdir().expect("tempdir");
    let limit = |key: &str| {
        format!(
            "  - key: \"{key}\"\n    rate_limit:\n      unit: minute\n      requests_per_unit: 2\n"
        )
    };
    let write = |descriptors: String| {
        std::fs::write(
            dir.path().join("api.yaml"),
            format!("domain: api\ndescriptors:\n{descriptors}"),
        )
        .expect("yaml")
    };
    write(limit("user id"));
    let (_up, gw, mut rls) = start(dir.path().to_str().expect("path")).await;
    let ask = |key: &'static str| RlsRequest {
        domain: "api".into(),
        descriptors: vec![descriptor(&[(key, "u")])],
        hits_addend: 0,
    };
    for code in [OK, OK, OVER_LIMIT] {
        assert_eq!(
            rls.call(ask("user id")).await.expect("call").overall_code,
            code
        );
    }
    write(limit("user_id") + &limit("user id"));
    let reloaded = super::admin::reload(&gw).await;
    assert_eq!(reloaded.status, 200, "{}", reloaded.text());
    assert_eq!(
        rls.call(ask("user id")).await.expect("call").overall_code,
        OVER_LIMIT,
        "its bucket stayed with it"
    );
    assert_eq!(
        rls.call(ask("user_id")).await.expect("call").overall_code,
        OK,
        "the newcomer's is fresh"
    );
}
