//! `tollgate check`'s summary: each route, its tiers, and T and τ of each policy.

use crate::config::{Config, Policy, Route, Server};
use crate::limit::Mode;
use std::fmt::Write;

pub fn summary(config: &Config) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "configuration {} is valid", config.path.display());
    write_listeners(&mut out, &config.server);
    write_store(&mut out, &config.store);
    let _ = writeln!(out, "\npolicies:");
    for p in &config.policies {
        write_policy(&mut out, p);
    }
    let _ = writeln!(out, "\nroutes (in match order):");
    match (config.routes.is_empty(), config.rls.is_some()) {
        (true, false) => {
            let _ = writeln!(
                out,
                "  none - warning: every request will be answered 404; add a [[routes]] entry"
            );
        }
        (true, true) => {
            let _ = writeln!(
                out,
                "  none (the rate limit service only: proxied requests are answered 404)"
            );
        }
        _ => {}
    }
    for r in &config.routes {
        write_route(&mut out, r);
    }
    if let Some(rls) = &config.rls {
        write_rls(&mut out, rls);
    }
    if !config.warnings.is_empty() {
        let _ = writeln!(out);
        for w in &config.warnings {
            let _ = writeln!(out, "{w}");
        }
    }
    out
}

/// The data-plane and admin addresses, warning when the admin API is open to anyone who
/// reaches it.
fn write_listeners(out: &mut String, server: &Server) {
    let _ = writeln!(
        out,
        "listen {}{}",
        server.listen,
        if server.tls.is_some() { " (TLS)" } else { "" }
    );
    if let Some(a) = server.admin_listen {
        let guard = match (&server.admin_token, a.ip().is_loopback()) {
            (Some(_), _) => " (token required)",
            (None, true) => "",
            // Said in full among the warnings below.
            (None, false) => " (no token: open to anyone who reaches it, see the warning)",
        };
        let _ = writeln!(out, "admin  {a}{guard}");
    }
    use crate::config::{AccessLog, LogKeys};
    let which = match server.access_log {
        AccessLog::Off => None,
        AccessLog::All => Some("every request"),
        AccessLog::Refused => Some("refused requests"),
    };
    if let Some(which) = which {
        let keys = match server.log_keys {
            LogKeys::Clear => "keys as sent",
            LogKeys::Hash => "keys hashed",
        };
        let _ = writeln!(
            out,
            "log    {which}, at most {} lines a second, {keys}{}",
            server.access_log_rate,
            if server.watch_config {
                "; reloads when the file changes"
            } else {
                ""
            }
        );
    } else if server.watch_config {
        let _ = writeln!(out, "log    off; reloads when the file changes");
    }
}

/// The backend, and with Redis what its key names are keyed with.
fn write_store(out: &mut String, store: &crate::config::StoreSettings) {
    use crate::config::Backend;
    let Backend::Redis {
        cluster, sentinel, ..
    } = &store.backend
    else {
        let _ = match &store.state_file {
            Some(path) => writeln!(
                out,
                "store  memory, state kept in {} (written every {} and at shutdown)",
                path.display(),
                humantime::format_duration(store.state_interval)
            ),
            None => writeln!(out, "store  memory (state is lost on restart)"),
        };
        return;
    };
    let kind = match (cluster, sentinel) {
        (true, _) => "redis cluster",
        (false, Some(_)) => "redis through sentinel",
        (false, None) => "redis",
    };
    let secret = match store.key_secret {
        Some(_) => "key names keyed by key_secret",
        None => "key names keyed by a secret the fleet keeps in Redis (tg:{secret}) - note: set key_secret_file so keys keep their names when Redis loses its data",
    };
    let _ = writeln!(out, "store  {kind}, {secret}");
    if let Some(n) = store.replica_ack {
        let _ = writeln!(
            out,
            "       admissions count once {n} replica(s) have them (replica_ack)"
        );
    }
    if let Some(n) = store.fleet_size {
        let _ = writeln!(
            out,
            "       on_error = \"local\" decides with 1/{n} of each limit (fleet_size)"
        );
    }
}

/// One line per policy: its name, key, numbers, shadow mode and override count.
fn write_policy(out: &mut String, p: &Policy) {
    let keys: Vec<String> = p.key.iter().map(ToString::to_string).collect();
    let numbers = p.kind.numbers();
    let _ = writeln!(
        out,
        "  {:<16} key={} {numbers}{}{}",
        p.name,
        keys.join("+"),
        if p.mode == Mode::Shadow {
            " (shadow)"
        } else {
            ""
        },
        match p.override_count() {
            0 => String::new(),
            n => format!(" overrides={n}"),
        },
    );
}

/// The rate limit service: its address, and which policy decides which descriptors.
fn write_rls(out: &mut String, rls: &crate::config::Rls) {
    let _ = writeln!(
        out,
        "\nrate limit service (RLS v3) on {}{}, unmatched descriptors: {}",
        rls.listen,
        if rls.tls.is_some() { " (TLS)" } else { "" },
        rls.on_unmatched.as_str()
    );
    if rls.rules.is_empty() && rls.buckets.is_empty() {
        let _ = writeln!(
            out,
            "  no rules - warning: every descriptor is unmatched; add a [[rls.rules]] entry"
        );
    }
    for rule in rls.rules.iter() {
        let _ = writeln!(out, "  {:<40} -> {}", rule.describe(), rule.limit_name());
    }
    for bucket in rls.buckets.iter() {
        let _ = writeln!(
            out,
            "  quota bucket {:<27} -> {} (assignments for {}s)",
            bucket.rule.describe(),
            bucket.rule.limit_name(),
            bucket.ttl.as_secs()
        );
    }
    if !rls.buckets.is_empty() {
        let _ = writeln!(
            out,
            "  at most {} quota streams open at once (max_quota_streams), {} buckets tracked (max_quota_buckets)",
            rls.max_quota_streams,
            rls.max_quota_buckets
        );
    }
}

/// One line per route, in match order: host and path, upstream, tiers and cost.
fn write_route(out: &mut String, r: &Route) {
    let tiers: Vec<&str> = r.policies.iter().map(|p| p.name.as_str()).collect();
    let _ = writeln!(
        out,
        "  {:<16} {}{} -> {}  tiers=[{}] cost={}",
        r.name,
        r.host
            .as_deref()
            .map(|h| format!("{h} "))
            .unwrap_or_default(),
        r.path,
        r.upstream.name,
        tiers.join(", "),
        r.cost
    );
}
