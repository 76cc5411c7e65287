//! Entry points for the fuzzers in `fuzz/` and for the corpus regression test: each takes
//! arbitrary bytes and panics only if an invariant breaks. Not part of the public API.

use std::path::Path;

use crate::key::{KeySource, RequestView, TrustedProxies};
use crate::limit::{evaluate, Mode, Quota, TatTable, Tier};
use crate::store::MemoryStore;

/// Any text given as a config file: compiles or reports located errors, never panics.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    if let Err(e) = crate::config::compile(Path::new("fuzz.toml"), text) {
        let shown = e.to_string();
        assert!(
            shown.starts_with("fuzz.toml:"),
            "every error is located: {shown}"
        );
    }
}

/// Bytes split into header lines, a query string and a peer: every key source extracts
/// without panicking, and the client address is the peer or an address from the header.
pub fn keys(data: &[u8]) {
    let text = String::from_utf8_lossy(data);
    let mut lines = text.split('\n');
    let query = lines.next().unwrap_or("");
    let uri: http::Uri = format!(
        "/p?{}",
        query.replace(|c: char| c.is_whitespace() || c == '#', "")
    )
    .parse()
    .unwrap_or_else(|_| http::Uri::from_static("/p"));
    let mut headers = http::HeaderMap::new();
    for line in lines.take(32) {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let (Ok(name), Ok(value)) = (
            http::header::HeaderName::from_bytes(name.trim().as_bytes()),
            http::HeaderValue::from_bytes(value.trim().as_bytes()),
        ) else {
            continue;
        };
        headers.append(name, value);
    }
    let peer: std::net::IpAddr = "127.0.0.1"
        .parse()
        .unwrap_or(std::net::IpAddr::from([127, 0, 0, 1]));
    let trusted = TrustedProxies::new(vec![ipnet::IpNet::from(peer)]);
    let client = trusted.client_ip(peer, &headers);
    // The whole input also as a form and as a multipart body with boundary `b`.
    let mut facts = [
        crate::json::BodyFacts::unread(None),
        crate::json::BodyFacts::unread(None),
    ];
    facts[0]
        .params
        .push(crate::request::form::BodyParams::Form(data));
    facts[1]
        .params
        .push(crate::request::form::BodyParams::Multipart(data, "b"));
    for body in [None, Some(&facts[0]), Some(&facts[1])] {
        let view = RequestView {
            method: &http::Method::GET,
            uri: &uri,
            headers: &headers,
            client_ip: client,
            route: "r",
            body,
        };
        extract_all(&view);
    }
}

fn extract_all(view: &RequestView<'_>) {
    for source in [
        "ip",
        "ip/64",
        "header:x-tenant-id",
        "query:user",
        "cookie:sid",
        "jwt:sub",
        "route",
        "method",
        "path",
    ] {
        if let Ok(s) = source.parse::<KeySource>() {
            for part in s.extract(view).unwrap_or_default() {
                let _ = part.as_text();
            }
        }
    }
}

fn u64_at(data: &[u8], i: usize) -> u64 {
    let mut b = [0u8; 8];
    for (k, slot) in b.iter_mut().enumerate() {
        *slot = data.get(i * 8 + k).copied().unwrap_or(0);
    }
    u64::from_le_bytes(b)
}

/// Arbitrary numbers into the GCRA and the tier evaluator: no panic, denials change
/// nothing, and an admitted TAT never moves backwards.
pub fn gcra(data: &[u8]) {
    let (limit, period, burst) = (
        u64_at(data, 0) % 1_000_000 + 1,
        u64_at(data, 1),
        u64_at(data, 2) % 10_000 + 1,
    );
    let Ok(quota) = Quota::new(limit, period, burst) else {
        return;
    };
    let (tat, now, cost, delay) = (
        u64_at(data, 3),
        u64_at(data, 4),
        u64_at(data, 5),
        u64_at(data, 6),
    );
    let d = quota.decide(tat, now, cost, delay);
    if d.admitted {
        assert!(
            d.tat >= tat.max(now) || d.tat == u64::MAX,
            "TAT never moves back"
        );
    } else {
        assert_eq!(d.tat, tat, "a denial changes nothing");
    }
    let store = MemoryStore::new(64);
    let tiers: Vec<Tier> = (0..(data.len() % 4 + 1))
        .map(|i| Tier {
            window: None,
            reserve: None,
            overflow: 0,
            quota,
            mode: if i % 2 == 1 {
                Mode::Shadow
            } else {
                Mode::Enforce
            },
            max_delay_ns: delay % 1_000_000_000,
            // Rate keys, as the key hasher makes them.
            key: u64_at(data, 7 + i) & crate::key::compose::HASH_MASK,
        })
        .collect();
    let small_now = now % (1 << 62);
    let before: Vec<u64> = tiers.iter().map(|t| store.peek(t.key)).collect();
    let v = evaluate(&store, &tiers, small_now, cost % (burst + 1));
    if !v.admitted {
        let after: Vec<u64> = tiers.iter().map(|t| store.peek(t.key)).collect();
        assert_eq!(before, after, "a denied request leaves no trace");
    }
}

/// Routes for [`paths`]: prefixes that share characters, so a wrong merge shows.
const PATH_ROUTES: &str = "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.u]\ntargets = [\"http://127.0.0.1:1\"]\n[[routes]]\nname = \"search\"\npath = \"/v1/search\"\nupstream = \"u\"\n[[routes]]\nname = \"v1\"\npath = \"/v1/\"\nupstream = \"u\"\n[[routes]]\nname = \"ab\"\npath = \"/a/b\"\nupstream = \"u\"\n[[routes]]\nname = \"tilde\"\npath = \"/~x\"\nupstream = \"u\"\n[[routes]]\nname = \"root\"\npath = \"/\"\nupstream = \"u\"\n";

/// Paths: normalisation never panics and is idempotent on any path; and a canonical path
/// built from the bytes, re-spelled by the bytes (encoded unreserved characters, doubled
/// slashes, `.` and `x/..` segments), normalises back to itself and so takes its route.
pub fn paths(data: &[u8]) {
    use crate::request::path::{normalize, PathRules};
    static CONFIG: std::sync::OnceLock<Option<crate::config::Config>> = std::sync::OnceLock::new();
    let rules = PathRules::default();
    if let Ok(pq) = std::str::from_utf8(data)
        .map_err(|_| ())
        .and_then(|t| t.parse::<http::uri::PathAndQuery>().map_err(|_| ()))
    {
        if let Ok(once) = normalize(pq.path(), &rules) {
            let twice = normalize(&once, &rules);
            assert_eq!(twice.as_deref(), Ok(&*once), "idempotent");
            assert!(once.parse::<http::uri::PathAndQuery>().is_ok(), "{once}");
        }
    }
    let Some(config) = CONFIG
        .get_or_init(|| crate::config::compile(Path::new("paths.toml"), PATH_ROUTES).ok())
        .as_ref()
    else {
        panic!("the fuzz routes compile");
    };
    let (canonical, respelled) = respell(data);
    let normalized = normalize(&respelled, &rules);
    assert_eq!(normalized.as_deref(), Ok(canonical.as_str()), "{respelled}");
    let get = http::Method::GET;
    assert_eq!(
        config.find_route(None, &canonical, &get),
        normalized
            .ok()
            .and_then(|n| config.find_route(None, &n, &get)),
    );
}

/// A canonical path from `data`, and a spelling of it an ordinary upstream resolves to it.
fn respell(data: &[u8]) -> (String, String) {
    const ALPHABET: &[u8] = b"av1searchb~x-._";
    let (mut canonical, mut respelled) = (String::new(), String::new());
    for chunk in data.chunks(4) {
        let mut segment: String = chunk[1..]
            .iter()
            .map(|&b| char::from(ALPHABET[usize::from(b) % ALPHABET.len()]))
            .collect();
        if segment.is_empty() || segment == "." || segment == ".." {
            segment.push('x');
        }
        canonical.push('/');
        canonical.push_str(&segment);
        match chunk[0] % 6 {
            0 => respelled.push_str("//"),
            1 => respelled.push_str("/./"),
            2 => respelled.push_str("/zz/%2E%2e/"),
            _ => respelled.push('/'),
        }
        for (i, c) in segment.chars().enumerate() {
            if (usize::from(chunk[0]) >> 3) & (1 << i) != 0 {
                respelled.push_str(&format!("%{:02x}", u32::from(c)));
            } else {
                respelled.push(c);
            }
        }
    }
    if canonical.is_empty() {
        canonical.push('/');
        respelled.push_str("/.");
    }
    (canonical, respelled)
}
