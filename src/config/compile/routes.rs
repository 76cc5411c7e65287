//! `[[routes]]`: matching, tiers, cost.

use super::*;
use crate::request::path::PathRules;

impl Compiler {
    pub(super) fn route(
        &mut self,
        raw: S<RawRoute>,
        upstreams: &BTreeMap<String, Arc<Upstream>>,
        policies: &BTreeMap<String, Arc<Policy>>,
        defined: &Defined,
        paths: Option<PathRules>,
    ) -> Option<Route> {
        let raw = raw.into_inner();
        let name = raw.name.get_ref().clone();
        if name.is_empty() {
            self.error(
                raw.name.span(),
                "route name is empty",
                Some("name it, e.g. name = \"search\"; names label metrics and logs".to_owned()),
            );
        }
        let path = raw.path.get_ref().clone();
        if !path.starts_with('/') {
            self.error(
                raw.path.span(),
                format!("route path `{path}` must start with `/`"),
                Some(format!(
                    "write path = \"/{}\"",
                    path.trim_start_matches('/')
                )),
            );
        }
        // Requests are routed on their normalised path, so a route written in another
        // spelling could never match.
        match paths.map(|rules| crate::request::path::normalize(&path, &rules)) {
            Some(Ok(std::borrow::Cow::Owned(canonical))) if path.starts_with('/') => self.error(
                raw.path.span(),
                format!("route path `{path}` is not in normalised form, so no request would match it"),
                Some(format!("write path = \"{canonical}\" (requests are routed after normalisation; see [server] normalize_path)")),
            ),
            Some(Err(e)) => self.error(
                raw.path.span(),
                format!("route path `{path}`: {e}"),
                Some("requests with such a path are refused before routing".to_owned()),
            ),
            _ => {}
        }
        let upstream = match upstreams.get(raw.upstream.get_ref()) {
            Some(u) => Some((
                u.clone(),
                upstreams
                    .keys()
                    .position(|k| k == raw.upstream.get_ref())
                    .unwrap_or(0),
            )),
            // Defined but invalid: its own errors are already reported.
            None if defined.upstreams.contains(raw.upstream.get_ref()) => None,
            None => {
                let hint = suggest(raw.upstream.get_ref(), upstreams.keys(), "[upstreams.");
                self.error(
                    raw.upstream.span(),
                    format!(
                        "route `{name}` names unknown upstream `{}`",
                        raw.upstream.get_ref()
                    ),
                    hint,
                );
                None
            }
        };
        let cost = match &raw.cost {
            Some(c) => self.positive(c, "cost"),
            None => Some(1),
        };
        let mut tiers = Vec::new();
        let mut seen = HashSet::new();
        for p in &raw.policies {
            if !seen.insert(p.get_ref().as_str()) {
                self.error(
                    p.span(),
                    format!("policy `{}` is listed twice", p.get_ref()),
                    Some("a tier applies once; remove the repeat".to_owned()),
                );
                continue;
            }
            match policies.get(p.get_ref()) {
                Some(policy) => {
                    if let (Some(cost), Some(rate)) = (cost, policy.rate()) {
                        // A settled policy charges its reserve at admission instead.
                        let charged = rate
                            .settle
                            .as_ref()
                            .and_then(|s| s.reserve)
                            .map_or(cost, std::num::NonZeroU64::get);
                        let too_small = std::iter::once(rate.quota.burst())
                            .chain(rate.overrides.values().map(Quota::burst))
                            .any(|b| charged > b);
                        if too_small {
                            let span = raw.cost.as_ref().map_or(p.span(), S::span);
                            self.error(span, format!("cost {charged} of route `{name}` exceeds the burst of policy `{}` (or one of its overrides)", p.get_ref()), Some("such a request could never be admitted: lower cost or raise burst".to_owned()));
                        }
                    }
                    tiers.push(policy.clone());
                }
                None if defined.policies.contains(p.get_ref()) => {}
                None => {
                    let hint = suggest(p.get_ref(), policies.keys(), "[policies.");
                    self.error(
                        p.span(),
                        format!("route `{name}` names unknown policy `{}`", p.get_ref()),
                        hint,
                    );
                }
            }
        }
        if raw.policies.len() > MAX_TIERS {
            self.error(
                raw.name.span(),
                format!(
                    "route `{name}` has {} tiers; at most {MAX_TIERS} are allowed",
                    raw.policies.len()
                ),
                Some("merge tiers or split the route".to_owned()),
            );
        }
        if let Some(h) = &raw.host {
            let text = h.get_ref();
            if text.is_empty()
                || text.contains(['/', ' '])
                || text
                    .rsplit_once(':')
                    .is_some_and(|(_, p)| p.bytes().all(|b| b.is_ascii_digit()))
                    && !text.ends_with(']')
            {
                self.error(h.span(), format!("route host `{text}` can never match"), Some("write the bare host name without port or scheme, e.g. host = \"api.example.com\" (the request's port is ignored)".to_owned()));
            }
        }
        if let Some(ms) = &raw.methods {
            if ms.is_empty() {
                self.error(
                    raw.name.span(),
                    format!("route `{name}` has methods = [], which matches nothing"),
                    Some("remove `methods` to match every method".to_owned()),
                );
            }
        }
        let host = raw.host.as_ref().map(|h| h.get_ref().to_ascii_lowercase());
        let methods = raw.methods.as_ref().map(|ms| {
            ms.iter()
                .filter_map(|m| {
                    match Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()) {
                        Ok(method) => Some(method),
                        Err(_) => {
                            self.error(
                                m.span(),
                                format!("`{}` is not an HTTP method", m.get_ref()),
                                Some("write methods = [\"GET\", \"POST\"]".to_owned()),
                            );
                            None
                        }
                    }
                })
                .collect()
        });
        let max_body = match &raw.max_body {
            Some(b) => Some(self.positive(b, "max_body")?),
            None => None,
        };
        Some(Route {
            name,
            path,
            host,
            methods,
            upstream: upstream.clone()?.0,
            upstream_index: upstream?.1,
            policies: tiers,
            cost: cost?,
            max_body,
        })
    }
}
