//! The tree against an independent model: the rules sorted most specific first, the first
//! that takes every entry, and where that is a YAML limit (or none is), envoyproxy/
//! ratelimit's walk over the YAML's nodes read off the paths written (how rules were found
//! before the tree, at a cost of every rule of the domain); wildcards read by a recursive
//! glob in the model, and `Pattern` against that glob.

use std::cmp::Reverse;

use proptest::prelude::*;

use crate::config::rls::{Found, Pattern, RlsRule, RlsRules, RuleEntry, Value, YamlNode};

fn ranks(rule: &RlsRule) -> Vec<u8> {
    rule.entries.iter().map(|e| e.value.rank()).collect()
}

/// Whether `e` takes `value`, a wildcard read by the recursive glob (not `Pattern`).
fn takes(e: &RuleEntry, value: &str) -> bool {
    match &e.value {
        Value::Any => true,
        Value::Wildcard(p) | Value::SharedWildcard(p) => {
            glob(p.written().as_bytes(), value.as_bytes())
        }
        Value::Exact(v) => v == value,
    }
}

fn matches(rule: &RlsRule, entries: &[(&str, &str)]) -> bool {
    entries.len() == rule.entries.len()
        && entries
            .iter()
            .zip(&rule.entries)
            .all(|(&(key, value), e)| key == e.key && takes(e, value))
}

/// envoyproxy/ratelimit's walk over its YAML's nodes (`yaml`: every node's entries,
/// the domain's descriptors written without a limit and its YAML limits), wildcards
/// tried in the order `written` first writes them: at each level the exact value's node,
/// else the first wildcard that takes the value, else the key alone, never backing up;
/// then the first rule of the node reached (none: exempt).
fn model_walk(
    rules: &[RlsRule],
    (yaml, written): (&[Vec<RuleEntry>], &[Vec<RuleEntry>]),
    domain: &str,
    entries: &[(&str, &str)],
) -> Found {
    let mut chosen: Vec<RuleEntry> = Vec::new();
    for &(key, value) in entries {
        let level = chosen.len();
        let leads = |e: &RuleEntry| {
            yaml.iter()
                .any(|p| p.len() > level && p[..level] == chosen[..] && p[level] == *e)
        };
        let mut order: Vec<&RuleEntry> = Vec::new();
        for p in written {
            if p.len() > level && p[..level] == chosen[..] && !order.contains(&&p[level]) {
                order.push(&p[level]);
            }
        }
        let here: Vec<&RuleEntry> = order
            .into_iter()
            .filter(|e| e.key == key && takes(e, value) && leads(e))
            .collect();
        let pick = (here.iter().find(|e| e.value.rank() == 2))
            .or_else(|| here.iter().find(|e| e.value.rank() == 1))
            .or_else(|| here.iter().find(|e| e.value.rank() == 0));
        match pick {
            Some(pick) => chosen.push((*pick).clone()),
            None => return Found::Unnamed,
        }
    }
    match (0..rules.len()).find(|&i| rules[i].domain == domain && rules[i].entries == chosen) {
        Some(first) => Found::Rule(first),
        None => Found::Exempt,
    }
}

fn model_find(
    rules: &[RlsRule],
    nodes: &[YamlNode],
    domain: &str,
    entries: &[(&str, &str)],
) -> Found {
    let mut ids: Vec<usize> = (0..rules.len())
        .filter(|&i| rules[i].domain == domain)
        .collect();
    ids.sort_by_key(|&i| Reverse(ranks(&rules[i])));
    let found = ids.iter().copied().find(|&i| matches(&rules[i], entries));
    // A TOML rule, most specific, decides; a YAML limit, or nothing, is the walk's.
    if let Some(toml) = found.filter(|&i| rules[i].name.is_none()) {
        return Found::Rule(toml);
    }
    let of_domain = nodes
        .iter()
        .filter(|n| n.domain == domain)
        .map(|n| n.entries.clone());
    let yaml: Vec<Vec<RuleEntry>> = (of_domain.clone())
        .chain(
            (rules.iter())
                .filter(|r| r.domain == domain && r.name.is_some())
                .map(|r| r.entries.clone()),
        )
        .collect();
    // The tree makes the YAML's nodes first, then each rule's, in their order.
    let written: Vec<Vec<RuleEntry>> = of_domain
        .chain(
            (rules.iter())
                .filter(|r| r.domain == domain)
                .map(|r| r.entries.clone()),
        )
        .collect();
    model_walk(rules, (&yaml, &written), domain, entries)
}

const KEYS: [&str; 2] = ["k", "l"];
const VALUES: [&str; 5] = ["", "x", "xy", "xyz", "y"];
/// Wildcards: trailing, leading, inner and several `*`s.
const PATTERNS: [&str; 6] = ["*", "x*", "xy*", "*z", "x*z", "*y*"];

fn entry() -> impl Strategy<Value = RuleEntry> {
    (0..2usize, 0..4u8, 0..VALUES.len(), 0..PATTERNS.len()).prop_map(|(k, kind, v, p)| {
        let pattern = || Pattern::new(PATTERNS[p]).expect("a pattern has a `*`");
        RuleEntry {
            key: KEYS[k].to_owned(),
            value: match kind {
                0 => Value::Any,
                1 => Value::Wildcard(pattern()),
                2 => Value::SharedWildcard(pattern()),
                _ => Value::Exact(VALUES[v].to_owned()),
            },
        }
    })
}

fn rule() -> impl Strategy<Value = RlsRule> {
    (
        0..2usize,
        prop::collection::vec(entry(), 1..4),
        any::<bool>(),
    )
        .prop_map(|(domain, entries, yaml)| RlsRule {
            domain: ["a", "b"][domain].to_owned(),
            entries,
            policy: None,
            reports: false,
            name: yaml.then(|| "limit".to_owned()),
            named: false,
            replaces: Vec::new(),
            blocked: None,
        })
}

fn node() -> impl Strategy<Value = YamlNode> {
    (0..2usize, prop::collection::vec(entry(), 1..4)).prop_map(|(domain, entries)| YamlNode {
        domain: ["a", "b"][domain].to_owned(),
        entries,
    })
}

fn descriptor() -> impl Strategy<Value = (usize, Vec<(usize, usize)>)> {
    (
        0..3usize,
        prop::collection::vec((0..2usize, 0..VALUES.len()), 1..4),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    #[test]
    fn the_tree_finds_the_rule_the_linear_walk_finds(
        rules in prop::collection::vec(rule(), 0..24),
        nodes in prop::collection::vec(node(), 0..6),
        descriptors in prop::collection::vec(descriptor(), 1..16),
    ) {
        let indexed = RlsRules::new(rules.clone(), nodes.clone());
        for (domain, entries) in descriptors {
            let domain = ["a", "b", "c"][domain];
            let entries: Vec<(&str, &str)> =
                entries.iter().map(|&(k, v)| (KEYS[k], VALUES[v])).collect();
            prop_assert_eq!(
                indexed.find(domain, entries.iter().copied()),
                model_find(&rules, &nodes, domain, &entries),
                "{} {:?}", domain, entries
            );
        }
    }
}

/// `*` as any run of characters, read by recursion: a pattern's independent reading.
fn glob(pattern: &[u8], value: &[u8]) -> bool {
    match pattern.split_first() {
        None => value.is_empty(),
        Some((b'*', rest)) => (0..=value.len()).any(|i| glob(rest, &value[i..])),
        Some((c, rest)) => value.first() == Some(c) && glob(rest, &value[1..]),
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(5_000))]

    #[test]
    fn a_pattern_takes_what_a_glob_takes(pattern in "[xy*]{1,7}", value in "[xy]{0,9}") {
        if let Some(p) = Pattern::new(&pattern) {
            prop_assert_eq!(
                p.takes(&value),
                glob(pattern.as_bytes(), value.as_bytes()),
                "{} {}", pattern, value
            );
        }
    }
}

#[test]
fn wildcards_take_as_envoyproxy_ratelimit_reads_them() {
    let p = |w: &str| Pattern::new(w).expect("a pattern");
    assert!(p("/v1/*").takes("/v1/"));
    assert!(p("/v1/*/users").takes("/v1/acme/users"));
    assert!(!p("/v1/*/users").takes("/v1/users"), "parts do not overlap");
    assert!(p("a*b*c").takes("abc") && p("a*b*c").takes("a-b-b-c"));
    assert!(!p("a*b*c").takes("acb"));
    assert_eq!(Pattern::new("plain"), None);
    assert_eq!(p("shared/*").shared_part(), "shared/");
}
