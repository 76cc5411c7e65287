//! `[rls]`: Envoy's rate limit service on a listener of its own, and which policy decides
//! each descriptor a `ShouldRateLimit` call carries. Matching is pure: a descriptor's
//! entries against the rules of its domain.

use std::collections::HashMap;
use std::sync::Arc;

use super::policy::Policy;
use super::rls_tree::{Tree, Walked};

/// `[rls] max_quota_streams` unless set: at about 64 KiB an idle stream, 1 GiB of idle
/// streams (each tracked bucket adds about 0.9 KiB; a stream tracks at most 65,536).
pub const DEFAULT_MAX_QUOTA_STREAMS: usize = 16_384;

/// `[rls] max_quota_buckets` unless set: about 0.9 KiB a tracked bucket, under 1 GiB for
/// the listener (one stream's bound, 65,536, alone allowed 16,384 streams 0.9 TiB).
pub const DEFAULT_MAX_QUOTA_BUCKETS: usize = 1_048_576;
pub use super::rls_tree::{Pattern, RuleEntry, Value};

/// What a descriptor no rule names is answered with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Unmatched {
    /// OK, and nothing is counted (envoyproxy/ratelimit's answer).
    #[default]
    Ok,
    /// OVER_LIMIT: only descriptors the file names pass.
    OverLimit,
}

/// What Envoy's 429 carries as its body (`raw_body`), when a call is over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum RefusalBody {
    /// Nothing: Envoy's own empty 429.
    #[default]
    None,
    /// The contract's JSON, as a proxied refusal's (`{"error":"rate_limited",…}`).
    Json,
    /// RFC 9457 problem details, as a proxied refusal's to a client that asks for them.
    ProblemJson,
}

impl Unmatched {
    pub fn as_str(self) -> &'static str {
        match self {
            Unmatched::Ok => "ok",
            Unmatched::OverLimit => "over_limit",
        }
    }
}

/// `[[rls.rules]]` (or a limit of envoyproxy/ratelimit's YAML): descriptors of `domain`
/// whose entries are `entries` (same keys, same order, values taken) are decided by
/// `policy`, keyed by the values of the entries that are not exact.
#[derive(Debug, Clone)]
pub struct RlsRule {
    pub domain: String,
    pub entries: Vec<RuleEntry>,
    /// `None`: unlimited (the YAML's `unlimited: true`): answered OK, counted, never
    /// charged.
    pub policy: Option<Arc<Policy>>,
    /// `reports = true`: a non-zero cost is usage reported after the fact, charged even
    /// when it goes over (the next check is refused until it is paid); 0 checks.
    pub reports: bool,
    /// The limit's name in statuses: the YAML's `rate_limit.name`, else its full key.
    pub name: Option<String>,
    /// The YAML named the limit (`rate_limit.name`): only such a limit can be replaced.
    pub named: bool,
    /// Names of the limits this one replaces when both apply to one call.
    pub replaces: Vec<String>,
    /// `requests_per_unit: 0`, the YAML's way to block: every descriptor it matches is
    /// over the limit, nothing charged — or, in `shadow_mode`, answered OK and counted
    /// `shadow_over_limit`. The unit's length in seconds, as written, and the mode.
    pub blocked: Option<(u64, crate::limit::Mode)>,
}

impl RlsRule {
    /// The rule as the file would write it, for logs and `tollgate check`:
    /// `edge: tenant, path=/v1/search`.
    pub fn describe(&self) -> String {
        let entries: Vec<String> = self
            .entries
            .iter()
            .map(|e| match &e.value {
                Value::Exact(v) => format!("{}={v}", e.key),
                Value::Wildcard(p) => format!("{}={}", e.key, p.written()),
                Value::SharedWildcard(p) => format!("{}={} (shared)", e.key, p.written()),
                Value::Any => e.key.clone(),
            })
            .collect();
        format!("{}: {}", self.domain, entries.join(", "))
    }

    /// A limit of envoyproxy/ratelimit's YAML (which always has a name: its own, else
    /// its full key), as opposed to an `[[rls.rules]]` entry.
    pub(super) fn is_yaml_limit(&self) -> bool {
        self.name.is_some()
    }

    /// The name its statuses give: the limit's own, else its policy's.
    pub fn limit_name(&self) -> &str {
        self.name
            .as_deref()
            .or(self.policy.as_ref().map(|p| p.name.as_str()))
            .unwrap_or("unlimited")
    }

    /// The values of a matching descriptor that key the limiter: those of the entries
    /// the rule does not pin to one value, in order.
    pub fn key_parts<'a>(
        &'a self,
        values: impl Iterator<Item = &'a str> + 'a,
    ) -> impl Iterator<Item = &'a str> + 'a {
        values
            .zip(&self.entries)
            .filter(|(_, rule)| !matches!(rule.value, Value::Exact(_)))
            .map(|(value, rule)| match &rule.value {
                Value::SharedWildcard(p) => p.shared_part(),
                _ => value,
            })
    }
}

impl RlsRule {
    /// [`key_parts`](Self::key_parts) as a request spells them (an address under `ip/64`
    /// as its network): the key's name in `/admin/top`, the admin API and the log.
    pub fn named_parts<'a>(
        &'a self,
        values: impl Iterator<Item = &'a str> + 'a,
    ) -> impl Iterator<Item = std::borrow::Cow<'a, str>> + 'a {
        let policy = self.policy.as_deref();
        self.key_parts(values)
            .enumerate()
            .map(move |(i, part)| match policy {
                Some(policy) => policy.spelled(i, part),
                None => std::borrow::Cow::Borrowed(part),
            })
    }
}

/// The rules, and by domain the tree of their entries (`rls_tree`): a descriptor's rule
/// is the most specific that takes it — at each entry, an exact value before a wildcard
/// before any value (as envoyproxy/ratelimit looks up `key_value`, then its wildcards,
/// then `key`); the file's order between equals.
#[derive(Debug, Clone, Default)]
pub struct RlsRules {
    rules: Vec<RlsRule>,
    yaml_nodes: Vec<YamlNode>,
    by_domain: HashMap<String, Tree>,
}

/// What decides a descriptor ([`RlsRules::find`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Found {
    /// The rule at this index.
    Rule(usize),
    /// envoyproxy/ratelimit's YAML writes the descriptor without a limit (a value
    /// exempted from its key's): OK, as that service answers it, whatever `on_unmatched`.
    Exempt,
    /// No rule, and no YAML node, names it: `on_unmatched` answers.
    Unnamed,
}

/// A descriptor envoyproxy/ratelimit's YAML writes, with a `rate_limit` or without (a
/// node that only holds others, or one that exempts its value): a node of the tree
/// that service walks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct YamlNode {
    pub domain: String,
    pub entries: Vec<RuleEntry>,
}

impl RlsRule {
    /// The same rule, its policy named the same: a policy's numbers are the policy's
    /// change (a reload reports it among the policies).
    pub fn same_as(&self, other: &Self) -> bool {
        let policy = |r: &Self| r.policy.as_ref().map(|p| p.name.clone());
        self.domain == other.domain
            && self.entries == other.entries
            && policy(self) == policy(other)
            && self.reports == other.reports
            && self.name == other.name
            && self.named == other.named
            && self.replaces == other.replaces
            && self.blocked == other.blocked
    }
}

impl RlsRules {
    /// The same rules in the same order ([`RlsRule::same_as`]) and the same YAML
    /// nodes.
    pub fn same_as(&self, other: &Self) -> bool {
        self.yaml_nodes == other.yaml_nodes
            && self.rules.len() == other.rules.len()
            && self
                .rules
                .iter()
                .zip(&other.rules)
                .all(|(a, b)| a.same_as(b))
    }

    /// `rules`, and `yaml_nodes`: every descriptor envoyproxy/ratelimit's YAML writes
    /// (domain and entries), with a limit or without, in the files' order — the tree
    /// that service walks.
    pub fn new(rules: Vec<RlsRule>, yaml_nodes: Vec<YamlNode>) -> Self {
        let mut ids: HashMap<&str, (Vec<usize>, Vec<usize>)> = HashMap::new();
        for (i, node) in yaml_nodes.iter().enumerate() {
            ids.entry(node.domain.as_str()).or_default().0.push(i);
        }
        for (i, rule) in rules.iter().enumerate() {
            ids.entry(rule.domain.as_str()).or_default().1.push(i);
        }
        let by_domain = ids
            .into_iter()
            .map(|(domain, (node_ids, ids))| {
                let nodes = node_ids.iter().map(|&i| yaml_nodes[i].entries.as_slice());
                let of_domain = ids
                    .iter()
                    .map(|&i| (i, rules[i].entries.as_slice(), rules[i].is_yaml_limit()));
                (domain.to_owned(), Tree::new(nodes, of_domain))
            })
            .collect();
        Self {
            rules,
            yaml_nodes,
            by_domain,
        }
    }

    /// What decides a descriptor of `domain` with `entries` (key, value): the most
    /// specific rule that matches, by index. Where that is a limit of
    /// envoyproxy/ratelimit's YAML, or no rule matches, the descriptor is found as that
    /// service walks its tree — at each level the exact value's node, else the first
    /// wildcard written that takes the value, else the key alone, never backing up — so
    /// a descriptor that enters a more specific node and finds no limit there is not
    /// matched by a less specific one: it is [`Found::Exempt`] when the YAML writes a node
    /// for its every entry, else [`Found::Unnamed`]. Its cost grows with the descriptor's
    /// entries, not with the domain's rules.
    pub fn find<'a, I>(&self, domain: &str, entries: I) -> Found
    where
        I: ExactSizeIterator<Item = (&'a str, &'a str)> + Clone,
    {
        let Some(tree) = self.by_domain.get(domain) else {
            return Found::Unnamed;
        };
        let found = tree.most_specific(|i| &self.rules[i].entries, entries.clone());
        if let Some(rule) = found.filter(|&i| !self.rules[i].is_yaml_limit()) {
            return Found::Rule(rule);
        }
        match tree.yaml_walk(entries) {
            Walked::Reached(Some(rule)) => Found::Rule(rule),
            Walked::Reached(None) => Found::Exempt,
            Walked::Stopped => Found::Unnamed,
        }
    }

    pub fn get(&self, index: usize) -> Option<&RlsRule> {
        self.rules.get(index)
    }

    pub fn iter(&self) -> impl ExactSizeIterator<Item = &RlsRule> {
        self.rules.iter()
    }

    pub fn len(&self) -> usize {
        self.rules.len()
    }

    pub fn is_empty(&self) -> bool {
        self.rules.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    fn rules(rules: &str) -> super::RlsRules {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[policies.p]\nkey = \"header:x-tenant\"\n\
             limit = 10\nperiod = \"1s\"\nburst = 1\n[policies.q]\nkey = [\"header:a\", \"header:b\"]\n\
             limit = 10\nperiod = \"1s\"\nburst = 1\n[rls]\nlisten = \"127.0.0.1:0\"\n{rules}"
        );
        let config = crate::config::compile(Path::new("t.toml"), &text).expect("valid");
        config.rls.expect("[rls]").rules
    }

    fn find(rules: &super::RlsRules, domain: &str, entries: &[(&str, &str)]) -> Option<usize> {
        match rules.find(domain, entries.iter().copied()) {
            super::Found::Rule(i) => Some(i),
            _ => None,
        }
    }

    /// `[rls]` with nothing but its address: an unnamed descriptor is OK and no body.
    #[test]
    fn a_bare_rls_table_passes_unmatched_descriptors() {
        let text = "[server]\nlisten = \"127.0.0.1:0\"\n[rls]\nlisten = \"127.0.0.1:0\"\n";
        let config = crate::config::compile(Path::new("t.toml"), text).expect("valid");
        let rls = config.rls.expect("[rls]");
        assert_eq!(rls.on_unmatched, super::Unmatched::Ok);
        assert_eq!(rls.refusal_body, super::RefusalBody::None);
    }

    #[test]
    fn a_pinned_value_beats_any_value_and_keys_must_match_in_order_and_number() {
        let rules = rules(
            "[[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", \"path\"]\npolicy = \"q\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", { path = \"/v1/search\" }]\npolicy = \"p\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"p\"\n\
             [[rls.rules]]\ndomain = \"other\"\ndescriptor = [\"tenant\"]\npolicy = \"p\"\n",
        );
        assert_eq!(
            find(&rules, "edge", &[("tenant", "a"), ("path", "/v1/search")]),
            Some(1)
        );
        assert_eq!(
            find(&rules, "edge", &[("tenant", "a"), ("path", "/v1/x")]),
            Some(0)
        );
        assert_eq!(find(&rules, "edge", &[("tenant", "a")]), Some(2));
        assert_eq!(find(&rules, "other", &[("tenant", "a")]), Some(3));
        assert_eq!(
            find(&rules, "edge", &[("path", "/v1/x"), ("tenant", "a")]),
            None
        );
        assert_eq!(
            find(
                &rules,
                "edge",
                &[("tenant", "a"), ("path", "x"), ("u", "1")]
            ),
            None
        );
        assert_eq!(find(&rules, "nowhere", &[("tenant", "a")]), None);
        let pinned = rules.get(1).expect("rule");
        let parts: Vec<&str> = pinned.key_parts(["a", "/v1/search"].into_iter()).collect();
        assert_eq!(parts, ["a"]);
        assert_eq!(pinned.describe(), "edge: tenant, path=/v1/search");
    }

    #[test]
    fn every_mistake_of_a_rule_is_located_and_says_what_to_do() {
        let text = "[server]\nlisten = \"127.0.0.1:9000\"\n\
            [policies.p]\nkey = \"header:x-tenant\"\nlimit = 10\nperiod = \"1s\"\nburst = 1\n\
            [policies.slots]\nkey = \"header:x-tenant\"\nmax_in_flight = 4\n\
            [rls]\nlisten = \"127.0.0.1:9000\"\non_unmatched = \"deny\"\n\
            [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"pp\"\n\
            [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"slots\"\n\
            [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\", \"user\"]\npolicy = \"p\"\n\
            [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [{ a = \"1\", b = \"2\" }]\npolicy = \"p\"\n\
            [[rls.rules]]\ndomain = \"edge\"\ndescriptor = []\npolicy = \"p\"\n\
            [[rls.rules]]\ndomain = \"\"\ndescriptor = [\"tenant\"]\npolicy = \"p\"\n\
            [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"user\"]\npolicy = \"p\"\n\
            [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"user\"]\npolicy = \"p\"\n\
            [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [{ generic_key = \"slow\" }]\npolicy = \"p\"\n";
        let err = crate::config::compile(Path::new("t.toml"), text)
            .expect_err("invalid")
            .to_string();
        for expected in [
            "t.toml:12:10: [rls] listen 127.0.0.1:9000 is the same address as [server] listen",
            "t.toml:13:16: unknown on_unmatched `deny`",
            "t.toml:17:10: unknown policy `pp`",
            "did you mean `p`?",
            "t.toml:21:10: policy `slots` limits requests in flight",
            "t.toml:24:14: this descriptor keys policy `p` by 2 value(s), but the policy is keyed by 1 source(s) (header:x-tenant)",
            "t.toml:28:14: a pinned descriptor entry is a table of exactly one key",
            "t.toml:32:14: an [[rls.rules]] descriptor needs at least one entry",
            "t.toml:35:10: an [[rls.rules]] entry has an empty domain",
            "t.toml:42:1: two [[rls.rules]] entries name the descriptor `edge: user`",
            "t.toml:48:14: this descriptor keys policy `p` by 0 value(s)",
            "a descriptor of pinned values only (a global limit, e.g. by generic_key) is one bucket: write it in envoyproxy/ratelimit's YAML",
        ] {
            assert!(err.contains(expected), "missing {expected:?} in:\n{err}");
        }
    }
}
