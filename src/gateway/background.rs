//! The gateway's background tasks, each one turn of [`every`]: sweeping idle keys,
//! following runtime overrides, keeping the Redis connection, giving leased slices back.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;
use tokio::task::JoinHandle;

use super::{OVERRIDES_INTERVAL, SWEEP_INTERVAL};
use crate::proxy::snapshot::Shared;

/// How often leased slices left idle are looked for.
const SLICE_INTERVAL: Duration = Duration::from_millis(100);

/// Which turn of a background loop this is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Turn {
    Tick,
    /// The shutdown signal came: the last turn.
    Last,
}

/// Runs `work` every `period` until the shutdown signal, and once more then when
/// `at_shutdown` (a task whose work must not be lost, like giving slices back).
async fn every<F, Fut>(
    period: Duration,
    mut shutdown: watch::Receiver<bool>,
    at_shutdown: bool,
    mut work: F,
) where
    F: FnMut(Turn) -> Fut,
    Fut: Future<Output = ()>,
{
    let mut tick = tokio::time::interval(period);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        let turn = tokio::select! {
            _ = tick.tick() => Turn::Tick,
            _ = shutdown.changed() => Turn::Last,
        };
        if turn == Turn::Last && !at_shutdown {
            return;
        }
        work(turn).await;
        if turn == Turn::Last {
            return;
        }
    }
}

/// Starts every background task: those aborted at shutdown, and the slice keeper, which
/// the shutdown waits for instead (a slice it took out of the table is always given back).
pub fn spawn(
    shared: &Arc<Shared>,
    shutdown: &watch::Receiver<bool>,
) -> (Vec<JoinHandle<()>>, Option<JoinHandle<()>>) {
    let s = shared.clone();
    let sweeping = every(SWEEP_INTERVAL, shutdown.clone(), false, move |_| {
        sweep(s.clone())
    });
    let s = shared.clone();
    let following = every(OVERRIDES_INTERVAL, shutdown.clone(), false, move |_| {
        let s = s.clone();
        async move {
            s.overrides
                .tick(|| s.config(), &s.limiter, s.clock.wall_ms())
                .await;
        }
    });
    let mut tasks = vec![tokio::spawn(sweeping), tokio::spawn(following)];
    let interval = shared.config().store.state_interval;
    if shared.config().store.state_file.is_some() && shared.limiter.memory().is_some() {
        let s = shared.clone();
        let writing = every(interval, shutdown.clone(), false, move |_| {
            super::state::write(s.clone())
        });
        tasks.push(tokio::spawn(writing));
    }
    let Some(remote) = shared.limiter.remote() else {
        return (tasks, None);
    };
    if let Some(acker) = remote.acker() {
        let (r, m) = (remote.clone(), remote.clone());
        let connect = move || {
            let r = r.clone();
            async move { r.own_connection().await }
        };
        tasks.push(tokio::spawn(
            acker.clone().run(connect, move || m.sentinel_master()),
        ));
    }
    let s = shared.clone();
    tasks.push(tokio::spawn(
        remote
            .clone()
            .maintain(shared.metrics.clone(), move || s.clock.wall_ms()),
    ));
    tasks.push(tokio::spawn(
        remote.clone().watch_liveness(shared.metrics.clone()),
    ));
    let s = shared.clone();
    let keeper = every(SLICE_INTERVAL, shutdown.clone(), true, move |turn| {
        let s = s.clone();
        // At shutdown everything goes back at once, while the workers (whose runtimes
        // drive the Redis connection) are still draining.
        async move {
            let all = turn == Turn::Last;
            s.limiter.give_back_slices(s.clock.now_ns(), all).await;
        }
    });
    (tasks, Some(tokio::spawn(keeper)))
}

/// Drops idle keys, on a blocking thread so request tasks never wait on it: from the
/// memory store, or from Redis mode's `on_error = "local"` fallback.
async fn sweep(shared: Arc<Shared>) {
    let swept = tokio::task::spawn_blocking(move || {
        let local = shared.limiter.local();
        let removed = local.sweep(shared.clock.now_ns());
        shared
            .metrics
            .keys_tracked
            .set(i64::try_from(local.len()).unwrap_or(i64::MAX));
        removed
    })
    .await;
    if let Ok(n) = swept {
        if n > 0 {
            tracing::debug!(removed = n, "swept idle keys");
        }
    }
}
