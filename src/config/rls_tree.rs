//! One domain's rate limit service rules as a tree of their entries, the way
//! envoyproxy/ratelimit keeps its YAML: finding a descriptor's rule walks one branch per
//! value the descriptor's entries take (a hash look-up for a pinned value and for any
//! value, a scan of the prefixes at that level), so its cost grows with the descriptor's
//! depth, not with the domain's rules: thousands of per-tenant limits in one domain cost
//! what ten do. Prefixes are the exception: a level with thousands of them is scanned.

use std::collections::HashMap;

/// A map looked up with a descriptor's strings on every call: ahash, several times
/// faster than SipHash on short strings. Its keys are the file's, not the client's.
type Map<V> = HashMap<String, V, ahash::RandomState>;

/// Which values of an entry a rule takes.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Value {
    /// Any value, which becomes a part of the limiter key.
    Any,
    /// Values starting with this (envoyproxy/ratelimit's trailing `*`): each value is a
    /// part of the key, as with any value.
    Prefix(String),
    /// Values starting with this, sharing one limiter (the YAML's `share_threshold`):
    /// the prefix, not the value, is the part of the key.
    SharedPrefix(String),
    /// Exactly this value: it selects the rule and is not part of the key.
    Exact(String),
}

impl Value {
    pub fn takes(&self, value: &str) -> bool {
        match self {
            Value::Any => true,
            Value::Prefix(p) | Value::SharedPrefix(p) => value.starts_with(p.as_str()),
            Value::Exact(v) => v == value,
        }
    }

    /// How specific the match is: an exact value before a prefix before any value.
    pub fn rank(&self) -> u8 {
        match self {
            Value::Any => 0,
            Value::Prefix(_) | Value::SharedPrefix(_) => 1,
            Value::Exact(_) => 2,
        }
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
    /// Children by an entry taking the values that start with a prefix (shared or not).
    prefixes: Vec<(RuleEntry, usize)>,
    /// Children by an entry taking any value of a key.
    any: Map<usize>,
    /// The rules whose entries end here, by index, in the file's order. They share
    /// their entries, so the first one is the one that decides.
    rules: Vec<usize>,
    /// A limit of envoyproxy/ratelimit's YAML ends here or below.
    yaml_below: bool,
}

impl Tree {
    /// The tree of a domain's `rules`: each one's index (in the file's order), entries
    /// and whether it is a limit of envoyproxy/ratelimit's YAML.
    pub(super) fn new<'r>(rules: impl IntoIterator<Item = (usize, &'r [RuleEntry], bool)>) -> Self {
        let mut tree = Tree {
            nodes: vec![Node::default()],
        };
        for (i, entries, yaml) in rules {
            let mut at = 0;
            tree.nodes[0].yaml_below |= yaml;
            for entry in entries {
                at = tree.child_or_new(at, entry);
                tree.nodes[at].yaml_below |= yaml;
            }
            tree.nodes[at].rules.push(i);
        }
        tree
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
            Value::Prefix(_) | Value::SharedPrefix(_) => node.prefixes.push((entry.clone(), child)),
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
            Value::Prefix(_) | Value::SharedPrefix(_) => node
                .prefixes
                .iter()
                .find(|(e, _)| e == entry)
                .map(|&(_, c)| c),
            Value::Any => node.any.get(&entry.key).copied(),
        }
    }

    /// The most specific rule that takes every entry of a descriptor (see
    /// [`super::rls::RlsRules::find`]): of the rules reached, the one whose entries are
    /// most specific earliest (an exact value before a prefix before any value), the
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
        for (entry, child) in &node.prefixes {
            if entry.key == key && entry.value.takes(value) {
                self.walk(*child, entries.clone(), found);
            }
        }
        if let Some(&child) = node.any.get(key) {
            self.walk(child, entries, found);
        }
    }

    /// Whether a descriptor (`entries`) that a YAML limit with entries `rule` takes would, walking the YAML's tree,
    /// enter a more specific branch than `rule`'s at some level, one holding another
    /// YAML limit: the same entries above, and there a value taken more specifically.
    pub(super) fn passed_by<'a>(
        &self,
        rule: &[RuleEntry],
        entries: impl Iterator<Item = (&'a str, &'a str)>,
    ) -> bool {
        let mut at = 0;
        for ((key, value), mine) in entries.zip(rule) {
            let node = &self.nodes[at];
            let yaml = |child: usize| self.nodes[child].yaml_below;
            let rank = mine.value.rank();
            if rank < 2
                && node
                    .exact
                    .get(key)
                    .and_then(|m| m.get(value))
                    .is_some_and(|&c| yaml(c))
            {
                return true;
            }
            if rank < 1
                && node
                    .prefixes
                    .iter()
                    .any(|(e, c)| e.key == key && e.value.takes(value) && yaml(*c))
            {
                return true;
            }
            let Some(next) = self.child(at, mine) else {
                return false;
            };
            at = next;
        }
        false
    }
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
