//! `[[rlqs.buckets]]`: which policy shares out which of Envoy's quota buckets. A bucket id
//! is a map of names to values; a bucket entry names its keys in order (a key may pin its
//! value), and the values of the keys it does not pin key the policy's limiter, as an RLS
//! descriptor's do.

use std::time::Duration;

use super::rls::{RlsRule, Value};

/// One `[[rlqs.buckets]]` entry: bucket ids of `rule.domain` with exactly `rule.entries`'
/// keys (pinned ones at their value) are shares of `rule.policy`, assigned for `ttl`.
#[derive(Debug, Clone)]
pub struct RlqsBucket {
    pub rule: RlsRule,
    /// How long an assignment holds in Envoy: whole seconds (Envoy 1.40 drops the rest).
    pub ttl: Duration,
}

impl RlqsBucket {
    /// The limiter key's parts of a matching bucket id, in the entries' order.
    pub fn key_parts<'a, 'i: 'a>(
        &'a self,
        id: &'i BucketMap,
    ) -> impl Iterator<Item = &'i str> + 'a {
        self.rule
            .entries
            .iter()
            .filter(|e| !matches!(e.value, Value::Exact(_)))
            .map(move |e| id.get(e.key.as_str()).map_or("", String::as_str))
    }

    fn matches(&self, domain: &str, id: &BucketMap) -> bool {
        self.rule.domain == domain
            && id.len() == self.rule.entries.len()
            && self.rule.entries.iter().all(|e| {
                id.get(e.key.as_str()).is_some_and(|v| match &e.value {
                    Value::Any => true,
                    Value::Prefix(p) | Value::SharedPrefix(p) => v.starts_with(p.as_str()),
                    Value::Exact(x) => x == v,
                })
            })
    }
}

/// A bucket id as Envoy sends it.
pub type BucketMap = std::collections::HashMap<String, String>;

/// The buckets, most specific first (pinned values before any value), then in file order.
#[derive(Debug, Clone, Default)]
pub struct RlqsBuckets {
    buckets: Vec<RlqsBucket>,
}

impl RlqsBuckets {
    pub fn new(mut buckets: Vec<RlqsBucket>) -> Self {
        buckets.sort_by_key(|b| {
            let pinned = b
                .rule
                .entries
                .iter()
                .filter(|e| matches!(e.value, Value::Exact(_)))
                .count();
            std::cmp::Reverse(pinned)
        });
        Self { buckets }
    }

    /// The entry deciding bucket `id` of `domain`, by index.
    pub fn find(&self, domain: &str, id: &BucketMap) -> Option<usize> {
        self.buckets.iter().position(|b| b.matches(domain, id))
    }

    pub fn get(&self, index: usize) -> Option<&RlqsBucket> {
        self.buckets.get(index)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &RlqsBucket> {
        self.buckets.iter()
    }

    pub fn is_empty(&self) -> bool {
        self.buckets.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::rls::RuleEntry;

    fn bucket(entries: &[(&str, Option<&str>)]) -> RlqsBucket {
        RlqsBucket {
            rule: RlsRule {
                domain: "edge".into(),
                entries: entries
                    .iter()
                    .map(|(k, v)| RuleEntry {
                        key: (*k).into(),
                        value: v.map_or(Value::Any, |v| Value::Exact(v.into())),
                    })
                    .collect(),
                policy: None,
                reports: false,
                name: None,
                named: false,
                replaces: Vec::new(),
                blocked: None,
            },
            ttl: Duration::from_secs(10),
        }
    }

    fn id(pairs: &[(&str, &str)]) -> BucketMap {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    #[test]
    fn a_bucket_id_matches_by_its_keys_whatever_their_order() {
        let buckets = RlqsBuckets::new(vec![
            bucket(&[("tenant", None), ("path", None)]),
            bucket(&[("tenant", None), ("path", Some("/search"))]),
            bucket(&[("tenant", None)]),
        ]);
        let search = id(&[("path", "/search"), ("tenant", "a")]);
        let found = buckets.find("edge", &search).expect("a match");
        let b = buckets.get(found).expect("bucket");
        assert_eq!(b.rule.entries[1].value, Value::Exact("/search".into()));
        assert_eq!(b.key_parts(&search).collect::<Vec<_>>(), ["a"]);
        let other = id(&[("tenant", "a"), ("path", "/x")]);
        let b = buckets
            .get(buckets.find("edge", &other).expect("any path"))
            .expect("bucket");
        assert_eq!(b.key_parts(&other).collect::<Vec<_>>(), ["a", "/x"]);
        assert!(buckets.find("edge", &id(&[("user", "u")])).is_none());
        assert!(buckets.find("other", &id(&[("tenant", "a")])).is_none());
        assert!(buckets.find("edge", &id(&[])).is_none());
    }
}
