//! Calendar windows, pure: which day, week or month of a time zone an instant falls in,
//! as Unix-second boundaries. The civil arithmetic is jiff's (its bundled tz database), so
//! a day may be 23 or 25 hours and a window starts at the first instant of its local day.
//!
//! A quota is decided as a GCRA of one unit per nanosecond whose `now` is the window's
//! end ([`Window`]): the stored TAT is `end + used`, so usage is `TAT − end`, a new window
//! (a later end) finds it below its own end (used 0), a store forgets it soon after the
//! window is over (its TAT has passed), and a denial's wait is the time until the reset.

use jiff::civil::{Date, Weekday};
use jiff::tz::TimeZone;
use jiff::Timestamp;

/// A window's length in calendar terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Period {
    Day,
    /// Starting on this weekday.
    Week(Weekday),
    /// Starting on this day of the month (1–28: every month has it).
    Month(i8),
}

/// How far past its window's end a stored TAT may lie and still be that window's usage.
/// Two calendars' window ends differ by a multiple of 15 minutes whenever they differ
/// (every zone's offset is a multiple of 15 minutes; days, weeks and months start at local
/// midnight), so a TAT 15 minutes or more past the end was written under another calendar
/// (the quota's `window`, `anchor` or `timezone` changed): it is no usage of this window,
/// whose count starts at zero. Usage itself never reaches it ([`MAX_QUOTA`]; settles are
/// capped below it).
pub const CARRY_NS: u64 = 900 * 1_000_000_000;

/// The most units one window may hold: well below [`CARRY_NS`], so usage and a settle's
/// debt on top of it are never mistaken for another calendar's TAT.
pub const MAX_QUOTA: u64 = 500_000_000_000;

/// The TAT a quota decides on at its window's `end`: the stored one, or `end` (nothing
/// used) when the stored one belongs to another calendar (see [`CARRY_NS`]).
#[inline]
pub fn carried(tat: u64, end: u64) -> u64 {
    if tat >= end.saturating_add(CARRY_NS) {
        end
    } else {
        tat
    }
}

/// Whether `tat` is usage of the window ending at `end` (see [`CARRY_NS`]): what a store
/// keeps of a quota key when its calendar may have changed.
#[inline]
pub fn usage_of(tat: u64, end: u64) -> bool {
    tat >= end && tat < end.saturating_add(CARRY_NS)
}

/// Whether `tat`, still ahead of `now`, was written under another calendar than the one
/// whose window runs from `start` to `end`: it is neither this window's usage (from `end`)
/// nor the previous window's (from `start`). A settle admitted under a calendar since
/// changed finds one: writing its debt from its own window's end would overwrite the
/// usage the new calendar counts with a value that calendar reads as none.
#[inline]
pub fn foreign(tat: u64, now: u64, (start, end): (u64, u64)) -> bool {
    tat > now && !usage_of(tat, end) && !usage_of(tat, start)
}

/// Units used in the window ending at `end` by a key whose TAT is `tat`.
pub fn used(tat: u64, end: u64) -> u64 {
    carried(tat, end).saturating_sub(end)
}

/// The highest TAT a settle may leave on a quota key of the window ending at `end`: one
/// below what would read as another calendar's.
pub fn max_tat(end: u64) -> u64 {
    end.saturating_add(CARRY_NS - 1)
}

/// A calendar: a period in a time zone.
#[derive(Debug, Clone, PartialEq)]
pub struct Calendar {
    pub period: Period,
    pub zone: TimeZone,
    /// The zone's IANA name, as configured.
    pub zone_name: String,
}

/// One window and the one after it, in Unix seconds: `[start, end)`, `[end, next)`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    pub start: i64,
    pub end: i64,
    pub next: i64,
}

/// Unix seconds as Unix nanoseconds (a time before 1970 as 0).
fn ns(secs: i64) -> u64 {
    u64::try_from(secs)
        .unwrap_or(0)
        .saturating_mul(1_000_000_000)
}

impl Bounds {
    /// The end of the window holding `unix_ns` among the three boundaries known: before
    /// `start` (a clock behind the one they were computed on) the window ending at
    /// `start`, past `end` the next one.
    pub fn end_at(&self, unix_ns: u64) -> u64 {
        ns(self.holding(unix_ns).end)
    }

    /// The bounds of the window holding `unix_ns`, as [`Bounds::end_at`] picks it: these,
    /// or the one before or after them, its unknown far boundary taken as long as the
    /// window these name.
    pub fn holding(&self, unix_ns: u64) -> Bounds {
        if unix_ns < ns(self.start) {
            Bounds {
                start: self.start - (self.end - self.start),
                end: self.start,
                next: self.end,
            }
        } else if unix_ns < ns(self.end) {
            *self
        } else {
            Bounds {
                start: self.end,
                end: self.next,
                next: self.next + (self.next - self.end),
            }
        }
    }

    /// Nanoseconds from `unix_ns` to the end of the window holding it ([`Bounds::end_at`]):
    /// how far ahead of now a quota is measured from.
    pub fn until_end(&self, unix_ns: u64) -> u64 {
        self.end_at(unix_ns).saturating_sub(unix_ns)
    }

    /// The window and the next as the Redis scripts read them: `start:end:next`.
    pub fn script_arg(&self) -> String {
        format!("{}:{}:{}", self.start, self.end, self.next)
    }

    pub fn contains(&self, unix_s: i64) -> bool {
        self.start <= unix_s && unix_s < self.end
    }
}

impl Calendar {
    /// The config's word for the period.
    pub fn period_name(&self) -> &'static str {
        match self.period {
            Period::Day => "day",
            Period::Week(_) => "week",
            Period::Month(_) => "month",
        }
    }

    /// The window holding the instant `unix_s`, and the next one.
    pub fn bounds(&self, unix_s: i64) -> Bounds {
        let at = Timestamp::from_second(unix_s).unwrap_or(Timestamp::UNIX_EPOCH);
        let today = self.zone.to_datetime(at).date();
        let mut first = self.first_day(today);
        // A window starts at its first day's first instant; a local date that runs back
        // over midnight (a DST fall-back at 00:00) may hold an instant of the next one.
        let mut start = self.start_of(first);
        if start > unix_s {
            first = self.step(first, -1);
            start = self.start_of(first);
        }
        let second = self.step(first, 1);
        let mut end = self.start_of(second);
        let mut next = self.start_of(self.step(second, 1));
        if end <= unix_s {
            start = end;
            end = next;
            next = self.start_of(self.step(second, 2));
        }
        Bounds { start, end, next }
    }

    /// The first day of the window holding the civil date `day`.
    fn first_day(&self, day: Date) -> Date {
        match self.period {
            Period::Day => day,
            Period::Week(anchor) => {
                let back = (day.weekday().to_monday_zero_offset() - anchor.to_monday_zero_offset())
                    .rem_euclid(7);
                day.checked_sub(jiff::Span::new().days(i64::from(back)))
                    .unwrap_or(day)
            }
            Period::Month(anchor) => {
                let this = Date::new(day.year(), day.month(), anchor).unwrap_or(day);
                if day.day() >= anchor {
                    this
                } else {
                    this.checked_sub(jiff::Span::new().months(1))
                        .unwrap_or(this)
                }
            }
        }
    }

    /// The first day of the window `n` windows from the one starting on `first`.
    fn step(&self, first: Date, n: i64) -> Date {
        let span = match self.period {
            Period::Day => jiff::Span::new().days(n),
            Period::Week(_) => jiff::Span::new().weeks(n),
            Period::Month(_) => jiff::Span::new().months(n),
        };
        first.checked_add(span).unwrap_or(first)
    }

    /// The first instant of the local day `day`: midnight, or the end of a gap that
    /// swallowed it, or the earlier of two midnights.
    fn start_of(&self, day: Date) -> i64 {
        day.to_zoned(self.zone.clone())
            .and_then(|z| z.start_of_day())
            .map_or(0, |z| z.timestamp().as_second())
    }
}

/// A weekday by its English name, as the config writes it.
pub fn weekday(name: &str) -> Option<Weekday> {
    Some(match name.to_ascii_lowercase().as_str() {
        "monday" => Weekday::Monday,
        "tuesday" => Weekday::Tuesday,
        "wednesday" => Weekday::Wednesday,
        "thursday" => Weekday::Thursday,
        "friday" => Weekday::Friday,
        "saturday" => Weekday::Saturday,
        "sunday" => Weekday::Sunday,
        _ => return None,
    })
}

#[cfg(test)]
mod tests;
