//! `cargo bench --bench routes`: what the number of routes costs.
//!
//! For 10 to 10,000 routes (each a prefix of its own, a third of them with a host, a
//! third with methods, and a catch-all `/`): the time to find a request's route
//! (`Config::find_route`, as the request path does: a hit on a random route and a miss
//! that falls through to `/`), and the time to load and check the file and to reload a
//! running gateway with it.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

#[path = "common/mod.rs"]
mod common;

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::Instant;

use common::full_run;
use http::Method;
use tollgate::clock::MonotonicClock;
use tollgate::gateway::Gateway;

fn config_text(routes: usize) -> String {
    let mut text = String::from(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\naccess_log = false\nworkers = 1\n\
         [upstreams.api]\ntargets = [\"http://127.0.0.1:9\"]\n\
         [policies.tenant]\nkey = \"header:x-tenant-id\"\nlimit = 100\nperiod = \"1s\"\nburst = 10\n",
    );
    for i in 0..routes.saturating_sub(1) {
        let _ = write!(
            text,
            "[[routes]]\nname = \"r{i}\"\npath = \"/api/v{}/svc-{i}/\"\nupstream = \"api\"\npolicies = [\"tenant\"]\n",
            i % 7
        );
        match i % 3 {
            0 => text.push_str("host = \"api.example.com\"\n"),
            1 => text.push_str("methods = [\"GET\", \"POST\"]\n"),
            _ => {}
        }
    }
    text.push_str("[[routes]]\nname = \"default\"\npath = \"/\"\nupstream = \"api\"\n");
    text
}

/// The scan `find_route` was before the index: the first route of match order that
/// matches, tried one by one.
fn scan(
    config: &tollgate::config::Config,
    host: &str,
    path: &str,
    method: &Method,
) -> Option<usize> {
    config.routes.iter().position(|r| {
        path.starts_with(r.path.as_str())
            && r.host
                .as_deref()
                .is_none_or(|h| host.eq_ignore_ascii_case(h))
            && r.methods.as_ref().is_none_or(|m| m.contains(method))
    })
}

fn per_lookup(config: &tollgate::config::Config, routes: usize, hit: bool, scanned: bool) -> f64 {
    let n = if full_run() { 2_000_000 } else { 20_000 };
    let paths: Vec<String> = (0..1024)
        .map(|k| {
            let i = (k * 7919) % routes.saturating_sub(1).max(1);
            if hit {
                format!("/api/v{}/svc-{i}/items/42", i % 7)
            } else {
                format!("/other/{k}/items")
            }
        })
        .collect();
    let started = Instant::now();
    let mut found = 0usize;
    for k in 0..n {
        let path = &paths[k % paths.len()];
        let r = if scanned {
            scan(config, "api.example.com", path, &Method::GET)
        } else {
            config.find_route(Some("api.example.com"), path, &Method::GET)
        };
        found += usize::from(r.is_some());
    }
    assert_eq!(found, n, "every request finds a route");
    started.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("runtime");
    let sizes = common::sizes("routes");
    println!("| routes | find a route: hit / miss to `/` | a scan (before), hit | load + check the file | reload a running gateway |");
    println!("|---:|---:|---:|---:|---:|");
    let mut base = None;
    for &routes in sizes {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("tollgate.toml");
        std::fs::write(&path, config_text(routes)).expect("config");
        let started = Instant::now();
        let config = tollgate::config::load(&path).expect("valid");
        tollgate::gateway::preflight(&config).expect("checked");
        let loaded = started.elapsed();
        let hit = per_lookup(&config, routes, true, false);
        let miss = per_lookup(&config, routes, false, false);
        let scanned = per_lookup(&config, routes, true, true);
        let reload = rt.block_on(async {
            let gw = Gateway::start_with(config, Arc::new(MonotonicClock::new()))
                .await
                .expect("starts");
            let started = Instant::now();
            gw.reload().await.expect("reloads");
            let took = started.elapsed();
            gw.shutdown().await;
            took
        });
        let (h0, m0) = *base.get_or_insert((hit, miss));
        println!(
            "| {routes} | {hit:.0} / {miss:.0} ns ({:.2}× / {:.2}× at 10) | {scanned:.0} ns | {:.0} ms | {:.0} ms |",
            hit / h0,
            miss / m0,
            loaded.as_secs_f64() * 1e3,
            reload.as_secs_f64() * 1e3
        );
    }
}
