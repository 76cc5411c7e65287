//! One at a time, and at most one waiting: work asked for while another run waits to
//! begin joins that run and shares its outcome. Reloads go through it (a reload asked for
//! while another waits would read the same file, which the waiting one reads only once it
//! begins): without it, a caller that asks and hangs up, again and again, queued reloads
//! without bound — each a compile, a snapshot, the refusal memory cleared and every
//! leased slice given back — and a SIGHUP waited behind them all. Each run that begins
//! goes to its end on a task of its own, whoever still waits for it.

use std::future::Future;
use std::sync::Arc;

use parking_lot::Mutex;
use tokio::sync::watch;

/// Runs of work whose outcome is a `T`.
pub struct Coalescing<T>(Arc<Queue<T>>);

struct Queue<T> {
    /// Held by the run under way.
    running: tokio::sync::Mutex<()>,
    /// The run waiting to begin, which a new caller joins.
    waiting: Mutex<Option<watch::Receiver<Option<Arc<T>>>>>,
}

impl<T> Default for Coalescing<T> {
    fn default() -> Self {
        Self(Arc::new(Queue {
            running: tokio::sync::Mutex::new(()),
            waiting: Mutex::new(None),
        }))
    }
}

impl<T: Send + Sync + 'static> Coalescing<T> {
    /// Runs `work` once the run under way (if any) is done, or joins the run waiting to
    /// begin: its outcome is this caller's. `None` when the run ended without one (its
    /// task panicked, or the runtime is shutting down).
    pub async fn run<F, Fut>(&self, work: F) -> Option<Arc<T>>
    where
        F: FnOnce() -> Fut + Send + 'static,
        Fut: Future<Output = T> + Send + 'static,
    {
        let mut outcome = {
            let mut waiting = self.0.waiting.lock();
            match &*waiting {
                Some(joined) => joined.clone(),
                None => {
                    let (tell, told) = watch::channel(None);
                    *waiting = Some(told.clone());
                    let queue = self.0.clone();
                    tokio::spawn(async move {
                        let _one_at_a_time = queue.running.lock().await;
                        // Begun: a later caller may want what has changed since; it waits
                        // for a run of its own.
                        queue.waiting.lock().take();
                        let _ = tell.send(Some(Arc::new(work().await)));
                    });
                    told
                }
            }
        };
        let done = outcome.wait_for(Option::is_some).await.ok()?;
        done.clone()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test]
    async fn callers_while_one_waits_share_it_and_later_ones_run_again() {
        let queue = Arc::new(Coalescing::<usize>::default());
        let runs = Arc::new(AtomicUsize::new(0));
        let (go, gate) = watch::channel(false);
        let run = |queue: Arc<Coalescing<usize>>| {
            let (runs, mut gate) = (runs.clone(), gate.clone());
            tokio::spawn(async move {
                queue
                    .run(move || async move {
                        let _ = gate.wait_for(|open| *open).await;
                        runs.fetch_add(1, Ordering::SeqCst) + 1
                    })
                    .await
            })
        };
        // The first runs (held at the gate), the next waits, the rest join it.
        let first = run(queue.clone());
        while queue.0.running.try_lock().is_ok() {
            tokio::task::yield_now().await;
        }
        let joined: Vec<_> = (0..10).map(|_| run(queue.clone())).collect();
        while queue.0.waiting.lock().is_none() {
            tokio::task::yield_now().await;
        }
        go.send(true).expect("open");
        assert_eq!(first.await.expect("task").as_deref(), Some(&1));
        for j in joined {
            assert_eq!(j.await.expect("task").as_deref(), Some(&2));
        }
        assert_eq!(runs.load(Ordering::SeqCst), 2);
        // Asked after: a run of its own.
        assert_eq!(run(queue).await.expect("task").as_deref(), Some(&3));
    }
}
