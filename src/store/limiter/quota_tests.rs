//! Calendar quotas through the limiter's one door, on the embedded store, with the fake
//! clock driving the calendar: resets at local midnight and on the anchor day (DST and
//! leap days included), denials that use nothing in any tier, a raised quota that
//! unblocks at once, the headers' numbers, and a route without limits after a refusal.

use std::sync::Arc;

use super::*;
use crate::clock::FakeClock;
use crate::config::Config;

const S: u64 = 1_000_000_000;

struct Bench {
    config: Config,
    limiter: Limiter,
    plans: Box<[PolicyPlan]>,
    clock: FakeClock,
}

/// A gateway's limiter over `policies` (TOML), one route `/` listing `route_policies`,
/// the fake clock at the Unix instant `unix_s`.
fn bench(policies: &str, route_policies: &str, unix_s: u64) -> Bench {
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"memory\"\n[upstreams.app]\ntargets = [\"http://127.0.0.1:9\"]\n{policies}\n[[routes]]\nname = \"r\"\npath = \"/\"\nupstream = \"app\"\npolicies = {route_policies}\n"
    );
    let config = crate::config::compile(std::path::Path::new("quota.toml"), &text)
        .unwrap_or_else(|e| panic!("{e}"));
    let local = Arc::new(MemoryStore::new(1 << 16));
    let metrics = Arc::new(Metrics::new());
    let limiter = Limiter::new(Store::Memory(local), metrics.clone());
    let plans = config.routes[0]
        .policies
        .iter()
        .map(|p| PolicyPlan::of(limiter.keys(), p, &metrics))
        .collect();
    let clock = FakeClock::at(0);
    clock.set((unix_s * S).saturating_sub(crate::clock::Clock::unix_ns_at(&clock, 0)));
    Bench {
        config,
        limiter,
        plans,
        clock,
    }
}

impl Bench {
    fn check(&self, key: &str) -> Admission {
        let mut admission = Admission::default();
        self.check_into((&self.config.routes[0], &self.plans), key, &mut admission);
        admission
    }

    /// Decides a request for `key` on `route` into `admission`, as the proxy does.
    fn check_into(&self, route: (&Route, &[PolicyPlan]), key: &str, admission: &mut Admission) {
        let mut headers = http::HeaderMap::new();
        headers.insert("x-key", http::HeaderValue::from_str(key).expect("value"));
        let (method, uri) = (http::Method::GET, http::Uri::from_static("/"));
        let view = RequestView {
            method: &method,
            uri: &uri,
            headers: &headers,
            client_ip: std::net::IpAddr::from([127, 0, 0, 1]),
            route: "r",
            body: None,
        };
        crate::clock::paused_runtime().block_on(self.limiter.check_request(
            route,
            &view,
            &self.clock,
            admission,
        ));
    }

    fn admitted(&self, key: &str) -> bool {
        self.check(key).outcome() == Outcome::Admitted
    }

    /// Admits `key` until refused; how many passed (at most `cap`).
    fn drain(&self, key: &str, cap: u64) -> u64 {
        (0..cap).take_while(|_| self.admitted(key)).count() as u64
    }

    fn at(&self, zone: &str, civil: &str) {
        let dt: jiff::civil::DateTime = civil.parse().expect("civil time");
        let unix = dt
            .to_zoned(jiff::tz::TimeZone::get(zone).expect("zone"))
            .expect("in range")
            .timestamp()
            .as_second();
        let unix = u64::try_from(unix).expect("after 1970");
        let offset = crate::clock::Clock::unix_ns_at(&self.clock, 0);
        self.clock.set(unix * S - offset);
    }
}

const DAILY: &str = "[policies.daily]\nkey = \"header:x-key\"\nquota = 3\nwindow = \"day\"\ntimezone = \"Europe/Berlin\"\n";

#[test]
fn a_daily_quota_resets_at_local_midnight_also_on_a_23_hour_day() {
    let b = bench(DAILY, "[\"daily\"]", 0);
    // 2026-03-29 has 23 hours in Berlin.
    b.at("Europe/Berlin", "2026-03-29T00:00:01");
    assert_eq!(b.drain("k", 10), 3);
    b.at("Europe/Berlin", "2026-03-29T23:59:59");
    assert!(!b.admitted("k"), "still the same day");
    let refused = b.check("k");
    let wait = refused.wait_ns();
    assert!(wait > 0 && wait <= S, "the wait is until midnight: {wait}");
    b.at("Europe/Berlin", "2026-03-30T00:00:00");
    assert_eq!(b.drain("k", 10), 3, "a new day, a new quota");
    assert_eq!(b.drain("other", 10), 3, "keys are counted apart");
}

#[test]
fn a_monthly_quota_starts_on_its_billing_day_across_a_leap_february() {
    let monthly = "[policies.monthly]\nkey = \"header:x-key\"\nquota = 2\nwindow = \"month\"\ntimezone = \"America/New_York\"\nanchor = 29\n";
    assert!(
        crate::config::compile(
            std::path::Path::new("q.toml"),
            &format!("[server]\nlisten = \"127.0.0.1:0\"\n{monthly}")
        )
        .is_err_and(|e| e.to_string().contains("anchor")),
        "anchor 29 is refused (not every month has it)"
    );
    let monthly = monthly.replace("anchor = 29", "anchor = 28");
    let b = bench(&monthly, "[\"monthly\"]", 0);
    b.at("America/New_York", "2028-02-28T00:00:00");
    assert_eq!(b.drain("k", 5), 2);
    b.at("America/New_York", "2028-03-27T23:59:59");
    assert!(
        !b.admitted("k"),
        "the leap day and March up to the 27th are the same window"
    );
    b.at("America/New_York", "2028-03-28T00:00:00");
    assert_eq!(b.drain("k", 5), 2);
}

#[test]
fn a_denial_uses_nothing_in_any_tier() {
    let policies = format!(
        "{DAILY}[policies.rate]\nkey = \"header:x-key\"\nlimit = 1000\nperiod = \"1s\"\nburst = 5\n"
    );
    // The quota first: a refusal by the rate tier after it gives its unit back.
    let b = bench(&policies, "[\"daily\", \"rate\"]", 1_800_000_000);
    assert_eq!(b.drain("k", 10), 3, "the quota refuses first");
    for _ in 0..20 {
        assert!(!b.admitted("k"));
    }
    // A day later the rate tier has refilled and the quota is whole: nothing was used.
    b.clock.advance(86_400 * S);
    assert_eq!(b.drain("k", 10), 3);
    // The rate tier first, and it refuses: the quota keeps its units.
    let b = bench(&policies, "[\"rate\", \"daily\"]", 1_800_000_000);
    let policies_tight = policies.replace("burst = 5", "burst = 1");
    let tight = bench(&policies_tight, "[\"daily\", \"rate\"]", 1_800_000_000);
    assert!(tight.admitted("k"));
    for _ in 0..10 {
        assert!(!tight.admitted("k"), "the rate tier refuses");
    }
    tight.clock.advance(S);
    assert!(tight.admitted("k"), "the quota still had two units");
    tight.clock.advance(S);
    assert!(tight.admitted("k"));
    tight.clock.advance(S);
    assert!(!tight.admitted("k"), "and now none");
    assert_eq!(b.drain("k", 10), 3);
}

#[test]
fn a_quota_raised_by_a_runtime_override_unblocks_at_once_and_keeps_the_usage() {
    let b = bench(DAILY, "[\"daily\"]", 1_800_000_000);
    assert_eq!(b.drain("k", 10), 3);
    let policy = b.config.policy("daily").expect("policy");
    let spec = crate::config::override_spec::OverrideSpec {
        quota: Some(5),
        ..Default::default()
    };
    let applied = crate::config::compile::runtime::check_override(&b.config, policy, &spec)
        .unwrap_or_else(|p| panic!("{p:?}"));
    let key = b.limiter.keys().key_of("daily", &["k".to_owned()]);
    let value = crate::store::overrides::KeyOverride {
        applied,
        expires_at_ms: None,
    };
    b.limiter.overrides().set(key.hash, Some(value));
    assert_eq!(b.drain("k", 10), 2, "5 in all, 3 of them used before");
}

#[test]
fn headers_count_units_left_and_seconds_to_the_reset() {
    let b = bench(DAILY, "[\"daily\"]", 0);
    b.at("Europe/Berlin", "2026-12-02T23:00:00");
    let a = b.check("k");
    let report = a.reported().expect("a report");
    assert_eq!(report.remaining, 2);
    assert_eq!(report.until_full_ns, 3_600 * S, "an hour to midnight");
    assert_eq!(report.window_s, Some(86_400));
    assert!(b.admitted("k") && b.admitted("k"));
    let refused = b.check("k");
    assert_eq!(refused.wait_ns(), 3_600 * S);
}

#[test]
fn a_file_override_sets_a_keys_quota_and_bad_calendars_are_refused_with_a_hint() {
    let policies = DAILY.to_owned() + "[policies.daily.overrides]\n\"vip\" = { quota = 5 }\n";
    let b = bench(&policies, "[\"daily\"]", 1_800_000_000);
    assert_eq!(b.drain("vip", 10), 5);
    assert_eq!(b.drain("other", 10), 3);
    let compile = |policy: &str| {
        let text =
            format!("[server]\nlisten = \"127.0.0.1:0\"\n[policies.q]\nkey = \"ip\"\n{policy}");
        crate::config::compile(std::path::Path::new("q.toml"), &text)
            .err()
            .map(|e| e.to_string())
            .unwrap_or_default()
    };
    let zone = compile("quota = 5\nwindow = \"day\"\ntimezone = \"Mars/Olympus\"\n");
    assert!(
        zone.contains("not a time zone of the IANA database"),
        "{zone}"
    );
    let window = compile("quota = 5\nwindow = \"year\"\n");
    assert!(window.contains("not a calendar window"), "{window}");
    let mixed = compile("quota = 5\nwindow = \"day\"\nlimit = 5\n");
    assert!(mixed.contains("does not apply to it"), "{mixed}");
    let weekday = compile("quota = 5\nwindow = \"week\"\nanchor = \"someday\"\n");
    assert!(weekday.contains("monday"), "{weekday}");
    let bytes = compile("quota = 5\nwindow = \"day\"\nsettle = \"response_bytes\"\n");
    assert!(bytes.contains("header or trailer"), "{bytes}");
    let lease = compile("quota = 5\nwindow = \"day\"\nsync = \"lease\"\n");
    assert!(lease.contains("decided exactly"), "{lease}");
    let no_window = compile("quota = 5\n");
    assert!(no_window.contains("no window"), "{no_window}");
}

/// A route without limits decides nothing, whatever the admission it is handed held: the
/// request is admitted, with no tier, no report and no refusal left from the request
/// before, and the clock read for the upstream's pick.
#[test]
fn a_route_without_limits_admits_with_nothing_left_from_the_admission_before() {
    let b = bench(DAILY, "[\"daily\"]", 1_800_000_000);
    assert_eq!(b.drain("k", 10), 3);
    let mut admission = b.check("k");
    assert!(matches!(admission.outcome(), Outcome::RateLimited { .. }));
    assert!(admission.reported().is_some());
    let open = crate::config::compile(
        std::path::Path::new("open.toml"),
        "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.app]\ntargets = [\"http://127.0.0.1:9\"]\n[[routes]]\nname = \"open\"\npath = \"/\"\nupstream = \"app\"\n",
    )
    .unwrap_or_else(|e| panic!("{e}"));
    b.clock.advance(7 * S);
    b.check_into((&open.routes[0], &[]), "k", &mut admission);
    assert_eq!(admission.outcome(), Outcome::Admitted);
    assert!(admission.reported().is_none());
    assert_eq!(
        admission.applied().count(),
        0,
        "no policy of the route before"
    );
    assert_eq!(admission.rate_reports().count(), 0);
    assert_eq!(admission.violated().count(), 0);
    assert_eq!(admission.wait_ns(), 0);
    assert_eq!(admission.now(), crate::clock::Clock::now_ns(&b.clock));
    // The limited route's key is as the refusal left it: nothing was charged.
    assert!(!b.admitted("k"));
}
