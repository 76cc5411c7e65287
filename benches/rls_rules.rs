//! `cargo bench --bench rls_rules`: what the number of rate limit service rules in one
//! domain costs a descriptor.
//!
//! For 10 to 10,000 limits (the YAML reader's node budget allows about 12,000 of these) in one domain of envoyproxy/ratelimit's YAML (a limit per
//! tenant, `tenant=<id>` then any `user`, beside a catch-all `tenant` then `user`): the
//! time to find a descriptor's rule (`RlsRules::find`, as a call does) for a tenant with a
//! limit of its own and for one without (found by the catch-all after the greedy walk's
//! check), and the time to load and check the file.
#![allow(clippy::disallowed_methods)] // a benchmark reads the real clock

#[path = "common/mod.rs"]
mod common;

use std::fmt::Write as _;
use std::time::Instant;

use common::full_run;

fn files(dir: &std::path::Path, limits: usize) -> std::path::PathBuf {
    let mut yaml = String::from(
        "domain: edge\ndescriptors:\n  - key: tenant\n    descriptors:\n      - key: user\n        rate_limit:\n          unit: second\n          requests_per_unit: 100\n",
    );
    for i in 0..limits {
        let _ = write!(
            yaml,
            "  - key: tenant\n    value: t{i}\n    descriptors:\n      - key: user\n        rate_limit:\n          unit: second\n          requests_per_unit: {}\n",
            10 + i % 90
        );
    }
    std::fs::write(dir.join("edge.yaml"), yaml).expect("yaml");
    let toml = dir.join("tollgate.toml");
    let text = format!(
        "[server]\nlisten = \"127.0.0.1:0\"\nadmin_listen = \"127.0.0.1:0\"\naccess_log = false\nworkers = 1\n\
         [upstreams.api]\ntargets = [\"http://127.0.0.1:9\"]\n\
         [rls]\nlisten = \"127.0.0.1:0\"\nratelimit_config = \"{}\"\n",
        dir.join("edge.yaml").display()
    );
    std::fs::write(&toml, text).expect("config");
    toml
}

fn per_lookup(rules: &tollgate::config::rls::RlsRules, limits: usize, own: bool) -> f64 {
    let n = if full_run() { 2_000_000 } else { 20_000 };
    let tenants: Vec<String> = (0..1024)
        .map(|k| {
            if own {
                format!("t{}", (k * 7919) % limits.max(1))
            } else {
                format!("other-{k}")
            }
        })
        .collect();
    let started = Instant::now();
    let mut found = 0usize;
    for k in 0..n {
        let entries = [
            ("tenant", tenants[k % tenants.len()].as_str()),
            ("user", "u"),
        ];
        let rule = rules.find("edge", entries.iter().copied());
        found += usize::from(matches!(rule, tollgate::config::rls::Found::Rule(_)));
    }
    assert_eq!(found, n, "every descriptor finds a rule");
    started.elapsed().as_nanos() as f64 / n as f64
}

fn main() {
    let sizes = common::sizes("rls_rules");
    println!("| limits in the domain | find a descriptor's rule: its own limit / the catch-all | load + check the files |");
    println!("|---:|---:|---:|");
    let mut base = None;
    for &limits in sizes {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = files(dir.path(), limits);
        let started = Instant::now();
        let config = tollgate::config::load(&path).expect("valid");
        let loaded = started.elapsed();
        let rules = &config.rls.as_ref().expect("[rls]").rules;
        let own = per_lookup(rules, limits, true);
        let other = per_lookup(rules, limits, false);
        let (o0, c0) = *base.get_or_insert((own, other));
        println!(
            "| {limits} | {own:.0} / {other:.0} ns ({:.2}× / {:.2}× at 10) | {:.0} ms |",
            own / o0,
            other / c0,
            loaded.as_secs_f64() * 1e3
        );
    }
}
