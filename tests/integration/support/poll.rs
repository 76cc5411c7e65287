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
