//! The memory backend's state file in the gateway's life: read before the first request
//! (its keys, and the key hasher's seeds they were hashed with), written every
//! `state_interval` on a blocking thread, and once more after the last request drained.

use std::sync::Arc;

use crate::clock::Clock;
use crate::config::{Backend, Config};
use crate::proxy::snapshot::Shared;
use crate::store::state::{self, StateError};
use crate::store::Limiter;

/// Reads `config`'s state file, if it names one: the seeds keys are hashed with, and the
/// keys to restore. A damaged or foreign file, one another account wrote, a link, or a
/// folder the state cannot be written in refuses the start (and `tollgate check`).
pub fn read(config: &Config) -> Result<Option<state::Saved>, StateError> {
    match (&config.store.backend, &config.store.state_file) {
        (Backend::Memory, Some(path)) => {
            // Found now, not at the next start when there is nothing to restore.
            crate::files::check_writable(path)?;
            state::read(path)
        }
        _ => Ok(None),
    }
}

/// `limiter` with the saved state in it: keys hashed as before, every debt and usage back,
/// each quota policy's keys in its area of the store as `config` arranges them.
pub fn restore(
    limiter: Limiter,
    saved: Option<state::Saved>,
    config: &Config,
    clock: &dyn Clock,
) -> Limiter {
    let Some(saved) = saved else {
        return limiter;
    };
    let limiter = limiter.with_key_seeds(saved.seeds);
    limiter.keys().arrange(config);
    let ends = limiter.keys().window_ends(config, clock);
    let restored = state::restore(&saved, limiter.local(), clock, |area| ends.of(area));
    tracing::info!(
        restored = restored.keys,
        saved = saved.keys.len(),
        "state file read: rate debts and quota usage restored (the keys idle since are left out)"
    );
    if restored.dropped > 0 {
        tracing::warn!(
            dropped = restored.dropped,
            "state file: keys of calendar quota policies the configuration no longer has were left out"
        );
    }
    if restored.foreign > 0 {
        tracing::warn!(
            left_out = restored.foreign,
            "state file: quota keys written under another calendar than their policy's (its window, anchor or timezone changed since) start at zero"
        );
    }
    limiter
}

/// One state write at a time in the process, taken before the keys are read: a periodic
/// write still on its blocking thread when the shutdown's begins (its task is not awaited)
/// would otherwise rename its older keys over the shutdown's, and the next start would
/// restore them — the last requests' debts forgiven. The last to take it reads last.
static WRITING: parking_lot::Mutex<()> = parking_lot::const_mutex(());

/// Writes the state file now, if the running config names one (on a blocking thread: a
/// million keys take a few hundred milliseconds, and requests go on meanwhile).
pub async fn write(shared: Arc<Shared>) {
    let Some(path) = shared.config().store.state_file.clone() else {
        return;
    };
    if shared.limiter.memory().is_none() {
        return;
    }
    let written = tokio::task::spawn_blocking(move || {
        let _one_at_a_time = WRITING.lock();
        let started = shared.clock.now_ns();
        let seeds = shared.limiter.keys().seeds();
        let result = state::write(&path, seeds, shared.limiter.local(), &*shared.clock);
        let took_ms = shared.clock.now_ns().saturating_sub(started) / 1_000_000;
        (path, result, took_ms)
    })
    .await;
    match written {
        Ok((path, Ok(w), took)) => tracing::debug!(
            path = %path.display(),
            keys = w.keys,
            bytes = w.bytes,
            ms = took,
            "state file written"
        ),
        Ok((path, Err(e), _)) => {
            tracing::warn!(path = %path.display(), error = %e, "could not write the state file")
        }
        Err(e) => tracing::warn!(error = %e, "the state file writer failed"),
    }
}
