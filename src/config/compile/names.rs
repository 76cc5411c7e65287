//! Names the file gives (policies, upstreams, routes) go into headers, JSON and metric
//! labels unescaped: only the characters all three take.

use std::collections::BTreeMap;

use super::Compiler;
use crate::config::raw::{RawPolicy, RawRoute, RawUpstream, S};

impl Compiler {
    /// Every policy, upstream and route name must be usable unescaped (see [`valid_name`]).
    pub(super) fn check_names(
        &mut self,
        policies: &BTreeMap<String, S<RawPolicy>>,
        upstreams: &BTreeMap<String, S<RawUpstream>>,
        routes: &[S<RawRoute>],
    ) {
        for (kind, name, span) in policies
            .iter()
            .map(|(n, p)| ("policy", n, p.span()))
            .chain(upstreams.iter().map(|(n, u)| ("upstream", n, u.span())))
            .chain(
                routes
                    .iter()
                    .map(|r| ("route", r.get_ref().name.get_ref(), r.get_ref().name.span())),
            )
        {
            if !valid_name(name) {
                self.error(span, format!("{kind} name `{name}` has characters that cannot go into headers, JSON and metric labels unescaped"), Some("use letters, digits and _ . : - only".to_owned()));
            }
        }
    }
}

/// Names appear in headers (`RateLimit-Policy: "name"`), JSON bodies and metric labels.
pub(super) fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"_.:-".contains(&b))
}
