//! A slice of a key's capacity, taken from the shared store ahead of use: `k` units whose
//! reservation took the key's TAT to `p`. Unit `j` (1..=k) stands for the slot ending at
//! `p − (k − j)·T` and may be used only until that slot begins — a unit whose slot has
//! begun expires unused — so however gateways hoard, share and give back slices, the
//! admissions of the whole fleet are ones an exact GCRA would have made. Pure: times are
//! given.

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Slice {
    /// When the key's TAT reaches the end of this slice (this clock's time, taken no later
    /// than the store's reservation happened, so every slot is if anything early).
    pub p: u64,
    /// Units in the slice.
    pub k: u64,
    /// Units consumed or skipped (expired): the next usable one is at least `used + 1`.
    pub used: u64,
    /// The key's emission interval when the slice was taken.
    pub t: u64,
    /// The TAT the reservation left, on the store's clock: a give-back applies only while
    /// the key's TAT is still exactly this.
    pub end: u64,
}

impl Slice {
    /// A fresh slice of `k` units ending `ahead` after `at` (this clock), at `end` on the
    /// store's.
    pub fn new(at: u64, ahead: u64, k: u64, t: u64, end: u64) -> Self {
        Self {
            p: at.saturating_add(ahead),
            k,
            used: 0,
            t: t.max(1),
            end,
        }
    }

    /// The first unit still usable at `now`. Unit `j` covers the slot `(p − (k−j+1)·T,
    /// p − (k−j)·T]` and is usable while its slot has not begun, `now ≤ p − (k−j+1)·T`,
    /// that is for `j ≥ k + 1 − ⌊(p − now)/T⌋`. `k + 1` when none is.
    ///
    /// Usable until the slot's start, not its end: the units a gateway holds then fit in
    /// `⌊(TAT − now)/T⌋`, so they and what the store has free never exceed the burst.
    /// Until the slot's end, a gateway holding units while the key refills could admit
    /// one unit more than exact GCRA in a window (the property test finds it).
    fn first_usable(&self, now: u64) -> u64 {
        if now > self.p {
            return self.k + 1;
        }
        let slack = (self.p - now) / self.t;
        (self.k + 1).saturating_sub(slack).max(self.used + 1).max(1)
    }

    /// Units usable at `now`.
    pub fn usable(&self, now: u64) -> u64 {
        (self.k + 1).saturating_sub(self.first_usable(now))
    }

    /// Takes `cost` consecutive usable units at `now` (expired ones are skipped for
    /// good); the units left usable after, or `None` when too few are.
    pub fn take(&mut self, cost: u64, now: u64) -> Option<u64> {
        let first = self.first_usable(now);
        let last = first.checked_add(cost)?.checked_sub(1)?;
        if cost == 0 || last > self.k {
            return None;
        }
        self.used = last;
        Some(self.k - last)
    }

    /// Returns the `cost` units a take ending at unit `last` took (a later tier refused
    /// the request) — only while nothing was taken after them, since units are handed out
    /// in order; otherwise they are simply not used. They stay bound to their slots.
    pub fn untake(&mut self, cost: u64, last: u64) {
        if self.used == last {
            self.used = last.saturating_sub(cost);
        }
    }

    /// Spends every unit: they were given back, or are about to be.
    pub fn drain(&mut self) {
        self.used = self.k;
    }

    /// The last unit taken so far.
    pub fn last_taken(&self) -> u64 {
        self.used
    }

    /// The unused units at `now`, to give back: their time (the store applies it only
    /// while this slice is the last reservation on the key).
    pub fn give_back(&self, now: u64) -> Option<GiveBack> {
        let units = self.usable(now);
        (units > 0).then(|| GiveBack {
            ns: units.saturating_mul(self.t),
            end: self.end,
        })
    }
}

/// What the store answers a request for a slice: `granted` units, whose reservation
/// took the key's TAT to `end` (`ahead` past now), with `left` units still free after; or
/// a refusal with the wait until `need` units would be free.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Grant {
    Granted {
        granted: u64,
        end: u64,
        ahead: u64,
        left: u64,
    },
    Refused {
        wait: u64,
    },
}

/// Unused units handed back to the store: their time, from a slice that ended at `end`
/// (the store's clock).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct GiveBack {
    pub ns: u64,
    pub end: u64,
}

/// Gives `back` to the key whose TAT is `tat`, at `now`: only while the slice is still
/// the last thing charged (`tat == end`). Once another reservation came after it, the
/// units' slots lie under that one's, and moving the TAT back would hand the same slots
/// out twice: the units then expire unused. Never below now.
pub fn give_back(tat: u64, now: u64, back: GiveBack) -> u64 {
    if tat != back.end || tat <= now {
        return tat;
    }
    tat.saturating_sub(back.ns).max(now)
}

/// The store's side of a slice at `now` on a key whose TAT is `tat`: first a previous
/// slice's unused units are given back ([`give_back`]), then `want` units are granted when
/// at least `need` are free — fewer when few are free (half of what is free, never less
/// than `need`), so the last units of a key go out one request at a time. Returns the TAT
/// after and the answer. `slice.lua` does exactly this on Redis's clock.
///
/// `lead`: how far ahead of `now` the slice's first slot should begin. A gateway that
/// serves a key slower than the key's rate uses its units more than `T` apart, so units
/// whose slots begin at `now`, `now + T`, … would expire unused; slots placed `lead` ahead
/// stay usable while it works through them. The capacity skipped over is capacity no one
/// had used (the key was that far from its limit); the lead is taken only where the key
/// has room for it and `need` units after it, so it never turns a grant into a refusal.
pub fn grant(
    tat: u64,
    now: u64,
    quota: &super::Quota,
    want: u64,
    need: u64,
    lead: u64,
    back: Option<GiveBack>,
) -> (u64, Grant) {
    let (t, tau) = (quota.interval_ns(), quota.tolerance_ns());
    let tat = back.map_or(tat, |b| give_back(tat, now, b));
    let debt = tat.saturating_sub(now);
    let free = tau.saturating_sub(debt) / t;
    if free < need || need == 0 {
        let wait = debt
            .saturating_add(need.saturating_mul(t))
            .saturating_sub(tau);
        return (tat, Grant::Refused { wait });
    }
    let start = match debt.max(lead) {
        padded if tau.saturating_sub(padded) / t >= need => padded,
        _ => debt,
    };
    let free = tau.saturating_sub(start) / t;
    let granted = want.min((free / 2).max(need)).max(need).min(free);
    let ahead = start + granted * t;
    let end = now + ahead;
    (
        end,
        Grant::Granted {
            granted,
            end,
            ahead,
            left: free - granted,
        },
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    const T: u64 = 1_000;

    #[test]
    fn units_are_usable_until_their_slots_begin() {
        // 5 units ending at 10 000 with T = 1 000: unit j's slot begins at 4 000 + j·1 000.
        let mut s = Slice::new(5_000, 5_000, 5, T, 10_000);
        assert_eq!(s.usable(5_000), 5);
        assert_eq!(s.usable(5_001), 4, "unit 1 is usable until 5 000 inclusive");
        assert_eq!(
            s.take(1, 7_500),
            Some(1),
            "units 1 to 3 expired, unit 4 taken"
        );
        assert_eq!(s.take(1, 7_500), Some(0));
        assert_eq!(s.take(1, 7_500), None);
        s.untake(1, 4);
        assert_eq!(
            s.usable(9_000),
            0,
            "unit 5 was taken after unit 4: 4 is not returned"
        );
        s.untake(1, 5);
        assert_eq!(
            s.usable(9_000),
            1,
            "given back to the slice, usable until its slot"
        );
        assert_eq!(s.usable(9_001), 0);
    }

    #[test]
    fn a_lead_places_the_slots_ahead_only_where_there_is_room() {
        // T = 1 000, burst 100.
        let quota = crate::limit::Quota::new(1, 1_000, 100).expect("quota");
        let tau = quota.tolerance_ns();
        let (tat, answer) = grant(0, 100_000, &quota, 3, 1, 4_000, None);
        assert_eq!(tat, 100_000 + 4_000 + 3 * T, "slots begin 4 000 ahead");
        let Grant::Granted {
            granted,
            ahead,
            left,
            ..
        } = answer
        else {
            panic!("granted");
        };
        assert_eq!((granted, ahead), (3, 7_000));
        assert_eq!(left, (tau - 4_000) / T - 3);
        let mut s = Slice::new(100_000, ahead, granted, T, tat);
        assert_eq!(s.take(1, 100_000), Some(2));
        assert_eq!(s.take(1, 105_000), Some(1), "unit 2 usable until 105 000");
        assert_eq!(s.take(1, 106_001), None, "unit 3's slot began at 106 000");

        // Already that far in debt: no padding.
        let (tat, _) = grant(105_000, 100_000, &quota, 1, 1, 4_000, None);
        assert_eq!(tat, 106_000);
        // No room for the lead and the request: the slice starts at the TAT.
        let (tat, answer) = grant(100_000, 100_000, &quota, 2, 2, tau, None);
        assert_eq!(tat, 102_000);
        assert!(matches!(answer, Grant::Granted { granted: 2, .. }));
    }

    #[test]
    fn only_the_last_reservation_is_given_back() {
        let s = Slice::new(0, 10 * T, 10, T, 10 * T);
        let back = s.give_back(3 * T + 500).expect("units left");
        assert_eq!(
            back,
            GiveBack {
                ns: 6 * T,
                end: 10 * T
            },
            "units 5 to 10"
        );
        assert_eq!(
            give_back(10 * T, 3 * T + 500, back),
            4 * T,
            "the slice's tail comes off"
        );
        assert_eq!(
            give_back(12 * T, 3 * T + 500, back),
            12 * T,
            "someone reserved after it"
        );
        assert_eq!(give_back(10 * T, 9 * T, back), 9 * T, "never below now");
        assert_eq!(s.give_back(10 * T), None);
    }
}
