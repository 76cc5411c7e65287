//! `[rls] ratelimit_config`: envoyproxy/ratelimit's YAML, read as is (a file, or every
//! `*.yaml`/`*.yml` of a folder, as its `RUNTIME_ROOT/…/config/` layout holds them). Each
//! limit becomes a rule and a policy of its own: `requests_per_unit` per `unit` with a
//! burst of `requests_per_unit` (a window's allowance), keyed by the values of the
//! entries whose value is not fixed, named by its full key (`domain.key_value.key`).

use serde::Deserialize;
use serde_saphyr::Spanned;

use super::*;
use crate::config::rls::{Pattern, RlsRule, RuleEntry, Value, YamlNode};
pub(super) use limit::unit_name;
use limit::{full_key, unit_seconds, yaml_policy};

mod limit;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRoot {
    domain: Spanned<String>,
    #[serde(default)]
    descriptors: Vec<YamlDescriptor>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlDescriptor {
    key: Spanned<String>,
    #[serde(default)]
    value: Option<String>,
    rate_limit: Option<Spanned<YamlRateLimit>>,
    #[serde(default)]
    descriptors: Vec<YamlDescriptor>,
    #[serde(default)]
    shadow_mode: bool,
    /// A trailing `*` value's matches share one limiter.
    #[serde(default)]
    share_threshold: bool,
    /// envoyproxy/ratelimit's quota mode (over only when every quota descriptor is):
    /// not followed — each limit is enforced on its own, and `check` warns.
    #[serde(default)]
    quota_mode: bool,
    /// Per-value metrics and metadata in envoyproxy/ratelimit; tollgate never labels a
    /// value, and its dynamic metadata is its own.
    #[serde(default)]
    #[allow(dead_code)]
    detailed_metric: bool,
    #[serde(default)]
    #[allow(dead_code)]
    value_to_metric: bool,
    #[serde(default)]
    #[allow(dead_code)]
    metadata: Option<serde::de::IgnoredAny>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlRateLimit {
    #[serde(default)]
    requests_per_unit: u64,
    #[serde(default)]
    unit: Option<String>,
    #[serde(default)]
    unlimited: bool,
    #[serde(default)]
    name: Option<String>,
    #[serde(default)]
    replaces: Vec<YamlReplaces>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct YamlReplaces {
    name: String,
}

/// What the YAML gives: its rules, and the policies its limits are.
#[derive(Default)]
pub(super) struct FromYaml {
    pub rules: Vec<RlsRule>,
    pub policies: Vec<Arc<Policy>>,
    /// Every descriptor the files write, with a limit or without, in their order.
    pub nodes: Vec<YamlNode>,
}

/// One place in one file, for messages: `ratelimit/config.yaml:7:5`.
struct At<'a> {
    file: &'a str,
    line: u64,
    column: u64,
}

impl std::fmt::Display for At<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}:{}:{}", self.file, self.line, self.column)
    }
}

fn at<'a, T>(file: &'a str, spanned: &Spanned<T>) -> At<'a> {
    At {
        file,
        line: spanned.referenced.line(),
        column: spanned.referenced.column(),
    }
}

impl Compiler {
    /// Reads the YAML `raw` names (relative to the config's folder) into rules and
    /// policies; every mistake is an error located in its file, reported at `raw`.
    pub(super) fn ratelimit_yaml(&mut self, raw: &S<String>) -> FromYaml {
        let mut out = FromYaml::default();
        let path = self.base.join(raw.get_ref());
        let files = match yaml_files(&path) {
            Ok(files) => files,
            Err(e) => {
                self.error(raw.span(), format!("ratelimit_config {}: {e}", path.display()), Some("name envoyproxy/ratelimit's YAML file, or the folder of its files (relative paths start at the config file's folder)".to_owned()));
                return out;
            }
        };
        let mut names = HashSet::new();
        let mut domains: HashMap<String, String> = HashMap::new();
        for file in files {
            let shown = file.display().to_string();
            let text = match crate::read_file::read_text_bounded(&file) {
                Ok(t) => t,
                Err(e) => {
                    self.error(raw.span(), format!("ratelimit_config {shown}: {e}"), None);
                    continue;
                }
            };
            match serde_saphyr::from_str::<YamlRoot>(&text) {
                Ok(root) => {
                    // As envoyproxy/ratelimit: one file per domain, not a silent merge.
                    let domain = root.domain.value.clone();
                    if let Some(first) = domains.insert(domain.clone(), shown.clone()) {
                        self.error(raw.span(), format!("ratelimit_config {shown}: domain `{domain}` is also in {first}"), Some("envoyproxy/ratelimit refuses a duplicate domain too: keep each domain's descriptors in one file".to_owned()));
                        continue;
                    }
                    self.yaml_root(raw, &shown, root, (&mut out, &mut names));
                }
                Err(e) => {
                    let place = e.location().map_or(shown.clone(), |l| {
                        format!("{shown}:{}:{}", l.line(), l.column())
                    });
                    let first = e.to_string();
                    let first = first.lines().next().unwrap_or("");
                    self.error(raw.span(), format!("ratelimit_config {place}: {first}"), Some("envoyproxy/ratelimit's keys: domain, descriptors, key, value, rate_limit (unit, requests_per_unit, unlimited, name, replaces), shadow_mode, quota_mode, detailed_metric, value_to_metric, share_threshold, metadata".to_owned()));
                }
            }
        }
        out
    }

    fn yaml_root(
        &mut self,
        raw: &S<String>,
        file: &str,
        root: YamlRoot,
        sink: (&mut FromYaml, &mut HashSet<String>),
    ) {
        if root.domain.value.is_empty() {
            let place = at(file, &root.domain);
            self.error(
                raw.span(),
                format!("ratelimit_config {place}: the domain is empty"),
                None,
            );
            return;
        }
        let domain = root.domain.value;
        let mut path = Vec::new();
        self.yaml_level(raw, (file, &domain), &root.descriptors, &mut path, sink);
    }

    /// One level of nested descriptors under `path` (the entries above it).
    fn yaml_level(
        &mut self,
        raw: &S<String>,
        (file, domain): (&str, &str),
        nodes: &[YamlDescriptor],
        path: &mut Vec<RuleEntry>,
        (out, names): (&mut FromYaml, &mut HashSet<String>),
    ) {
        let mut seen = HashSet::new();
        for node in nodes {
            let place = at(file, &node.key);
            let key = node.key.value.clone();
            // A `*` anywhere is a wildcard, as envoyproxy/ratelimit reads it since it
            // took more than a trailing one.
            let value = match node.value.as_deref() {
                None | Some("") => Value::Any,
                Some(v) => match Pattern::new(v) {
                    Some(p) if node.share_threshold => Value::SharedWildcard(p),
                    Some(p) => Value::Wildcard(p),
                    None => Value::Exact(v.to_owned()),
                },
            };
            if node.share_threshold && !matches!(value, Value::SharedWildcard(_)) {
                self.error(
                    raw.span(),
                    format!(
                        "ratelimit_config {place}: share_threshold applies to a value with a `*`"
                    ),
                    None,
                );
                continue;
            }
            if node.quota_mode {
                self.warn(raw.span(), format!("ratelimit_config {place}: quota_mode is not followed: this limit is enforced on its own (over when it is over)"), None::<String>);
            }
            if key.is_empty() {
                self.error(
                    raw.span(),
                    format!("ratelimit_config {place}: a descriptor has an empty key"),
                    None,
                );
                continue;
            }
            if !seen.insert((key.clone(), value.clone())) {
                self.error(raw.span(), format!("ratelimit_config {place}: the descriptor `{key}` with this value is given twice at this level"), None);
                continue;
            }
            path.push(RuleEntry { key, value });
            // Every node, a limit's or not, in the file's order: the walk enters one
            // without a limit too, and tries wildcards in the order they are written.
            out.nodes.push(YamlNode {
                domain: domain.to_owned(),
                entries: path.clone(),
            });
            if let Some(limit) = &node.rate_limit {
                if let Some(rule) = self.yaml_limit(raw, (file, domain), path, node, limit, names) {
                    out.policies.extend(rule.policy.clone());
                    out.rules.push(rule);
                }
            }
            self.yaml_level(raw, (file, domain), &node.descriptors, path, (out, names));
            path.pop();
        }
    }

    /// A limit whose interval loses to whole nanoseconds is said, as a policy's is.
    fn lint_yaml_rounding(&mut self, policy: &Policy, at: std::ops::Range<usize>) {
        if let Some(r) = policy.rate() {
            let numbers = (Some(r.limit), Some(r.period));
            self.lint_rounding(&policy.name, Some(&r.quota), numbers, at);
        }
    }

    /// The rule (and policy) of one `rate_limit`.
    fn yaml_limit(
        &mut self,
        raw: &S<String>,
        (file, domain): (&str, &str),
        path: &[RuleEntry],
        node: &YamlDescriptor,
        limit: &Spanned<YamlRateLimit>,
        names: &mut HashSet<String>,
    ) -> Option<RlsRule> {
        let place = at(file, limit);
        let l = &limit.value;
        let fail = |c: &mut Self, message: String| {
            c.error(
                raw.span(),
                format!("ratelimit_config {place}: {message}"),
                None,
            );
        };
        for r in &l.replaces {
            if r.name.is_empty() || Some(&r.name) == l.name.as_ref() {
                fail(
                    self,
                    "a replaces entry is empty or names its own limit".to_owned(),
                );
                return None;
            }
        }
        let full_key = full_key(domain, path);
        let unlimited = l.unlimited;
        let unit = l.unit.as_deref().filter(|u| !u.is_empty());
        let mut blocked = None;
        let policy = match (unlimited, unit) {
            (true, Some(_)) => {
                fail(self, "an unlimited limit names no unit".to_owned());
                return None;
            }
            (true, None) => None,
            (false, unit) => {
                let Some(seconds) = unit.and_then(unit_seconds) else {
                    let shown = unit.unwrap_or("");
                    fail(self, format!("invalid rate limit unit `{shown}`: second, minute, hour, day, week, month or year"));
                    return None;
                };
                if l.requests_per_unit == 0 {
                    // envoyproxy/ratelimit's block: always over, nothing to count with.
                    let mode = if node.shadow_mode {
                        Mode::Shadow
                    } else {
                        Mode::Enforce
                    };
                    blocked = Some((seconds, mode));
                }
                let policy = if blocked.is_some() {
                    None
                } else if let Some(policy) = yaml_policy(
                    (&full_key, names),
                    path,
                    node,
                    (l.requests_per_unit, seconds),
                ) {
                    self.lint_yaml_rounding(&policy, raw.span());
                    Some(Arc::new(policy))
                } else {
                    fail(self, format!("requests_per_unit {} per {} cannot be a limit: at most 1e9 a second (0 blocks)", l.requests_per_unit, unit.unwrap_or("")));
                    return None;
                };
                policy
            }
        };
        Some(RlsRule {
            domain: domain.to_owned(),
            entries: path.to_vec(),
            policy,
            reports: false,
            named: l.name.is_some(),
            name: l.name.clone().or(Some(full_key)),
            replaces: l.replaces.iter().map(|r| r.name.clone()).collect(),
            blocked,
        })
    }
}

/// The YAML files at `path`: itself, or the `*.yaml`/`*.yml` files of the folder (not
/// hidden, not below it), by name.
pub fn yaml_files(path: &Path) -> std::io::Result<Vec<PathBuf>> {
    if !std::fs::metadata(path)?.is_dir() {
        return Ok(vec![path.to_owned()]);
    }
    let mut files: Vec<PathBuf> = std::fs::read_dir(path)?
        .filter_map(Result::ok)
        .map(|e| e.path())
        .filter(|p| {
            let name = p.file_name().and_then(|n| n.to_str()).unwrap_or(".");
            !name.starts_with('.')
                && (name.ends_with(".yaml") || name.ends_with(".yml"))
                && p.is_file()
        })
        .collect();
    files.sort();
    Ok(files)
}
