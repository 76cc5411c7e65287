//! The running gateway's shared state: the current config snapshot (swapped whole on
//! reload), the limiter store, the clock and the metrics.

use std::path::PathBuf;
use std::sync::Arc;

use arc_swap::ArcSwap;

use crate::clock::Clock;
use crate::config::Config;
use crate::metrics::{Metrics, RouteMetrics};
use crate::proxy::pool::UpstreamPool;
use crate::proxy::response::PolicyHeaders;
use crate::store::Limiter;

/// Everything one request needs from one config version. A request loads it once, so a
/// reload never mixes two versions within a request.
pub struct Snapshot {
    pub config: Arc<Config>,
    /// By upstream index.
    pub pools: Vec<Arc<UpstreamPool>>,
    /// By route index.
    pub route_metrics: Vec<RouteMetrics>,
    /// By route index, then tier position: each policy's constant header values.
    pub route_headers: Vec<Box<[PolicyHeaders]>>,
}

impl Snapshot {
    /// Builds a snapshot for `config`, reusing the pools of `previous` whose upstream
    /// settings did not change so their warm connections survive.
    pub fn build(config: Arc<Config>, previous: Option<&Snapshot>, metrics: &Metrics) -> Self {
        let pools = config
            .upstreams
            .iter()
            .map(|u| {
                previous
                    .and_then(|p| p.pools.iter().find(|pool| pool.serves(u)))
                    .cloned()
                    .unwrap_or_else(|| {
                        Arc::new(UpstreamPool::new(u.clone(), config.server.workers, metrics))
                    })
            })
            .collect();
        let route_metrics = metrics.route_handles(&config);
        let route_headers = config
            .routes
            .iter()
            .map(|r| {
                r.policies
                    .iter()
                    .map(|p| PolicyHeaders::new(&p.name, &p.quota))
                    .collect()
            })
            .collect();
        Self {
            config,
            pools,
            route_metrics,
            route_headers,
        }
    }
}

pub struct Shared {
    pub snapshot: ArcSwap<Snapshot>,
    pub limiter: Limiter,
    pub clock: Arc<dyn Clock>,
    pub metrics: Arc<Metrics>,
    pub config_path: PathBuf,
    /// Serializes reloads: two SIGHUPs at once cannot interleave.
    pub reload_lock: tokio::sync::Mutex<()>,
}

impl Shared {
    pub fn config(&self) -> Arc<Config> {
        self.snapshot.load().config.clone()
    }
}
