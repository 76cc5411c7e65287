//! One stream's buckets that are shares of one key: an Envoy buckets apart what one key
//! limits (the addresses of one `ip/64` network, a rule's shared prefix). The stream
//! holds the key once, with what its buckets of it ask for together; held one by one,
//! each bucket was given the stream's whole share, and N buckets let through N times the
//! key.
//!
//! Such buckets are sized together, once their report's usages are all charged
//! (`Stream::resplit`): a bucket sized on its own before its siblings' demands were read
//! was sized against their last ones, too big when theirs rose. The stream's share is
//! split by the buckets' demands (`render::split`).

use std::collections::{HashMap, HashSet};

use super::keys::BucketKey;
use super::share::MIN_DEMAND;

/// The most demand one bucket counts with (requests a second): a report's counts are the
/// client's to pick, and sums must not wrap.
const MAX_DEMAND: f64 = 1e9;

/// A stream's buckets by the key they are shares of, and the keys whose buckets are to
/// be sized together once the report (or re-size) being answered is.
#[derive(Debug, Default)]
pub struct Together {
    keys: HashMap<String, Shares>,
    pub resplit: HashSet<String>,
}

#[derive(Debug, Default)]
struct Shares {
    /// The buckets, by their stream map key (ids are held twice for keys with siblings
    /// and once more for keys without: bounded by the stream's id bytes).
    members: HashSet<BucketKey>,
    /// Their demands together, in whole thousandths of a request a second: kept exactly
    /// as buckets come, change and go.
    milli: u64,
}

fn milli(demand: f64) -> u64 {
    (demand.clamp(0.0, MAX_DEMAND) * 1_000.0).round() as u64
}

impl Together {
    /// Bucket `member` of `key`, holding `demand`, joins; the key's buckets are sized
    /// together after the report when it has more than one.
    pub fn join(&mut self, key: &str, member: &BucketKey, demand: f64) {
        let shares = self.keys.entry(key.to_owned()).or_default();
        if shares.members.insert(member.clone()) {
            shares.milli += milli(demand);
        }
        if shares.members.len() > 1 {
            self.resplit.insert(key.to_owned());
        }
    }

    /// A bucket of `key` now holds `new` instead of `old`.
    pub fn moved(&mut self, key: &str, (old, new): (f64, f64)) {
        if let Some(shares) = self.keys.get_mut(key) {
            shares.milli = shares.milli.saturating_sub(milli(old)) + milli(new);
        }
    }

    /// Bucket `member` of `key`, which held `demand`, leaves; whether it was the key's
    /// last (the stream's hold of the key then goes; else the rest are sized again).
    pub fn leave(&mut self, key: &str, member: &BucketKey, demand: f64) -> bool {
        let Some(shares) = self.keys.get_mut(key) else {
            return true;
        };
        if shares.members.remove(member) {
            shares.milli = shares.milli.saturating_sub(milli(demand));
        }
        if shares.members.is_empty() {
            self.keys.remove(key);
            self.resplit.remove(key);
            return true;
        }
        self.resplit.insert(key.to_owned());
        false
    }

    /// The stream's buckets of `key`.
    pub fn members(&self, key: &str) -> Vec<BucketKey> {
        self.keys
            .get(key)
            .map(|s| s.members.iter().cloned().collect())
            .unwrap_or_default()
    }

    /// How many buckets of `key` the stream has.
    pub fn count(&self, key: &str) -> usize {
        self.keys.get(key).map_or(0, |s| s.members.len())
    }

    /// The stream's demand for `key`: its buckets' together, the least an idle holder
    /// keeps counted once (idle siblings are no more demand than one idle bucket).
    pub fn demand(&self, key: &str) -> f64 {
        let milli = self.keys.get(key).map_or(0, |s| s.milli);
        (milli as f64 / 1_000.0).max(MIN_DEMAND)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(n: u8) -> BucketKey {
        (
            "edge".to_owned(),
            vec![("client".to_owned(), n.to_string())],
        )
    }

    #[test]
    fn buckets_of_one_key_hold_it_together_and_are_sized_together() {
        let mut together = Together::default();
        together.join("k", &member(1), 2.0);
        assert!(
            together.resplit.is_empty(),
            "the first bucket has no sibling"
        );
        assert_eq!((together.count("k"), together.demand("k")), (1, 2.0));
        together.join("k", &member(1), 2.0);
        assert_eq!(
            (together.count("k"), together.demand("k")),
            (1, 2.0),
            "once"
        );
        together.join("k", &member(2), 0.0);
        assert!(together.resplit.contains("k"), "a sibling joined");
        together.moved("k", (2.0, 0.0));
        assert_eq!(
            together.demand("k"),
            MIN_DEMAND,
            "idle siblings: the least, once"
        );
        together.moved("k", (0.0, 3.3));
        together.resplit.clear();
        assert!(!together.leave("k", &member(2), 0.0));
        assert!(
            together.resplit.contains("k"),
            "the one left is sized again"
        );
        assert_eq!(together.members("k"), [member(1)]);
        assert_eq!(together.demand("k"), 3.3);
        assert!(together.leave("k", &member(1), 3.3), "the last");
        assert!(!together.resplit.contains("k"), "nothing left to size");
        assert!(
            together.leave("gone", &member(3), 1.0),
            "nothing held: nothing to keep"
        );
    }

    #[test]
    fn absurd_demands_are_capped_so_the_sum_neither_wraps_nor_drifts() {
        let mut together = Together::default();
        for n in 0..=255 {
            together.join("k", &member(n), f64::MAX);
        }
        assert_eq!(together.demand("k"), 256.0 * MAX_DEMAND);
        for n in 0..=255 {
            together.moved("k", (f64::MAX, 0.0));
            assert!(!together.leave("k", &member(n), 0.0) || n == 255);
        }
        assert_eq!(together.count("k"), 0);
    }
}
