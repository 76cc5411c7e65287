//! One stream's buckets that are shares of one key: an Envoy buckets apart what one key
//! limits (a rule's shared prefix, the addresses of one `ip/64` network). They hold the
//! key together, with the sum of their demands, and split what the stream is given by
//! their own: held one by one, each bucket was given the stream's whole share, and N
//! buckets let through N times the key.

use std::collections::HashMap;

use super::share::MIN_DEMAND;

/// A bucket's demand as it counts among the key's holders: at least [`MIN_DEMAND`], in
/// whole thousandths of a request a second, so that sums kept as buckets come, change
/// and go are exact (two equal demands split a share in halves, not 0.4999…).
pub fn held(demand: f64) -> f64 {
    milli(demand) as f64 / 1_000.0
}

fn milli(demand: f64) -> u64 {
    // `as` saturates: an absurd demand is the most, never a wrap.
    (demand.max(MIN_DEMAND) * 1_000.0).round() as u64
}

/// A stream's buckets by the key they are shares of.
#[derive(Debug, Default)]
pub struct Together(HashMap<String, Shares>);

#[derive(Debug)]
struct Shares {
    buckets: usize,
    /// The sum of the buckets' [`milli`] demands.
    milli: u64,
}

impl Together {
    /// A bucket of `key` holding `demand` joins; whether it is not the key's first
    /// (its siblings' shares are then to be re-sized).
    pub fn join(&mut self, key: &str, demand: f64) -> bool {
        let shares = self.0.entry(key.to_owned()).or_insert(Shares {
            buckets: 0,
            milli: 0,
        });
        shares.buckets += 1;
        shares.milli = shares.milli.saturating_add(milli(demand));
        shares.buckets > 1
    }

    /// A bucket of `key` now holds `new` instead of `old`.
    pub fn moved(&mut self, key: &str, (old, new): (f64, f64)) {
        if let Some(shares) = self.0.get_mut(key) {
            shares.milli = shares
                .milli
                .saturating_sub(milli(old))
                .saturating_add(milli(new));
        }
    }

    /// A bucket of `key` that held `demand` leaves; whether it was the key's last (the
    /// stream's hold of the key then goes).
    pub fn leave(&mut self, key: &str, demand: f64) -> bool {
        let Some(shares) = self.0.get_mut(key) else {
            return true;
        };
        shares.buckets = shares.buckets.saturating_sub(1);
        shares.milli = shares.milli.saturating_sub(milli(demand));
        if shares.buckets == 0 {
            self.0.remove(key);
            return true;
        }
        false
    }

    /// What the stream's buckets of `key` hold together (0 when it has none).
    pub fn demand(&self, key: &str) -> f64 {
        self.0.get(key).map_or(0.0, |s| s.milli as f64 / 1_000.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_of_one_key_hold_it_together_and_the_last_to_leave_lets_go() {
        let mut together = Together::default();
        assert!(!together.join("k", 2.0), "the first");
        assert!(together.join("k", 0.0), "a sibling");
        assert_eq!(together.demand("k"), 2.1);
        together.moved("k", (0.0, 3.0));
        assert_eq!(together.demand("k"), 5.0);
        together.moved("k", (2.0, 0.0));
        together.moved("k", (3.0, 0.0));
        assert_eq!(together.demand("k"), 0.2, "exact: two idle buckets, halves");
        together.moved("k", (0.0, 3.0));
        assert!(!together.leave("k", 0.0));
        assert_eq!(together.demand("k"), 3.0);
        assert!(together.leave("k", 3.0), "the last");
        assert_eq!(together.demand("k"), 0.0);
        assert!(together.leave("gone", 1.0), "nothing held: nothing to keep");
    }
}
