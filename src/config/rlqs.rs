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

    /// Whether `id` of `domain` is this entry's: its keys, each pinned one at its value.
    /// `absent`: keys of any value may be missing from the id (Envoy leaves a key out of
    /// an id when the request's value is empty), so long as every key the id has is one
    /// of the entry's — a missing value is the policy's `missing` to answer, not an
    /// unmatched bucket let through uncharged.
    fn matches(&self, domain: &str, id: &BucketMap, absent: bool) -> bool {
        let entries = &self.rule.entries;
        self.rule.domain == domain
            && (id.len() == entries.len() || absent && !id.is_empty() && id.len() < entries.len())
            && id.keys().all(|k| entries.iter().any(|e| e.key == *k))
            && entries
                .iter()
                .all(|e| match (id.get(e.key.as_str()), &e.value) {
                    (None, Value::Any) => absent,
                    (None, _) => false,
                    (Some(_), Value::Any) => true,
                    (Some(v), Value::Wildcard(p) | Value::SharedWildcard(p)) => p.takes(v),
                    (Some(v), Value::Exact(x)) => x == v,
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
    /// The same buckets, each with the same rule and `ttl`.
    pub fn same_as(&self, other: &Self) -> bool {
        self.buckets.len() == other.buckets.len()
            && self
                .buckets
                .iter()
                .zip(&other.buckets)
                .all(|(a, b)| a.rule.same_as(&b.rule) && a.ttl == b.ttl)
    }

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

    /// The entry deciding bucket `id` of `domain`, by index: one naming exactly its keys,
    /// else one that names more keys of any value (those the id lacks are missing).
    pub fn find(&self, domain: &str, id: &BucketMap) -> Option<usize> {
        let with = |absent| {
            self.buckets
                .iter()
                .position(|b| b.matches(domain, id, absent))
        };
        with(false).or_else(|| with(true))
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

    /// Envoy leaves a key out of a bucket id when the request's value is empty: such an
    /// id is the entry's whose other keys it has (the key a missing one, for the policy's
    /// `missing` to answer), after every entry naming exactly its keys.
    #[test]
    fn an_id_lacking_a_key_of_any_value_is_the_entrys_with_it_missing() {
        let pair = RlqsBuckets::new(vec![bucket(&[("tenant", None), ("user", None)])]);
        let lacking = id(&[("tenant", "a")]);
        let found = pair
            .find("edge", &lacking)
            .expect("the pair's, user missing");
        let b = pair.get(found).expect("bucket");
        assert_eq!(b.key_parts(&lacking).collect::<Vec<_>>(), ["a", ""]);
        assert!(
            pair.find("edge", &id(&[("team", "a")])).is_none(),
            "not its key"
        );
        let pinned = RlqsBuckets::new(vec![bucket(&[("tenant", None), ("path", Some("/x"))])]);
        assert!(
            pinned.find("edge", &lacking).is_none(),
            "a pinned key is never missing"
        );
        let both = RlqsBuckets::new(vec![
            bucket(&[("tenant", None), ("user", None)]),
            bucket(&[("tenant", None)]),
        ]);
        let exact = both.find("edge", &lacking).expect("a match");
        assert_eq!(both.get(exact).expect("bucket").rule.entries.len(), 1);
    }
}
