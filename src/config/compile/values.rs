//! Single values shared by every table: addresses, durations, counts, choices.

use super::*;

/// The longest duration a setting takes: 100 years (humantime's year is 365.25 days).
/// Every period fits in a u64 of nanoseconds below it, and every deadline added to an
/// instant stays far from what `Instant + Duration` panics on.
const MAX_DURATION: Duration = Duration::from_secs(100 * 31_557_600);

impl Compiler {
    pub(super) fn socket_addr(&mut self, raw: &S<String>) -> Option<SocketAddr> {
        match raw.get_ref().parse() {
            Ok(a) => Some(a),
            Err(_) => {
                self.error(
                    raw.span(),
                    format!("`{}` is not a socket address", raw.get_ref()),
                    Some("write IP:PORT, e.g. \"127.0.0.1:8080\" or \"[::]:8080\"".to_owned()),
                );
                None
            }
        }
    }

    pub(super) fn duration(&mut self, raw: &S<String>, zero_ok: bool) -> Option<Duration> {
        match humantime::parse_duration(raw.get_ref().trim()) {
            Ok(d) if d > MAX_DURATION => {
                self.error(
                    raw.span(),
                    format!("`{}` is longer than 100 years", raw.get_ref()),
                    Some("write at most \"100y\": a deadline or period past that is never reached, and the clock arithmetic of one past 292 billion years overflows".to_owned()),
                );
                None
            }
            Ok(d) if zero_ok || !d.is_zero() => Some(d),
            Ok(_) => {
                self.error(
                    raw.span(),
                    "duration must be greater than zero",
                    Some("write e.g. \"1s\"".to_owned()),
                );
                None
            }
            Err(e) => {
                self.error(
                    raw.span(),
                    format!("`{}` is not a duration: {e}", raw.get_ref()),
                    Some(
                        "use a number and a unit: \"250ms\", \"1s\", \"5m\", \"1h\", \"1d\""
                            .to_owned(),
                    ),
                );
                None
            }
        }
    }

    pub(super) fn duration_or(
        &mut self,
        raw: &Option<S<String>>,
        default: Duration,
        zero_ok: bool,
    ) -> Option<Duration> {
        raw.as_ref()
            .map_or(Some(default), |r| self.duration(r, zero_ok))
    }

    /// A whole number of at least 0.
    pub(super) fn whole(&mut self, raw: &S<i64>, what: &str) -> Option<u64> {
        match u64::try_from(*raw.get_ref()) {
            Ok(v) => Some(v),
            Err(_) => {
                self.error(
                    raw.span(),
                    format!(
                        "{what} must be a whole number of at least 0, not {}",
                        raw.get_ref()
                    ),
                    Some(format!("write {what} = 0 or more, without quotes")),
                );
                None
            }
        }
    }

    pub(super) fn positive(&mut self, raw: &S<i64>, what: &str) -> Option<u64> {
        match u64::try_from(*raw.get_ref()) {
            Ok(v) if v > 0 => Some(v),
            _ => {
                self.error(
                    raw.span(),
                    format!(
                        "{what} must be a whole number of at least 1, not {}",
                        raw.get_ref()
                    ),
                    Some(format!("write {what} = 1 or more, without quotes")),
                );
                None
            }
        }
    }

    pub(super) fn count_or(
        &mut self,
        raw: &Option<S<i64>>,
        default: u64,
        what: &str,
    ) -> Option<u64> {
        raw.as_ref()
            .map_or(Some(default), |r| self.positive(r, what))
    }

    pub(super) fn choice<T: Copy>(
        &mut self,
        raw: &Option<S<String>>,
        options: &[(&str, T)],
        default: T,
        what: &str,
    ) -> Option<T> {
        let Some(raw) = raw else { return Some(default) };
        match options.iter().find(|(name, _)| *name == raw.get_ref()) {
            Some((_, v)) => Some(*v),
            None => {
                let names: Vec<String> = options.iter().map(|(n, _)| format!("\"{n}\"")).collect();
                self.error(
                    raw.span(),
                    format!("unknown {what} `{}`", raw.get_ref()),
                    Some(format!("use one of {}", names.join(", "))),
                );
                None
            }
        }
    }
}

impl Compiler {
    /// A secret written inline (`inline_name`) or in a file (`file_name`, read at every
    /// load so a rotated one applies on reload, relative to the config's folder): its
    /// text and where the config names it. `Some(None)`: neither is set.
    pub(super) fn secret_text(
        &mut self,
        (inline_name, inline): (&str, &Option<S<String>>),
        (file_name, file): (&str, &Option<S<String>>),
    ) -> Option<Option<(String, std::ops::Range<usize>)>> {
        match (inline, file) {
            (None, None) => Some(None),
            (Some(_), Some(file)) => {
                self.error(
                    file.span(),
                    format!("{inline_name} and {file_name} are both set"),
                    Some("keep one: the file is the safer place for a secret".to_owned()),
                );
                None
            }
            (Some(text), None) => Some(Some((text.get_ref().clone(), text.span()))),
            (None, Some(file)) => {
                let path = self.base.join(file.get_ref());
                match crate::read_file::read_text_bounded(&path) {
                    Ok(text) => Some(Some((text, file.span()))),
                    Err(e) => {
                        self.error(
                            file.span(),
                            format!("cannot read {file_name} {}: {e}", path.display()),
                            Some("relative paths start at the config file's folder".to_owned()),
                        );
                        None
                    }
                }
            }
        }
    }
}
