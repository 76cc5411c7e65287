//! A descriptor value that is empty (Envoy sends an empty header's value as `""`) is a
//! missing key, as an empty header is on the HTTP door, under each `missing`: `"shared"`
//! charges the one bucket of requests lacking the key (the HTTP door's too), `"skip"`
//! leaves the limit out, `"reject"` refuses the call and charges nothing. Spaces and tabs
//! around a value are not part of it, as the HTTP door reads a header.

use crate::support::*;

fn toml() -> String {
    let policy = |key: &str, missing: &str| {
        format!(
            "key = \"{key}\"\nlimit = 10\nperiod = \"1h\"\nburst = 10\nmissing = \"{missing}\"\n"
        )
    };
    Fixture::new()
        .policy_raw("tenants", policy("header:x-tenant", "shared"))
        .policy_raw("users", policy("header:x-user", "skip"))
        .policy_raw("orgs", policy("header:x-org", "reject"))
        .route("api", "/api", "api", &["tenants"])
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"tenants\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"user\"]\npolicy = \"users\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"org\"]\npolicy = \"orgs\"\n",
        )
        .build()
}

async fn started() -> (Upstream, TestGateway, RlsClient) {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&toml(), &up.url()).await;
    let rls = RlsClient::connect(gw.rls.expect("rls")).await;
    (up, gw, rls)
}

#[tokio::test]
async fn an_empty_value_shares_the_bucket_of_requests_lacking_the_key() {
    let (_up, gw, mut rls) = started().await;
    // Two proxied requests without the header, over HTTP/1.1 and HTTP/2: the shared bucket.
    for client in [http1(), http2()] {
        assert_eq!(
            send(&client, "GET", &gw.url("/api"), &[], b"").await.status,
            200
        );
    }
    for (value, left) in [("", 7), ("  ", 6), ("\t", 5)] {
        let answer = rls
            .ask("edge", vec![descriptor(&[("tenant", value)])])
            .await;
        assert_eq!(answer.codes(), [(OK, left)], "{value:?}: the same bucket");
    }
    // A value's surrounding spaces are not part of it.
    for (value, left) in [("acme", 9), ("acme ", 8), (" acme", 7)] {
        let answer = rls
            .ask("edge", vec![descriptor(&[("tenant", value)])])
            .await;
        assert_eq!(answer.codes(), [(OK, left)], "{value:?}: acme's bucket");
    }
}

#[tokio::test]
async fn an_empty_value_under_skip_leaves_the_limit_out() {
    let (_up, _gw, mut rls) = started().await;
    for _ in 0..12 {
        let answer = rls.ask("edge", vec![descriptor(&[("user", "")])]).await;
        assert_eq!(answer.overall_code, OK, "never charged, never refused");
        assert!(
            answer.statuses[0].current_limit.is_none(),
            "no limit applied"
        );
    }
}

#[tokio::test]
async fn an_empty_value_under_reject_refuses_the_call_and_charges_nothing() {
    let (_up, gw, mut rls) = started().await;
    let call = vec![descriptor(&[("tenant", "t1")]), descriptor(&[("org", " ")])];
    let answer = rls.ask("edge", call).await;
    assert_eq!(answer.overall_code, OVER_LIMIT);
    assert_eq!(answer.statuses[1].code, OVER_LIMIT);
    // Its limit stated, so Envoy's `X-RateLimit-Limit` names the policy that refused.
    let limit = answer.statuses[1].current_limit.as_ref().expect("a limit");
    assert_eq!(
        (limit.name.as_str(), limit.requests_per_unit, limit.unit),
        ("orgs", 10, HOUR)
    );
    assert_eq!(answer.statuses[1].limit_remaining, 0);
    // Counted as the call was answered: the refusing descriptor over, the one it
    // refused with it under neither (it was counted `ok`).
    let counted = |policy: &str, outcome: &str| {
        format!("tollgate_rls_decisions_total{{domain=\"edge\",policy=\"{policy}\",outcome=\"{outcome}\"}} 1\n")
    };
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert!(
        metrics.contains(&counted("orgs", "over_limit")),
        "{metrics}"
    );
    let tenants = "tollgate_rls_decisions_total{domain=\"edge\",policy=\"tenants\"";
    let counted_tenants = metrics.lines().filter(|l| l.starts_with(tenants));
    assert!(counted_tenants.clone().count() > 0, "{metrics}");
    for line in counted_tenants {
        assert!(line.ends_with(" 0"), "counted under no outcome: {line}");
    }
    let after = rls.ask("edge", vec![descriptor(&[("tenant", "t1")])]).await;
    assert_eq!(after.codes(), [(OK, 9)], "the refused call charged nothing");
    let metrics = get(&gw.admin_url("/metrics"), &[]).await.text();
    assert!(metrics.contains(&counted("tenants", "ok")), "{metrics}");
}
