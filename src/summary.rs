//! `tollgate check`'s summary: each route, its tiers, and T and τ of each policy.

use std::fmt::Write;
use std::time::Duration;

use crate::config::Config;

fn human(ns: u64) -> String {
    humantime::format_duration(Duration::from_nanos(ns)).to_string()
}

pub fn summary(config: &Config) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "configuration {} is valid", config.path.display());
    let _ = writeln!(
        out,
        "listen {}{}",
        config.server.listen,
        if config.server.tls.is_some() {
            " (TLS)"
        } else {
            ""
        }
    );
    if let Some(a) = config.server.admin_listen {
        let guard = match (&config.server.admin_token, a.ip().is_loopback()) {
            (Some(_), _) => " (token required)",
            (None, true) => "",
            (None, false) => " - warning: no admin_token: limits, config and stats are readable by anyone who reaches this port (changes are refused); set admin_token_file or listen on 127.0.0.1",
        };
        let _ = writeln!(out, "admin  {a}{guard}");
    }
    let _ = writeln!(out, "\npolicies:");
    for p in &config.policies {
        let keys: Vec<String> = p.key.iter().map(ToString::to_string).collect();
        let numbers = match &p.kind {
            crate::config::PolicyKind::Rate(r) => format!(
                "limit={} per {} burst={}  T={} τ={}{}{}",
                r.limit,
                humantime::format_duration(r.period),
                r.quota.burst(),
                human(r.quota.interval_ns()),
                human(r.quota.tolerance_ns()),
                r.settle.as_ref().map_or_else(String::new, |s| format!(
                    "  settle={} reserve={}",
                    s.source.describe(),
                    s.reserve
                        .map_or_else(|| "the route's cost".to_owned(), |r| r.to_string())
                )),
                if r.sync == crate::config::Sync::Lease {
                    "  sync=lease"
                } else {
                    ""
                },
            ),
            crate::config::PolicyKind::Concurrency(c) => format!(
                "max_in_flight={}  retry_after={}",
                c.max_in_flight,
                humantime::format_duration(c.retry_after),
            ),
        };
        let _ = writeln!(
            out,
            "  {:<16} key={} {numbers}{}{}",
            p.name,
            keys.join("+"),
            if p.mode == crate::limit::Mode::Shadow {
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
    let _ = writeln!(out, "\nroutes (in match order):");
    if config.routes.is_empty() {
        let _ = writeln!(
            out,
            "  none - warning: every request will be answered 404; add a [[routes]] entry"
        );
    }
    for r in &config.routes {
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
    out
}
