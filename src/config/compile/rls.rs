//! `[rls]` and its `[[rls.rules]]`: which policy decides which descriptors.

use super::*;
use crate::config::raw::{RawRls, RawRlsEntry, RawRlsRule};
use crate::config::rls::{RefusalBody, RlsRule, RlsRules, RuleEntry, Unmatched, Value};
use crate::config::Rls;

impl Compiler {
    /// `[rls]`, and the policies its envoyproxy/ratelimit YAML adds (with where the file
    /// names them, for errors about them).
    pub(super) fn rls(
        &mut self,
        raw: S<RawRls>,
        policies: &BTreeMap<String, Arc<Policy>>,
        defined: &Defined,
        data_plane: Option<SocketAddr>,
    ) -> Option<(Rls, Vec<Arc<Policy>>, std::ops::Range<usize>)> {
        let raw = raw.into_inner();
        let yaml_span = raw.ratelimit_config.as_ref().map_or(0..0, S::span);
        let yaml = self.rls_yaml(&raw.ratelimit_config, defined);
        let listen = self.socket_addr(&raw.listen);
        if let (Some(l), Some(d)) = (listen, data_plane) {
            if l == d && l.port() != 0 {
                self.error(
                    raw.listen.span(),
                    format!("[rls] listen {l} is the same address as [server] listen"),
                    Some(
                        "the rate limit service has a listener of its own: pick another port"
                            .to_owned(),
                    ),
                );
            }
        }
        let tls = raw.tls.as_ref().map(|t| self.server_tls(t, "[rls.tls]"));
        let on_unmatched = self.choice(
            &raw.on_unmatched,
            &[("ok", Unmatched::Ok), ("over_limit", Unmatched::OverLimit)],
            Unmatched::Ok,
            "on_unmatched",
        );
        let refusal_body = self.choice(
            &raw.refusal_body,
            &[
                ("none", RefusalBody::None),
                ("json", RefusalBody::Json),
                ("problem+json", RefusalBody::ProblemJson),
            ],
            RefusalBody::None,
            "refusal_body",
        );
        let max_quota_streams = self.count_or(
            &raw.max_quota_streams,
            crate::config::rls::DEFAULT_MAX_QUOTA_STREAMS as u64,
            "max_quota_streams",
        );
        let max_quota_buckets = self.count_or(
            &raw.max_quota_buckets,
            crate::config::rls::DEFAULT_MAX_QUOTA_BUCKETS as u64,
            "max_quota_buckets",
        );
        let rules = self.all_rules(raw.rules, yaml.rules, (policies, defined));
        let rls = Rls {
            listen: listen?,
            tls: match tls {
                Some(t) => Some(t?),
                None => None,
            },
            on_unmatched: on_unmatched?,
            refusal_body: refusal_body?,
            rules: RlsRules::new(rules, yaml.nodes),
            ratelimit_config: raw
                .ratelimit_config
                .as_ref()
                .map(|p| self.base.join(p.get_ref())),
            buckets: Default::default(),
            max_quota_streams: usize::try_from(max_quota_streams?).unwrap_or(usize::MAX),
            max_quota_buckets: usize::try_from(max_quota_buckets?).unwrap_or(usize::MAX),
        };
        Some((rls, yaml.policies, yaml_span))
    }

    /// envoyproxy/ratelimit's YAML, when `[rls] ratelimit_config` names it: its limits'
    /// policies must not take a `[policies.NAME]` table's name.
    fn rls_yaml(
        &mut self,
        path: &Option<S<String>>,
        defined: &Defined,
    ) -> super::ratelimit_yaml::FromYaml {
        let Some(path) = path else {
            return super::ratelimit_yaml::FromYaml::default();
        };
        let yaml = self.ratelimit_yaml(path);
        for p in &yaml.policies {
            if defined.policies.contains(&p.name) {
                self.error(
                    path.span(),
                    format!(
                        "the YAML's limit `{}` has the name of a [policies.{}] table",
                        p.name, p.name
                    ),
                    Some(
                        "rename the table: a YAML limit's policy is named by its full key"
                            .to_owned(),
                    ),
                );
            }
        }
        yaml
    }

    /// The YAML's rules, then the TOML's, each descriptor named once.
    fn all_rules(
        &mut self,
        raw: Vec<S<RawRlsRule>>,
        from_yaml: Vec<RlsRule>,
        (policies, defined): (&BTreeMap<String, Arc<Policy>>, &Defined),
    ) -> Vec<RlsRule> {
        let mut rules = Vec::new();
        let mut seen: HashSet<(String, Vec<RuleEntry>)> = HashSet::new();
        for rule in from_yaml {
            // The YAML checks its own duplicates (per level); a TOML rule naming one of
            // its descriptors is reported below.
            seen.insert((rule.domain.clone(), rule.entries.clone()));
            rules.push(rule);
        }
        for r in raw {
            let span = r.span();
            let Some(rule) = self.rls_rule(r.into_inner(), policies, defined) else {
                continue;
            };
            if !seen.insert((rule.domain.clone(), rule.entries.clone())) {
                self.error(
                    span,
                    format!(
                        "two [[rls.rules]] entries name the descriptor `{}`",
                        rule.describe()
                    ),
                    Some("a descriptor is decided by one policy: keep one of them".to_owned()),
                );
                continue;
            }
            rules.push(rule);
        }
        rules
    }

    pub(super) fn rls_rule(
        &mut self,
        raw: RawRlsRule,
        policies: &BTreeMap<String, Arc<Policy>>,
        defined: &Defined,
    ) -> Option<RlsRule> {
        let entries = self.rls_entries(&raw.descriptor)?;
        if raw.domain.get_ref().is_empty() {
            self.error(
                raw.domain.span(),
                "an [[rls.rules]] entry has an empty domain",
                Some(
                    "write the domain Envoy's rate limit filter sends, e.g. domain = \"edge\""
                        .to_owned(),
                ),
            );
            return None;
        }
        let name = raw.policy.get_ref();
        let Some(policy) = policies.get(name) else {
            if !defined.policies.contains(name) {
                let hint = suggest(name, policies.keys(), "[policies.");
                self.error(raw.policy.span(), format!("unknown policy `{name}`"), hint);
            }
            return None;
        };
        if policy.kind().held_in_flight() {
            self.error(
                raw.policy.span(),
                format!("policy `{name}` limits requests in flight; a rate limit service call has no end to release a slot at"),
                Some("name a rate or quota policy".to_owned()),
            );
            return None;
        }
        let any_values = entries
            .iter()
            .filter(|e| !matches!(e.value, Value::Exact(_)))
            .count();
        if any_values != policy.key.len() {
            let sources: Vec<String> = policy.key.iter().map(ToString::to_string).collect();
            self.error(
                raw.descriptor.span(),
                format!(
                    "this descriptor keys policy `{name}` by {any_values} value(s), but the policy is keyed by {} source(s) ({})",
                    policy.key.len(),
                    sources.join(", ")
                ),
                Some(match any_values {
                    // Every entry pinned: one bucket for all such descriptors, which a
                    // TOML policy (always keyed by something) cannot name.
                    0 => "a descriptor of pinned values only (a global limit, e.g. by generic_key) is one bucket: write it in envoyproxy/ratelimit's YAML (`ratelimit_config`, a `rate_limit` under `key: generic_key` / `value: slowpath`), or leave one entry unpinned (`descriptor = [\"generic_key\"]`: one bucket per value)".to_owned(),
                    _ => "an RLS key is the values of the entries that are not pinned, in order, so that a proxied request and an Envoy's descriptor share one bucket: make the counts equal".to_owned(),
                }),
            );
            return None;
        }
        Some(RlsRule {
            domain: raw.domain.into_inner(),
            entries,
            policy: Some(policy.clone()),
            reports: raw.reports.unwrap_or(false),
            name: None,
            named: false,
            replaces: Vec::new(),
            blocked: None,
        })
    }

    /// `descriptor = ["tenant", { path = "/v1/search" }]`: keys in order, values pinned.
    fn rls_entries(&mut self, raw: &S<Vec<RawRlsEntry>>) -> Option<Vec<RuleEntry>> {
        let hint = || {
            Some("write entry keys in order, pinning a value as a one-key table: descriptor = [\"tenant\", { path = \"/v1/search\" }]".to_owned())
        };
        if raw.get_ref().is_empty() {
            self.error(
                raw.span(),
                "an [[rls.rules]] descriptor needs at least one entry",
                hint(),
            );
            return None;
        }
        let mut entries = Vec::new();
        for entry in raw.get_ref() {
            let entry = match entry {
                RawRlsEntry::Key(key) => RuleEntry {
                    key: key.clone(),
                    value: Value::Any,
                },
                RawRlsEntry::Pinned(map) if map.len() == 1 => {
                    let (key, value) = map.iter().next()?;
                    RuleEntry {
                        key: key.clone(),
                        value: Value::Exact(value.clone()),
                    }
                }
                RawRlsEntry::Pinned(_) => {
                    self.error(
                        raw.span(),
                        "a pinned descriptor entry is a table of exactly one key",
                        hint(),
                    );
                    return None;
                }
            };
            if entry.key.is_empty() {
                self.error(raw.span(), "a descriptor entry has an empty key", hint());
                return None;
            }
            entries.push(entry);
        }
        if entries.len() > crate::limit::MAX_TIERS {
            self.error(
                raw.span(),
                format!(
                    "a descriptor of {} entries; at most {} are matched",
                    entries.len(),
                    crate::limit::MAX_TIERS
                ),
                None,
            );
            return None;
        }
        Some(entries)
    }

    /// The policies of envoyproxy/ratelimit's YAML beside the TOML's, each placed at
    /// `ratelimit_config` (`span`); the names of those added. A TOML policy of the same
    /// name stays, with its own place.
    pub(super) fn add_yaml_policies(
        (from_yaml, span): (Vec<Arc<Policy>>, std::ops::Range<usize>),
        policies: &mut BTreeMap<String, Arc<Policy>>,
        spans: &mut BTreeMap<String, std::ops::Range<usize>>,
    ) -> HashSet<String> {
        let mut added = HashSet::new();
        for p in from_yaml {
            if let std::collections::btree_map::Entry::Vacant(slot) = policies.entry(p.name.clone())
            {
                added.insert(p.name.clone());
                spans.insert(p.name.clone(), span.clone());
                slot.insert(p);
            }
        }
        added
    }
}
