//! A calendar quota (`quota`, `window`): units per window of a calendar, run as a rate
//! policy decided at the window's end, and the window it is in.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::limit::calendar::{Bounds, Calendar, Period};

/// A calendar quota: units per window of a calendar, and the current window remembered
/// (computed with the time-zone database only when a window ends).
#[derive(Debug)]
pub struct CalendarQuota {
    pub quota: u64,
    pub calendar: Calendar,
    /// `start:end` and `end:next` of the window last computed, each as two `u32` Unix
    /// seconds; read together, they agree on `end` unless a writer was between them.
    first: AtomicU64,
    second: AtomicU64,
}

/// The quota and its calendar; the window remembered is a cache, not a setting.
impl PartialEq for CalendarQuota {
    fn eq(&self, other: &Self) -> bool {
        self.quota == other.quota && self.calendar == other.calendar
    }
}

impl CalendarQuota {
    pub fn new(quota: u64, calendar: Calendar) -> Self {
        Self {
            quota,
            calendar,
            first: AtomicU64::new(0),
            second: AtomicU64::new(0),
        }
    }

    /// The window holding the instant `unix_ns` and the next: from the one remembered
    /// while it lasts.
    #[inline]
    pub fn bounds(&self, unix_ns: u64) -> Bounds {
        let unix_s = i64::try_from(unix_ns / 1_000_000_000).unwrap_or(i64::MAX);
        let (a, b) = (
            self.first.load(Ordering::Relaxed),
            self.second.load(Ordering::Relaxed),
        );
        let (start, end, end2, next) = (
            i64::from((a >> 32) as u32),
            i64::from(a as u32),
            i64::from((b >> 32) as u32),
            i64::from(b as u32),
        );
        if end == end2 && start <= unix_s && unix_s < end {
            return Bounds { start, end, next };
        }
        let fresh = self.calendar.bounds(unix_s);
        let pack = |hi: i64, lo: i64| match (u32::try_from(hi), u32::try_from(lo)) {
            (Ok(hi), Ok(lo)) => Some(u64::from(hi) << 32 | u64::from(lo)),
            _ => None,
        };
        if let (Some(a), Some(b)) = (pack(fresh.start, fresh.end), pack(fresh.end, fresh.next)) {
            self.second.store(b, Ordering::Relaxed);
            self.first.store(a, Ordering::Relaxed);
        }
        fresh
    }
}

impl CalendarQuota {
    /// Its numbers and current window (`unix_ns`: now) as `/admin/config` shows them.
    pub(super) fn describe(&self, unix_ns: u64) -> serde_json::Value {
        let bounds = self.bounds(unix_ns);
        let at = |s: i64| crate::clock::rfc3339(u64::try_from(s).unwrap_or(0) * 1_000_000_000);
        serde_json::json!({
            "kind": "quota",
            "quota": self.quota,
            "window": self.calendar.period_name(),
            "timezone": self.calendar.zone_name,
            "window_start": at(bounds.start),
            "resets_at": at(bounds.end),
        })
    }

    /// Its numbers as written, on `tollgate check`'s line.
    pub(super) fn numbers(&self) -> String {
        let from = match self.calendar.period {
            Period::Day => "local midnight".to_owned(),
            Period::Week(day) => format!("{day:?}s").to_lowercase(),
            Period::Month(day) => format!("day {day}"),
        };
        format!(
            "quota={} per {} ({}, from {from})",
            self.quota,
            self.calendar.period_name(),
            self.calendar.zone_name,
        )
    }
}
