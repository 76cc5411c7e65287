//! One stream's buckets that are shares of one key: an Envoy buckets apart what one key
//! limits (the addresses of one `ip/64` network, keyed by `remote_address`). The stream
//! holds the key once, with what its buckets of it ask for together; held one by one,
//! each bucket was given the stream's whole share, and N buckets let through N times the
//! key.
//!
//! Such buckets are sized together once their report's usages are all charged
//! (`Stream::resplit`): a bucket sized on its own before its siblings' demands were read
//! was sized against their last ones, too big when theirs rose. The stream's share is
//! split by the buckets' demands (`render::split`).

use std::collections::{HashMap, HashSet};

use super::keys::BucketKey;

/// A stream's buckets by the key they are shares of, the keys whose buckets are to be
/// sized together once the report (or re-size) being answered is, and the buckets of
/// such keys the report named (each is answered; a sibling it did not name only when its
/// share changed).
#[derive(Debug, Default)]
pub struct Together {
    keys: HashMap<String, HashSet<BucketKey>>,
    pub resplit: HashSet<String>,
    pub reported: HashSet<BucketKey>,
}

impl Together {
    /// Bucket `member` of `key` joins; the key's buckets are sized together after the
    /// report when it has more than one.
    pub fn join(&mut self, key: &str, member: &BucketKey) {
        let members = self.keys.entry(key.to_owned()).or_default();
        members.insert(member.clone());
        if members.len() > 1 {
            self.resplit.insert(key.to_owned());
        }
    }

    /// Bucket `member` of `key` leaves; whether it was the key's last (the stream's hold
    /// of the key then goes; else the rest are sized again).
    pub fn leave(&mut self, key: &str, member: &BucketKey) -> bool {
        let Some(members) = self.keys.get_mut(key) else {
            return true;
        };
        members.remove(member);
        if members.is_empty() {
            self.keys.remove(key);
            self.resplit.remove(key);
            return true;
        }
        self.resplit.insert(key.to_owned());
        false
    }

    /// The stream's buckets of `key`, in order (ids held once more than the stream's map
    /// does: bounded by its id bytes).
    pub fn members(&self, key: &str) -> Vec<BucketKey> {
        let mut members: Vec<BucketKey> = self
            .keys
            .get(key)
            .map(|m| m.iter().cloned().collect())
            .unwrap_or_default();
        members.sort_unstable();
        members
    }

    /// How many buckets of `key` the stream has.
    pub fn count(&self, key: &str) -> usize {
        self.keys.get(key).map_or(0, HashSet::len)
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
    fn buckets_of_one_key_are_sized_together_and_the_last_to_leave_lets_go() {
        let mut together = Together::default();
        together.join("k", &member(1));
        assert!(
            together.resplit.is_empty(),
            "the first bucket has no sibling"
        );
        together.join("k", &member(1));
        assert_eq!(together.count("k"), 1, "once");
        together.join("k", &member(2));
        assert!(together.resplit.contains("k"), "a sibling joined");
        assert_eq!(together.members("k"), [member(1), member(2)]);
        together.resplit.clear();
        assert!(!together.leave("k", &member(2)));
        assert!(
            together.resplit.contains("k"),
            "the one left is sized again"
        );
        assert_eq!(together.members("k"), [member(1)]);
        assert!(together.leave("k", &member(1)), "the last");
        assert!(!together.resplit.contains("k"), "nothing left to size");
        assert!(
            together.leave("gone", &member(3)),
            "nothing held: nothing to keep"
        );
    }
}
