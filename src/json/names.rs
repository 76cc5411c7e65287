//! A JSON member's name as the readers behind the gateway take it: borrowed from the body
//! when it has no escapes, and matched to a pointer's token exactly or under simple case
//! folding (Go's encoding/json fills a struct's `model` from `"Model"`). Read by the walk
//! and by the JSON-RPC batch check alike.

use std::borrow::Cow;
use std::fmt;

use serde::de::{Deserializer, Visitor};

/// Whether a member called `name` is the one `token` names: the same name, or the same
/// one letter at a time under simple case folding (ASCII first; for the rest, a letter's
/// one-letter lower or upper case: the Kelvin sign is `k`, the long s is `s`).
pub(crate) fn names(token: &str, name: &str) -> bool {
    if token == name {
        return true;
    }
    if token.is_ascii() && name.is_ascii() {
        return token.eq_ignore_ascii_case(name);
    }
    let (mut a, mut b) = (token.chars(), name.chars());
    loop {
        match (a.next(), b.next()) {
            (None, None) => return true,
            (Some(c), Some(d)) if folds(c, d) => {}
            _ => return false,
        }
    }
}

/// Whether two letters are one under simple case folding.
fn folds(c: char, d: char) -> bool {
    c == d
        || one(c.to_lowercase()).is_some_and(|l| Some(l) == one(d.to_lowercase()))
        || one(c.to_uppercase()).is_some_and(|u| Some(u) == one(d.to_uppercase()))
}

/// A letter's case as one letter, when it is one (`ß` upper-cases to two).
fn one(mut case: impl Iterator<Item = char>) -> Option<char> {
    let c = case.next()?;
    case.next().is_none().then_some(c)
}

/// A member name, borrowed from the body when it has no escapes.
pub(crate) struct Key<'de>(pub(crate) Cow<'de, str>);

impl<'de> serde::Deserialize<'de> for Key<'de> {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl<'de> Visitor<'de> for KeyVisitor {
            type Value = Key<'de>;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a member name")
            }
            fn visit_borrowed_str<E>(self, v: &'de str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Borrowed(v)))
            }
            fn visit_str<E>(self, v: &str) -> Result<Key<'de>, E> {
                Ok(Key(Cow::Owned(v.to_owned())))
            }
        }
        d.deserialize_str(KeyVisitor)
    }
}
