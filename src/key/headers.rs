//! The request headers some policy reads a key from. A client's `Connection` option may
//! not remove one of them: a front proxy that sets the key header (an authenticated user
//! id) and passes the client's `Connection` on unread would otherwise have it stripped
//! here, and the request would be limited as one without a key (`missing`), where
//! `"skip"` lets it past the tier.

use http::header::{HeaderName, AUTHORIZATION, COOKIE};

use super::source::KeySource;

/// The names, each once; a handful at most, so a scan beats a hash.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct KeyHeaders(Box<[HeaderName]>);

impl KeyHeaders {
    /// The headers `sources` read: a header's own name, `Cookie` for a cookie,
    /// `Authorization` for a JWT claim. (The client's address is read from
    /// `X-Forwarded-For`, which no option removes; see `proxy::hop`.)
    pub fn of<'a>(sources: impl IntoIterator<Item = &'a KeySource>) -> Self {
        let mut names: Vec<HeaderName> = Vec::new();
        for source in sources {
            let name = match source {
                KeySource::Header(name) => name.clone(),
                KeySource::Cookie(_) => COOKIE,
                KeySource::Jwt(_) => AUTHORIZATION,
                _ => continue,
            };
            if !names.contains(&name) {
                names.push(name);
            }
        }
        Self(names.into_boxed_slice())
    }

    /// Whether `name` (a `Connection` option, any case) is one of them.
    pub fn holds(&self, name: &str) -> bool {
        self.0.iter().any(|h| name.eq_ignore_ascii_case(h.as_str()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn header_cookie_and_jwt_sources_name_their_headers_once() {
        let sources: Vec<KeySource> = ["header:x-user-id", "cookie:sid", "jwt:sub", "jwt:org"]
            .into_iter()
            .chain(["ip", "query:k", "header:X-User-Id"])
            .map(|s| s.parse().expect("source"))
            .collect();
        let kept = KeyHeaders::of(&sources);
        assert_eq!(kept.0.len(), 3, "{kept:?}");
        for name in ["X-USER-ID", "cookie", "Authorization"] {
            assert!(kept.holds(name), "{name}");
        }
        assert!(!kept.holds("x-forwarded-for") && !kept.holds("k"));
    }
}
