//! The runtime overrides a gateway holds, with what each change needs at hand: the
//! overrides by id (sorted, for listing), by expiry (so the upkeep finds the expired ones
//! without looking at the others), and why some are not in effect. Every change costs
//! O(log n).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use super::stored::{OverrideId, Stored};
use crate::config::override_spec::OverrideProblem;

#[derive(Default)]
pub struct OverrideSet {
    all: BTreeMap<OverrideId, Stored>,
    by_expiry: BTreeSet<(u64, OverrideId)>,
    /// Why an override is not in effect, by override.
    inactive: HashMap<OverrideId, Vec<OverrideProblem>>,
}

impl OverrideSet {
    pub fn new(initial: impl IntoIterator<Item = Stored>) -> Self {
        let mut set = Self::default();
        for s in initial {
            set.insert(s);
        }
        set
    }

    pub fn len(&self) -> usize {
        self.all.len()
    }

    pub fn is_empty(&self) -> bool {
        self.all.is_empty()
    }

    pub fn contains(&self, id: &OverrideId) -> bool {
        self.all.contains_key(id)
    }

    pub fn get(&self, id: &OverrideId) -> Option<&Stored> {
        self.all.get(id)
    }

    pub fn values(&self) -> impl Iterator<Item = &Stored> {
        self.all.values()
    }

    /// The overrides in id order (policy, then key) from just after `after` (from the
    /// first), only `policy`'s when given: a page of the list starts here without walking
    /// the ones before it.
    pub fn from<'a>(
        &'a self,
        after: Option<&OverrideId>,
        policy: Option<&'a str>,
    ) -> impl Iterator<Item = &'a Stored> + 'a {
        use std::ops::Bound::{Excluded, Included, Unbounded};
        let first = policy.map(|p| OverrideId {
            policy: p.to_owned(),
            key: Vec::new(),
        });
        let start = match (after, &first) {
            // The later of the two: a cursor before the policy's first starts at it.
            (Some(a), Some(f)) if a < f => Included(f.clone()),
            (Some(a), _) => Excluded(a.clone()),
            (None, Some(f)) => Included(f.clone()),
            (None, None) => Unbounded,
        };
        self.all
            .range((start, Unbounded))
            .map(|(_, stored)| stored)
            .take_while(move |s| policy.is_none_or(|p| s.id.policy == p))
    }

    /// Sets `stored`, replacing the override of its id (and forgetting why that one was
    /// not in effect); the one it replaced.
    pub fn insert(&mut self, stored: Stored) -> Option<Stored> {
        let old = self.remove(&stored.id);
        if let Some(at) = stored.expires_at_ms {
            self.by_expiry.insert((at, stored.id.clone()));
        }
        self.all.insert(stored.id.clone(), stored);
        old
    }

    /// Removes `id`'s override; the one removed.
    pub fn remove(&mut self, id: &OverrideId) -> Option<Stored> {
        let old = self.all.remove(id)?;
        if let Some(at) = old.expires_at_ms {
            self.by_expiry.remove(&(at, id.clone()));
        }
        self.inactive.remove(id);
        Some(old)
    }

    /// The overrides expired by `now_ms`: O(their number).
    pub fn expired(&self, now_ms: u64) -> Vec<OverrideId> {
        self.by_expiry
            .iter()
            .take_while(|(at, _)| *at <= now_ms)
            .map(|(_, id)| id.clone())
            .collect()
    }

    /// Records why `id` is not in effect (`None`: it is).
    pub fn set_problems(&mut self, id: &OverrideId, problems: Option<Vec<OverrideProblem>>) {
        match problems {
            Some(p) => {
                self.inactive.insert(id.clone(), p);
            }
            None => {
                self.inactive.remove(id);
            }
        }
    }

    /// Why `id` is not in effect; empty when it is.
    pub fn problems(&self, id: &OverrideId) -> &[OverrideProblem] {
        self.inactive.get(id).map_or(&[], Vec::as_slice)
    }

    pub fn inactive(&self) -> impl Iterator<Item = (&OverrideId, &Vec<OverrideProblem>)> {
        self.inactive.iter()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stored(key: &str, expires_at_ms: Option<u64>) -> Stored {
        Stored {
            id: OverrideId {
                policy: "p".into(),
                key: vec![key.into()],
            },
            set: Default::default(),
            expires_at_ms,
            keyed_by: None,
        }
    }

    #[test]
    fn finds_the_expired_through_replacements_and_removals() {
        let mut set = OverrideSet::new([stored("a", Some(10)), stored("b", Some(20))]);
        set.insert(stored("c", None));
        assert_eq!(set.expired(15).len(), 1);
        // Set again with a later expiry: no longer expired at 15.
        set.insert(stored("a", Some(30)));
        assert!(set.expired(15).is_empty());
        assert_eq!(set.expired(25), vec![stored("b", None).id]);
        set.remove(&stored("b", None).id);
        assert_eq!(set.expired(u64::MAX), vec![stored("a", None).id]);
        assert_eq!(set.len(), 2);
    }
}
