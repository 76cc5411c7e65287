//! The descriptor budget. At start the soft `RLIMIT_NOFILE` is raised to the hard limit
//! (as nginx's `worker_rlimit_nofile`); if data-plane connections, admin connections,
//! upstream connections and a reserve still do not fit, the configured caps are scaled
//! down to fit, with a warning that prints the values in effect. Never a refusal to start.

use std::sync::Arc;

use crate::config::{Config, ADMIN_MAX_CONNECTIONS};

/// Descriptors kept for listeners, Redis connections, config and certificate files, logs.
pub const RESERVE: u64 = 64;

/// Raises the soft descriptor limit to the hard one; returns the limit in force.
pub fn raise_limit() -> u64 {
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(limit) => limit,
        Err(e) => {
            tracing::warn!(error = %e, "cannot raise the open-file limit");
            rlimit::getrlimit(rlimit::Resource::NOFILE).map_or(1024, |(soft, _)| soft)
        }
    }
}

/// Scales `max_connections` and every upstream's `max_connections` down, in proportion,
/// until they fit in `limit` descriptors beside the admin listener and the reserve.
pub fn fit(config: &mut Config, limit: u64) {
    let admin = if config.server.admin_listen.is_some() {
        ADMIN_MAX_CONNECTIONS as u64
    } else {
        0
    };
    let upstreams: u64 = config
        .upstreams
        .iter()
        .map(|u| u.max_connections as u64)
        .sum();
    let wanted = config.server.max_connections as u64 + upstreams;
    let available = limit.saturating_sub(RESERVE + admin).max(2);
    if wanted <= available {
        return;
    }
    let scale =
        |n: usize| ((n as u128 * u128::from(available) / u128::from(wanted)) as usize).max(1);
    config.server.max_connections = scale(config.server.max_connections);
    for upstream in &mut config.upstreams {
        let mut fitted = (**upstream).clone();
        fitted.max_connections = scale(fitted.max_connections);
        *upstream = Arc::new(fitted);
    }
    for route in &mut config.routes {
        if let Some(route) = Arc::get_mut(route) {
            route.upstream = config.upstreams[route.upstream_index].clone();
        }
    }
    let caps: Vec<String> = config
        .upstreams
        .iter()
        .map(|u| format!("{}={}", u.name, u.max_connections))
        .collect();
    tracing::warn!(
        limit,
        max_connections = config.server.max_connections,
        upstream_max_connections = %caps.join(","),
        "the open-file limit cannot hold the configured connections; caps scaled down to fit"
    );
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(max_connections: usize, upstream_cap: usize) -> Config {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\nmax_connections = {max_connections}\n[upstreams.a]\ntargets = [\"http://127.0.0.1:1\"]\nmax_connections = {upstream_cap}\n[[routes]]\nname = \"r\"\npath = \"/\"\nupstream = \"a\"\n"
        );
        crate::config::compile(std::path::Path::new("t.toml"), &text).expect("valid")
    }

    #[test]
    fn caps_that_fit_are_kept() {
        let mut c = config(1000, 100);
        fit(&mut c, 4096);
        assert_eq!(
            (c.server.max_connections, c.upstreams[0].max_connections),
            (1000, 100)
        );
    }

    #[test]
    fn caps_that_do_not_fit_are_scaled_down_together() {
        let mut c = config(10_000, 1024);
        fit(&mut c, 1024);
        let (conns, up) = (c.server.max_connections, c.upstreams[0].max_connections);
        let used = conns as u64 + up as u64 + ADMIN_MAX_CONNECTIONS as u64 + RESERVE;
        assert!(used <= 1024, "{conns} + {up} fit");
        assert!(conns > 5 * up, "in proportion: {conns} / {up}");
        assert_eq!(
            c.routes[0].upstream.max_connections, up,
            "routes see the fitted upstream"
        );
    }
}
