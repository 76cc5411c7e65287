//! One domain's rate limit service rules as a tree of their entries, the way
//! envoyproxy/ratelimit keeps its YAML: finding a descriptor's rule walks one branch per
//! value the descriptor's entries take (a hash look-up for a pinned value and for any
//! value, a scan of the wildcards at that level), so its cost grows with the descriptor's
//! depth, not with the domain's rules: thousands of per-tenant limits in one domain cost
//! what ten do. Wildcards are the exception: a level with thousands of them is scanned.

use std::collections::HashMap;

/// A map looked up with a descriptor's strings on every call: ahash, several times
/// faster than SipHash on short strings. Its keys are the file's, not the client's.
type Map<V> = HashMap<String, V, ahash::RandomState>;

/// Which values of an entry a rule takes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    /// Any value, which becomes a part of the limiter key.
    Any,
    /// Values an envoyproxy/ratelimit wildcard takes (`/v1/*`, `/v1/*/users`): each
    /// value is a part of the key, as with any value.
    Wildcard(Pattern),
    /// Values a wildcard takes, sharing one limiter (the YAML's `share_threshold`): the
    /// pattern, not the value, is the part of the key.
    SharedWildcard(Pattern),
    /// Exactly this value: it selects the rule and is not part of the key.
    Exact(String),
}

impl Value {
    pub fn takes(&self, value: &str) -> bool {
        match self {
            Value::Any => true,
            Value::Wildcard(p) | Value::SharedWildcard(p) => p.takes(value),
            Value::Exact(v) => v == value,
        }
    }

    /// How specific the match is: an exact value before a wildcard before any value.
    pub fn rank(&self) -> u8 {
        match self {
            Value::Any => 0,
            Value::Wildcard(_) | Value::SharedWildcard(_) => 1,
            Value::Exact(_) => 2,
        }
    }
}

/// A value written with `*`s, each standing for any run of characters (none included),
/// as envoyproxy/ratelimit reads one: `/v1/*` takes what starts with `/v1/`,
/// `/v1/*/users` what starts with `/v1/` and ends with `/users`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Pattern(String);

impl Pattern {
    /// `written` as a pattern, when it has a `*`.
    pub fn new(written: &str) -> Option<Self> {
        written.contains('*').then(|| Self(written.to_owned()))
    }

    /// The pattern as written.
    pub fn written(&self) -> &str {
        &self.0
    }

    /// The part of the limiter key every value a shared wildcard takes draws on: the
    /// pattern without a trailing `*` (`shared/` for `shared/*`).
    pub fn shared_part(&self) -> &str {
        self.0.strip_suffix('*').unwrap_or(&self.0)
    }

    /// Whether `value` is one the pattern takes: its first literal part leading, its
    /// last one trailing, and those between in order, without overlapping.
    pub fn takes(&self, value: &str) -> bool {
        let Some((head, last)) = self.0.rsplit_once('*') else {
            return self.0 == value;
        };
        let (first, middle) = head.split_once('*').unwrap_or((head, ""));
        if value.len() < first.len() + last.len()
            || !value.starts_with(first)
            || !value.ends_with(last)
        {
            return false;
        }
        let mut rest = &value[first.len()..value.len() - last.len()];
        for part in middle.split('*') {
            match rest.find(part) {
                Some(i) => rest = &rest[i + part.len()..],
                None => return false,
            }
        }
        true
    }
}

/// One entry of a rule's descriptor: its key, and which values it takes.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RuleEntry {
    pub key: String,
    pub value: Value,
}

/// The tree of one domain: node 0 is the root (no entry yet).
#[derive(Debug, Clone)]
pub(super) struct Tree {
    nodes: Vec<Node>,
}

#[derive(Debug, Clone, Default)]
struct Node {
    /// Children by an entry pinned to one value: key, then value.
    exact: Map<Map<usize>>,
    /// Children by an entry taking the values a wildcard takes (shared or not), in the
    /// order the file writes them: the YAML's walk takes the first that takes a value.
    wildcards: Vec<(RuleEntry, usize)>,
    /// Children by an entry taking any value of a key.
    any: Map<usize>,
    /// The rules whose entries end here, by index, in the file's order. They share
    /// their entries, so the first one is the one that decides.
    rules: Vec<usize>,
    /// A descriptor of envoyproxy/ratelimit's YAML (a limit, or a node written
    /// without one) ends here or below: a node of that YAML's own tree.
    yaml_below: bool,
}

impl Tree {
    /// The tree of a domain's YAML `nodes` — the entries of every descriptor
    /// envoyproxy/ratelimit's YAML writes, with a limit or without, in the file's order
    /// (a node is made where it is first written: the walk tries wildcards in that
    /// order) — and of its `rules`: each one's index (in the file's order), entries and
    /// whether it is a limit of that YAML.
    pub(super) fn new<'r>(
        nodes: impl IntoIterator<Item = &'r [RuleEntry]>,
        rules: impl IntoIterator<Item = (usize, &'r [RuleEntry], bool)>,
    ) -> Self {
        let mut tree = Tree {
            nodes: vec![Node::default()],
        };
        for entries in nodes {
            tree.path(entries, true);
        }
        for (i, entries, yaml) in rules {
            let at = tree.path(entries, yaml);
            tree.nodes[at].rules.push(i);
        }
        tree
    }

    /// The node `entries` lead to from the root, made where missing; `yaml` marks each
    /// node on the way as leading to a YAML descriptor.
    fn path(&mut self, entries: &[RuleEntry], yaml: bool) -> usize {
        let mut at = 0;
        self.nodes[0].yaml_below |= yaml;
        for entry in entries {
            at = self.child_or_new(at, entry);
            self.nodes[at].yaml_below |= yaml;
        }
        at
    }

    fn child_or_new(&mut self, at: usize, entry: &RuleEntry) -> usize {
        if let Some(child) = self.child(at, entry) {
            return child;
        }
        let child = self.nodes.len();
        self.nodes.push(Node::default());
        let node = &mut self.nodes[at];
        match &entry.value {
            Value::Exact(v) => {
                node.exact
                    .entry(entry.key.clone())
                    .or_default()
                    .insert(v.clone(), child);
            }
            Value::Wildcard(_) | Value::SharedWildcard(_) => {
                node.wildcards.push((entry.clone(), child));
            }
            Value::Any => {
                node.any.insert(entry.key.clone(), child);
            }
        }
        child
    }

    /// The child of `at` by exactly `entry`.
    fn child(&self, at: usize, entry: &RuleEntry) -> Option<usize> {
        let node = &self.nodes[at];
        match &entry.value {
            Value::Exact(v) => node.exact.get(&entry.key)?.get(v).copied(),
            Value::Wildcard(_) | Value::SharedWildcard(_) => node
                .wildcards
                .iter()
                .find(|(e, _)| e == entry)
                .map(|&(_, c)| c),
            Value::Any => node.any.get(&entry.key).copied(),
        }
    }

    /// The most specific rule that takes every entry of a descriptor (see
    /// [`super::rls::RlsRules::find`]): of the rules reached, the one whose entries are
    /// most specific earliest (an exact value before a wildcard before any value), the
    /// file's order between equals.
    pub(super) fn most_specific<'a, 'r, I>(
        &self,
        entries_of: impl Fn(usize) -> &'r [RuleEntry],
        entries: I,
    ) -> Option<usize>
    where
        I: Iterator<Item = (&'a str, &'a str)> + Clone,
    {
        let mut best = None;
        self.walk(0, entries, &mut |i| {
            if best.is_none_or(|b| more_specific(entries_of(i), i, entries_of(b), b)) {
                best = Some(i);
            }
        });
        best
    }

    /// Calls `found` with the first rule of every node the whole of `entries` leads to.
    fn walk<'a, I>(&self, at: usize, mut entries: I, found: &mut impl FnMut(usize))
    where
        I: Iterator<Item = (&'a str, &'a str)> + Clone,
    {
        let node = &self.nodes[at];
        let Some((key, value)) = entries.next() else {
            if let Some(&first) = node.rules.first() {
                found(first);
            }
            return;
        };
        if let Some(&child) = node.exact.get(key).and_then(|m| m.get(value)) {
            self.walk(child, entries.clone(), found);
        }
        for (entry, child) in &node.wildcards {
            if entry.key == key && entry.value.takes(value) {
                self.walk(*child, entries.clone(), found);
            }
        }
        if let Some(&child) = node.any.get(key) {
            self.walk(child, entries, found);
        }
    }

    /// Where envoyproxy/ratelimit's walk takes a descriptor (`entries`): over that
    /// YAML's own nodes, at each entry the node of its exact value, else the first
    /// wildcard (in the file's order) that takes it, else the key alone, never backing up.
    pub(super) fn yaml_walk<'a>(
        &self,
        entries: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> Walked {
        let yaml = |child: &usize| self.nodes[*child].yaml_below;
        let mut at = 0;
        for (key, value) in entries {
            let node = &self.nodes[at];
            let exact = node
                .exact
                .get(key)
                .and_then(|m| m.get(value))
                .filter(|c| yaml(c));
            let wildcard = || {
                (node.wildcards.iter())
                    .find(|(e, c)| e.key == key && e.value.takes(value) && yaml(c))
                    .map(|(_, c)| c)
            };
            let next = exact
                .or_else(wildcard)
                .or_else(|| node.any.get(key).filter(|c| yaml(c)));
            match next {
                Some(&child) => at = child,
                None => return Walked::Stopped,
            }
        }
        Walked::Reached(self.nodes[at].rules.first().copied())
    }
}

/// Where the YAML's walk took a descriptor.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Walked {
    /// A node the YAML writes for its last entry, and the first rule there, if any.
    Reached(Option<usize>),
    /// No node for one of its entries: the YAML does not write it whole.
    Stopped,
}

/// Whether rule `a` (index `ai`) comes before rule `b` (index `bi`) in the order rules
/// are tried: at the first entry where they differ in rank, the more specific value;
/// the file's order between equals.
fn more_specific(a: &[RuleEntry], ai: usize, b: &[RuleEntry], bi: usize) -> bool {
    let ranks = |r: &[RuleEntry]| {
        r.iter()
            .map(|e| e.value.rank())
            .collect::<smallvec::SmallVec<[u8; 8]>>()
    };
    match ranks(a).cmp(&ranks(b)) {
        std::cmp::Ordering::Greater => true,
        std::cmp::Ordering::Less => false,
        std::cmp::Ordering::Equal => ai < bi,
    }
}

#[cfg(test)]
mod tests;
