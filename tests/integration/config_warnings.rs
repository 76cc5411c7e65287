//! What `tollgate check` warns of and hints at for a valid file that is likely not meant: a
//! period in months (or a minute mistyped as `M`), a client-chosen key left at
//! `missing = "shared"`, a string where a list is wanted, a fraction for a count, a body
//! or query key that skips while the route forwards bodies too large to read.

use super::config::{errors_of, BASE};

/// The warnings of `text`, written at `path` and loaded (it must be valid).
fn warnings_of(path: &std::path::Path, text: &str) -> Vec<String> {
    std::fs::write(path, text).expect("write");
    tollgate::config::load(path).expect("valid").warnings
}

#[test]
fn a_period_in_months_is_a_warning_check_prints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("months.toml");
    let warnings = warnings_of(&path, &BASE.replace("period = \"1s\"", "period = \"1M\""));
    // (And, first by its place in the file, the key an IPv6 client can invent held 3
    // days a request: below.)
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert!(
        warnings[0].contains("can hold its key for 3days"),
        "{}",
        warnings[0]
    );
    // 10 a month: a minute (`m`) was surely meant.
    assert!(
        warnings[1].ends_with(
            "months.toml:10:10: warning: policy `p`: period `1M` is 1M month(s) (`M`), not minutes (`m`): 10 requests a month is fewer than one every ten minutes\n    hint: for a minute write period = \"1m\"; for a monthly allowance use a calendar quota (quota = …, window = \"month\")"
        ),
        "{}",
        warnings[1]
    );
    // A million a month is a rate meant in months, said as one.
    let million = BASE
        .replace("period = \"1s\"", "period = \"1M\"")
        .replace("limit = 10", "limit = 1_000_000");
    let warnings = warnings_of(&path, &million);
    assert!(
        warnings[0].ends_with(
            "warning: policy `p`: period `1M` counts a month as a fixed length (30.44 days a month, 365.25 days a year) and refills continuously; it is not a calendar window\n    hint: write the period in days (\"30d\") to say so; limit = 1000000, period = \"30d\" is a continuous rate, not a monthly allowance"
        ),
        "{}",
        warnings[0]
    );
    std::fs::write(&path, BASE.replace("period = \"1s\"", "period = \"1M\"")).expect("write");
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"))
        .args(["check", "--config"])
        .arg(&path)
        .output()
        .expect("run check");
    assert!(out.status.success());
    assert!(String::from_utf8_lossy(&out.stdout).contains("warning: policy `p`: period `1M`"));
    // (Keyed by network: 10 in 30 days per address is a key held for days that an IPv6
    // client can invent, warned of below.)
    let days = BASE
        .replace("period = \"1s\"", "period = \"30d\"")
        .replace("key = \"ip\"", "key = \"ip/64\"");
    assert!(warnings_of(&path, &days).is_empty());
}

#[test]
fn a_header_key_without_missing_and_mistyped_values_get_hints() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("first-day.toml");
    let header = BASE.replace("key = \"ip\"", "key = \"header:x-tenant-id\"");
    let warnings = warnings_of(&path, &header);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0]
            .contains("every request without its key (header:x-tenant-id) shares one bucket")
            && warnings[0].contains("missing = \"skip\""),
        "{}",
        warnings[0]
    );
    let meant = header.replace("burst = 5", "burst = 5\nmissing = \"shared\"");
    let said = warnings_of(&path, &meant);
    assert!(said.is_empty(), "{said:?}");

    let cases = [
        (
            "targets = [\"http://127.0.0.1:3000\"]",
            "targets = \"http://127.0.0.1:3000\"",
            "put the value in brackets",
        ),
        ("limit = 10", "limit = 10.5", "a whole number"),
    ];
    for (from, to, hint) in cases {
        let got = errors_of(&BASE.replacen(from, to, 1));
        assert!(got.contains(hint), "for {to:?}: {got}");
    }
}

#[test]
fn a_body_key_that_skips_is_warned_of_until_the_route_refuses_unread_bodies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("skip.toml");
    let skipping = BASE.replace(
        "key = \"ip\"",
        "key = \"json:/params/name\"\nmissing = \"skip\"",
    );
    let warnings = warnings_of(&path, &skipping);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].ends_with(
            "warning: route `r`: a body larger than max_key_body (65536 bytes) is not read, so policy `p`'s `json:` key is missing and, with missing = \"skip\", the tier is skipped: padding a request past it goes around the tier\n    hint: set max_body = 65536 on the route (larger bodies are refused 413), or raise [server] max_key_body to what requests may carry"
        ),
        "{}",
        warnings[0]
    );
    let refused = skipping.replace("policies = [\"p\"]", "policies = [\"p\"]\nmax_body = 65536");
    let warnings = warnings_of(&path, &refused);
    assert!(warnings.is_empty(), "{warnings:?}");
}

#[test]
fn a_query_key_that_skips_is_warned_of_until_the_route_refuses_unread_bodies() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("query.toml");
    let skipping = BASE.replace(
        "key = \"ip\"",
        "key = \"query:username\"\nmissing = \"skip\"",
    );
    let warnings = warnings_of(&path, &skipping);
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].ends_with(
            "warning: route `r`: policy `p`'s `query:` key is also read from form, multipart and JSON bodies, as PHP, Rails, Laravel and Flask read parameters, but not from one larger than max_key_body (65536 bytes): with missing = \"skip\", such a body with the key in it goes around the tier where the upstream reads parameters from bodies\n    hint: set max_body = 65536 on the route (larger bodies are refused 413), or raise [server] max_key_body to what requests may carry, or use missing = \"reject\""
        ),
        "{}",
        warnings[0]
    );
    let refused = skipping.replace("policies = [\"p\"]", "policies = [\"p\"]\nmax_body = 65536");
    assert!(warnings_of(&path, &refused).is_empty());
    let rejecting = skipping.replace("missing = \"skip\"", "missing = \"reject\"");
    assert!(warnings_of(&path, &rejecting).is_empty());
}

/// A rate one request of which holds its key for hours, keyed by what a client can
/// invent: invented keys would fill the memory store's room for rate keys for as long
/// (a key that owes is never dropped), and new keys of every rate policy would then
/// share one overflow key each; on Redis, its memory for as long. Not for a key a client
/// cannot invent at will, nor for a key held an hour or less.
#[test]
fn a_rate_holding_an_inventable_key_for_hours_is_a_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("held.toml");
    let daily = |key: &str, limit: u32| {
        BASE.replace(
            "key = \"ip\"",
            &format!("key = \"{key}\"\nmissing = \"reject\""),
        )
        .replace("limit = 10", &format!("limit = {limit}"))
        .replace("period = \"1s\"", "period = \"1d\"")
    };
    let warnings = warnings_of(&path, &daily("header:x-api-key", 10));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].ends_with(
            "held.toml:7:1: warning: policy `p`: one request can hold its key for 2h 24m (period / limit, times the most a request is charged), and a client can invent keys of `header:x-api-key`: on the memory backend, keys invented at a rate the other tiers let through fill the store's room for rate keys (max_keys) for as long, and new keys of every rate policy then share one overflow key each\n    hint: key it by something a client cannot invent (an IPv6 client by its network: ip/64), put an ip/64 tier on its routes to bound how fast keys are invented, or make it a calendar quota (quota = …, window = \"day\"): its keys have a room of their own, which drops its least-used keys when full"
        ),
        "{}",
        warnings[0]
    );
    // An IPv6 client holds 2⁶⁴ addresses: `ip` (and a network narrower than its /64) is
    // a key it can invent, its network is not.
    let held = |text: &str| {
        let warnings = warnings_of(&path, text);
        let held: Vec<&String> = (warnings.iter())
            .filter(|w| w.contains("can hold its key for"))
            .collect();
        assert!(held.len() <= 1, "{warnings:?}");
        held.first().map(|w| {
            let (_, after) = w.split_once("hold its key for ").expect("the held warning");
            after.split(" (").next().unwrap_or_default().to_owned()
        })
    };
    assert_eq!(held(&daily("ip", 3)).as_deref(), Some("8h"));
    assert_eq!(held(&daily("ip/96", 3)).as_deref(), Some("8h"));
    assert_eq!(held(&daily("ip/64", 3)), None);
    // 100 a day holds a key 14 m 24 s a request; at a route cost of 5, 1 h 12 m.
    assert_eq!(held(&daily("header:x-api-key", 100)), None);
    let costly = daily("header:x-api-key", 100)
        .replace("policies = [\"p\"]", "policies = [\"p\"]\ncost = 5");
    assert_eq!(held(&costly).as_deref(), Some("1h 12m"));
    // An hour is not over an hour; 1 h 2 m 36 s is.
    assert_eq!(held(&daily("header:x-api-key", 24)), None);
    assert_eq!(
        held(&daily("header:x-api-key", 23)).as_deref(),
        Some("1h 2m 36s")
    );
    // A settle's value that never comes (its client gone) is charged at `max_cost`: 100
    // a day and a call of up to 50 units hold a key 12 h.
    let settled = daily("header:x-api-key", 100).replace(
        "burst = 5",
        "burst = 5\nreserve = 1\nsettle = \"response_header:x-cost\"\nmax_cost = 50",
    );
    assert_eq!(held(&settled).as_deref(), Some("12h"));
    // A policy no route (nor rule) names holds no key.
    let unnamed = daily("header:x-api-key", 10).replace("policies = [\"p\"]", "policies = []");
    assert_eq!(held(&unnamed), None);
    // Redis keeps each key to its expiry too: invented keys fill its memory.
    let redis = on_redis(&daily("header:x-api-key", 10));
    assert_eq!(held(&redis).as_deref(), Some("2h 24m"));
    let warnings = warnings_of(&path, &redis);
    assert!(
        warnings[0].contains("on Redis, keys invented"),
        "{warnings:?}"
    );
    assert!(!warnings[0].contains("calendar quota"), "{warnings:?}");
}

fn on_redis(text: &str) -> String {
    text.replace(
        "[upstreams.api]",
        "[store]\nbackend = \"redis\"\nurl = \"redis://127.0.0.1:6379\"\n\n[upstreams.api]",
    )
}

/// On Redis a calendar quota's key lives until its window ends (a month): one keyed by
/// what a client can invent fills Redis's memory at the rate keys are invented. Not on
/// the memory backend, whose quota keys have a room of their own that drops the
/// least-used, nor for a key a client cannot invent.
#[test]
fn a_calendar_quota_keyed_by_an_inventable_key_on_redis_is_a_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("quota.toml");
    let monthly = |key: &str| {
        BASE.replace(
            "key = \"ip\"\nlimit = 10\nperiod = \"1s\"\nburst = 5",
            &format!("key = \"{key}\"\nmissing = \"reject\"\nquota = 1000\nwindow = \"month\""),
        )
    };
    let quota = |text: &str| {
        let warnings = warnings_of(&path, text);
        warnings
            .iter()
            .filter(|w| w.contains("a calendar quota keyed by"))
            .count()
    };
    let text = on_redis(&monthly("header:x-api-key"));
    assert!(text.contains("window = \"month\""), "{text}");
    let warnings = warnings_of(&path, &text);
    assert_eq!(quota(&text), 1, "{warnings:?}");
    assert!(
        warnings
            .iter()
            .any(|w| w.contains("each key lives until its window ends")),
        "{warnings:?}"
    );
    assert_eq!(quota(&on_redis(&monthly("ip/64"))), 0);
    let memory =
        monthly("header:x-api-key") + "\n[store]\nstate_file = \"/tmp/tollgate-quota-state\"\n";
    assert_eq!(quota(&memory), 0);
}

/// A rate whose interval loses more than 1 % to whole nanoseconds is said: 600,000,000 a
/// second is kept as one a nanosecond, 67 % more than written. 500,000,000 a second
/// (2 ns exactly) and 3 a second (333,333,333 ns, a billionth off) are not.
#[test]
fn a_rate_rounded_to_whole_nanoseconds_is_a_warning() {
    let dir = tempfile::tempdir().expect("tempdir");
    let path = dir.path().join("fast.toml");
    let with_limit = |limit: &str| {
        BASE.replace("limit = 10", &format!("limit = {limit}"))
            .replace("key = \"ip\"", "key = \"ip/24\"")
    };
    let warnings = warnings_of(&path, &with_limit("600_000_000"));
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert!(
        warnings[0].ends_with("fast.toml:9:9: warning: policy `p`: period / limit is 1.667 ns, kept as 1 ns (whole nanoseconds): the policy admits 67 % more than 600000000 per 1s\n    hint: count in larger units (a cost of thousands of tokens or bytes: `settle_unit`, a price table's units) so that period / limit is 100 ns or more"),
        "{}",
        warnings[0]
    );
    for exact in ["500_000_000", "3"] {
        let none = warnings_of(&path, &with_limit(exact));
        assert!(none.is_empty(), "{exact}: {none:?}");
    }
    // A key's own numbers, and a limit of envoyproxy/ratelimit's YAML, are said alike.
    let overridden = with_limit("3").replace(
        "burst = 5\n",
        "burst = 5\n[policies.p.overrides.\"10.0.0.0\"]\nlimit = 600_000_000\n",
    );
    // The one warning `text` gives, which says `what`.
    let one_saying = |text: &str, what: &str| {
        let warnings = warnings_of(&path, text);
        assert_eq!(warnings.len(), 1, "{warnings:?}");
        assert!(warnings[0].contains(what), "{}", warnings[0]);
    };
    one_saying(
        &overridden,
        "policy `p` override `10.0.0.0`: period / limit is 1.667 ns",
    );
    let yaml = dir.path().join("limits.yaml");
    std::fs::write(&yaml, "domain: d\ndescriptors:\n  - key: k\n    rate_limit:\n      unit: second\n      requests_per_unit: 600000000\n").expect("write");
    let with_yaml = format!(
        "{}\n[rls]\nlisten = \"127.0.0.1:0\"\nratelimit_config = \"{}\"\n",
        with_limit("3"),
        yaml.display()
    );
    one_saying(&with_yaml, "policy `d.k`: period / limit is 1.667 ns");
}
