//! Usage reports (`reports = true`): a non-zero `hits_addend` is usage already spent,
//! charged even past the limit — on a rate and on a calendar quota, in memory and on
//! Redis — so the checks after it are refused until it is paid back or the window ends;
//! an absurd report leaves the key used up, never wrapped round to unused.

use crate::support::*;

fn toml(store: Option<&RedisServer>) -> String {
    let mut fixture = Fixture::new()
        .policy("tokens", "header:x-tenant", 1000, "1h", 1000)
        .policy_raw(
            "monthly",
            "key = \"header:x-tenant\"\nquota = 1000\nwindow = \"month\"\n",
        )
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", { kind = \"tokens\" }]\npolicy = \"tokens\"\nreports = true\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", { kind = \"monthly\" }]\npolicy = \"monthly\"\nreports = true\n",
        );
    if let Some(redis) = store {
        fixture = fixture.store(redis.store_toml());
    }
    fixture.build()
}

/// One descriptor of `kind` for `tenant` costing `hits` (0: a check, charging nothing).
fn call(kind: &str, tenant: &str, hits: u64) -> RlsRequest {
    RlsRequest {
        domain: "edge".into(),
        descriptors: vec![RlsDescriptor {
            hits_addend: Some(hits),
            ..descriptor(&[("tenant", tenant), ("kind", kind)])
        }],
        hits_addend: 0,
    }
}

/// A check, a report of 1,500 against 1,000 (charged, not refused), a check refused, for
/// each kind of limit on `rls`.
async fn a_report_over_the_limit_is_charged(rls: &mut RlsClient, tenant: &str) {
    for kind in ["tokens", "monthly"] {
        let first = rls.call(call(kind, tenant, 0)).await.expect("check");
        assert_eq!(first.overall_code, OK, "{kind}");
        let reported = rls.call(call(kind, tenant, 1_500)).await.expect("report");
        assert_eq!(
            reported.overall_code, OK,
            "{kind}: a report is never refused"
        );
        let after = rls.call(call(kind, tenant, 0)).await.expect("check");
        assert_eq!(
            after.overall_code, OVER_LIMIT,
            "{kind}: the report's 1,500 units were charged"
        );
        // An absurd report owes more than any window holds: the key stays used up (a
        // quota's usage is capped below what would read as another calendar's, zero).
        for _ in 0..3 {
            let absurd = rls.call(call(kind, tenant, 1 << 40)).await.expect("report");
            assert_eq!(absurd.overall_code, OK, "{kind}: a report is never refused");
        }
        let still = rls.call(call(kind, tenant, 0)).await.expect("check");
        assert_eq!(still.overall_code, OVER_LIMIT, "{kind}: still used up");
        // Used up for at most about 52 days (2^52 ns), however many absurd reports: they
        // do not add up to a key locked for months, in any store.
        let reset = still.statuses[0].duration_until_reset.expect("a reset");
        assert!(
            reset.seconds <= 4_503_600,
            "{kind}: the key is used up for {} s, past the cap",
            reset.seconds
        );
    }
}

#[tokio::test]
async fn a_report_over_the_limit_is_charged_in_memory() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml(None), &up.url()).await;
    let mut rls = RlsClient::connect(gw.rls.expect("rls")).await;
    a_report_over_the_limit_is_charged(&mut rls, "acme").await;
}

/// A gateway's rate limit service on `redis`, once it answers from there.
async fn on_redis(redis: &RedisServer, up: &Upstream) -> (TestGateway, RlsClient) {
    on_redis_with(&toml(Some(redis)), up).await
}

/// A gateway of `toml` (its store Redis), once its rate limit service answers from there.
async fn on_redis_with(toml: &str, up: &Upstream) -> (TestGateway, RlsClient) {
    let gw = TestGateway::start_real_clock(toml, &up.url()).await;
    let addr = gw.rls.expect("rls");
    let answered = eventually_async(std::time::Duration::from_secs(30), || async move {
        let mut rls = RlsClient::connect(addr).await;
        rls.call(call("tokens", "warm-up", 0))
            .await
            .is_ok_and(|r| r.overall_code == OK)
    })
    .await;
    assert!(answered, "the rate limit service answers from Redis");
    (gw, RlsClient::connect(addr).await)
}

#[tokio::test]
async fn a_report_over_the_limit_is_charged_on_redis() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let (_a, mut a) = on_redis(&redis, &up).await;
    a_report_over_the_limit_is_charged(&mut a, "acme").await;
    // What Redis keeps, read by a gateway that remembers nothing of the reports.
    let (_b, mut b) = on_redis(&redis, &up).await;
    for kind in ["tokens", "monthly"] {
        let check = b.call(call(kind, "acme", 0)).await.expect("check");
        assert_eq!(check.overall_code, OVER_LIMIT, "{kind}: used up in Redis");
    }
}

/// One absurd report on a key that owes nothing, whatever its size: past what a Redis
/// integer reply holds once multiplied by the rate's interval (3,000,000,000 × 1 h), past
/// what the script's doubles compare exactly (2^40, 2^64 − 1). The report is answered OK
/// and charged, and every later check, here and on a gateway that remembers nothing, is
/// refused from what Redis keeps (never a store error answered per `on_error`, never a
/// report dropped as refused).
#[tokio::test]
async fn an_absurd_first_report_leaves_the_key_used_up_on_redis() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let (_a, mut a) = on_redis(&redis, &up).await;
    let sizes = [3_000_000_000, 1 << 40, u64::MAX];
    for kind in ["tokens", "monthly"] {
        for (i, hits) in sizes.into_iter().enumerate() {
            let tenant = format!("absurd-{i}");
            let reported = a.call(call(kind, &tenant, hits)).await;
            assert_eq!(
                reported.expect("report answered").overall_code,
                OK,
                "{kind} {hits}"
            );
            for _ in 0..2 {
                let again = a.call(call(kind, &tenant, hits)).await;
                assert_eq!(again.expect("report answered").overall_code, OK);
            }
            let check = a.call(call(kind, &tenant, 0)).await;
            assert_eq!(
                check.expect("check answered").overall_code,
                OVER_LIMIT,
                "{kind} {hits}: used up"
            );
        }
    }
    let (_b, mut b) = on_redis(&redis, &up).await;
    for kind in ["tokens", "monthly"] {
        for i in 0..sizes.len() {
            let check = b.call(call(kind, &format!("absurd-{i}"), 0)).await;
            assert_eq!(
                check.expect("check answered from Redis").overall_code,
                OVER_LIMIT,
                "{kind} #{i}: used up in Redis"
            );
        }
        let fresh = b.call(call(kind, "untouched", 1)).await;
        assert_eq!(fresh.expect("report").overall_code, OK, "{kind}");
    }
}

/// The same through a quota stream: an absurd count of requests allowed, on Redis, is
/// charged and leaves the bucket denied, on this gateway and on one that remembers
/// nothing; the stream and the store stay usable.
#[tokio::test]
async fn an_absurd_quota_report_leaves_the_bucket_used_up_on_redis() {
    use crate::rlqs::{open, proxied, tenant};
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(redis.store_toml())
        .policy("tenant", "header:x-tenant", 10, "1h", 20)
        .route("api", "/api", "api", &["tenant"])
        .raw("[rls]\nlisten = \"127.0.0.1:0\"\n[[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\n")
        .build();
    let a = TestGateway::start_real_clock(&toml, &up.url()).await;
    let mut envoy = open(&a).await;
    for count in [30_000_000, 1 << 40, u64::MAX] {
        let t = format!("huge-{count}");
        for _ in 0..3 {
            let told = envoy.ask("edge", vec![tenant(&t, count, 0)]).await;
            assert!(matches!(told[0].told(), Told::DenyAll(_)), "{count}");
        }
        assert_eq!(proxied(&a, &t).await, 429, "{count}");
    }
    let b = TestGateway::start_real_clock(&toml, &up.url()).await;
    for count in [30_000_000u64, 1 << 40, u64::MAX] {
        assert_eq!(proxied(&b, &format!("huge-{count}")).await, 429, "{count}");
    }
    assert_eq!(proxied(&b, "untouched").await, 200);
}

/// A policy whose gateways lease slices of each key (`sync = "lease"`) is decided exactly
/// where a call's cost is 0 or forced: a check reads what the key really owes (it was
/// answered OK from a made-up state, and left a remembered refusal that turned an idle
/// key's next proxied request away), and a report past the slice is charged in Redis
/// (it was dropped when the slice could not hold it).
#[tokio::test]
async fn checks_and_reports_on_a_leased_policy_are_decided_exactly_on_redis() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(redis.store_toml())
        .policy_raw(
            "tokens",
            "key = \"header:x-tenant\"\nlimit = 1000\nperiod = \"1h\"\nburst = 1000\nsync = \"lease\"\n",
        )
        .route("api", "/api", "api", &["tokens"])
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", { kind = \"tokens\" }]\npolicy = \"tokens\"\nreports = true\n",
        )
        .build();
    let (gw, mut rls) = on_redis_with(&toml, &up).await;
    let idle = rls.call(call("tokens", "idle", 0)).await.expect("check");
    assert_eq!(idle.overall_code, OK);
    let r = get(&gw.url("/api"), &[("x-tenant", "idle")]).await;
    assert_eq!(r.status, 200, "a check leaves no refusal behind");
    let first = rls.call(call("tokens", "acme", 0)).await.expect("check");
    assert_eq!(first.overall_code, OK);
    let reported = rls
        .call(call("tokens", "acme", 1_500))
        .await
        .expect("report");
    assert_eq!(reported.overall_code, OK, "a report is never refused");
    let after = rls.call(call("tokens", "acme", 0)).await.expect("check");
    assert_eq!(
        after.overall_code, OVER_LIMIT,
        "the report's 1,500 units were charged in Redis"
    );
    let r = get(&gw.url("/api"), &[("x-tenant", "acme")]).await;
    assert_eq!(r.status, 429, "and a proxied request of the key sees them");
}

/// A call whose report cannot be charged (Redis gone, `on_error = "deny"`) fails whole:
/// its other descriptors, decided by nobody, are counted `store_unavailable` under their
/// rule — not `ok`, which the call never answered.
#[tokio::test]
async fn a_call_whose_report_failed_counts_its_checks_unavailable_not_ok() {
    let mut redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = toml(Some(&redis)).replace("timeout = \"2s\"", "timeout = \"200ms\"");
    assert!(toml.contains("timeout = \"200ms\"") && toml.contains("on_error = \"deny\""));
    let (gw, mut rls) = on_redis_with(&toml, &up).await;
    redis.kill();
    let mut both = call("tokens", "acme", 5);
    both.descriptors
        .push(call("tokens", "other", 0).descriptors.remove(0));
    let failed = rls.call(both).await.expect_err("no answer without a store");
    assert_eq!(failed.code(), tonic::Code::Unavailable, "{failed:?}");
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    let line = |outcome: &str| {
        format!("tollgate_rls_decisions_total{{domain=\"edge\",policy=\"tokens\",outcome=\"{outcome}\"}}")
    };
    assert!(
        metrics.contains(&format!("{} 2\n", line("store_unavailable"))),
        "the report and the check: {metrics}"
    );
    assert!(
        metrics.contains(&format!("{} 1\n", line("ok"))),
        "the warm-up's check alone: {metrics}"
    );
}
