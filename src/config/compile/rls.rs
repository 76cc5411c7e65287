//! `[rls]` and its `[[rls.rules]]`: which policy decides which descriptors.

use super::*;
use crate::config::raw::{RawRls, RawRlsEntry, RawRlsRule};
use crate::config::rls::{RlsRule, RlsRules, RuleEntry, Unmatched};
use crate::config::Rls;

impl Compiler {
    pub(super) fn rls(
        &mut self,
        raw: S<RawRls>,
        policies: &BTreeMap<String, Arc<Policy>>,
        defined: &Defined,
        data_plane: Option<SocketAddr>,
    ) -> Option<Rls> {
        let raw = raw.into_inner();
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
        let mut rules = Vec::new();
        let mut seen: HashSet<(String, Vec<RuleEntry>)> = HashSet::new();
        for r in raw.rules {
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
        Some(Rls {
            listen: listen?,
            tls: match tls {
                Some(t) => Some(t?),
                None => None,
            },
            on_unmatched: on_unmatched?,
            rules: RlsRules::new(rules),
        })
    }

    fn rls_rule(
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
        if policy.concurrency().is_some() {
            self.error(
                raw.policy.span(),
                format!("policy `{name}` limits requests in flight; a rate limit service call has no end to release a slot at"),
                Some("name a rate or quota policy".to_owned()),
            );
            return None;
        }
        let any_values = entries.iter().filter(|e| e.value.is_none()).count();
        if any_values != policy.key.len() {
            let sources: Vec<String> = policy.key.iter().map(ToString::to_string).collect();
            self.error(
                raw.descriptor.span(),
                format!(
                    "this descriptor keys policy `{name}` by {any_values} value(s), but the policy is keyed by {} source(s) ({})",
                    policy.key.len(),
                    sources.join(", ")
                ),
                Some("an RLS key is the values of the entries that are not pinned, in order, so that a proxied request and an Envoy's descriptor share one bucket: make the counts equal".to_owned()),
            );
            return None;
        }
        Some(RlsRule {
            domain: raw.domain.into_inner(),
            entries,
            policy: policy.clone(),
            reports: raw.reports.unwrap_or(false),
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
                    value: None,
                },
                RawRlsEntry::Pinned(map) if map.len() == 1 => {
                    let (key, value) = map.iter().next()?;
                    RuleEntry {
                        key: key.clone(),
                        value: Some(value.clone()),
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
}
