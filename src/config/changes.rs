//! What a reload changed, by name: the routes, policies and upstreams added, removed and
//! changed between the running config and the new one, and the `[server]` settings that
//! changed and apply live. Compared once per reload on the compiled values.

use std::collections::HashMap;
use std::sync::Arc;

use crate::config::{Config, Route, Server};

/// Names shown per list in a line of [`Changes::lines`]; the answer's JSON holds them all.
const SHOWN: usize = 30;

/// One kind's names, each list sorted.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Delta {
    pub added: Vec<String>,
    pub removed: Vec<String>,
    /// Kept by name, with a setting that differs.
    pub changed: Vec<String>,
}

/// What a reload changed.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Changes {
    pub routes: Delta,
    pub policies: Delta,
    pub upstreams: Delta,
    /// `[server]` settings that changed and apply live, by field name (`access_log`);
    /// the ones that wait for a restart are the report's `needs_restart`.
    pub server: Vec<String>,
    /// The gRPC services' and telemetry's settings that changed (they apply live):
    /// `rls.rules`, `rls.on_unmatched`, `rls.refusal_body`, `rlqs.buckets`, `telemetry`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub services: Vec<String>,
}

impl Delta {
    /// `old` and `new` by name: the names only in `new`, only in `old`, and in both but
    /// not `same`.
    fn between<T>(
        old: &[Arc<T>],
        new: &[Arc<T>],
        name: impl Fn(&T) -> &str,
        same: impl Fn(&T, &T) -> bool,
    ) -> Self {
        let before: HashMap<&str, &T> = old.iter().map(|o| (name(o), &**o)).collect();
        let after: HashMap<&str, &T> = new.iter().map(|n| (name(n), &**n)).collect();
        let mut delta = Delta::default();
        for (n, item) in &after {
            match before.get(n) {
                None => delta.added.push((*n).to_owned()),
                Some(was) if !same(was, item) => delta.changed.push((*n).to_owned()),
                Some(_) => {}
            }
        }
        delta.removed = before
            .keys()
            .filter(|n| !after.contains_key(*n))
            .map(|n| (*n).to_owned())
            .collect();
        delta.added.sort_unstable();
        delta.removed.sort_unstable();
        delta.changed.sort_unstable();
        delta
    }

    pub fn is_empty(&self) -> bool {
        self.added.is_empty() && self.removed.is_empty() && self.changed.is_empty()
    }

    /// `added a, b; removed c; changed d`, the empty lists left out.
    fn describe(&self) -> String {
        [
            ("added", &self.added),
            ("removed", &self.removed),
            ("changed", &self.changed),
        ]
        .iter()
        .filter(|(_, names)| !names.is_empty())
        .map(|(what, names)| format!("{what} {}", shown(names)))
        .collect::<Vec<_>>()
        .join("; ")
    }
}

/// Up to [`SHOWN`] names, then how many more.
fn shown(names: &[String]) -> String {
    let mut text = names[..names.len().min(SHOWN)].join(", ");
    if names.len() > SHOWN {
        text.push_str(&format!(" and {} more", names.len() - SHOWN));
    }
    text
}

impl Changes {
    /// Between the running config and `new` (its restart-only settings already set back to
    /// the running values, so they are not counted here).
    pub fn between(old: &Config, new: &Config) -> Self {
        Self {
            routes: Delta::between(&old.routes, &new.routes, |r| &r.name, same_route),
            policies: Delta::between(&old.policies, &new.policies, |p| &p.name, |a, b| a == b),
            upstreams: Delta::between(
                &old.upstreams,
                &new.upstreams,
                |u| &u.name,
                |a, b| a.same_settings(b),
            ),
            server: live_server_changes(&old.server, &new.server),
            services: service_changes(old, new),
        }
    }

    pub fn is_empty(&self) -> bool {
        self.routes.is_empty()
            && self.policies.is_empty()
            && self.upstreams.is_empty()
            && self.server.is_empty()
            && self.services.is_empty()
    }

    /// One line per kind that changed (`policies: added tenant; changed search`), in the
    /// order routes, policies, upstreams, server; none when nothing did.
    pub fn lines(&self) -> Vec<String> {
        let mut lines: Vec<String> = [
            ("routes", &self.routes),
            ("policies", &self.policies),
            ("upstreams", &self.upstreams),
        ]
        .iter()
        .filter(|(_, delta)| !delta.is_empty())
        .map(|(kind, delta)| format!("{kind}: {}", delta.describe()))
        .collect();
        if !self.server.is_empty() {
            lines.push(format!("server: changed {}", shown(&self.server)));
        }
        if !self.services.is_empty() {
            lines.push(format!("services: changed {}", shown(&self.services)));
        }
        lines
    }
}

/// What changed of `[rls]`'s rules and answers, `[[rlqs.buckets]]` and `[telemetry]`
/// (the rate limit service's listener and bounds wait for a restart: `needs_restart`).
fn service_changes(old: &Config, new: &Config) -> Vec<String> {
    let mut changed = Vec::new();
    if let (Some(o), Some(n)) = (&old.rls, &new.rls) {
        for (name, differs) in [
            ("rls.rules", !o.rules.same_as(&n.rules)),
            ("rls.on_unmatched", o.on_unmatched != n.on_unmatched),
            ("rls.refusal_body", o.refusal_body != n.refusal_body),
            ("rlqs.buckets", !o.buckets.same_as(&n.buckets)),
        ] {
            if differs {
                changed.push(name.to_owned());
            }
        }
    }
    if old.telemetry != new.telemetry {
        changed.push("telemetry".to_owned());
    }
    changed
}

/// A route's own settings: its upstream and policies by name (their settings are
/// reported as theirs).
fn same_route(a: &Route, b: &Route) -> bool {
    a.path == b.path
        && a.host == b.host
        && a.methods == b.methods
        && a.upstream.name == b.upstream.name
        && a.policies.len() == b.policies.len()
        && a.policies
            .iter()
            .zip(&b.policies)
            .all(|(p, q)| p.name == q.name)
        && a.cost == b.cost
        && a.max_body == b.max_body
        && a.body_pointers == b.body_pointers
        && a.body_always == b.body_always
        && a.query_in_body == b.query_in_body
        && a.keys_by_params == b.keys_by_params
}

/// The `[server]` fields that differ. Every field is named below, so a new one has to be
/// placed: compared here, or restart-only (`keep_running_values` sets it back).
fn live_server_changes(old: &Server, new: &Server) -> Vec<String> {
    let Server {
        listen: _,
        admin_listen: _,
        trusted_proxies,
        tls,
        header_read_timeout: _,
        max_connections: _,
        max_header_bytes: _,
        drain_timeout: _,
        access_log,
        access_log_rate,
        log_keys,
        top_keys,
        top_window,
        watch_config: _,
        workers: _,
        body_read_timeout,
        paths,
        send_timeout: _,
        idle_timeout: _,
        tunnel_idle_timeout,
        max_streams: _,
        max_requests,
        max_key_body,
        max_key_body_memory,
        admin_token,
        overrides_file: _,
    } = new;
    [
        ("trusted_proxies", old.trusted_proxies != *trusted_proxies),
        ("tls", old.tls != *tls),
        ("access_log", old.access_log != *access_log),
        ("access_log_rate", old.access_log_rate != *access_log_rate),
        ("log_keys", old.log_keys != *log_keys),
        ("top_keys", old.top_keys != *top_keys),
        ("top_window", old.top_window != *top_window),
        (
            "body_read_timeout",
            old.body_read_timeout != *body_read_timeout,
        ),
        ("paths", old.paths != *paths),
        (
            "tunnel_idle_timeout",
            old.tunnel_idle_timeout != *tunnel_idle_timeout,
        ),
        ("max_requests", old.max_requests != *max_requests),
        ("max_key_body", old.max_key_body != *max_key_body),
        (
            "max_key_body_memory",
            old.max_key_body_memory != *max_key_body_memory,
        ),
        ("admin_token", old.admin_token != *admin_token),
    ]
    .into_iter()
    .filter(|(_, differs)| *differs)
    .map(|(name, _)| name.to_owned())
    .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn load(text: &str) -> Config {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("t.toml");
        std::fs::write(&path, text).expect("write");
        crate::config::load(&path).expect("a valid config")
    }

    const BEFORE: &str = r#"
[server]
listen = "127.0.0.1:0"
[upstreams.api]
targets = ["http://127.0.0.1:9"]
[upstreams.gone]
targets = ["http://127.0.0.1:9"]
[policies.search]
key = "ip"
limit = 10
period = "1s"
burst = 10
[policies.old]
key = "ip"
limit = 1
period = "1s"
burst = 1
[[routes]]
name = "api"
path = "/"
upstream = "api"
policies = ["search"]
[[routes]]
name = "legacy"
path = "/legacy"
upstream = "gone"
"#;

    #[test]
    fn names_what_was_added_removed_and_changed() {
        let after = BEFORE
            .replace("[upstreams.gone]", "[upstreams.new]")
            .replace("upstream = \"gone\"", "upstream = \"new\"")
            .replace("limit = 10", "limit = 20")
            .replace("[policies.old]", "[policies.tenant]")
            .replace("name = \"legacy\"", "name = \"fresh\"")
            .replace("[upstreams.api]\n", "[upstreams.api]\ntimeout = \"3s\"\n")
            .replace(
                "listen = \"127.0.0.1:0\"\n",
                "listen = \"127.0.0.1:0\"\naccess_log = false\n",
            );
        let changes = Changes::between(&load(BEFORE), &load(&after));
        assert_eq!(
            changes.lines(),
            [
                "routes: added fresh; removed legacy",
                "policies: added tenant; removed old; changed search",
                "upstreams: added new; removed gone; changed api",
                "server: changed access_log",
            ]
        );
        let same = Changes::between(&load(BEFORE), &load(BEFORE));
        assert!(same.is_empty(), "{same:?}");
        assert!(same.lines().is_empty());
    }

    #[test]
    fn a_route_changes_with_its_own_settings_only() {
        let moved = BEFORE.replace("path = \"/legacy\"", "path = \"/old\"");
        let changes = Changes::between(&load(BEFORE), &load(&moved));
        assert_eq!(changes.lines(), ["routes: changed legacy"]);
        // A policy's numbers are the policy's change, not its routes'.
        let tuned = BEFORE.replace("limit = 10", "limit = 11");
        let changes = Changes::between(&load(BEFORE), &load(&tuned));
        assert_eq!(changes.lines(), ["policies: changed search"]);
    }

    #[test]
    fn long_lists_are_cut_in_lines_only() {
        let names: Vec<String> = (0..SHOWN + 5).map(|i| format!("r{i:02}")).collect();
        let changes = Changes {
            routes: Delta {
                added: names.clone(),
                ..Delta::default()
            },
            ..Changes::default()
        };
        let line = &changes.lines()[0];
        assert!(line.ends_with(", r29 and 5 more"), "{line}");
        assert_eq!(changes.routes.added.len(), SHOWN + 5);
    }
}
