use super::*;

fn cal(period: Period, zone: &str) -> Calendar {
    Calendar {
        period,
        zone: jiff::tz::TimeZone::get(zone).expect("zone in the bundled database"),
        zone_name: zone.to_owned(),
    }
}

/// Unix seconds of a civil time in `zone` (the earlier of two, if ambiguous).
fn at(zone: &str, text: &str) -> i64 {
    let dt: jiff::civil::DateTime = text.parse().expect("civil time");
    dt.to_zoned(jiff::tz::TimeZone::get(zone).expect("zone"))
        .expect("in range")
        .timestamp()
        .as_second()
}

#[test]
fn a_day_starts_at_local_midnight_and_may_last_23_or_25_hours() {
    let c = cal(Period::Day, "Europe/Berlin");
    // 2026-03-29: clocks go from 02:00 to 03:00.
    let b = c.bounds(at("Europe/Berlin", "2026-03-29T12:00"));
    assert_eq!(b.start, at("Europe/Berlin", "2026-03-29T00:00"));
    assert_eq!(b.end, at("Europe/Berlin", "2026-03-30T00:00"));
    assert_eq!(b.end - b.start, 23 * 3600);
    // 2026-10-25: from 03:00 back to 02:00.
    let b = c.bounds(at("Europe/Berlin", "2026-10-25T01:00"));
    assert_eq!(b.end - b.start, 25 * 3600);
    assert_eq!(b.next - b.end, 24 * 3600);
}

#[test]
fn a_midnight_swallowed_by_a_gap_starts_the_day_when_the_gap_ends() {
    // America/Sao_Paulo 2018-11-04: clocks went from 00:00 to 01:00.
    let c = cal(Period::Day, "America/Sao_Paulo");
    let b = c.bounds(at("America/Sao_Paulo", "2018-11-04T12:00"));
    assert_eq!(b.start, at("America/Sao_Paulo", "2018-11-04T01:00"));
    assert_eq!(b.end - b.start, 23 * 3600);
}

#[test]
fn months_start_on_their_anchor_day_across_year_and_leap_day() {
    let utc = cal(Period::Month(1), "UTC");
    let b = utc.bounds(at("UTC", "2028-02-29T23:59:59"));
    assert_eq!(b.start, at("UTC", "2028-02-01T00:00"));
    assert_eq!(b.end, at("UTC", "2028-03-01T00:00"));
    assert_eq!(b.end - b.start, 29 * 86_400, "a leap February");
    let b = utc.bounds(at("UTC", "2026-12-31T23:59:59"));
    assert_eq!(b.end, at("UTC", "2027-01-01T00:00"));
    // A billing day of 15: on the 14th the window began last month.
    let billing = cal(Period::Month(15), "America/New_York");
    let b = billing.bounds(at("America/New_York", "2027-01-14T23:00"));
    assert_eq!(b.start, at("America/New_York", "2026-12-15T00:00"));
    assert_eq!(b.end, at("America/New_York", "2027-01-15T00:00"));
    assert_eq!(b.next, at("America/New_York", "2027-02-15T00:00"));
    // The boundary itself belongs to the new window.
    let b = billing.bounds(at("America/New_York", "2027-01-15T00:00"));
    assert_eq!(b.start, at("America/New_York", "2027-01-15T00:00"));
}

#[test]
fn weeks_start_on_their_weekday() {
    let c = cal(Period::Week(Weekday::Monday), "Asia/Kathmandu");
    // 2026-12-02 is a Wednesday.
    let b = c.bounds(at("Asia/Kathmandu", "2026-12-02T10:00"));
    assert_eq!(b.start, at("Asia/Kathmandu", "2026-11-30T00:00"));
    assert_eq!(b.end, at("Asia/Kathmandu", "2026-12-07T00:00"));
    let sunday = cal(Period::Week(Weekday::Sunday), "UTC");
    let b = sunday.bounds(at("UTC", "2026-12-06T00:00"));
    assert_eq!(b.start, at("UTC", "2026-12-06T00:00"));
}

#[test]
fn end_at_follows_a_clock_on_either_side_of_the_boundaries() {
    let b = Bounds {
        start: 100,
        end: 200,
        next: 300,
    };
    let ns = 1_000_000_000;
    assert_eq!(b.end_at(50 * ns), 100 * ns);
    assert_eq!(b.end_at(100 * ns), 200 * ns);
    assert_eq!(b.end_at(250 * ns), 300 * ns);
}

/// The independent model: the window label of each minute from the zone's offsets alone
/// (a local date, moved back to its window's first day by counting), and a window's
/// start the first minute whose label (the largest so far) reaches it.
fn model_label(period: Period, zone: &jiff::tz::TimeZone, unix_s: i64) -> (i16, i8, i8) {
    let ts = Timestamp::from_second(unix_s).expect("in range");
    let d = zone.to_datetime(ts).date();
    let (mut y, mut m, mut day) = (d.year(), d.month(), d.day());
    match period {
        Period::Day => {}
        Period::Week(anchor) => {
            let mut wd = d.weekday();
            let mut back = 0;
            while wd != anchor {
                wd = wd.previous();
                back += 1;
            }
            let first = d - jiff::Span::new().days(back);
            (y, m, day) = (first.year(), first.month(), first.day());
        }
        Period::Month(anchor) => {
            if day < anchor {
                if m == 1 {
                    (y, m) = (y - 1, 12);
                } else {
                    m -= 1;
                }
            }
            day = anchor;
        }
    }
    (y, m, day)
}

fn model_bounds(period: Period, zone: &jiff::tz::TimeZone, unix_s: i64) -> (i64, i64) {
    let minute = unix_s - unix_s.rem_euclid(60);
    let mut label = model_label(period, zone, minute);
    // Back to the first minute with this label (the window is at most 31 days).
    let mut t = minute;
    while t > minute - 33 * 86_400 {
        let earlier = model_label(period, zone, t - 60);
        if earlier < label {
            break;
        }
        if earlier > label {
            label = earlier; // a date that ran back: the larger label holds
        }
        t -= 60;
    }
    let start = t;
    let mut end = minute + 60;
    while model_label(period, zone, end) <= label {
        end += 60;
    }
    (start, end)
}

proptest::proptest! {
    #![proptest_config(proptest::prelude::ProptestConfig::with_cases(64))]
    #[test]
    fn bounds_agree_with_a_minute_by_minute_model(
        unix_s in 946_684_800i64..2_114_380_800,
        zone in proptest::sample::select(vec![
            "UTC", "Europe/Berlin", "America/New_York", "America/Sao_Paulo",
            "Australia/Lord_Howe", "Asia/Kathmandu", "Pacific/Chatham", "America/Havana",
        ]),
        kind in 0u8..3,
        anchor in 1i8..=28,
    ) {
        let period = match kind {
            0 => Period::Day,
            1 => Period::Week(weekday(["monday", "tuesday", "wednesday", "thursday", "friday",
                "saturday", "sunday"][usize::try_from(anchor % 7).unwrap_or(0)]).expect("a day")),
            _ => Period::Month(anchor),
        };
        let c = cal(period, zone);
        let b = c.bounds(unix_s);
        let (start, end) = model_bounds(period, &c.zone, unix_s);
        proptest::prop_assert!(b.contains(unix_s), "{b:?} holds {unix_s}");
        proptest::prop_assert_eq!((b.start, b.end), (start, end));
        proptest::prop_assert_eq!(c.bounds(b.end).start, b.end);
        proptest::prop_assert_eq!(c.bounds(b.end).end, b.next);
    }
}
