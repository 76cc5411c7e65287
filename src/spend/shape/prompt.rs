//! An element of a Completions `prompt` list: a prompt of its own, or one token of a
//! single prompt. Anything else (a boolean, `null`, an object) is no prompt any API takes:
//! the scan fails on it, and a body it cannot read is input of unknown length.

use serde::de::{Deserializer, IgnoredAny, SeqAccess, Visitor};
use std::fmt;

/// An element of a `prompt` list: `true` when it is a prompt of its own (a text or a
/// token list), `false` for a token.
pub(super) struct PromptItem(pub(super) bool);

impl<'de> serde::Deserialize<'de> for PromptItem {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
        d.deserialize_any(PromptItemVisitor)
    }
}

struct PromptItemVisitor;

impl<'de> Visitor<'de> for PromptItemVisitor {
    type Value = PromptItem;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a prompt or a token")
    }

    fn visit_u64<E>(self, _: u64) -> Result<PromptItem, E> {
        Ok(PromptItem(false))
    }

    fn visit_i64<E>(self, _: i64) -> Result<PromptItem, E> {
        Ok(PromptItem(false))
    }

    fn visit_f64<E>(self, _: f64) -> Result<PromptItem, E> {
        Ok(PromptItem(false))
    }

    fn visit_str<E>(self, _: &str) -> Result<PromptItem, E> {
        Ok(PromptItem(true))
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<PromptItem, A::Error> {
        while seq.next_element::<IgnoredAny>()?.is_some() {}
        Ok(PromptItem(true))
    }
}
