//! Reload: read and validate the file off the request path, then swap the whole snapshot.
//! A failed reload keeps the running config; limiter state is never touched. What it
//! changed is said by name (`config/changes.rs`); reloads go one at a time, at most one
//! waiting, which later callers join (`coalesce.rs`).

use std::sync::Arc;

use crate::config::{self, Config};
use crate::metrics::ResultLabels;
use crate::proxy::snapshot::{Shared, Snapshot};

pub use crate::config::changes::Changes;
pub use crate::config::reload_report::{ReloadError, ReloadReport};

/// Reloads the file the gateway was started with, or joins the reload waiting to begin
/// (`Shared::reloads`). Each runs to its end on a task of its own: an admin client hanging
/// up mid-reload (which drops the future that asked) must not leave a new config running
/// with half its work done (overrides, refusals and slices of the old numbers).
pub async fn reload(shared: &Arc<Shared>) -> Result<ReloadReport, ReloadError> {
    let owned = shared.clone();
    let outcome = shared
        .reloads
        .run(move || async move { reload_here(&owned).await })
        .await;
    match outcome.as_deref() {
        Some(Ok(report)) => Ok(report.clone()),
        Some(Err(e)) => Err(ReloadError::Joined(e.to_string())),
        None => Err(ReloadError::Joined(
            "the reload task ended without an outcome".into(),
        )),
    }
}

async fn reload_here(shared: &Shared) -> Result<ReloadReport, ReloadError> {
    let result = reload_locked(shared).await;
    let label = if result.is_ok() { "ok" } else { "error" };
    let metrics = &shared.metrics;
    metrics
        .reloads
        .get_or_create(&ResultLabels { result: label })
        .inc();
    metrics.config_last_reload_ok.set(i64::from(result.is_ok()));
    if result.is_ok() {
        metrics
            .config_applied_at
            .set(unix_seconds(shared.clock.wall_ms()));
    }
    match &result {
        Ok(report) => {
            tracing::info!(
                routes = report.routes,
                policies = report.policies,
                "configuration reloaded"
            );
            for line in report.changes.lines() {
                tracing::info!("{line}");
            }
            if report.changes.is_empty() {
                tracing::info!("no route, policy, upstream or live server setting changed");
            }
            for w in &shared.config().warnings {
                tracing::warn!("{w}");
            }
            for what in &report.needs_restart {
                tracing::warn!("{what} changed: this takes effect only after a restart");
            }
        }
        Err(e) => {
            // One log line per problem, its hint (the indented line after it) included.
            let text = e.to_string();
            let mut problems: Vec<String> = Vec::new();
            for line in text.lines() {
                match (line.strip_prefix("    hint: "), problems.last_mut()) {
                    (Some(hint), Some(last)) => {
                        last.push_str(" (hint: ");
                        last.push_str(hint);
                        last.push(')');
                    }
                    _ => problems.push(line.to_owned()),
                }
            }
            for problem in problems {
                tracing::error!("reload refused, old configuration still serving: {problem}");
            }
        }
    }
    result
}

async fn reload_locked(shared: &Shared) -> Result<ReloadReport, ReloadError> {
    let path = shared.config_path.clone();
    // Reading files (config, certificates) stays off the request path's threads.
    let mut config = tokio::task::spawn_blocking(move || config::load(&path))
        .await
        .map_err(|e| ReloadError::Task(e.to_string()))??;
    crate::descriptors::fit(&mut config, crate::descriptors::raise_limit());
    let old = shared.config();
    if old.rls.is_some() && config.rls.is_none() {
        return Err(ReloadError::RlsRemoved(config.path.clone()));
    }
    warn_of_policy_changes(&old, &mut config);
    let needs_restart = restart_only_changes(&old, &config);
    // What needs a restart keeps its running value, so the snapshot (and /admin/config,
    // and the next reload's report) describe what is in effect.
    keep_running_values(&old, &mut config);
    // The listeners keep the mode they started in: a plain listener cannot turn into TLS
    // live, and a TLS one keeps its last certificates if the file drops [server.tls].
    // Otherwise the new certificates apply to new connections.
    config.server.tls = match (&old.server.tls, config.server.tls.take()) {
        (None, _) => None,
        (Some(kept), None) => Some(kept.clone()),
        (Some(_), new) => new,
    };
    let report = ReloadReport {
        routes: config.routes.len(),
        policies: config.policies.len(),
        needs_restart,
        changes: Changes::between(&old, &config),
        warnings: config.warnings.clone(),
    };
    let previous = shared.snapshot.load_full();
    let snapshot = Snapshot::build(
        Arc::new(config),
        Some(&previous),
        (&shared.metrics, shared.limiter.keys()),
        shared.clock.now_ns(),
    );
    shared
        .metrics
        .forget_removed(&previous.config, &snapshot.config);
    // Runtime overrides are checked against the new numbers before they run: some may
    // apply again, some stop applying until a later reload or a new PUT.
    let next = snapshot.config.clone();
    let wall_ms = shared.clock.wall_ms();
    let swap = || shared.snapshot.store(Arc::new(snapshot));
    (shared.overrides)
        .reapply_then(&next, &shared.limiter, wall_ms, swap)
        .await;
    let emptied = drop_other_calendars(shared);
    if emptied > 0 {
        tracing::info!(
            keys = emptied,
            "calendar changed: the old calendar's quota keys in memory dropped"
        );
    }
    // Refusals remembered under the old numbers are forgotten (a policy turned from a
    // quota into a rate must not read a quota's window end as a debt).
    shared.limiter.forget_refusals();
    // Slices were sized and timed with the old numbers: give them all back.
    shared
        .limiter
        .give_back_slices(shared.clock.now_ns(), true)
        .await;
    // Again after the round trips, for what requests decided before the swap recorded
    // meanwhile.
    shared.limiter.forget_refusals();
    Ok(report)
}

/// A quota policy whose calendar changed starts at zero: the old calendar's keys go from
/// its area of the memory store, or making room would weigh them against the new
/// calendar's (all but a window both calendars share). Returns the keys dropped.
fn drop_other_calendars(shared: &Shared) -> usize {
    let ends = shared
        .limiter
        .keys()
        .window_ends(&shared.config(), &*shared.clock);
    shared
        .limiter
        .local()
        .empty_stale_areas(|area| ends.of(area))
}

/// Copies the settings that only a restart applies from the running config into `new`.
fn keep_running_values(running: &Config, new: &mut Config) {
    let (r, n) = (&running.server, &mut new.server);
    n.listen = r.listen;
    n.admin_listen = r.admin_listen;
    n.header_read_timeout = r.header_read_timeout;
    n.max_connections = r.max_connections;
    n.max_header_bytes = r.max_header_bytes;
    n.drain_timeout = r.drain_timeout;
    n.workers = r.workers;
    n.send_timeout = r.send_timeout;
    n.idle_timeout = r.idle_timeout;
    n.max_streams = r.max_streams;
    n.overrides_file = r.overrides_file.clone();
    n.watch_config = r.watch_config;
    new.store = running.store.clone();
    // The rate limit service's listener is bound at start: one added waits for a restart,
    // and its address, mode and bound on quota streams stay (new certificates of a TLS one
    // apply to new connections).
    if running.rls.is_none() {
        new.rls = None;
    }
    if let (Some(r), Some(n)) = (&running.rls, &mut new.rls) {
        n.listen = r.listen;
        n.max_quota_streams = r.max_quota_streams;
        n.max_quota_buckets = r.max_quota_buckets;
        n.tls = match (&r.tls, n.tls.take()) {
            (None, _) => None,
            (Some(kept), None) => Some(kept.clone()),
            (Some(_), new) => new,
        };
    }
}

fn restart_only_changes(old: &Config, new: &Config) -> Vec<String> {
    let (o, n) = (&old.server, &new.server);
    let mut changed = Vec::new();
    let mut check = |name: &str, differs: bool| {
        if differs {
            changed.push(name.to_owned());
        }
    };
    check("server.listen", o.listen != n.listen);
    // Removing it is refused (`ReloadError::RlsRemoved`).
    check(
        "[rls] (adding the rate limit service)",
        old.rls.is_none() && new.rls.is_some(),
    );
    if let (Some(o), Some(n)) = (&old.rls, &new.rls) {
        check("rls.listen", o.listen != n.listen);
        check(
            "rls.max_quota_streams",
            o.max_quota_streams != n.max_quota_streams,
        );
        check(
            "rls.max_quota_buckets",
            o.max_quota_buckets != n.max_quota_buckets,
        );
        check(
            "rls.tls (enabling or disabling)",
            o.tls.is_some() != n.tls.is_some(),
        );
    }
    check("server.admin_listen", o.admin_listen != n.admin_listen);
    check(
        "server.tls (enabling or disabling)",
        o.tls.is_some() != n.tls.is_some(),
    );
    check(
        "server.header_read_timeout",
        o.header_read_timeout != n.header_read_timeout,
    );
    check(
        "server.max_connections",
        o.max_connections != n.max_connections,
    );
    check(
        "server.max_header_bytes",
        o.max_header_bytes != n.max_header_bytes,
    );
    check("server.drain_timeout", o.drain_timeout != n.drain_timeout);
    // Read by each worker when it starts serving.
    check("server.send_timeout", o.send_timeout != n.send_timeout);
    check("server.idle_timeout", o.idle_timeout != n.idle_timeout);
    check("server.max_streams", o.max_streams != n.max_streams);
    check(
        "server.overrides_file",
        o.overrides_file != n.overrides_file,
    );
    check("server.workers", o.workers != n.workers);
    check("server.watch_config", o.watch_config != n.watch_config);
    check("store", old.store != new.store);
    changed
}

/// A policy that keeps its name keeps its keys' state (algorithm.md § 7.6), which a change
/// of its calendar, of its kind (between a rate and a calendar quota the same TAT means
/// something else) or of its key's sources (a key's state is found by its text) makes
/// another thing: each is said, with how to start afresh.
fn warn_of_policy_changes(old: &Config, new: &mut Config) {
    let quota = |p: &crate::config::Policy| {
        p.rate()
            .map(|_| p.kind() == crate::config::LimitKind::Quota)
    };
    let mut warnings = Vec::new();
    for p in &new.policies {
        let Some(before) = old.policy(&p.name) else {
            continue;
        };
        if let Some(change) = calendar_change(before, p) {
            warnings.push(format!(
                "{}: warning: policy `{}`'s calendar changed ({change}): every key's usage starts at zero in the new calendar's window, whose end Retry-After and resets_at now name (a usage counted under the old calendar is not carried over, except into a window that ends when the old one did, e.g. month to day on the month's last day: there it counts until that window ends; rename the policy to start every key afresh at once)",
                new.path.display(),
                p.name
            ));
        }
        if let (Some(was), Some(is)) = (quota(before), quota(p)) {
            if was != is {
                warnings.push(format!(
                    "{}: warning: policy `{}` changed between a rate and a calendar quota: its keys start afresh under the new kind (a rate's debt reaching past the window's end by less than 15 minutes is read as that much usage), except a key whose quota state is unmarked (last charged on Redis by a gateway older than the quota mark, or in memory by one of more quota policies than the 63 areas), which a rate reads as owing up to the rest of the window; rename the policy to start every key afresh at once",
                    new.path.display(),
                    p.name
                ));
            }
        }
        let (was, is) = (before.key_sources(), p.key_sources());
        if was != is {
            warnings.push(format!(
                "{}: warning: policy `{}` is keyed by {} now, not {}: a key's state is found by its text, so a key of the new source that spells one of the old takes its state until that runs out, and runtime overrides set before wait inactive; rename the policy to start every key afresh",
                new.path.display(),
                p.name,
                is.join("/"),
                was.join("/")
            ));
        }
    }
    new.warnings.extend(warnings);
}

/// How a calendar quota's calendar changed between `old` and `new` (its window, anchor or
/// time zone), said the way the file writes it; `None` when it did not (or either is no
/// quota).
fn calendar_change(old: &crate::config::Policy, new: &crate::config::Policy) -> Option<String> {
    let calendar = |p: &crate::config::Policy| {
        p.rate()
            .and_then(|r| r.calendar.as_ref())
            .map(|c| c.calendar.clone())
    };
    let (was, is) = (calendar(old)?, calendar(new)?);
    if was.period == is.period && was.zone_name == is.zone_name {
        return None;
    }
    let describe = |c: &crate::limit::calendar::Calendar| {
        let anchor = match c.period {
            crate::limit::calendar::Period::Day => String::new(),
            crate::limit::calendar::Period::Week(day) => format!(" from {day:?}").to_lowercase(),
            crate::limit::calendar::Period::Month(day) => format!(" from day {day}"),
        };
        format!("{}{anchor} in {}", c.period_name(), c.zone_name)
    };
    Some(format!("{} -> {}", describe(&was), describe(&is)))
}

/// Whole Unix seconds of a wall-clock reading in milliseconds.
pub fn unix_seconds(wall_ms: u64) -> i64 {
    i64::try_from(wall_ms / 1000).unwrap_or(i64::MAX)
}
