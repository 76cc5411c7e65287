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
    let gw = TestGateway::start_real_clock(&toml(Some(redis)), &up.url()).await;
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
