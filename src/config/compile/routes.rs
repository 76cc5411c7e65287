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
        server: Option<(PathRules, usize)>,
    ) -> Option<Route> {
        let (paths, max_key_body) = (server.map(|s| s.0), server.map(|s| s.1));
        let raw = raw.into_inner();
        let name = raw.name.get_ref().clone();
        let path = raw.path.get_ref().clone();
        self.check_route_name_and_path(&raw, paths);
        let upstream = self.route_upstream(&raw, &name, upstreams, defined);
        let cost = match &raw.cost {
            Some(c) => self.positive(c, "cost"),
            None => Some(1),
        };
        let tiers = self.route_tiers(&raw, &name, cost, policies, defined);
        self.check_route_host(&raw);
        let methods = self.route_methods(&raw, &name);
        let host = raw.host.as_ref().map(|h| h.get_ref().to_ascii_lowercase());
        let max_body = match &raw.max_body {
            Some(b) => Some(self.positive(b, "max_body")?),
            None => None,
        };
        let (upstream, upstream_index) = upstream?;
        let (body_pointers, body_always) = self.body_pointers(&raw, &name, &tiers);
        let keyed_by =
            |source: fn(&KeySource) -> bool| tiers.iter().flat_map(|p| &p.key).any(source);
        let query_in_body = keyed_by(|k| matches!(k, KeySource::Query(_)));
        let jwt = keyed_by(|k| matches!(k, KeySource::Jwt(_)));
        if let Some(max_key_body) = max_key_body {
            self.lint_unread_bodies(&raw, &tiers, (max_body, max_key_body));
        }
        Some(Route {
            body_pointers,
            body_always,
            query_in_body,
            keys_by_params: query_in_body || body_always || jwt,
            name,
            path,
            host,
            methods,
            upstream,
            upstream_index,
            policies: tiers,
            cost: cost?,
            max_body,
        })
    }

    /// The JSON pointers the route's policies read from a request body, each once: their
    /// `json:` key sources and their price tables' quotes (read from every body: `true`
    /// beside them when there are any), and the top-level member of each `query:` key's
    /// name (read from JSON bodies, as Rails and Laravel merge them into parameters).
    fn body_pointers(
        &mut self,
        raw: &RawRoute,
        name: &str,
        policies: &[Arc<Policy>],
    ) -> (Box<[Arc<crate::json::JsonPointer>]>, bool) {
        let mut pointers: Vec<Arc<crate::json::JsonPointer>> = Vec::new();
        let keys = policies
            .iter()
            .flat_map(|p| &p.key)
            .filter_map(|k| match k {
                KeySource::Json(p) => Some(p),
                _ => None,
            });
        let quoted = policies
            .iter()
            .filter_map(|p| p.rate()?.settle.as_ref()?.priced.as_ref())
            .flat_map(|prices| prices.pointers());
        for p in keys.chain(quoted) {
            if !pointers.iter().any(|q| q.text() == p.text()) {
                pointers.push(p.clone());
            }
        }
        let always = !pointers.is_empty();
        let members = policies
            .iter()
            .flat_map(|p| &p.key)
            .filter_map(|k| match k {
                KeySource::Query(name) => crate::json::JsonPointer::member(name).ok(),
                _ => None,
            });
        for p in members {
            if !pointers.iter().any(|q| q.text() == p.text()) {
                pointers.push(Arc::new(p));
            }
        }
        if pointers.len() > crate::json::MAX_POINTERS {
            self.error(
                raw.name.span(),
                format!(
                    "route `{name}` reads {} JSON pointers from a request body",
                    pointers.len()
                ),
                Some(format!(
                    "at most {}: split the policies over routes",
                    crate::json::MAX_POINTERS
                )),
            );
        }
        (pointers.into(), always)
    }

    /// A tier that skips a request without its `json:` key also skips every body too
    /// large to read (past `max_key_body`), and one without its `query:` key every such
    /// body that carries it as a parameter: said unless the route refuses such bodies.
    fn lint_unread_bodies(
        &mut self,
        raw: &RawRoute,
        tiers: &[Arc<Policy>],
        (max_body, max_key_body): (Option<u64>, usize),
    ) {
        if max_body.is_some_and(|m| m <= max_key_body as u64) {
            return;
        }
        // The first tier that skips a request without a key `reads` reads.
        let skipping = |reads: fn(&KeySource) -> bool| {
            tiers
                .iter()
                .find(|p| p.missing == Missing::Skip && p.key.iter().any(reads))
        };
        let name = raw.name.get_ref();
        let fix = format!("set max_body = {max_key_body} on the route (larger bodies are refused 413), or raise [server] max_key_body to what requests may carry");
        if let Some(policy) = skipping(KeySource::reads_body) {
            self.warn(
                raw.name.span(),
                format!("route `{name}`: a body larger than max_key_body ({max_key_body} bytes) is not read, so policy `{}`'s `json:` key is missing and, with missing = \"skip\", the tier is skipped: padding a request past it goes around the tier", policy.name),
                Some(fix.clone()),
            );
        }
        if let Some(policy) = skipping(|k| matches!(k, KeySource::Query(_))) {
            self.warn(
                raw.name.span(),
                format!("route `{name}`: policy `{}`'s `query:` key is also read from form, multipart and JSON bodies, as PHP, Rails, Laravel and Flask read parameters, but not from one larger than max_key_body ({max_key_body} bytes): with missing = \"skip\", such a body with the key in it goes around the tier where the upstream reads parameters from bodies", policy.name),
                Some(fix + ", or use missing = \"reject\""),
            );
        }
    }

    /// A route needs a name, and a path that starts with `/` and is already in the form
    /// requests take after normalisation.
    fn check_route_name_and_path(&mut self, raw: &RawRoute, paths: Option<PathRules>) {
        if raw.name.get_ref().is_empty() {
            self.error(
                raw.name.span(),
                "route name is empty",
                Some("name it, e.g. name = \"search\"; names label metrics and logs".to_owned()),
            );
        }
        let path = raw.path.get_ref();
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
        match paths.map(|rules| crate::request::path::normalize(path, &rules)) {
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
        let folded = crate::request::path::fold_case(path);
        if paths.is_some_and(|rules| rules.ignore_case) && folded != *path {
            self.error(
                raw.path.span(),
                format!("route path `{path}` has upper-case letters, and with ignore_path_case = true requests are routed by their lower-cased path, so none would match it"),
                Some(format!("write path = \"{folded}\" (a %XX escape keeps its upper-case hex)")),
            );
        }
    }

    /// The upstream the route names, with its position in [`Config::upstreams`].
    fn route_upstream(
        &mut self,
        raw: &RawRoute,
        name: &str,
        upstreams: &BTreeMap<String, Arc<Upstream>>,
        defined: &Defined,
    ) -> Option<(Arc<Upstream>, usize)> {
        let wanted = raw.upstream.get_ref();
        match upstreams.get(wanted) {
            Some(u) => Some((
                u.clone(),
                upstreams.keys().position(|k| k == wanted).unwrap_or(0),
            )),
            // Defined but invalid: its own errors are already reported.
            None if defined.upstreams.contains(wanted) => None,
            None => {
                let hint = suggest(wanted, upstreams.keys(), "[upstreams.");
                self.error(
                    raw.upstream.span(),
                    format!("route `{name}` names unknown upstream `{wanted}`"),
                    hint,
                );
                None
            }
        }
    }

    /// The route's tiers in the order listed: each named policy once, each able to admit
    /// the route's cost, and no more than [`MAX_TIERS`] of them.
    fn route_tiers(
        &mut self,
        raw: &RawRoute,
        name: &str,
        cost: Option<u64>,
        policies: &BTreeMap<String, Arc<Policy>>,
        defined: &Defined,
    ) -> Vec<Arc<Policy>> {
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
                    self.check_cost_fits(raw, name, cost, p, policy);
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
        tiers
    }

    /// A request charged more than a rate tier's burst (or an override's) could never be
    /// admitted.
    fn check_cost_fits(
        &mut self,
        raw: &RawRoute,
        name: &str,
        cost: Option<u64>,
        listed: &S<String>,
        policy: &Policy,
    ) {
        let (Some(cost), Some(rate)) = (cost, policy.rate()) else {
            return;
        };
        // A settled policy charges its reserve at admission instead; a priced one quotes
        // each request.
        if rate.settle.as_ref().is_some_and(|s| s.priced.is_some()) {
            return;
        }
        let charged = rate
            .settle
            .as_ref()
            .and_then(|s| s.reserve)
            .map_or(cost, std::num::NonZeroU64::get);
        // A settled policy's key reserves at most its burst and pays the rest when it
        // settles (`RequestTiers::cap_reserves`): an override may go below the reserve, as
        // a runtime one may; the policy's own burst below it is a mistake.
        let overrides = rate.overrides.values().filter(|_| rate.settle.is_none());
        let too_small = std::iter::once(rate.quota.burst())
            .chain(overrides.map(Quota::burst))
            .any(|b| charged > b);
        if too_small {
            let span = raw.cost.as_ref().map_or(listed.span(), S::span);
            self.error(span, format!("cost {charged} of route `{name}` exceeds the burst of policy `{}` (or one of its overrides)", listed.get_ref()), Some("such a request could never be admitted: lower cost or raise burst".to_owned()));
        }
    }

    /// `host` is matched against the request's host without its port, so one written
    /// with a port, scheme or path never matches.
    fn check_route_host(&mut self, raw: &RawRoute) {
        let Some(h) = &raw.host else { return };
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

    /// `methods`, upper-cased; `None` when absent (every method matches).
    fn route_methods(&mut self, raw: &RawRoute, name: &str) -> Option<Vec<Method>> {
        let ms = raw.methods.as_ref()?;
        if ms.is_empty() {
            self.error(
                raw.name.span(),
                format!("route `{name}` has methods = [], which matches nothing"),
                Some("remove `methods` to match every method".to_owned()),
            );
        }
        let methods = ms
            .iter()
            .filter_map(
                |m| match Method::from_bytes(m.get_ref().to_ascii_uppercase().as_bytes()) {
                    Ok(method) => Some(method),
                    Err(_) => {
                        self.error(
                            m.span(),
                            format!("`{}` is not an HTTP method", m.get_ref()),
                            Some("write methods = [\"GET\", \"POST\"]".to_owned()),
                        );
                        None
                    }
                },
            )
            .collect();
        Some(methods)
    }
}
