//! Waiting for a condition instead of sleeping and hoping: tests run on small, busy
//! machines, so every wait polls with a generous deadline.

use std::future::Future;
use std::time::{Duration, Instant};

/// How often a condition is checked.
const EVERY: Duration = Duration::from_millis(50);

/// Polls `cond` every 50 ms until it holds or `limit` has passed; whether it held.
pub async fn eventually(limit: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond() {
            return true;
        }
        tokio::time::sleep(EVERY).await;
    }
    cond()
}

/// [`eventually`] for a condition that has to await (an HTTP request, say).
pub async fn eventually_async<F, Fut>(limit: Duration, mut cond: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = Instant::now() + limit;
    while Instant::now() < deadline {
        if cond().await {
            return true;
        }
        tokio::time::sleep(EVERY).await;
    }
    cond().await
}

/// Sends `request` until it is answered with anything but 503 (a Redis Cluster is
/// connected in the background after start; a 503 until then charges nothing), within
/// `limit`: the last answer.
pub async fn past_503<F, Fut>(limit: Duration, mut request: F) -> super::Got
where
    F: FnMut() -> Fut,
    Fut: Future<Output = super::Got>,
{
    let deadline = Instant::now() + limit;
    loop {
        let answer = request().await;
        if answer.status != 503 || Instant::now() >= deadline {
            return answer;
        }
        tokio::time::sleep(EVERY).await;
    }
}
