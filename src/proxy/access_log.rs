//! The access log: one line per request (target `tollgate::access`), from what the
//! request path noted along the way. Bounded: `access_log = "refused"` writes only the
//! requests not admitted, and each worker writes at most its share of `access_log_rate`
//! lines a second (a per-thread budget, no shared write); the lines it could not write
//! are counted in `tollgate_access_log_dropped_total`, added once a budget refills. So a
//! flood costs the disk at most `access_log_rate` lines a second, whatever its size.

use std::cell::Cell;
use std::sync::OnceLock;

use crate::config::{AccessLog, Config, LogKeys, Policy};
use crate::conn::ConnInfo;
use crate::key::fleet::{FleetKey, KeySecret};
use crate::key::RequestView;
use crate::metrics::Metrics;
use crate::proxy::response::Answer;
use crate::reply::ceil_millis;

/// What the access log line and the response counters need, filled in along the way.
pub struct Trace {
    pub route: Option<usize>,
    pub client: Option<std::net::IpAddr>,
    /// Why the request ended as it did (its `decision` word, its gRPC rendering).
    pub answer: Answer,
    /// The deciding policy's position in the route.
    pub policy: Option<usize>,
    pub wait_ns: u64,
    /// The normalised target, kept only when an access log line will be written.
    /// Boxed: most requests never take one, and the trace moves with the request.
    pub normalized: Option<Box<http::Uri>>,
    /// A refused request's key parts in the deciding policy, as `log_keys` writes them
    /// (taken only when a line will be written).
    pub key: Option<Vec<String>>,
    /// The gateway answered itself (refused, or the upstream failed): a gRPC call's answer
    /// is then rewritten as gRPC.
    pub by_gateway: bool,
    /// A sampled request's span, as it goes (`[telemetry]`); `None` for every other.
    pub span: Option<Box<crate::telemetry::span::SpanTrace>>,
}

impl Trace {
    pub fn new() -> Self {
        Self {
            route: None,
            client: None,
            answer: Answer::Unmatched,
            policy: None,
            wait_ns: 0,
            normalized: None,
            key: None,
            by_gateway: false,
            span: None,
        }
    }

    /// The request was refused by the policy at `position`, to wait `wait_ns`.
    pub fn refused(&mut self, answer: Answer, position: usize, wait_ns: u64) {
        self.answer = answer;
        self.policy = Some(position);
        self.wait_ns = wait_ns;
    }
}

impl Default for Trace {
    fn default() -> Self {
        Self::new()
    }
}

/// What a request's line says of its head, taken before the request moves on: cheap
/// clones (reference-counted) and the clock reading it started at.
pub struct Head {
    pub method: http::Method,
    pub uri: http::Uri,
    pub started: u64,
    /// The client's `x-request-id` (passed upstream like any header), to name the line.
    pub request_id: Option<http::HeaderValue>,
}

/// The header a client (or a proxy before tollgate) names a request with.
pub static X_REQUEST_ID: http::HeaderName = http::HeaderName::from_static("x-request-id");

/// A line's request id when the client sent none: this process's prefix and a count, unique
/// per process and cheap (made only for a line that is written).
fn made_request_id() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static PREFIX: OnceLock<String> = OnceLock::new();
    static COUNT: AtomicU64 = AtomicU64::new(0);
    let prefix = PREFIX.get_or_init(|| crate::random::hex(&crate::random::bytes::<8>()));
    format!("{prefix}-{:x}", COUNT.fetch_add(1, Ordering::Relaxed))
}

/// One worker thread's line budget: tokens in thousandths of a line, refilled at its
/// share of `access_log_rate`, at most one second's worth.
#[derive(Clone, Copy)]
struct Budget {
    milli_lines: u64,
    at_ns: u64,
    dropped: u64,
}

impl Budget {
    /// Thousandths of a line earned since the last look, at `rate` lines a second.
    fn earned(&self, now: u64, rate: u64) -> u128 {
        u128::from(now.saturating_sub(self.at_ns)) * u128::from(rate) / 1_000_000
    }
}

thread_local! {
    static BUDGET: Cell<Option<Budget>> = const { Cell::new(None) };
}

/// This worker's share of `rate` lines a second.
fn per_worker(config: &Config) -> u64 {
    let workers = config.server.workers.max(1) as u64;
    u64::from(config.server.access_log_rate).div_ceil(workers)
}

/// Takes one line from this thread's budget at `now`; when it has none, counts a drop.
/// Drops are added to the metric when the budget has lines again.
pub fn take_line(config: &Config, metrics: &Metrics, now: u64) -> bool {
    let rate = per_worker(config);
    let full = rate * 1_000;
    let mut b = BUDGET.get().unwrap_or(Budget {
        milli_lines: full,
        at_ns: now,
        dropped: 0,
    });
    let earned = b.earned(now, rate);
    if earned > 0 {
        b.milli_lines = (u128::from(b.milli_lines) + earned).min(u128::from(full)) as u64;
        b.at_ns = now;
    }
    let written = b.milli_lines >= 1_000;
    if written {
        b.milli_lines -= 1_000;
        if b.dropped > 0 {
            metrics.access_log_dropped.inc_by(b.dropped);
            b.dropped = 0;
        }
    } else {
        b.dropped += 1;
    }
    BUDGET.set(Some(b));
    written
}

/// Whether this worker has a line to spend now (nothing taken): a refusal's key parts
/// are worth composing only for a line that will be written.
pub fn has_line(config: &Config, now: u64) -> bool {
    config.server.access_log.enabled()
        && BUDGET
            .get()
            .is_none_or(|b| u128::from(b.milli_lines) + b.earned(now, per_worker(config)) >= 1_000)
}

/// The key parts `policy` takes from the request, as `log_keys` writes them: the text as
/// sent (the line escapes it), or a keyed hash of each part — under the fleet's secret
/// when there is one (the same hash on every gateway), else this process's.
pub fn key_parts(
    policy: &Policy,
    view: &RequestView<'_>,
    log_keys: LogKeys,
    fleet: Option<&FleetKey>,
) -> Vec<String> {
    let mut parts = Vec::new();
    for source in &policy.key {
        let Ok(values) = source.extract(view) else {
            parts.push("(too many values)".to_owned());
            continue;
        };
        for value in values.iter() {
            parts.push(logged_part(&value.as_text(), log_keys, fleet));
        }
    }
    parts
}

/// One key part as `log_keys` writes it: as sent, or its keyed hash (see [`key_parts`]).
pub fn logged_part(text: &str, log_keys: LogKeys, fleet: Option<&FleetKey>) -> String {
    static OWN: OnceLock<FleetKey> = OnceLock::new();
    match log_keys {
        LogKeys::Clear => KeyPart(text).to_string(),
        LogKeys::Hash => {
            let key =
                fleet.unwrap_or_else(|| OWN.get_or_init(|| FleetKey::new(KeySecret::random())));
            key.field(text.as_bytes())
        }
    }
}

/// Writes the access log line of one answered request, unless its mode leaves it out or
/// this worker's budget for the second is spent.
pub fn write(
    (head, trace): (&Head, &Trace),
    config: &Config,
    metrics: &Metrics,
    conn: &ConnInfo,
    status: u16,
    now: u64,
) {
    if config.server.access_log == AccessLog::Refused && trace.answer.admitted() {
        return;
    }
    if !take_line(config, metrics, now) {
        return;
    }
    let route = trace.route.map(|i| &config.routes[i]);
    let policy = route
        .zip(trace.policy)
        .map(|(r, p)| r.policies[p].name.as_str());
    // JSON text, so the JSON log can carry the parts as a list (see `JsonLines`); the text
    // log shows the same `["part", …]`.
    let key = serde_json::to_string(trace.key.as_deref().unwrap_or(&[])).unwrap_or_default();
    let request_id = match head.request_id.as_ref().and_then(|v| v.to_str().ok()) {
        Some(id) => std::borrow::Cow::Borrowed(id),
        None => std::borrow::Cow::Owned(made_request_id()),
    };
    tracing::info!(
        target: "tollgate::access",
        request_id = %Clipped(&request_id, MAX_ID_BYTES),
        method = %Clipped(head.method.as_str(), MAX_METHOD_BYTES),
        path = %Clipped(trace.normalized.as_deref().unwrap_or(&head.uri).path(), MAX_PATH_BYTES),
        raw_path = %Clipped(head.uri.path(), MAX_PATH_BYTES),
        route = route.map_or("", |r| r.name.as_str()),
        client = %trace.client.unwrap_or(conn.peer.ip()),
        decision = trace.answer.decision(),
        policy = policy.unwrap_or(""),
        key = %key,
        wait_ms = ceil_millis(trace.wait_ns),
        status,
        elapsed_ms = now.saturating_sub(head.started) / 1_000_000,
    );
}

/// One line for each shadow tier that would have refused (`denials`: its position and
/// the wait it would have imposed), within `access_log_rate`: a client can make a shadow
/// tier refuse every request it sends, and past the budget its lines are counted as
/// dropped, as access lines are.
pub fn write_shadow(
    (config, metrics, now): (&Config, &Metrics, u64),
    route: &crate::config::Route,
    denials: impl Iterator<Item = (usize, u64)>,
    client: std::net::IpAddr,
) {
    for (position, wait_ns) in denials {
        if take_line(config, metrics, now) {
            tracing::info!(target: "tollgate::shadow", route = %route.name, policy = %route.policies[position].name, client = %client, wait_ms = ceil_millis(wait_ns), "shadow tier would deny");
        }
    }
}

/// Most bytes of a client's `x-request-id` a line shows.
const MAX_ID_BYTES: usize = 128;
/// Most bytes of a method a line shows: hyper takes any token up to the head's size.
const MAX_METHOD_BYTES: usize = 32;
/// Most bytes of one key part a line shows (a key has at most four parts a source).
const MAX_KEY_PART_BYTES: usize = 256;
/// Most bytes of a path a line shows (the upstream gets all of it): a line's size, not
/// only the number of lines, is what `access_log_rate` bounds the disk by.
const MAX_PATH_BYTES: usize = 1024;

/// A client's text in a log line: at most `.1` bytes (cut at a character, `…` after),
/// with a space, `"`, a backslash and control characters (a tab among them, and the
/// Unicode ones a viewer breaks or reorders a line at: see [`misleads`])
/// percent-encoded, so it is one token that cannot write fields of its own into the text
/// line (`x-request-id: x decision="admitted"`); the JSON log gets the same text as its
/// string. Ordinary ids and paths are written as they are.
struct Clipped<'a>(&'a str, usize);

impl std::fmt::Display for Clipped<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ascii = |b: u8| matches!(b, b' ' | b'"' | b'\\') || b.is_ascii_control();
        escaped(f, self.0, self.1, ascii)
    }
}

/// One key part in a line: at most [`MAX_KEY_PART_BYTES`], with a space and `%` (and
/// control characters) percent-encoded as the admin API takes a key part, so that a
/// part is one token of the text line — `x-tenant: acme client=1.2.3.4` writes no
/// field. Quotes and backslashes are left to the
/// key's JSON text, which escapes them.
struct KeyPart<'a>(&'a str);

impl std::fmt::Display for KeyPart<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let ascii = |b: u8| matches!(b, b' ' | b'%') || b.is_ascii_control();
        escaped(f, self.0, MAX_KEY_PART_BYTES, ascii)
    }
}

/// `text`, cut at `max` bytes (at a character, `…` after), each ASCII byte `ascii` names
/// and each character that [`misleads`] percent-encoded.
fn escaped(
    f: &mut std::fmt::Formatter<'_>,
    text: &str,
    max: usize,
    ascii: impl Fn(u8) -> bool,
) -> std::fmt::Result {
    let mut end = text.len().min(max);
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    let shown = &text[..end];
    let (mut plain, mut i) = (0, 0);
    while let Some(&b) = shown.as_bytes().get(i) {
        let width = match b {
            0..0x80 if ascii(b) => 1,
            0..0x80 => 0,
            _ => match shown[i..].chars().next() {
                Some(c) if misleads(c) => c.len_utf8(),
                Some(c) => {
                    i += c.len_utf8();
                    continue;
                }
                None => break,
            },
        };
        if width == 0 {
            i += 1;
            continue;
        }
        f.write_str(&shown[plain..i])?;
        for b in &shown.as_bytes()[i..i + width] {
            write!(f, "%{b:02X}")?;
        }
        i += width;
        plain = i;
    }
    f.write_str(&shown[plain..])?;
    if end < text.len() {
        f.write_str("…")?;
    }
    Ok(())
}

/// Characters past ASCII that a log viewer or a line splitter reads as a break or a
/// reordering: C1 controls (NEL, CSI), the line and paragraph separators, the
/// bidirectional marks and overrides, and a byte-order mark.
fn misleads(c: char) -> bool {
    matches!(c,
        '\u{80}'..='\u{9f}'
        | '\u{2028}' | '\u{2029}'
        | '\u{200e}' | '\u{200f}'
        | '\u{202a}'..='\u{202e}'
        | '\u{2066}'..='\u{2069}'
        | '\u{feff}')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_shows_a_clients_text_as_one_token_that_breaks_no_line() {
        let part = |text: &str| KeyPart(text).to_string();
        assert_eq!(part("acme a=b"), "acme%20a=b");
        assert_eq!(
            part("50%"),
            "50%25",
            "unambiguous: a `%20` sent reads `%2520`"
        );
        assert_eq!(part("tab\there"), "tab%09here");
        // NEL, a line separator and a right-to-left override: percent-encoded bytes.
        assert_eq!(
            part("a\u{85}b\u{2028}c\u{202e}d"),
            "a%C2%85b%E2%80%A8c%E2%80%AEd"
        );
        assert_eq!(part("café ünï"), "café%20ünï", "other text as it is");
        let long = "é".repeat(200);
        assert_eq!(part(&long), format!("{}…", "é".repeat(128)));
        let id = Clipped("x \"y\"\u{2029}", 64).to_string();
        assert_eq!(id, "x%20%22y%22%E2%80%A9");
    }
}
