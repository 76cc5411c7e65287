//! The parameters web frameworks read from a request body as they read the query's:
//! PHP's `$_REQUEST`, Rails' `params`, Laravel's `input()` and Flask's `request.values`
//! merge a form (`application/x-www-form-urlencoded`), the text fields of a
//! `multipart/form-data` body and (Rails, Laravel) a JSON body's members into what a
//! handler reads as a query parameter. Pure functions over a body already read.
//!
//! Readers disagree on what a `Content-Type` names, on a multipart body's boundary and
//! on where its parts begin and end. A key must be found wherever any of them finds it,
//! or a client picks the reading the gateway does not make: so every reading is taken
//! ([`readings`]) and every field any of them yields is a parameter (`multipart`).

use http::header::CONTENT_TYPE;
use http::{HeaderMap, Method};

mod multipart;
pub use multipart::{fields, foreign_charset};

/// One reading of a body frameworks take parameters from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParamsBody {
    /// `application/x-www-form-urlencoded`.
    Form,
    /// `multipart/…`, with one reading of its boundary.
    Multipart(Box<str>),
    /// A JSON body Rails or Laravel merges into parameters.
    Json,
}

/// Every reading of a request's body, at most [`MAX_READINGS`]; `None` past that (its
/// `Content-Type` lines name more bodies than are read: the request is refused, or a
/// reading left out would be a way around a key).
pub type Readings = arrayvec::ArrayVec<ParamsBody, MAX_READINGS>;
pub const MAX_READINGS: usize = 8;

/// How a request's body is read for parameters by some framework: empty when none takes
/// parameters from it. Every `Content-Type` line is read (servers disagree on which of
/// several a framework is given), and a POST without one is a form (Rack).
pub fn readings(method: &Method, headers: &HeaderMap) -> Option<Readings> {
    let mut out = Readings::new();
    let mut typed = false;
    let mut fits = true;
    for value in headers.get_all(CONTENT_TYPE) {
        // Bytes that are no UTF-8 read as U+FFFD: parsers take such a value.
        let value = String::from_utf8_lossy(value.as_bytes());
        typed |= !value.trim().is_empty();
        classify(&value, &mut |reading| fits &= push(&mut out, reading));
    }
    if !typed && method == Method::POST {
        fits &= push(&mut out, ParamsBody::Form);
    }
    fits.then_some(out)
}

/// Adds `reading` unless it is there: `false` when there is no room for it.
fn push(out: &mut Readings, reading: ParamsBody) -> bool {
    out.contains(&reading) || out.try_push(reading).is_ok()
}

/// The readings one `Content-Type` value names. Its type is cut at `;`, `,` or white
/// space (PHP cuts at each, Rack at the first two); a form is any type starting with the
/// form's (Symfony); multipart any `multipart/` type (Rack parses `mixed`, `related`);
/// JSON any value with `/json` or `+json` in it, parameters included (Laravel's
/// `isJson`), or Rails' `text/x-json` and `application/jsonrequest`; never gRPC's.
fn classify(value: &str, out: &mut dyn FnMut(ParamsBody)) {
    let lower = value.to_ascii_lowercase();
    let end = lower.find([';', ',', ' ', '\t']).unwrap_or(lower.len());
    let essence = lower[..end].trim();
    if essence.starts_with("application/x-www-form-urlencoded") {
        out(ParamsBody::Form);
    }
    if essence.starts_with("multipart/") {
        for boundary in boundaries(value) {
            out(ParamsBody::Multipart(boundary.into()));
        }
    }
    let json = lower.contains("/json")
        || lower.contains("+json")
        || matches!(essence, "text/x-json" | "application/jsonrequest");
    if json && !essence.starts_with("application/grpc") {
        out(ParamsBody::Json);
    }
}

/// Each reading of a multipart `Content-Type`'s boundary: PHP's (the first `boundary`
/// anywhere, then `=`; quoted to the next quote, else to `,` or `;`, untrimmed), Rack's
/// (after the last `boundary=`, up to a quote, `;` or `,`), the first and last
/// `boundary` parameter (busboy, Werkzeug), quoted with escapes undone or trimmed, and
/// Werkzeug's RFC 2231 `boundary*` and `boundary*0`, `boundary*1`… joined.
fn boundaries(value: &str) -> Vec<String> {
    // Every reading is kept: `readings` refuses a request past its bound, never drops one.
    let mut found = Vec::<String>::new();
    let mut add = |b: String| {
        if !b.is_empty() && !found.contains(&b) {
            found.push(b);
        }
    };
    let lower = value.to_ascii_lowercase();
    // PHP looks for `boundary` as written first, then in any case.
    if let Some(at) = value.find("boundary").or_else(|| lower.find("boundary")) {
        if let Some(eq) = value[at..].find('=') {
            let after = &value[at + eq + 1..];
            add(match after.strip_prefix('"') {
                Some(quoted) => quoted.split('"').next().unwrap_or("").to_owned(),
                None => after.split([',', ';']).next().unwrap_or("").to_owned(),
            });
        }
    }
    // Rack's pattern is greedy: the last `boundary=`.
    if let Some(at) = lower.rfind("boundary=") {
        let after = &value[at + "boundary=".len()..];
        let after = after.strip_prefix('"').unwrap_or(after);
        add(after.split(['"', ';', ',']).next().unwrap_or("").to_owned());
    }
    let params: Vec<(&str, String)> = parameters(value).collect();
    let named = |name: &'static str| {
        let all = params
            .iter()
            .filter(move |(n, _)| n.eq_ignore_ascii_case(name));
        all.map(|(_, v)| v.clone())
    };
    let plain: Vec<String> = named("boundary").collect();
    for b in plain.first().into_iter().chain(plain.last()) {
        add(b.clone());
    }
    // Werkzeug's RFC 2231 forms: `boundary*=utf-8''…`, `boundary*0=…; boundary*1=…`.
    let extended = |v: String| multipart::extended(&v).unwrap_or(v);
    for v in named("boundary*") {
        add(extended(v));
    }
    let pieces = params.iter().map(|(n, v)| (*n, v.as_str()));
    if let Some(joined) = multipart::continued(pieces, "boundary") {
        add(extended(joined));
    }
    found
}

/// `name=value` parameters after a header value's first `;`, split at `;` outside
/// quotes; a quoted value with its escapes undone, another trimmed.
fn parameters(value: &str) -> impl Iterator<Item = (&str, String)> {
    let mut rest = value.split_once(';').map_or("", |(_, r)| r);
    std::iter::from_fn(move || loop {
        if rest.is_empty() {
            return None;
        }
        let eq = rest.find('=');
        let semi = rest.find(';');
        let Some(eq) = eq.filter(|&e| semi.is_none_or(|s| e < s)) else {
            rest = semi.map_or("", |s| &rest[s + 1..]);
            continue;
        };
        let name = rest[..eq].trim();
        let after = rest[eq + 1..].trim_start();
        let (value, tail) = match after.strip_prefix('"') {
            Some(quoted) => {
                let (text, tail) = multipart::quoted(quoted);
                (text, tail)
            }
            None => {
                let end = after.find(';').unwrap_or(after.len());
                (after[..end].trim().to_owned(), &after[end..])
            }
        };
        rest = tail.split_once(';').map_or("", |(_, r)| r);
        return Some((name, value));
    })
}

/// What a body read before the decision holds of parameters, for `query:` and `json:`
/// keys: one entry per reading.
#[derive(Debug, Clone, Copy)]
pub enum BodyParams<'a> {
    /// A form's text: `name=value` pairs, as a query's.
    Form(&'a [u8]),
    /// A multipart body's text, and one reading of its boundary.
    Multipart(&'a [u8], &'a str),
}

impl<'a> BodyParams<'a> {
    /// The parameters of `text` under `reading` (none for JSON: its members are found
    /// by the JSON walk).
    pub fn read(reading: &'a ParamsBody, text: &'a [u8]) -> Option<Self> {
        match reading {
            ParamsBody::Form => Some(BodyParams::Form(text)),
            ParamsBody::Multipart(boundary) => Some(BodyParams::Multipart(text, boundary)),
            ParamsBody::Json => None,
        }
    }
}

#[cfg(test)]
mod tests;
