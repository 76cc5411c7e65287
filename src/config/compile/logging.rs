//! `[server]`'s access log settings: which requests get a line, how many lines a second
//! at most, and how a refused request's key parts are written.

use super::Compiler;
use crate::config::raw::{BoolOrText, RawServer};
use crate::config::{AccessLog, LogKeys};

/// Lines a second when `access_log_rate` is not set: a flood costs the disk at most this.
pub const DEFAULT_ACCESS_LOG_RATE: u32 = 1_000;

pub(super) struct Logging {
    pub access_log: AccessLog,
    pub access_log_rate: u32,
    pub log_keys: LogKeys,
    pub top_window: std::time::Duration,
}

/// `top_window` when not set.
pub const DEFAULT_TOP_WINDOW: std::time::Duration = std::time::Duration::from_secs(300);

impl Compiler {
    pub(super) fn logging(&mut self, raw: &RawServer) -> Option<Logging> {
        let access_log = match raw.access_log.as_ref().map(|a| (a.get_ref(), a.span())) {
            None | Some((BoolOrText::Bool(true), _)) => Some(AccessLog::All),
            Some((BoolOrText::Bool(false), _)) => Some(AccessLog::Off),
            Some((BoolOrText::Text(t), _)) if t == "refused" => Some(AccessLog::Refused),
            Some((BoolOrText::Text(t), span)) => {
                self.error(
                    span,
                    format!("unknown access_log `{t}`"),
                    Some(
                        "use true (every request), \"refused\" (refused requests only) or false"
                            .to_owned(),
                    ),
                );
                None
            }
        };
        let access_log_rate = match &raw.access_log_rate {
            None => Some(DEFAULT_ACCESS_LOG_RATE),
            Some(rate) => match u32::try_from(*rate.get_ref()) {
                Ok(n) if n >= 1 => Some(n),
                _ => {
                    self.error(
                        rate.span(),
                        "access_log_rate must be a whole number of lines a second, at least 1",
                        Some(format!("e.g. access_log_rate = {DEFAULT_ACCESS_LOG_RATE} (the default); to write no lines, access_log = false")),
                    );
                    None
                }
            },
        };
        let log_keys = match raw
            .log_keys
            .as_ref()
            .map(|k| (k.get_ref().as_str(), k.span()))
        {
            None | Some(("clear", _)) => Some(LogKeys::Clear),
            Some(("hash", _)) => Some(LogKeys::Hash),
            Some((other, span)) => {
                self.error(
                    span,
                    format!("unknown log_keys `{other}`"),
                    Some(
                        "use \"clear\" (the key as sent) or \"hash\" (a keyed hash of it)"
                            .to_owned(),
                    ),
                );
                None
            }
        };
        let top_window = self.duration_or(&raw.top_window, DEFAULT_TOP_WINDOW, false);
        Some(Logging {
            access_log: access_log?,
            access_log_rate: access_log_rate?,
            log_keys: log_keys?,
            top_window: top_window?,
        })
    }
}
