//! One pass over a JSON body that picks out what a route's pointers name: serde_json's own
//! parser drives a seed that follows only the members and elements some pointer still
//! matches and skips the rest unbuilt, so the body is parsed once, whatever the number of
//! pointers, and a string without escapes is borrowed from the body, not copied.
//!
//! The body's first JSON value is walked, and what follows it is not read: Go's
//! `json.Decoder` (gin, echo, many MCP servers) and Jackson (Spring, by default) read the
//! first value and ignore the rest, so `{"user":"u1"}x` is user `u1` there — read as not
//! JSON here, every `json:` key of it was missing. A parser that refuses trailing bytes
//! refuses the request itself. A member given twice yields both
//! values: parsers upstream disagree on which one wins, so a key charges each. A member
//! is the pointer's when its name is the token's under case folding too: Go's
//! encoding/json takes `{"Model":…}` as a struct's `model` (`bytes.EqualFold`).

use std::borrow::Cow;
use std::fmt;

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};

use super::names::{names, Key};
use super::pointer::JsonPointer;

/// Most pointers one walk follows (a bit each).
pub const MAX_POINTERS: usize = 64;

/// Most distinct values kept for all pointers together; more makes the walk
/// [`overflowed`](BodyFacts::overflowed) (a key then has too many values).
const MAX_FOUND: usize = 16;

/// The body is not one JSON value (or nests deeper than serde_json's limit of 128).
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the request body is not JSON")]
pub struct NotJson;

/// What a request's body told: each pointer's scalar values (strings as their text,
/// numbers and booleans as JSON writes them), the body's length when known, and a form's
/// or multipart body's parameters to be read by name.
#[derive(Debug, Default, Clone)]
pub struct BodyFacts<'a> {
    /// Inline and covariant (an `ArrayVec`), so facts borrowed for a short while pass
    /// where a longer-lived request view is asked for.
    found: arrayvec::ArrayVec<(&'a JsonPointer, Cow<'a, [u8]>), MAX_FOUND>,
    overflowed: bool,
    /// The body's length in bytes, when it is known (read whole, or declared).
    pub len: Option<u64>,
    /// The body, when it was read whole and is JSON.
    json: Option<&'a [u8]>,
    /// Reading it would have held more than the worker's share of key body memory.
    over_memory: bool,
    /// A form's or a multipart body's parameters, for `query:` and `json:` keys: one
    /// entry per reading of the body (`request::form::readings`).
    pub params: arrayvec::ArrayVec<
        crate::request::form::BodyParams<'a>,
        { crate::request::form::MAX_READINGS },
    >,
}

impl<'a> BodyFacts<'a> {
    /// Facts with nothing found: a body that was not read, not JSON, or too large.
    pub fn unread(len: Option<u64>) -> Self {
        Self {
            len,
            ..Self::default()
        }
    }

    /// Whether the body was read whole and is JSON (else every pointer is missing
    /// because nothing was looked at).
    pub fn read_whole(&self) -> bool {
        self.json.is_some()
    }

    /// The body, when it was read whole and is JSON (what the walk read: the strict
    /// copy of a body JSON only to lenient readers).
    pub fn json(&self) -> Option<&'a [u8]> {
        self.json
    }

    /// The distinct values found at `pointer`.
    pub fn values<'s, 'p>(
        &'s self,
        pointer: &'p JsonPointer,
    ) -> impl Iterator<Item = &'s [u8]> + use<'s, 'p, 'a> {
        self.found
            .iter()
            .filter(move |(p, _)| p.text() == pointer.text())
            .map(|(_, v)| &**v)
    }

    /// The distinct values found at the top-level member `name` (the pointer of a
    /// `query:` key's name: `Route::body_pointers`).
    pub fn member<'s, 'n>(
        &'s self,
        name: &'n str,
    ) -> impl Iterator<Item = &'s [u8]> + use<'s, 'n, 'a> {
        self.found
            .iter()
            .filter(move |(p, _)| matches!(p.tokens(), [only] if &**only == name))
            .map(|(_, v)| &**v)
    }

    /// The id of a JSON-RPC request body (see [`super::rpc`]), for the answer to its
    /// refusal. Parses the body again: only for a request already refused.
    pub fn json_rpc_id(&self) -> Option<super::rpc::RequestId> {
        super::rpc::request_id(self.json?)
    }

    /// Reading the body as JSON needed more memory than the worker's share: the request
    /// is answered as overloaded, its keys never read as missing.
    pub fn over_memory(&self) -> bool {
        self.over_memory
    }

    pub fn mark_over_memory(&mut self) {
        self.over_memory = true;
    }

    /// Bytes of the values the walk had to copy (strings written with escapes, numbers):
    /// what reading the body holds beyond the body itself until the decision is made.
    pub fn copied_len(&self) -> usize {
        (self.found.iter())
            .map(|(_, v)| match v {
                Cow::Owned(copy) => copy.len(),
                Cow::Borrowed(_) => 0,
            })
            .sum()
    }

    /// More distinct values than the walk keeps: treated as too many key values.
    pub fn overflowed(&self) -> bool {
        self.overflowed
    }

    fn record(&mut self, pointer: &'a JsonPointer, value: Cow<'a, [u8]>) {
        let seen = self
            .found
            .iter()
            .any(|(p, v)| p.text() == pointer.text() && *v == value);
        if seen {
            return;
        }
        if self.found.len() == MAX_FOUND {
            self.overflowed = true;
            return;
        }
        self.found.push((pointer, value));
    }
}

/// Walks `body` once for every pointer in `pointers` (at most [`MAX_POINTERS`]), adding
/// what it finds to `facts`. On `Err` nothing is added.
pub fn walk<'a>(
    body: &'a [u8],
    pointers: &[&'a JsonPointer],
    facts: &mut BodyFacts<'a>,
) -> Result<(), NotJson> {
    debug_assert!(pointers.len() <= MAX_POINTERS);
    let active = match pointers.len() {
        0 => return Ok(()),
        n if n >= MAX_POINTERS => u64::MAX,
        n => (1u64 << n) - 1,
    };
    let mut found = BodyFacts::default();
    let mut de = serde_json::Deserializer::from_slice(body);
    let node = Node {
        pointers,
        active,
        depth: 0,
        out: &mut found,
    };
    node.deserialize(&mut de).map_err(|_| NotJson)?;
    // The first value, without what trails it (see the module's comment): found by a
    // second pass only when something trails it.
    facts.json = Some(match de.end() {
        Ok(()) => body,
        Err(_) => first_value(body),
    });
    facts.overflowed |= found.overflowed;
    for (p, v) in found.found {
        facts.record(p, v);
    }
    Ok(())
}

/// `body` up to the end of its first JSON value (which the walk found whole).
fn first_value(body: &[u8]) -> &[u8] {
    let mut values = serde_json::Deserializer::from_slice(body).into_iter::<IgnoredAny>();
    let _ = values.next();
    &body[..values.byte_offset()]
}

/// One value of the body, at `depth`, that the `active` pointers still match.
struct Node<'p, 'a, 'o> {
    pointers: &'p [&'a JsonPointer],
    active: u64,
    depth: usize,
    out: &'o mut BodyFacts<'a>,
}

impl<'a> Node<'_, 'a, '_> {
    /// The active pointers whose token at this depth satisfies `matches`.
    fn next(&self, matches: impl Fn(&JsonPointer) -> bool) -> u64 {
        let mut next = 0;
        for (i, p) in self.pointers.iter().enumerate().take(MAX_POINTERS) {
            let bit = 1u64 << i;
            if self.active & bit != 0 && p.tokens().len() > self.depth && matches(p) {
                next |= bit;
            }
        }
        next
    }

    /// A scalar here is the value of every active pointer that ends here.
    fn scalar(self, value: Cow<'a, [u8]>) {
        for (i, p) in self.pointers.iter().enumerate().take(MAX_POINTERS) {
            if self.active & (1u64 << i) != 0 && p.tokens().len() == self.depth {
                self.out.record(p, value.clone());
            }
        }
    }
}

impl<'de> DeserializeSeed<'de> for Node<'_, 'de, '_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Node<'_, 'de, '_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_borrowed_str<E>(self, v: &'de str) -> Result<(), E> {
        self.scalar(Cow::Borrowed(v.as_bytes()));
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.scalar(Cow::Owned(v.as_bytes().to_vec()));
        Ok(())
    }

    fn visit_u64<E>(self, v: u64) -> Result<(), E> {
        self.scalar(Cow::Owned(v.to_string().into_bytes()));
        Ok(())
    }

    fn visit_i64<E>(self, v: i64) -> Result<(), E> {
        self.scalar(Cow::Owned(v.to_string().into_bytes()));
        Ok(())
    }

    fn visit_f64<E>(self, v: f64) -> Result<(), E> {
        // `-0` is zero: one key, not a second spelling of it.
        let v = if v == 0.0 { 0.0 } else { v };
        self.scalar(Cow::Owned(v.to_string().into_bytes()));
        Ok(())
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        let text: &'static [u8] = if v { b"true" } else { b"false" };
        self.scalar(Cow::Borrowed(text));
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        while let Some(Key(key)) = map.next_key::<Key<'de>>()? {
            let next = self.next(|p| names(&p.tokens()[self.depth], &key));
            if next == 0 {
                map.next_value::<IgnoredAny>()?;
                continue;
            }
            map.next_value_seed(Node {
                pointers: self.pointers,
                active: next,
                depth: self.depth + 1,
                out: &mut *self.out,
            })?;
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        let mut index = 0;
        loop {
            let next = self.next(|p| p.names_index(self.depth, index));
            let more = if next == 0 {
                seq.next_element::<IgnoredAny>()?.is_some()
            } else {
                seq.next_element_seed(Node {
                    pointers: self.pointers,
                    active: next,
                    depth: self.depth + 1,
                    out: &mut *self.out,
                })?
                .is_some()
            };
            if !more {
                return Ok(());
            }
            index += 1;
        }
    }
}

#[cfg(test)]
mod tests;
