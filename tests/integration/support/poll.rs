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

/// Reads `read` every 50 ms until its value has held for `quiet` (work still in flight,
/// such as a settle the gateway sends after a response, has landed), or `limit` has
/// passed; the last value read.
pub async fn steady<T: PartialEq>(
    quiet: Duration,
    limit: Duration,
    mut read: impl FnMut() -> T,
) -> T {
    let deadline = Instant::now() + limit;
    let mut last = read();
    let mut since = Instant::now();
    while Instant::now() < deadline && since.elapsed() < quiet {
        tokio::time::sleep(EVERY).await;
        let now = read();
        if now != last {
            last = now;
            since = Instant::now();
        }
    }
    last
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
