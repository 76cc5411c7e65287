//! The rate limit service's access lines under `access_log_rate`: its calls run on the
//! main runtime's threads, one per core, and a flood of refused calls over many
//! connections writes at most the service's one share of the budget (a worker's, the
//! data plane's workers sharing the rest), counting the others as dropped.

use std::time::{Duration, Instant};

use super::rls_ops::{config, rls_lines};
use crate::support::*;

#[tokio::test]
async fn a_flood_of_refused_calls_writes_at_most_the_services_share() {
    let up = Upstream::start().await;
    let dir = tempfile::tempdir().expect("tempdir");
    // One worker and the service: two shares of 20 lines a second, 10 each.
    let gw = Process::run(&config(dir.path(), &up, "access_log_rate = 20"));
    let addr = gw.rls.expect("the ready file names the rls address");
    let (tasks, calls) = (8, 100);
    let started = Instant::now();
    let mut flood = Vec::new();
    for _ in 0..tasks {
        flood.push(tokio::spawn(async move {
            let mut rls = RlsClient::connect(addr).await;
            for _ in 0..calls {
                let d = vec![descriptor(&[("tenant", "flooder"), ("kind", "api")])];
                rls.ask("edge", d).await;
            }
        }));
    }
    for task in flood {
        task.await.expect("flood task");
    }
    let took = started.elapsed();
    let admin = format!("http://{}/metrics", gw.admin.expect("admin"));
    let dropped = || async {
        metric(
            &get(&admin, &[]).await.text(),
            "tollgate_access_log_dropped_total",
        ) as usize
    };
    // A line after the budget refilled adds the drops to the counter.
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    let mut rls = RlsClient::connect(addr).await;
    rls.ask(
        "edge",
        vec![descriptor(&[("tenant", "flooder"), ("kind", "api")])],
    )
    .await;
    let sent = tasks * calls + 1;
    let settled = eventually_async(Duration::from_secs(20), || async {
        rls_lines(&gw).len() + dropped().await == sent
    })
    .await;
    let lines = rls_lines(&gw).len();
    assert!(
        settled,
        "{lines} lines + {} dropped = {sent} calls",
        dropped().await
    );
    // A second's share at the start, 10 a second after, and the last call's line.
    let bound = 10.0 * (took.as_secs_f64() + 1.2) + 10.0 + 1.0;
    assert!(
        (lines as f64) <= bound && lines >= 10,
        "{lines} lines in {took:?} (bound {bound:.0})"
    );
}
