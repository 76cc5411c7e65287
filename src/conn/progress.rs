//! Whether an HTTP/2 stream's response is waiting for its client to read, shared by the
//! response body (which records it) and the stream's send watchdog (which acts on it).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

tokio::task_local! {
    static STREAM: Arc<SendProgress>;
}

/// Whether a stream's response is waiting for the client, and since when.
#[derive(Debug)]
pub struct SendProgress {
    base: Instant,
    /// Milliseconds after `base` when the body last handed data over and was not asked
    /// again; `u64::MAX` while it is not waiting.
    waiting_since_ms: AtomicU64,
}

impl Default for SendProgress {
    fn default() -> Self {
        Self {
            base: Instant::now(),
            waiting_since_ms: AtomicU64::new(u64::MAX),
        }
    }
}

impl SendProgress {
    /// The body handed a frame over: from now on the client owes a read.
    pub fn handed(&self) {
        let ms = u64::try_from(self.base.elapsed().as_millis()).unwrap_or(u64::MAX - 1);
        self.waiting_since_ms.store(ms, Ordering::Relaxed);
    }

    /// The body was asked for more: the client took what it had.
    pub fn asked(&self) {
        self.waiting_since_ms.store(u64::MAX, Ordering::Relaxed);
    }

    pub fn waiting_since(&self) -> Option<Instant> {
        match self.waiting_since_ms.load(Ordering::Relaxed) {
            u64::MAX => None,
            ms => Some(self.base + Duration::from_millis(ms)),
        }
    }
}

/// The progress record of the HTTP/2 stream this task serves, if it is one.
pub fn current() -> Option<Arc<SendProgress>> {
    STREAM.try_with(Arc::clone).ok()
}

/// Runs `fut` as the stream whose progress is `progress` (see [`current`]). Not an
/// `async fn`: that would keep `fut` twice (its argument and the scope holding it), in
/// every HTTP/2 stream's task.
pub fn watched<F: Future>(
    progress: Arc<SendProgress>,
    fut: F,
) -> tokio::task::futures::TaskLocalFuture<Arc<SendProgress>, F> {
    STREAM.scope(progress, fut)
}
