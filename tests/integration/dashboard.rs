//! The Grafana dashboard in examples/ queries only metrics a real gateway exports, and
//! shows every one of them.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::Value;

use crate::support::*;

const DASHBOARD: &str = concat!(
    env!("CARGO_MANIFEST_DIR"),
    "/examples/grafana-dashboard.json"
);

/// Every `tollgate_…` identifier in a PromQL expression.
fn metric_names(expr: &str) -> Vec<String> {
    let bytes = expr.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let mut names = Vec::new();
    let mut at = 0;
    while let Some(found) = expr[at..].find("tollgate_") {
        let start = at + found;
        let end = start
            + expr[start..]
                .bytes()
                .take_while(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_')
                .count();
        if start == 0 || !ident(bytes[start - 1]) {
            names.push(expr[start..end].to_owned());
        }
        at = end;
    }
    names
}

/// The PromQL a dashboard runs: panel targets' `expr`, and template variables' queries.
fn expressions(value: &Value, key: Option<&str>, out: &mut Vec<String>) {
    match value {
        Value::String(s) if matches!(key, Some("expr" | "query" | "definition")) => {
            out.push(s.clone())
        }
        Value::Array(items) => items.iter().for_each(|v| expressions(v, key, out)),
        Value::Object(fields) => {
            for (k, v) in fields {
                expressions(v, Some(k), out);
            }
        }
        _ => {}
    }
}

/// The series names Prometheus stores from an exposition, each with its family (the name
/// of its `# TYPE` line): a counter's `_total`, a histogram's `_bucket`, `_count` and
/// `_sum`, a gauge's own name — also for families that have no series yet.
fn queryable(exposition: &str) -> BTreeMap<String, String> {
    let mut names = BTreeMap::new();
    for line in exposition.lines() {
        let Some(rest) = line.strip_prefix("# TYPE ") else {
            continue;
        };
        let mut words = rest.split_whitespace();
        let (Some(family), Some(kind)) = (words.next(), words.next()) else {
            continue;
        };
        let suffixes: &[&str] = match kind {
            "counter" if family.ends_with("_total") => &[""],
            "counter" => &["_total"],
            "histogram" => &["_bucket", "_count", "_sum"],
            "summary" => &["", "_count", "_sum"],
            _ => &[""],
        };
        for suffix in suffixes {
            names.insert(format!("{family}{suffix}"), family.to_owned());
        }
    }
    for line in exposition.lines().filter(|l| !l.starts_with('#')) {
        let name: String = line
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_' || *c == ':')
            .collect();
        if !name.is_empty() && !names.contains_key(&name) {
            // A series whose family is not declared: its own family.
            names.insert(name.clone(), name);
        }
    }
    names
}

#[test]
fn metric_names_are_found_in_promql() {
    assert_eq!(
        metric_names(
            r#"sum by (route) (rate(tollgate_decisions_total{route=~"$r"}[5m])) / my_tollgate_x + histogram_quantile(0.9, tollgate_a_bucket)"#
        ),
        ["tollgate_decisions_total", "tollgate_a_bucket"]
    );
    let q = queryable(
        "# TYPE tollgate_d counter\n# TYPE tollgate_h histogram\n# TYPE tollgate_g gauge\ntollgate_g 1\n",
    );
    let names: Vec<&str> = q.keys().map(String::as_str).collect();
    assert_eq!(
        names,
        [
            "tollgate_d_total",
            "tollgate_g",
            "tollgate_h_bucket",
            "tollgate_h_count",
            "tollgate_h_sum"
        ]
    );
    assert!(
        !q.contains_key("tollgate_h"),
        "a bare histogram name is no series"
    );
}

#[tokio::test]
async fn the_grafana_dashboard_queries_only_exported_metrics_and_all_of_them() {
    let text = std::fs::read_to_string(DASHBOARD).expect("examples/grafana-dashboard.json");
    let dashboard: Value = serde_json::from_str(&text).expect("the dashboard is JSON");

    // Its data source is a variable, chosen on import: `${DS_PROMETHEUS}` everywhere.
    let variables = dashboard["templating"]["list"]
        .as_array()
        .expect("templating variables");
    assert!(
        variables.iter().any(|v| v["name"] == "DS_PROMETHEUS"
            && v["type"] == "datasource"
            && v["query"] == "prometheus"),
        "a Prometheus data source variable named DS_PROMETHEUS"
    );
    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for panel in panels {
        assert!(
            ids.insert(panel["id"].as_u64().expect("panel id")),
            "unique panel ids"
        );
        if panel["type"] == "row" {
            continue;
        }
        let title = panel["title"].as_str().expect("title");
        assert_eq!(panel["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
        let targets = panel["targets"].as_array().expect("targets");
        assert!(!targets.is_empty(), "{title} queries something");
        for t in targets {
            assert_eq!(t["datasource"]["uid"], "${DS_PROMETHEUS}", "{title}");
            assert!(t["expr"].as_str().is_some_and(|e| !e.is_empty()), "{title}");
        }
    }

    let mut exprs = Vec::new();
    expressions(&dashboard, None, &mut exprs);
    let queried: BTreeSet<String> = exprs.iter().flat_map(|e| metric_names(e)).collect();
    assert!(queried.len() >= 10, "the dashboard's metrics: {queried:?}");

    let exposition = exposition_after_traffic().await;
    let exported = queryable(&exposition);

    let missing: Vec<&String> = queried
        .iter()
        .filter(|n| !exported.contains_key(*n))
        .collect();
    assert!(
        missing.is_empty(),
        "the dashboard queries metrics tollgate does not export: {missing:?}\nexported: {:?}",
        exported.keys().collect::<Vec<_>>()
    );
    let shown: BTreeSet<&String> = queried.iter().filter_map(|n| exported.get(n)).collect();
    let families: BTreeSet<&String> = exported
        .values()
        .filter(|f| f.starts_with("tollgate_"))
        .collect();
    let unshown: Vec<&&String> = families.difference(&shown).collect();
    assert!(
        unshown.is_empty(),
        "exported metrics the dashboard does not show (add a panel): {unshown:?}"
    );
}

/// What a real gateway with rate and concurrency tiers exposes after admitted, refused
/// and unmatched requests and a reload: the labelled series exist.
async fn exposition_after_traffic() -> String {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy("client", "ip", 1, "1h", 2)
        .policy_raw("inflight", "key = \"header:x-key\"\nmax_in_flight = 4\n")
        .route("api", "/api", "api", &["client", "inflight"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut statuses = Vec::new();
    for _ in 0..3 {
        statuses.push(
            get(&gw.url("/api"), &[("x-key", "k")])
                .await
                .status
                .as_u16(),
        );
    }
    assert_eq!(statuses, [200, 200, 429]);
    assert_eq!(get(&gw.url("/elsewhere"), &[]).await.status, 404);
    gw.gw().reload().await.expect("reload");
    let scraped = get(&gw.admin_url("/metrics"), &[]).await;
    assert_eq!(scraped.status, 200);
    let exposition = scraped.text();
    for series in [
        r#"tollgate_decisions_total{route="api",policy="client",outcome="denied"} 1"#,
        r#"tollgate_retry_after_seconds_count{route="api"} 1"#,
        r#"tollgate_config_reloads_total{result="ok"} 1"#,
    ] {
        assert!(exposition.contains(series), "{series} in:\n{exposition}");
    }
    exposition
}
