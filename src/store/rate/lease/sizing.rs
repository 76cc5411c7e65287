//! How big a key's next slice is: sized from this gateway's recent use of the key, so a
//! hot key is served locally for about [`SLICE_WINDOW_NS`] at a time and a cold one stays
//! exact.

use crate::limit::Quota;

/// How much of a key's local traffic one slice is sized to carry.
pub const SLICE_WINDOW_NS: u64 = 50_000_000;

/// The next slice of a key: its size and how far ahead its slots should begin.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ask {
    pub want: u64,
    pub lead: u64,
}

impl Ask {
    /// A key's first request, or one with too little traffic to lease: exact.
    pub const ONE: Self = Self { want: 1, lead: 0 };

    /// Sized from `uses` units used locally over `elapsed`: the units a
    /// [`SLICE_WINDOW_NS`] of that traffic uses (at most a quarter of the burst), with the
    /// first slot placed as far ahead as serving them at that pace takes (at most a
    /// quarter of the burst's time), so none expires before its turn.
    pub fn sized(uses: u64, elapsed: u64, quota: &Quota) -> Self {
        let elapsed = elapsed.max(1);
        let per_window = u128::from(uses) * u128::from(SLICE_WINDOW_NS) / u128::from(elapsed);
        let want = u64::try_from(per_window)
            .unwrap_or(u64::MAX)
            .clamp(1, (quota.burst() / 4).max(1));
        // The last of `want` units is used about (want − 1) local gaps from now, and its
        // slot begins (want − 1)·T after the first: the lead covers the difference.
        let gap = elapsed / uses.max(1);
        let lead = (want - 1)
            .saturating_mul(gap.saturating_sub(quota.interval_ns()))
            .min(SLICE_WINDOW_NS)
            .min(quota.tolerance_ns() / 4);
        Self { want, lead }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{quota, MS};
    use super::*;

    #[test]
    fn a_key_served_slower_than_its_rate_gets_its_slots_ahead() {
        // 100 uses a second at this gateway, of a key allowed a million a second.
        let ask = Ask::sized(5, 50 * MS, &quota(1_000_000, 1_000_000));
        assert_eq!(ask.want, 5);
        assert_eq!(
            ask.lead,
            4 * (10 * MS - 1_000),
            "four gaps, less the slots' own spacing"
        );
    }

    #[test]
    fn a_key_served_at_its_rate_needs_no_lead_and_the_burst_caps_the_size() {
        // 1,000 uses a second of a key allowed 100 a second (T = 10 ms), burst 100.
        let ask = Ask::sized(50, 50 * MS, &quota(100, 100));
        assert_eq!(ask, Ask { want: 25, lead: 0 });
    }

    #[test]
    fn the_lead_takes_at_most_a_quarter_of_the_burst() {
        // 500 uses a second of a key allowed 10,000 a second, burst 100 (τ = 10 ms).
        let q = quota(10_000, 100);
        let ask = Ask::sized(50, 100 * MS, &q);
        assert_eq!(ask.want, 25);
        assert_eq!(ask.lead, q.tolerance_ns() / 4);
        // A key used once in a long while stays exact.
        assert_eq!(Ask::sized(1, 10_000 * MS, &q), Ask::ONE);
    }
}
