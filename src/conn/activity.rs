//! Requests in flight on one connection, for its idle timeout: a request counts from its
//! start until its response body is done (or dropped).

use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

/// Requests in flight on one connection (a request counts until its response body
/// ends), and when the last one ended.
#[derive(Debug)]
pub struct Activity {
    opened: Instant,
    in_flight: AtomicUsize,
    /// Milliseconds after `opened` when the connection last went idle.
    idle_since_ms: AtomicU64,
}

impl Default for Activity {
    fn default() -> Self {
        Self {
            opened: Instant::now(),
            in_flight: AtomicUsize::new(0),
            idle_since_ms: AtomicU64::new(0),
        }
    }
}

impl Activity {
    pub fn start(&self) {
        self.in_flight.fetch_add(1, Ordering::Relaxed);
    }

    pub fn end(&self) {
        if self.in_flight.fetch_sub(1, Ordering::Relaxed) == 1 {
            let ms = u64::try_from(self.opened.elapsed().as_millis()).unwrap_or(u64::MAX);
            self.idle_since_ms.store(ms, Ordering::Relaxed);
        }
    }

    /// Requests in flight now.
    pub fn in_flight(&self) -> usize {
        self.in_flight.load(Ordering::Relaxed)
    }

    /// When the connection may be closed for idleness, if nothing starts before then.
    pub fn idle_deadline(&self, idle_timeout: Duration) -> Option<Instant> {
        if self.in_flight.load(Ordering::Relaxed) > 0 {
            return None;
        }
        let since = Duration::from_millis(self.idle_since_ms.load(Ordering::Relaxed));
        Some(self.opened + since + idle_timeout)
    }
}

/// Counts a request from its start until its response (body included) is done.
pub struct InFlight(Arc<Activity>);

impl InFlight {
    pub fn new(activity: Arc<Activity>) -> Self {
        activity.start();
        Self(activity)
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.end();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn idle_deadline_waits_for_requests_in_flight() {
        crate::clock::paused_runtime().block_on(async {
            let a = Arc::new(Activity::default());
            let limit = Duration::from_secs(60);
            assert_eq!(a.idle_deadline(limit), Some(a.opened + limit));
            let req = InFlight::new(a.clone());
            assert_eq!(a.idle_deadline(limit), None);
            tokio::time::advance(Duration::from_secs(100)).await;
            drop(req);
            let d = a.idle_deadline(limit).expect("idle");
            assert!(
                d >= a.opened + Duration::from_secs(160),
                "{:?}",
                d - a.opened
            );
        });
    }
}
