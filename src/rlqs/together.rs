//! One stream's buckets that are shares of one key: an Envoy buckets apart what one key
//! limits (a rule's shared prefix, the addresses of one `ip/64` network). The stream
//! holds the key once, with what its buckets of it demand together, and splits what it
//! is given evenly between them: held one by one, each bucket was given the stream's
//! whole share, and N buckets let through N times the key.
//!
//! Evenly, not by each bucket's demand: a report answers its buckets one after another,
//! and a split by demand would size a bucket answered early against its siblings' last
//! demands, over-sizing it when theirs rose. An even split of the stream's share never
//! hands out more than the share, whatever order demands move in; the siblings are
//! re-sized once a report is answered when one joins or leaves (`Stream::resplit`).

use std::collections::{HashMap, HashSet};

use super::share::MIN_DEMAND;

/// The most demand one bucket counts with (requests a second): a report's counts are the
/// client's to pick, and a sum of absurd ones must neither wrap nor drown its siblings'.
const MAX_DEMAND: f64 = 1e9;

/// A stream's buckets by the key they are shares of, and the keys whose buckets are to
/// be re-sized once the report being answered is.
#[derive(Debug, Default)]
pub struct Together {
    keys: HashMap<String, Shares>,
    pub resplit: HashSet<String>,
}

#[derive(Debug)]
struct Shares {
    buckets: usize,
    /// The sum of the buckets' demands, in whole thousandths of a request a second: kept
    /// exactly as buckets come, change and go.
    milli: u64,
}

fn milli(demand: f64) -> u64 {
    (demand.clamp(0.0, MAX_DEMAND) * 1_000.0).round() as u64
}

/// What a stream's buckets of one key weigh among the key's holders.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Split {
    /// The stream's demand for the key: its buckets' together, at least [`MIN_DEMAND`]
    /// (once for the stream, not once a bucket: idle siblings are no demand).
    pub demand: f64,
    /// The buckets the stream's share is split between.
    pub buckets: usize,
}

impl Together {
    /// A bucket of `key` holding `demand` joins; its siblings are re-sized after the
    /// report when it is not the key's first.
    pub fn join(&mut self, key: &str, demand: f64) {
        let shares = self.keys.entry(key.to_owned()).or_insert(Shares {
            buckets: 0,
            milli: 0,
        });
        shares.buckets += 1;
        shares.milli += milli(demand);
        if shares.buckets > 1 {
            self.resplit.insert(key.to_owned());
        }
    }

    /// A bucket of `key` now holds `new` instead of `old`.
    pub fn moved(&mut self, key: &str, (old, new): (f64, f64)) {
        if let Some(shares) = self.keys.get_mut(key) {
            shares.milli = shares.milli.saturating_sub(milli(old)) + milli(new);
        }
    }

    /// A bucket of `key` that held `demand` leaves; whether it was the key's last (the
    /// stream's hold of the key then goes; else its siblings are re-sized after the
    /// report, and the hold with them).
    pub fn leave(&mut self, key: &str, demand: f64) -> bool {
        let Some(shares) = self.keys.get_mut(key) else {
            return true;
        };
        shares.buckets = shares.buckets.saturating_sub(1);
        shares.milli = shares.milli.saturating_sub(milli(demand));
        if shares.buckets == 0 {
            self.keys.remove(key);
            self.resplit.remove(key);
            return true;
        }
        self.resplit.insert(key.to_owned());
        false
    }

    /// The stream's split of `key`, given the demand of a bucket of it as reported
    /// (used as is when it is the key's only bucket).
    pub fn split(&self, key: &str, own: f64) -> Split {
        match self.keys.get(key) {
            Some(shares) if shares.buckets > 1 => Split {
                demand: (shares.milli as f64 / 1_000.0).max(MIN_DEMAND),
                buckets: shares.buckets,
            },
            _ => Split {
                demand: own.max(MIN_DEMAND),
                buckets: 1,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_of_one_key_hold_it_together_and_split_it_evenly() {
        let mut together = Together::default();
        together.join("k", 2.0);
        assert!(
            together.resplit.is_empty(),
            "the first bucket has no sibling"
        );
        assert_eq!(
            together.split("k", 2.0),
            Split {
                demand: 2.0,
                buckets: 1
            }
        );
        together.join("k", 0.0);
        assert!(together.resplit.contains("k"), "a sibling joined");
        assert_eq!(
            together.split("k", 0.0),
            Split {
                demand: 2.0,
                buckets: 2
            }
        );
        together.moved("k", (2.0, 0.0));
        assert_eq!(
            together.split("k", 0.0),
            Split {
                demand: MIN_DEMAND,
                buckets: 2
            },
            "idle siblings are the least demand once, not once each"
        );
        together.moved("k", (0.0, 3.3));
        together.resplit.clear();
        assert!(!together.leave("k", 0.0));
        assert!(together.resplit.contains("k"), "the one left is re-sized");
        assert_eq!(
            together.split("k", 3.3),
            Split {
                demand: 3.3,
                buckets: 1
            }
        );
        assert!(together.leave("k", 3.3), "the last");
        assert!(!together.resplit.contains("k"), "nothing left to re-size");
        assert!(together.leave("gone", 1.0), "nothing held: nothing to keep");
    }

    #[test]
    fn absurd_demands_neither_wrap_nor_drown_the_sum() {
        let mut together = Together::default();
        for _ in 0..65_536 {
            together.join("k", f64::MAX);
        }
        together.join("k", 1.0);
        let split = together.split("k", 1.0);
        assert_eq!(split.buckets, 65_537);
        assert_eq!(split.demand, 65_536.0 * MAX_DEMAND + 1.0);
    }
}
