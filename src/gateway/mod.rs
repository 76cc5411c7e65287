//! Start-up, signals and shutdown: binds the listeners once, owns every background task
//! (`background`), and stops them in order (stop accepting → drain → exit).

mod background;
mod config_watch;
mod state;

use std::net::SocketAddr;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use arc_swap::ArcSwap;
use tokio::net::TcpListener;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::clock::{Clock, MonotonicClock};
use crate::config::{self, Backend, Config, ConfigError};
use crate::key::FleetSecret;
use crate::metrics::Metrics;
use crate::overrides::Overrides;
use crate::proxy::snapshot::{Shared, Snapshot};
use crate::reload::{ReloadError, ReloadReport};
use crate::store::{Limiter, MemoryStore, RedisStore, Store};

/// How long a start waits for Redis to give the fleet's key secret.
const STARTUP_STORE_WAIT: std::time::Duration = std::time::Duration::from_secs(2);

/// How often idle keys are swept from the embedded store.
pub const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// How often runtime overrides are expired and, with Redis, re-read when changed.
pub const OVERRIDES_INTERVAL: Duration = Duration::from_secs(1);

#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        addr: SocketAddr,
        #[source]
        source: std::io::Error,
    },
    #[error("store: {0}")]
    Store(#[from] crate::store::StoreError),
    /// Starting without them could throttle the tenants they protect.
    #[error("runtime overrides: {0}")]
    Overrides(#[from] crate::overrides::FileError),
    #[error("watch_config: cannot watch the config file's folder: {0}")]
    Watch(#[from] notify::Error),
    #[error(transparent)]
    State(#[from] crate::store::state::StateError),
}

pub struct Gateway {
    shared: Arc<Shared>,
    addr: SocketAddr,
    admin_addr: Option<SocketAddr>,
    /// The rate limit service's address, when `[rls]` is configured.
    rls_addr: Option<SocketAddr>,
    shutdown: watch::Sender<bool>,
    data_plane: Vec<crate::workers::Worker>,
    /// The admin listener: drained on shutdown, after the data plane.
    admin: Option<JoinHandle<()>>,
    /// The rate limit service's listener: drained with the admin listener.
    rls: Option<JoinHandle<()>>,
    background: Vec<JoinHandle<()>>,
    /// Gives leased slices back; stopped by the shutdown signal, never aborted, so a
    /// slice it took out of the table is always given back.
    slice_keeper: Option<JoinHandle<()>>,
}

impl Gateway {
    /// Loads `path` and starts serving it.
    pub async fn start(path: &Path) -> Result<Self, StartError> {
        let config = config::load(path)?;
        Self::start_with(config, Arc::new(MonotonicClock::new())).await
    }

    /// Starts serving `config` with `clock` (tests pass their own clock).
    pub async fn start_with(mut config: Config, clock: Arc<dyn Clock>) -> Result<Self, StartError> {
        crate::descriptors::fit(&mut config, crate::descriptors::raise_limit());
        let metrics = Arc::new(Metrics::new());
        // rustls needs one process-wide crypto provider for the Redis client's TLS.
        let _ = rustls::crypto::ring::default_provider().install_default();
        let saved = state::read(&config)?;
        sweep_leftovers(&config, &*clock);
        let limiter = Limiter::new(store_of(&config, clock.clone())?, metrics.clone());
        let limiter = state::restore(limiter, saved, &config, &*clock);
        if let Some(remote) = limiter.remote() {
            // Decisions need the fleet's key secret: read it now if Redis answers soon
            // (a gateway still starts while Redis is down, and learns it later).
            remote.prepare(STARTUP_STORE_WAIT).await;
        }
        let (addr, listeners) =
            crate::workers::bind_all(config.server.listen, config.server.workers).map_err(
                |source| StartError::Bind {
                    addr: config.server.listen,
                    source,
                },
            )?;
        let admin_listener = match config.server.admin_listen {
            Some(a) => Some(
                TcpListener::bind(a)
                    .await
                    .map_err(|source| StartError::Bind { addr: a, source })?,
            ),
            None => None,
        };
        let admin_addr = admin_listener.as_ref().and_then(|l| l.local_addr().ok());
        let rls_listener = match config.rls.as_ref().map(|r| r.listen) {
            Some(a) => Some(
                TcpListener::bind(a)
                    .await
                    .map_err(|source| StartError::Bind { addr: a, source })?,
            ),
            None => None,
        };
        let rls_addr = rls_listener.as_ref().and_then(|l| l.local_addr().ok());
        let shared = shared_state(config, limiter, clock, metrics)?;
        shared
            .overrides
            .reapply(|| shared.config(), &shared.limiter, shared.clock.wall_ms())
            .await;
        let (shutdown, rx) = watch::channel(false);
        let data_plane = crate::workers::spawn(listeners, &shared, &rx)
            .map_err(|source| StartError::Bind { addr, source })?;
        let (mut background, slice_keeper) = background::spawn(&shared, &rx);
        if shared.config().server.watch_config {
            let path = shared.config_path.clone();
            background.push(config_watch::spawn(shared.clone(), path, rx.clone())?);
        }
        let rls = rls_listener
            .map(|l| tokio::spawn(crate::rls::listener::serve(l, shared.clone(), rx.clone())));
        let admin = admin_listener
            .map(|l| tokio::spawn(crate::admin::listener::serve(l, shared.clone(), rx)));
        announce(&shared, addr, admin_addr);
        if let Some(rls_addr) = rls_addr {
            tracing::info!(%rls_addr, "rate limit service (RLS v3) serving");
        }
        Ok(Self {
            shared,
            addr,
            admin_addr,
            rls_addr,
            shutdown,
            data_plane,
            admin,
            rls,
            background,
            slice_keeper,
        })
    }

    /// The data-plane address actually bound (useful with port 0).
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn admin_addr(&self) -> Option<SocketAddr> {
        self.admin_addr
    }

    /// The rate limit service's address, when `[rls]` is configured.
    pub fn rls_addr(&self) -> Option<SocketAddr> {
        self.rls_addr
    }

    /// Writes `{"listen": …, "admin": … | null, "rls": … | null, "pid": …}` to `path` atomically, never
    /// through a link ([`crate::files::replace`]), so a reader never sees it half-written.
    pub fn write_ready_file(&self, path: &Path) -> Result<(), crate::files::WriteError> {
        let body = serde_json::json!({
            "listen": self.addr.to_string(),
            "admin": self.admin_addr.map(|a| a.to_string()),
            "rls": self.rls_addr.map(|a| a.to_string()),
            "pid": std::process::id(),
        });
        crate::files::replace(path, |out| {
            use std::io::Write;
            writeln!(out, "{body}")
        })
    }

    pub fn shared(&self) -> &Arc<Shared> {
        &self.shared
    }

    /// Re-reads the config file, as SIGHUP does.
    pub async fn reload(&self) -> Result<ReloadReport, ReloadError> {
        crate::reload::reload(&self.shared).await
    }

    /// Stops accepting, drains open connections up to the drain deadline, stops the rest.
    pub async fn shutdown(self) {
        let _ = self.shutdown.send(true);
        let mut drained = Vec::with_capacity(self.data_plane.len());
        for worker in self.data_plane {
            let _ = worker.done.await;
            drained.push((worker.release, worker.thread));
        }
        if let Some(admin) = self.admin {
            let _ = admin.await;
        }
        if let Some(rls) = self.rls {
            let _ = rls.await;
        }
        // The last requests' spans go now, not after a batch's linger that would never
        // come: bounded by one export's timeout.
        let flush = self.shared.spans.flush();
        if tokio::time::timeout(Duration::from_secs(6), flush)
            .await
            .is_err()
        {
            tracing::warn!(target: "tollgate::telemetry", "spans not all exported in 6 s at shutdown");
        }
        if let Some(keeper) = self.slice_keeper {
            let _ = tokio::time::timeout(Duration::from_secs(5), keeper).await;
        }
        // Every request has been answered: the state file gets their last word.
        state::write(self.shared.clone()).await;
        // Leased slices go back, so the fleet is not short of what this gateway held.
        let give_back = self
            .shared
            .limiter
            .give_back_slices(self.shared.clock.now_ns(), true);
        if tokio::time::timeout(Duration::from_secs(5), give_back)
            .await
            .is_err()
        {
            tracing::warn!("leased slices not all given back in 5 s; their units expire");
        }
        // Only now: a worker's runtime may be the one driving the Redis connection those
        // give-backs went through.
        for (release, thread) in drained {
            let _ = release.send(());
            let _ = tokio::task::spawn_blocking(move || thread.join()).await;
        }
        for task in self.background {
            task.abort();
            let _ = task.await;
        }
        tracing::info!("tollgate stopped");
    }

    /// Serves until SIGTERM or SIGINT; reloads on SIGHUP.
    pub async fn run_until_signalled(self) -> std::io::Result<()> {
        use tokio::signal::unix::{signal, SignalKind};
        let mut hup = signal(SignalKind::hangup())?;
        let mut term = signal(SignalKind::terminate())?;
        let mut int = signal(SignalKind::interrupt())?;
        loop {
            tokio::select! {
                _ = hup.recv() => {
                    tracing::info!("SIGHUP: reloading");
                    let _ = self.reload().await;
                }
                _ = term.recv() => break,
                _ = int.recv() => break,
            }
        }
        tracing::info!(
            "shutting down: no new connections, draining open ones (signal again to stop at once)"
        );
        tokio::select! {
            _ = self.shutdown() => {}
            _ = term.recv() => tracing::warn!("second signal: stopping without waiting for the drain"),
            _ = int.recv() => tracing::warn!("second signal: stopping without waiting for the drain"),
        }
        Ok(())
    }
}

/// What `run` checks of a compiled config before it binds, beyond the config itself:
/// the store's clients can be made (nothing connects). `tollgate check` runs it, so
/// the two agree.
pub fn preflight(config: &Config) -> Result<(), StartError> {
    state::read(config)?;
    store_of(config, Arc::new(MonotonicClock::default())).map(drop)
}

/// Removes what a writer killed mid-write left beside the files this gateway writes
/// (a full copy of its state or overrides apiece), and says so.
fn sweep_leftovers(config: &Config, clock: &dyn Clock) {
    let unix_ns = clock.unix_ns_at(clock.now_ns());
    let now = std::time::UNIX_EPOCH + Duration::from_nanos(unix_ns);
    let written = [&config.store.state_file, &config.server.overrides_file];
    for path in written.into_iter().flatten() {
        let swept = crate::files::sweep_leftovers(path, now);
        if swept > 0 {
            tracing::info!(path = %path.display(), swept, "removed temporary files an interrupted write left beside the file");
        }
    }
}

/// The store `config` names: the embedded one, or Redis with the embedded one beside it
/// for `on_error = "local"`. `clock`: the one requests read (a reply's arrival is read on
/// it to date the deadline a Redis call carries).
fn store_of(config: &Config, clock: Arc<dyn Clock>) -> Result<Store, StartError> {
    let local = Arc::new(MemoryStore::new(config.store.max_keys));
    Ok(match &config.store.backend {
        Backend::Memory => Store::Memory(local),
        Backend::Redis {
            urls,
            cluster,
            sentinel,
        } => Store::Redis {
            remote: Arc::new(
                RedisStore::new(
                    urls,
                    *cluster,
                    sentinel.as_ref(),
                    config.store.timeout,
                    (
                        Arc::new(match &config.store.key_secret {
                            Some(secret) => FleetSecret::configured(secret.clone()),
                            None => FleetSecret::from_redis(),
                        }),
                        clock,
                    ),
                )?
                .with_fleet_size(config.store.fleet_size)
                .with_replica_ack(config.store.replica_ack),
            ),
            local,
            on_error: config.store.on_error,
        },
    })
}

/// What outlives config versions, with the first snapshot and the runtime overrides
/// kept in `overrides_file`.
fn shared_state(
    config: Config,
    limiter: Limiter,
    clock: Arc<dyn Clock>,
    metrics: Arc<Metrics>,
) -> Result<Arc<Shared>, StartError> {
    let kept = match &config.server.overrides_file {
        Some(path) => {
            crate::files::refuse_link(path).map_err(crate::overrides::FileError::from)?;
            Some((path.clone(), Overrides::read_file(path)?))
        }
        None => None,
    };
    let config_path = config.path.clone();
    metrics.config_last_reload_ok.set(1);
    (metrics.config_applied_at).set(crate::reload::unix_seconds(clock.wall_ms()));
    let snapshot = Snapshot::build(
        Arc::new(config),
        None,
        (&metrics, limiter.keys()),
        clock.now_ns(),
    );
    let (spans, queued) = crate::telemetry::export::Spans::new();
    let shared = Arc::new(Shared {
        snapshot: ArcSwap::from_pointee(snapshot),
        reload: |shared| Box::pin(crate::reload::reload(shared)),
        limiter,
        clock,
        metrics: metrics.clone(),
        config_path,
        reloads: Default::default(),
        overrides: Overrides::new(kept),
        spans,
        sampling: Default::default(),
        service_lines: Default::default(),
        // Admin changes are rare; a quota stream 64 behind waits for Envoy's next report.
        key_changes: tokio::sync::broadcast::channel(64).0,
    });
    // The exporter reads the `[telemetry]` in effect at each export (a reload moves it)
    // and ends with the gateway (its queue's sender lives in `Shared`).
    let weak = Arc::downgrade(&shared);
    let current = move || weak.upgrade()?.config().telemetry.clone();
    tokio::spawn(crate::telemetry::export::run(queued, current, metrics));
    Ok(shared)
}

/// The start-up log line, and the warnings a running config deserves.
fn announce(shared: &Shared, addr: SocketAddr, admin: Option<SocketAddr>) {
    let config = shared.config();
    let admin_shown = admin.map_or_else(|| "none".to_owned(), |a| a.to_string());
    let (tls, workers) = (config.server.tls.is_some(), config.server.workers);
    tracing::info!(%addr, admin = %admin_shown, tls, workers, "tollgate serving");
    for w in &config.warnings {
        tracing::warn!("{w}");
    }
    if config.routes.is_empty() && config.rls.is_none() {
        tracing::warn!("the configuration has no routes: every request is answered 404");
    }
}
