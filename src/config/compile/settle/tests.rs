fn check(policy: &str) -> Result<crate::config::Config, String> {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.api]\ntargets = [\"http://127.0.0.1:1\"]\n[policies.p]\nkey = \"ip\"\n{policy}\n[[routes]]\nname = \"r\"\npath = \"/\"\nupstream = \"api\"\npolicies = [\"p\"]\ncost = 500\n"
    );
    crate::config::compile(std::path::Path::new("t.toml"), &text).map_err(|e| e.to_string())
}

const RATE: &str = "limit = 60\nperiod = \"1m\"\nburst = 100\n";

#[test]
fn a_settled_policy_charges_its_reserve_not_the_routes_cost() {
    let config = check(&format!(
        "{RATE}reserve = 10\nsettle = \"response_header:X-Used\""
    ))
    .expect("valid");
    let settle = config.policies[0].rate().unwrap().settle.clone().unwrap();
    assert_eq!(settle.reserve.map(|r| r.get()), Some(10));
    assert_eq!(
        settle.source,
        crate::config::SettleSource::ResponseHeader(http::HeaderName::from_static("x-used"))
    );
    // Largest representable: (2^52 ns − τ) / T.
    assert_eq!(
        settle.max_cost,
        ((1u64 << 52) - 100_000_000_000) / 1_000_000_000
    );
    assert_eq!(settle.unit.get(), 1);
    // Without a reserve, the route's cost (500) is charged, and exceeds the burst.
    let e = check(&format!("{RATE}settle = \"response_bytes\"")).unwrap_err();
    assert!(e.contains("cost 500 of route `r` exceeds the burst"), "{e}");
}

#[test]
fn settle_settings_are_checked_where_they_are_written() {
    for (policy, says) in [
        (
            format!("{RATE}reserve = 10\nsettle = \"response_headers:x\""),
            "not a settle source",
        ),
        (
            format!("{RATE}reserve = 10\nsettle = \"response_header:bad name\""),
            "not a settle source",
        ),
        (
            format!("{RATE}reserve = 101\nsettle = \"response_bytes\""),
            "reserve 101 exceeds burst 100",
        ),
        (
            format!("{RATE}reserve = 0\nsettle = \"response_bytes\""),
            "reserve must be a whole number of at least 1",
        ),
        (
            format!("{RATE}reserve = 10\nsettle = \"response_header:x\"\nsettle_unit = 1024"),
            "settle_unit divides measured bytes",
        ),
        (
            format!("{RATE}reserve = 10"),
            "`reserve` applies only with `settle`",
        ),
        (
            format!("{RATE}max_cost = 10"),
            "`max_cost` applies only with `settle`",
        ),
        (
            format!("{RATE}reserve = 10\nsettle = \"response_bytes\"\nmax_cost = 99999999999"),
            "would owe more than 52 days",
        ),
        (
            "max_in_flight = 3\nsettle = \"response_bytes\"".to_owned(),
            "`settle` applies to rate policies",
        ),
    ] {
        let e = check(&policy).expect_err(&policy);
        assert!(e.contains(says), "{policy}: expected {says:?} in\n{e}");
    }
}

#[test]
fn an_override_may_go_below_a_settled_policys_reserve_but_its_own_burst_may_not() {
    // The key reserves its whole burst (`RequestTiers::cap_reserves`): a runtime override
    // may go there too, so the file's may.
    let under = "reserve = 10\nsettle = \"response_header:x-used\"\n[policies.p.overrides]\n\"10.0.0.1\" = { burst = 5 }";
    check(&format!("{RATE}{under}")).expect("an override below the reserve");
    let own =
        "limit = 60\nperiod = \"1m\"\nburst = 5\nreserve = 10\nsettle = \"response_header:x-used\"";
    let e = check(own).unwrap_err();
    assert!(e.contains("cost 10 of route `r` exceeds the burst"), "{e}");
    // Unsettled, the route's cost is the charge: an override under it never admits.
    let unsettled = "[policies.p.overrides]\n\"10.0.0.1\" = { burst = 499 }";
    let e = check(&format!(
        "limit = 60\nperiod = \"1m\"\nburst = 600\n{unsettled}"
    ))
    .unwrap_err();
    assert!(e.contains("cost 500 of route `r` exceeds the burst"), "{e}");
}
