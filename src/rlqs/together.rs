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
    /// By key, the assignment period (its length in seconds, and which of them) and
    /// the bucket that has the turn in it.
    turns: HashMap<String, ((u64, u64), BucketKey)>,
}

/// Whose turn it is among a key's buckets too small for a token each: the assignment
/// period `n`, and the bucket (by its index among those sized) that had the turn in it.
/// It keeps the turn for the period, asking or not, so a client that flips made-up
/// siblings between asking and idle does not move the turn, and a bucket starting full,
/// to another at every report.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Turn {
    pub n: u64,
    pub holder: Option<usize>,
}

impl Turn {
    /// Whose turn it is, kept as the holder: `kept` (the holder, when it may keep it),
    /// else each of `candidates` (indices) in turn by the period.
    pub fn pick(&mut self, candidates: &[usize], kept: Option<usize>) -> Option<usize> {
        let len = candidates.len().max(1) as u64;
        let by_period = usize::try_from(self.n % len).ok();
        let chosen = kept.or_else(|| by_period.and_then(|i| candidates.get(i).copied()));
        self.holder = chosen;
        chosen
    }
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
            self.turns.remove(key);
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

    /// Whose turn it is among `members` of `key` (in the order they are sized) in the
    /// `period` (`(seconds, n)`: the `n`th of that length; a period of another length,
    /// the siblings' shortest TTL changed, is another period): the one that had it in
    /// this period, if it is still among them.
    pub fn turn<'m>(
        &self,
        key: &str,
        period: (u64, u64),
        mut members: impl Iterator<Item = &'m BucketKey>,
    ) -> Turn {
        let had = self.turns.get(key).filter(|(at, _)| *at == period);
        let holder = had.and_then(|(_, held)| members.position(|m| m == held));
        Turn {
            n: period.1,
            holder,
        }
    }

    /// Keeps `holder` as the one whose turn it is for `key` in the `period`.
    pub fn keep_turn(&mut self, key: &str, period: (u64, u64), holder: Option<&BucketKey>) {
        match holder {
            Some(held) => self.turns.insert(key.to_owned(), (period, held.clone())),
            None => self.turns.remove(key),
        };
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

    #[test]
    fn the_turn_stays_with_its_holder_for_its_period() {
        let mut together = Together::default();
        let (one, two, three) = (member(1), member(2), member(3));
        let mut turn = together.turn("k", (10, 7), [&one, &two, &three].into_iter());
        assert_eq!(
            turn.pick(&[1, 2], turn.holder),
            Some(2),
            "by the period: 7 % 2"
        );
        together.keep_turn("k", (10, 7), Some(&three));
        // Found again by its key, among members now in another order.
        let turn = together.turn("k", (10, 7), [&three, &one].into_iter());
        assert_eq!(turn.holder, Some(0));
        let mut turn = together.turn("k", (10, 7), [&one, &two, &three].into_iter());
        assert_eq!(turn.pick(&[1], turn.holder), Some(2), "kept, asking or not");
        // The next period starts over, as does one of another length (a shorter TTL);
        // the key's last bucket gone, nothing is kept.
        assert_eq!(
            together.turn("k", (10, 8), [&three].into_iter()).holder,
            None
        );
        assert_eq!(
            together.turn("k", (5, 7), [&three].into_iter()).holder,
            None
        );
        together.join("k", &two);
        assert!(together.leave("k", &two));
        assert_eq!(together.turn("k", (10, 7), [&two].into_iter()).holder, None);
    }
}
