//! The keys `[policies.NAME.overrides]` names, in the spelling requests make them in: an
//! address as its canonical text (`"2001:DB8::1"` is the client `2001:db8::1`), under
//! `ip/64` the network it falls in. Without it an override written in another spelling
//! would silently never apply.

use std::borrow::Cow;

use super::*;

impl Compiler {
    /// Respells `kind`'s override keys for the policy's single key source; a key that is
    /// no value of the source, or two that name one key, is an error at `span` (two
    /// spellings of one address under `ip`, a warning).
    pub(super) fn spell_overrides(
        &mut self,
        name: &str,
        source: &KeySource,
        kind: &mut PolicyKind,
        span: std::ops::Range<usize>,
    ) {
        let problems = kind.visit_overrides(Respell(source));
        for (typed, problem) in problems {
            let message = match problem {
                Unspelled::NotAValue => {
                    format!("policy `{name}`: override `{typed}` is not one key of `{source}`")
                }
                Unspelled::Twice(spelled) => format!(
                    "policy `{name}`: override `{typed}` names the key `{spelled}` another override names"
                ),
            };
            let hint = match source {
                KeySource::IpPrefix(len) => format!(
                    "name an address, or a network of /{len} or narrower: it stands for its /{len}"
                ),
                _ => "name each key once".to_owned(),
            };
            // Under `ip`, two spellings of one address loaded before addresses were
            // matched in one spelling (one of them matched nothing): a warning keeps such
            // a config loading, the one that applied then applying still.
            match source {
                KeySource::Ip => self.warn(
                    span.clone(),
                    format!("{message}: the one spelled as requests spell it applies (of two other spellings, the first in name order)"),
                    Some(hint),
                ),
                _ => self.error(span.clone(), message, Some(hint)),
            }
        }
    }
}

enum Unspelled {
    NotAValue,
    Twice(String),
}

/// Rewrites a policy's override keys in the source's spelling; what could not be, and why.
struct Respell<'s>(&'s KeySource);

impl OverridesVisitor for Respell<'_> {
    type Out = Vec<(String, Unspelled)>;

    fn visit<V>(self, overrides: &mut HashMap<String, V>) -> Self::Out {
        respell(overrides, self.0)
    }
}

/// Rewrites `overrides`' keys in `source`'s spelling; what could not be, and why.
fn respell<V>(overrides: &mut HashMap<String, V>, source: &KeySource) -> Vec<(String, Unspelled)> {
    let mut problems = Vec::new();
    let mut spelled = HashMap::with_capacity(overrides.len());
    // A key already in the requests' spelling first (it is the one that applied before
    // spellings were matched), then in name order: which of two clashing keys is kept,
    // and which reported, does not move between runs.
    let mut typed: Vec<(String, V)> = overrides.drain().collect();
    typed.sort_by_cached_key(|(key, _)| {
        let respelled = !matches!(source.spelled(key), Some(Cow::Borrowed(_)));
        (respelled, key.clone())
    });
    for (key, value) in typed {
        match source.spelled(&key).map(std::borrow::Cow::into_owned) {
            None => problems.push((key, Unspelled::NotAValue)),
            Some(text) if spelled.contains_key(&text) => {
                problems.push((key, Unspelled::Twice(text)))
            }
            Some(text) => {
                spelled.insert(text, value);
            }
        }
    }
    *overrides = spelled;
    problems
}
