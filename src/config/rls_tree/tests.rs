//! The tree against an independent model: the rules sorted most specific first, the first
//! that takes every entry, and the YAML's greedy walk checked against every other limit
//! (how rules were found before the tree, at a cost of every rule of the domain).

use std::cmp::Reverse;

use proptest::prelude::*;

use crate::config::rls::{RlsRule, RlsRules, RuleEntry, Value};

fn ranks(rule: &RlsRule) -> Vec<u8> {
    rule.entries.iter().map(|e| e.value.rank()).collect()
}

fn matches(rule: &RlsRule, entries: &[(&str, &str)]) -> bool {
    entries.len() == rule.entries.len()
        && entries
            .iter()
            .zip(&rule.entries)
            .all(|(&(key, value), e)| key == e.key && e.value.takes(value))
}

/// Whether walking the YAML's tree, `entries` would enter `other`'s more specific branch
/// at some level instead of `rule`'s.
fn passes_by(rule: &RlsRule, other: &RlsRule, entries: &[(&str, &str)]) -> bool {
    for (level, &(key, value)) in entries.iter().enumerate() {
        let (Some(mine), Some(theirs)) = (rule.entries.get(level), other.entries.get(level)) else {
            return false;
        };
        if theirs.key == key && theirs.value.takes(value) && theirs.value.rank() > mine.value.rank()
        {
            return true;
        }
        if theirs != mine {
            return false;
        }
    }
    false
}

fn model_find(rules: &[RlsRule], domain: &str, entries: &[(&str, &str)]) -> Option<usize> {
    let mut ids: Vec<usize> = (0..rules.len())
        .filter(|&i| rules[i].domain == domain)
        .collect();
    ids.sort_by_key(|&i| Reverse(ranks(&rules[i])));
    let found = ids.iter().copied().find(|&i| matches(&rules[i], entries))?;
    let rule = &rules[found];
    let yaml = |r: &RlsRule| r.name.is_some();
    let branched = yaml(rule)
        && ids
            .iter()
            .any(|&o| yaml(&rules[o]) && passes_by(rule, &rules[o], entries));
    (!branched).then_some(found)
}

const KEYS: [&str; 2] = ["k", "l"];
const VALUES: [&str; 5] = ["", "x", "xy", "xyz", "y"];

fn entry() -> impl Strategy<Value = RuleEntry> {
    (0..2usize, 0..4u8, 0..VALUES.len()).prop_map(|(k, kind, v)| {
        let text = VALUES[v].to_owned();
        RuleEntry {
            key: KEYS[k].to_owned(),
            value: match kind {
                0 => Value::Any,
                1 => Value::Prefix(text),
                2 => Value::SharedPrefix(text),
                _ => Value::Exact(text),
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
        descriptors in prop::collection::vec(descriptor(), 1..16),
    ) {
        let indexed = RlsRules::new(rules.clone());
        for (domain, entries) in descriptors {
            let domain = ["a", "b", "c"][domain];
            let entries: Vec<(&str, &str)> =
                entries.iter().map(|&(k, v)| (KEYS[k], VALUES[v])).collect();
            prop_assert_eq!(
                indexed.find(domain, entries.iter().copied()),
                model_find(&rules, domain, &entries),
                "{} {:?}", domain, entries
            );
        }
    }
}
