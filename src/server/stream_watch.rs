//! HTTP/2 streams whose client stops reading. The connection keeps going while other
//! streams make progress, so the socket-level deadline cannot see one stalled stream:
//! each stream's task runs under a watchdog that drops it (h2 then sends RST_STREAM)
//! once its response has waited `send_timeout` for the client to take more.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use crate::conn::progress::{watched, SendProgress};

/// Runs hyper's HTTP/2 stream tasks, each under a send watchdog.
#[derive(Clone, Copy, Debug)]
pub struct StreamExecutor {
    pub send_timeout: Duration,
}

impl<F> hyper::rt::Executor<F> for StreamExecutor
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    fn execute(&self, fut: F) {
        let progress = Arc::new(SendProgress::default());
        // A future of its own rather than an `async` block around `select!`, which would
        // keep the stream's future twice in the task (a captured value and its pinned
        // copy): each stream, a parked one too, costs what its future is, once.
        tokio::spawn(Watchdog {
            stream: watched(progress.clone(), fut),
            stalled: stalled(progress, self.send_timeout),
        });
    }
}

pin_project_lite::pin_project! {
    /// A stream's task: its future, until it ends or the stream stalls past the limit.
    struct Watchdog<F, S> {
        #[pin]
        stream: F,
        #[pin]
        stalled: S,
    }
}

impl<F: Future, S: Future<Output = ()>> Future for Watchdog<F, S> {
    type Output = ();

    fn poll(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<()> {
        let this = self.project();
        if this.stream.poll(cx).is_ready() {
            return std::task::Poll::Ready(());
        }
        if this.stalled.poll(cx).is_ready() {
            tracing::debug!("HTTP/2 stream reset: the client stopped reading (send_timeout)");
            return std::task::Poll::Ready(());
        }
        std::task::Poll::Pending
    }
}

/// Resolves once the stream has waited `limit` for the client in one stretch.
async fn stalled(progress: Arc<SendProgress>, limit: Duration) {
    loop {
        let next = match progress.waiting_since() {
            Some(since) if since + limit <= Instant::now() => return,
            Some(since) => since + limit,
            None => Instant::now() + limit,
        };
        tokio::time::sleep_until(next).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn a_stream_waiting_for_its_client_is_dropped_at_the_deadline() {
        let limit = Duration::from_secs(60);
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let stream = async move {
            let progress = crate::conn::progress::current().expect("inside a watched stream");
            progress.handed();
            // The client never asks for more.
            std::future::pending::<()>().await;
            drop(done_tx);
        };
        let started = Instant::now();
        hyper::rt::Executor::execute(
            &StreamExecutor {
                send_timeout: limit,
            },
            stream,
        );
        // Dropping the stream drops the sender without sending.
        assert!(done_rx.await.is_err());
        assert!(started.elapsed() >= limit);
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_waiting_for_its_upstream_is_left_alone() {
        let (done_tx, done_rx) = tokio::sync::oneshot::channel::<()>();
        let stream = async move {
            let progress = crate::conn::progress::current().expect("inside a watched stream");
            progress.handed();
            progress.asked();
            tokio::time::sleep(Duration::from_secs(600)).await;
            let _ = done_tx.send(());
        };
        hyper::rt::Executor::execute(
            &StreamExecutor {
                send_timeout: Duration::from_secs(60),
            },
            stream,
        );
        assert!(done_rx.await.is_ok(), "finished on its own");
    }
}
