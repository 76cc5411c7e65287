//! Calendar quotas an attacker cannot bend, replayed through the gateway: a flood of
//! invented quota keys takes no room from other policies (nor after a restart with the
//! state file), a reservation made before midnight refunds nothing into the next day, a
//! debt settled two days late leaves today's usage alone, and a changed calendar starts
//! usage at zero with a truthful Retry-After (memory, state file, Redis). A reset reaching
//! the fleet: `quota_redis.rs`.

use std::time::Duration;

use crate::support::*;

/// The fake clock starts at 1000 s: 2026-01-01T00:16:40Z.
const TO_MIDNIGHT_S: u64 = 86_400 - 1_000;

/// A monthly quota keyed on a client-chosen API key and an unrelated per-client rate, in
/// a store of 512 keys.
fn flood_target(store: &str) -> String {
    Fixture::new()
        .server("workers = 1")
        .store(format!("backend = \"memory\"\nmax_keys = 512\n{store}"))
        .policy_raw(
            "monthly",
            "key = \"header:x-api-key\"\nquota = 1000\nwindow = \"month\"\n",
        )
        .policy("per-client", "header:x-client", 1, "1h", 1)
        .route("quota", "/q", "api", &["monthly"])
        .route("rate", "/r", "api", &["per-client"])
        .build()
}

/// Sends `n` requests to `/q`, each with an invented API key, 16 at a time, half over
/// HTTP/1.1 and half over HTTP/2; their statuses.
async fn flood(gw: &TestGateway, prefix: &str, n: usize) -> Vec<u16> {
    let url = gw.url("/q");
    let mut statuses = Vec::with_capacity(n);
    for batch in (0..n).collect::<Vec<_>>().chunks(16) {
        let calls = batch.iter().map(|i| {
            let client = if i % 2 == 0 { http1() } else { http2() };
            let (url, key) = (url.clone(), format!("{prefix}-{i}"));
            async move {
                send(&client, "GET", &url, &[("x-api-key", &key)], b"")
                    .await
                    .status
                    .as_u16()
            }
        });
        statuses.extend(futures_util::future::join_all(calls).await);
    }
    statuses
}

/// Ten new clients of the rate policy, each once: how many were admitted.
async fn new_rate_clients(gw: &TestGateway, prefix: &str) -> usize {
    let mut admitted = 0;
    for i in 0..10 {
        let client = if i % 2 == 0 { http1() } else { http2() };
        let id = format!("{prefix}-{i}");
        let r = send(&client, "GET", &gw.url("/r"), &[("x-client", &id)], b"").await;
        admitted += usize::from(r.status == 200);
    }
    admitted
}

#[tokio::test]
async fn invented_quota_keys_take_no_room_from_other_policies_even_after_a_restart() {
    let up = Upstream::start().await;
    let keep = tempfile::tempdir().expect("tempdir");
    let file = keep.path().join("state");
    let toml = flood_target(&format!(
        "state_file = {:?}\nstate_interval = \"1h\"",
        file.display().to_string()
    ));
    let mut first = TestGateway::start_real_clock(&toml, &up.url()).await;
    // A real customer before the flood, and three times the store's keys invented.
    let real = |gw: &TestGateway| {
        let url = gw.url("/q");
        async move { send(&http2(), "GET", &url, &[("x-api-key", "real")], b"").await }
    };
    assert_eq!(real(&first).await.num("x-ratelimit-remaining"), 999);
    let statuses = flood(&first, "invented", 1_500).await;
    assert!(
        statuses.iter().all(|&s| s == 200),
        "each invented key has a budget of its own"
    );
    assert_eq!(
        new_rate_clients(&first, "before-restart").await,
        10,
        "the rate policy's new clients are untouched by the quota flood"
    );
    let after = real(&first).await;
    assert_eq!(after.status, 200);
    assert!(
        after.num("x-ratelimit-remaining") <= 998,
        "the real customer's usage is kept (or read at a floor above it): {after:?}"
    );
    // A new customer starts at the floor the flood left: a few units, not the quota.
    let newcomer = send(
        &http1(),
        "GET",
        &first.url("/q"),
        &[("x-api-key", "new")],
        b"",
    )
    .await;
    assert_eq!(newcomer.status, 200);
    assert!(newcomer.num("x-ratelimit-remaining") >= 980, "{newcomer:?}");
    first.gateway.take().expect("running").shutdown().await;

    let second = TestGateway::start_real_clock(&toml, &up.url()).await;
    assert_eq!(
        new_rate_clients(&second, "after-restart").await,
        10,
        "the state file brings the quota keys back into their own area"
    );
    let again = real(&second).await;
    assert!(again.num("x-ratelimit-remaining") <= 997, "{again:?}");
}

/// A token quota of 100 a day, 50 reserved a request, settled from the upstream's header.
fn reserved_daily() -> String {
    Fixture::new()
        .server("workers = 1")
        .store("backend = \"memory\"")
        .policy_raw(
            "tokens",
            "key = \"header:x-key\"\nquota = 100\nwindow = \"day\"\nreserve = 50\nsettle = \"response_header:x-usage-tokens\"\n",
        )
        .route("api", "/", "api", &["tokens"])
        .build()
}

#[tokio::test]
async fn a_reservation_made_before_midnight_gives_nothing_back_to_the_next_day() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&reserved_daily(), &up.url()).await;
    // Two slow calls, over HTTP/1.1 and HTTP/2, reserve the whole day just before midnight.
    let slow = [http1(), http2()].map(|client| {
        let url = gw.url("/v1/usage");
        tokio::spawn(async move {
            let headers = [("x-key", "acme"), ("x-usage", "1"), ("x-delay-ms", "4000")];
            send(&client, "GET", &url, &headers, b"").await.status
        })
    });
    let upstream_saw_both = eventually(Duration::from_secs(10), || up.requests() == 2).await;
    assert!(upstream_saw_both);
    gw.advance(TO_MIDNIGHT_S * S);
    // The new day's 100 units, used at once.
    for _ in 0..2 {
        let headers = [("x-key", "acme"), ("x-usage", "50")];
        let r = send(&http1(), "GET", &gw.url("/v1/usage"), &headers, b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    for call in slow {
        assert_eq!(call.await.expect("call"), 200);
    }
    // The slow calls settled at 1 unit each after midnight (before their answers reached
    // the client): what they reserved yesterday is yesterday's; today stays used up.
    assert_eq!(up.requests(), 4);
    let today = get(&gw.admin_url("/admin/limits/tokens/acme"), &[])
        .await
        .json();
    assert_eq!(today["used"], 100, "{today}");
    let refused = send(&http2(), "GET", &gw.url("/"), &[("x-key", "acme")], b"").await;
    assert_eq!(refused.status, 429, "at most the quota in one window");
    assert_eq!(refused.num("retry-after"), 86_400);
}

/// A call admitted before one midnight and settled after the next (its answer took over a
/// day) owes its debt to a day long gone: today's usage is not touched by it (it was
/// overwritten with the debt alone, so a day-long call reset its key's day).
#[tokio::test]
async fn a_debt_settled_two_days_late_leaves_todays_usage_as_it_is() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&reserved_daily(), &up.url()).await;
    let slow = tokio::spawn({
        let url = gw.url("/v1/usage");
        async move {
            let headers = [("x-key", "acme"), ("x-usage", "90"), ("x-delay-ms", "4000")];
            send(&http1(), "GET", &url, &headers, b"").await.status
        }
    });
    assert!(eventually(Duration::from_secs(10), || up.requests() == 1).await);
    gw.advance((TO_MIDNIGHT_S + 86_400) * S);
    for _ in 0..2 {
        let headers = [("x-key", "acme"), ("x-usage", "50")];
        let r = send(&http1(), "GET", &gw.url("/v1/usage"), &headers, b"").await;
        assert_eq!(r.status, 200, "{}", r.text());
    }
    assert_eq!(slow.await.expect("call"), 200);
    let today = get(&gw.admin_url("/admin/limits/tokens/acme"), &[])
        .await
        .json();
    assert_eq!(today["used"], 100, "{today}");
    let refused = send(&http2(), "GET", &gw.url("/"), &[("x-key", "acme")], b"").await;
    assert_eq!(refused.status, 429, "today stays used up");
}

/// A quota of 3 per `window` (its lines: `window = "month"`, an anchor, …).
fn monthly_then(store: &str, window: &str) -> String {
    Fixture::new()
        .server("workers = 1")
        .store(store)
        .policy_raw(
            "plan",
            format!("key = \"header:x-key\"\nquota = 3\n{window}\n"),
        )
        .route("api", "/", "api", &["plan"])
        .build()
}

const MONTH: &str = "window = \"month\"";
const DAY: &str = "window = \"day\"";

async fn plan_call(gw: &TestGateway, client: &HttpClient) -> Got {
    send(client, "GET", &gw.url("/"), &[("x-key", "acme")], b"").await
}

/// Uses 2 of the key's 3 a month (`month`: its window lines, `said` how the reload names
/// it), turns the window into a day by reload, and checks that the key starts the day at
/// zero and is refused on its 4th call.
async fn month_to_day(gw: &TestGateway, up: &Upstream, store: &str, said: &str) {
    for client in [http1(), http2()] {
        assert_eq!(plan_call(gw, &client).await.status, 200);
    }
    gw.rewrite(&monthly_then(store, DAY), &up.url());
    let answer = send(&http1(), "POST", &gw.admin_url("/admin/reload"), &[], b"").await;
    assert_eq!(answer.status, 200, "{}", answer.text());
    let warnings = answer.json()["report"]["warnings"].to_string();
    assert!(
        warnings.contains(&format!("calendar changed ({said} -> day in UTC)"))
            && warnings.contains("starts at zero"),
        "{warnings}"
    );
    let state = get(&gw.admin_url("/admin/limits/plan/acme"), &[])
        .await
        .json();
    assert_eq!(
        (state["used"].as_u64(), state["window"].as_str()),
        (Some(0), Some("day")),
        "{state}"
    );
    for client in [http1(), http2(), http1()] {
        assert_eq!(plan_call(gw, &client).await.status, 200);
    }
    let refused = plan_call(gw, &http2()).await;
    assert_eq!(refused.status, 429);
}

#[tokio::test]
async fn a_changed_calendar_starts_usage_at_zero_and_says_the_real_reset() {
    let up = Upstream::start().await;
    let keep = tempfile::tempdir().expect("tempdir");
    let store = format!(
        "backend = \"memory\"\nstate_file = {:?}\nstate_interval = \"1h\"",
        keep.path().join("state").display().to_string()
    );
    let gw = TestGateway::start(&monthly_then(&store, MONTH), &up.url()).await;
    month_to_day(&gw, &up, &store, "month from day 1 in UTC").await;
    let refused = plan_call(&gw, &http1()).await;
    assert_eq!(
        refused.num("retry-after"),
        TO_MIDNIGHT_S,
        "the new day's end"
    );
    let state = get(&gw.admin_url("/admin/limits/plan/acme"), &[])
        .await
        .json();
    assert_eq!(state["resets_at"], "2026-01-02T00:00:00Z", "{state}");

    // A restart on the month's state file under the day's calendar: no lockout either.
    let store = format!(
        "backend = \"memory\"\nstate_file = {:?}\nstate_interval = \"1h\"",
        keep.path().join("restarted").display().to_string()
    );
    let mut monthly = TestGateway::start(&monthly_then(&store, MONTH), &up.url()).await;
    for _ in 0..3 {
        assert_eq!(plan_call(&monthly, &http1()).await.status, 200);
    }
    monthly.gateway.take().expect("running").shutdown().await;
    let daily = TestGateway::start(&monthly_then(&store, DAY), &up.url()).await;
    assert_eq!(plan_call(&daily, &http2()).await.status, 200, "no lockout");
    let state = get(&daily.admin_url("/admin/limits/plan/acme"), &[])
        .await
        .json();
    assert_eq!(state["used"], 1, "{state}");
}

#[tokio::test]
async fn a_changed_calendar_on_redis_starts_usage_at_zero_with_a_truthful_retry_after() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = redis.store_toml();
    // A month that does not end at the coming midnight (then both calendars would share
    // the window, and its usage would rightly carry over).
    let now = jiff::Timestamp::now();
    let midnight = now
        .to_zoned(jiff::tz::TimeZone::UTC)
        .tomorrow()
        .and_then(|d| d.start_of_day())
        .expect("tomorrow");
    let anchor = if midnight.day() == 2 { 3 } else { 2 };
    let month = format!("{MONTH}\nanchor = {anchor}");
    let gw = TestGateway::start_real_clock(&monthly_then(&store, &month), &up.url()).await;
    gw.wait_for_store_with("/", "x-key", "warm-up").await;
    let said = format!("month from day {anchor} in UTC");
    month_to_day(&gw, &up, &store, &said).await;
    let refused = plan_call(&gw, &http1()).await;
    let to_midnight = jiff::Timestamp::now()
        .duration_until(midnight.timestamp())
        .as_secs() as u64;
    let retry_after = refused.num("retry-after");
    assert!(
        (to_midnight.saturating_sub(5)..=to_midnight + 1).contains(&retry_after),
        "Retry-After {retry_after} s names the next UTC midnight, {to_midnight} s away"
    );
}

#[tokio::test]
async fn check_warns_of_a_quota_keyed_on_a_value_clients_choose() {
    let toml = flood_target("state_file = \"state\"").replace("{upstream}", "http://127.0.0.1:9");
    let (passed, all) = check_text(&toml);
    assert!(passed, "a warning, not an error: {all}");
    assert!(
        all.contains("policy `monthly` is a calendar quota keyed on `header:x-api-key`, a value clients choose"),
        "{all}"
    );
    assert!(
        !all.contains("policy `per-client` is a calendar quota"),
        "{all}"
    );
}

#[tokio::test]
async fn a_quota_override_answers_in_the_quotas_own_words() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&monthly_then("backend = \"memory\"", MONTH), &up.url()).await;
    let put = send(
        &http1(),
        "PUT",
        &gw.admin_url("/admin/overrides/plan/acme"),
        &[("content-type", "application/json")],
        br#"{"quota": 50}"#,
    )
    .await;
    assert_eq!(put.status, 200, "{}", put.text());
    assert_eq!(
        put.json()["applied"],
        serde_json::json!({"kind": "quota", "quota": 50, "window": "month", "timezone": "UTC"}),
    );
}

/// A reset key of a full quota area is admitted again: a key the area does not hold reads
/// at the area's floor (the most a dropped key had used), so forgetting it had left it
/// there, refused for the rest of the month, while the reset said it was done.
#[tokio::test]
async fn a_reset_key_of_a_full_quota_area_starts_at_zero_not_at_the_floor() {
    let up = Upstream::start().await;
    // A quota of 1: every invented key uses all of it, so the floor the flood leaves is
    // the whole quota.
    let toml = flood_target("").replace("quota = 1000", "quota = 1");
    let gw = TestGateway::start(&toml, &up.url()).await;
    let statuses = flood(&gw, "invented", 600).await;
    assert_eq!(statuses[0], 200);
    assert_eq!(
        statuses.last(),
        Some(&429),
        "the area filled, and the floor it raised is the whole quota"
    );
    for (client, key) in [(http1(), "victim-1"), (http2(), "victim-2")] {
        let url = gw.url("/q");
        let call = || {
            let (client, url) = (client.clone(), url.clone());
            async move { send(&client, "GET", &url, &[("x-api-key", key)], b"").await }
        };
        assert_eq!(call().await.status, 429, "a new key starts at the floor");
        let reset = gw.admin_url(&format!("/admin/reset/monthly/{key}"));
        let answer = send(&http1(), "POST", &reset, &[], b"").await;
        assert_eq!(answer.status, 200, "{}", answer.text());
        let state = get(&gw.admin_url(&format!("/admin/limits/monthly/{key}")), &[])
            .await
            .json();
        assert_eq!(state["used"], 0, "{state}");
        assert_eq!(call().await.status, 200, "the reset key is admitted");
        assert_eq!(call().await.status, 429, "and charged");
    }
}
