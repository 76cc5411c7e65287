//! `current_limit`'s numbers: a policy's rate stated in the units envoyproxy/ratelimit
//! speaks (second to year, a month 30 days, a year 365), as exactly as a unit allows.

use super::proto::Unit;
use crate::config::Policy;
use crate::limit::calendar::Period;
use crate::limit::gcra::NANOS_PER_SEC as SECOND_NS;
use crate::limit::Quota;

const DAY_NS: u64 = 86_400 * SECOND_NS;
/// The units a rate is stated in, smallest first, with their length as
/// envoyproxy/ratelimit counts it (a month is 30 days, a year 365).
pub const UNITS: [(Unit, u64); 7] = [
    (Unit::Second, SECOND_NS),
    (Unit::Minute, 60 * SECOND_NS),
    (Unit::Hour, 3_600 * SECOND_NS),
    (Unit::Day, DAY_NS),
    (Unit::Week, 7 * DAY_NS),
    (Unit::Month, 30 * DAY_NS),
    (Unit::Year, 365 * DAY_NS),
];

/// `current_limit`'s `requests_per_unit` and `unit` for `policy` deciding on `quota`: a
/// calendar quota's units per its window; a rate as written when its period is a unit
/// (a YAML's 60/minute, `limit = 60, period = "1m"`: 60 per minute, as
/// envoyproxy/ratelimit echoes its config, not the 1/s it equals); a key's own quota (an
/// override) per the unit that holds exactly its burst, when one does; otherwise per
/// the smallest unit that states it exactly (10 per 1 s, 100 per 60 s, 7 per 3,600 s); a
/// rate no unit states exactly (7 per 11 s) per the smallest unit of a day or more
/// holding at least one request, rounded down (at least 1 per year).
pub fn stated(policy: &Policy, quota: &Quota) -> (u32, Unit) {
    let saturate = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    if let Some(calendar) = policy.rate().and_then(|r| r.calendar.as_ref()) {
        let unit = match calendar.calendar.period {
            Period::Day => Unit::Day,
            Period::Week(_) => Unit::Week,
            Period::Month(_) => Unit::Month,
        };
        return (saturate(quota.burst()), unit);
    }
    // As written only where a u32 holds it: 5e9 an hour is 1,388,888/SECOND, not
    // 4,294,967,295/HOUR.
    if let Some(written) = policy.rate().filter(|r| r.quota == *quota) {
        let period = u64::try_from(written.period.as_nanos()).unwrap_or(u64::MAX);
        let unit = UNITS.iter().find(|(_, length)| *length == period);
        if let (Ok(limit), Some((unit, _))) = (u32::try_from(written.limit), unit) {
            return (limit, *unit);
        }
    }
    let t = quota.interval_ns().max(1);
    // The interval is the period over the limit rounded down to the nanosecond, so a
    // unit holding exactly `n` requests holds `n` intervals and less than `n` ns more.
    let exact = |length: u64| {
        let n = length / t;
        (n >= 1 && length - n * t < n).then_some(n)
    };
    if let Ok(burst) = u32::try_from(quota.burst()) {
        let as_burst = UNITS
            .iter()
            .find(|(_, length)| exact(*length) == Some(u64::from(burst)));
        if let Some((unit, _)) = as_burst {
            return (burst, *unit);
        }
    }
    for (unit, length) in UNITS {
        if let Some(n) = exact(length) {
            return (saturate(n), unit);
        }
    }
    let (unit, length) = UNITS[3..]
        .iter()
        .copied()
        .find(|(_, length)| length / t >= 1)
        .unwrap_or(UNITS[6]);
    (saturate((length / t).max(1)), unit)
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    /// A rate policy of `limit` per `period` with a burst of `burst`, as the config
    /// compiles it.
    fn config_of(limit: u64, period: Duration, burst: u64) -> crate::config::Config {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[policies.p]\nkey = \"header:x\"\nlimit = {limit}\nperiod = \"{}s\"\nburst = {burst}\n",
            period.as_secs()
        );
        crate::config::compile(std::path::Path::new("t.toml"), &text)
            .unwrap_or_else(|e| panic!("{e}"))
    }

    /// What `current_limit` states of a rate policy of `limit` per `period`, burst `limit`.
    fn stated_of(limit: u64, period: Duration) -> (u32, Unit) {
        let config = config_of(limit, period, limit);
        let policy = config.policy("p").expect("policy p");
        let quota = policy.rate().expect("a rate").quota;
        stated(policy, &quota)
    }

    /// A rate written per a unit is stated per that unit, as envoyproxy/ratelimit echoes
    /// its config (60/minute, not the 1/second it equals); a key's own quota per the unit
    /// holding its burst, else per the smallest exact unit.
    #[test]
    fn a_rate_written_per_a_unit_is_stated_as_written() {
        let s = Duration::from_secs;
        let day = 86_400;
        for (limit, period, want) in [
            (60, s(60), (60, Unit::Minute)),
            (120, s(60), (120, Unit::Minute)),
            (3_600, s(3_600), (3_600, Unit::Hour)),
            (86_400, s(day), (86_400, Unit::Day)),
            (30, s(30 * day), (30, Unit::Month)),
            (365, s(365 * day), (365, Unit::Year)),
        ] {
            assert_eq!(stated_of(limit, period), want, "{limit} per {period:?}");
        }
        // Too many to state as written in a u32: the smallest exact unit.
        assert_eq!(
            stated_of(5_000_000_000, s(3_600)),
            (1_388_888, Unit::Second)
        );
        // Written per a unit, whatever the burst.
        let config = config_of(60, s(60), 5);
        let policy = config.policy("p").expect("policy p");
        assert_eq!(
            stated(policy, &policy.rate().expect("a rate").quota),
            (60, Unit::Minute)
        );
        // A key's own quota: per the unit holding its burst, else the smallest exact one.
        let minute = 60 * SECOND_NS;
        let own = Quota::new(300, minute, 300).expect("quota");
        assert_eq!(stated(policy, &own), (300, Unit::Minute));
        let own = Quota::new(300, minute, 7).expect("quota");
        assert_eq!(stated(policy, &own), (5, Unit::Second));
    }

    #[test]
    fn a_rate_is_stated_in_the_smallest_unit_that_holds_it_exactly() {
        let s = Duration::from_secs;
        let day = 86_400;
        let cases = [
            (10, s(1), (10, Unit::Second)),
            (100, s(60), (100, Unit::Minute)),
            (1, s(1), (1, Unit::Second)),
            // 7/h: the interval is rounded down to the nanosecond, the hour still holds 7.
            (7, s(3_600), (7, Unit::Hour)),
            (5, s(90), (200, Unit::Hour)),
            (2, s(day), (2, Unit::Day)),
            // envoyproxy/ratelimit's longer units: a week, a 30-day month, a 365-day year.
            (1, s(7 * day), (1, Unit::Week)),
            (10, s(30 * day), (10, Unit::Month)),
            (1_000, s(30 * day), (1_000, Unit::Month)),
            (3, s(365 * day), (3, Unit::Year)),
            // No unit holds 7 per 11 s exactly: per day, rounded down.
            (7, s(11), (54_981, Unit::Day)),
            (1, s(2 * day), (15, Unit::Month)),
            // Slower than one a day and no unit exact: the first unit holding one.
            (1, s(4 * day), (1, Unit::Week)),
            (1, s(400 * day), (1, Unit::Year)),
        ];
        for (limit, period, want) in cases {
            assert_eq!(stated_of(limit, period), want, "{limit} per {period:?}");
        }
    }
}
