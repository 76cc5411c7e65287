//! What a request body says of its cost beyond its bytes, read in one pass: whether it
//! carries input its length does not bound, and which API's output limits it may set.
//!
//! A quote counts a body's bytes as its most input tokens (a token is at least one byte
//! of text), which holds for text only: a 90-byte image URL is thousands of tokens, a
//! `file_id` a whole PDF, a `previous_response_id` a whole conversation held upstream, a
//! batch's `requests` many requests' output. Such a body's input is unknown to the
//! quote. And an output limit bounds the answer only when the upstream reads it: one
//! spelled in another case (Python's readers ignore `"MAX_TOKENS"`), or of another API
//! than the body's (`max_output_tokens` beside `messages`), is no bound.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

use crate::json::{names, Key};

mod prompt;
mod vocabulary;

use prompt::PromptItem;
use vocabulary::{
    named, Named, BEYOND_MEMBERS, BEYOND_TYPES, CANDIDATES, CHOICES, EXTRA_BODY,
    EXTRA_BODY_PROVIDER, GENERATION_CONFIGS, MEDIA_TYPES, OTHER_LIMITS, TEMPLATE_KWARGS,
};
pub use vocabulary::{CHAT_LIMITS, RESPONSES_LIMIT};

/// Bodies nested deeper than this are read as carrying media (serde_json refuses 128
/// levels anyway).
const MAX_DEPTH: usize = 64;

/// What a body says of its cost beyond its bytes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct BodyShape {
    /// Its input is not bounded by its length: media, a chain or cache kept upstream, a
    /// batch, extra completions (or it does not parse, or nests too deep).
    pub beyond: bool,
    /// It has `messages` or a text `prompt` (Chat Completions, Anthropic Messages,
    /// Completions): `max_output_tokens` is no limit there.
    pub chat: bool,
    /// It has `input` (OpenAI Responses): `max_tokens` and `max_completion_tokens` are
    /// none there.
    pub responses: bool,
    /// An output limit or `n` is spelled in another case than its API's, or given
    /// twice: neither the output nor the choices bound the quote (readers disagree on
    /// which one counts, or whether it does).
    pub unsure_limit: bool,
}

/// Reads `json` (a body the walk read as JSON). Names and values are compared after JSON
/// unescaping, so `"image\u005furl"` is found; top-level names under case folding too
/// (Go's readers fold them).
pub fn body_shape(json: &[u8]) -> BodyShape {
    let mut shape = BodyShape::default();
    let mut de = serde_json::Deserializer::from_slice(json);
    let top = Scan {
        depth: 0,
        place: Place::Top,
        shape: &mut shape,
        seen: 0,
    };
    if top.deserialize(&mut de).is_err() {
        shape.beyond = true;
    }
    shape
}

/// Where a value sits, for what it tells.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Place {
    /// The body itself.
    Top,
    /// A `type` member's value: media when a string of [`MEDIA_TYPES`].
    Type,
    /// The top-level `prompt`: text (Completions), or a stored prompt (an object).
    Prompt,
    /// SGLang's native `text` or `input_ids`: a list of several prompts is a batch, one
    /// generation each (the Responses API's `text` is an object, read as any other).
    NativePrompt,
    /// `chat_template_kwargs`: a `chat_template` in it is beyond the body.
    TemplateKwargs,
    /// Gemini's generation settings.
    GenerationConfig,
    /// A top-level `extra_body` (and its `google`): provider settings some upstreams
    /// read from it as written (Gemini's OpenAI-compatible API) and some proxies merge
    /// into the top level, so its members are read as the top level's.
    Extra,
    /// A value that multiplies or extends what is billed when it is not `null`.
    Beyond,
    /// A JSON Schema: skipped.
    Schema,
    Other,
}

/// One value of the body at `depth`, recording what it tells in `shape`.
struct Scan<'s> {
    depth: usize,
    place: Place,
    shape: &'s mut BodyShape,
    /// The top level's output limits and `n` met so far (a bit each).
    seen: u8,
}

impl Scan<'_> {
    /// The place of a member `name`'s value inside this value (`kind`: what its name
    /// tells anywhere).
    fn member(&mut self, name: &str, kind: Named) -> Place {
        // The known names are ASCII: an ASCII name folds to one only under ASCII folding,
        // a cheap length check first (the full folding is for the rest).
        let ascii = name.is_ascii();
        let folds_to = |token: &str| match ascii {
            true => token.eq_ignore_ascii_case(name),
            false => names(token, name),
        };
        let any_of = |list: &[&str]| list.iter().any(|m| folds_to(m));
        match self.place {
            Place::Top | Place::Extra => {
                let top = self.place == Place::Top;
                let limits = CHAT_LIMITS.iter().chain([&RESPONSES_LIMIT, &CHOICES]);
                for (i, limit) in limits.enumerate() {
                    if folds_to(limit) {
                        // In `extra_body`, a limit is a second one some reader merges.
                        let twice = !top || self.seen & (1 << i) != 0;
                        self.shape.unsure_limit |= *limit != name || twice;
                        self.seen |= 1 << i;
                    }
                }
                self.shape.unsure_limit |= any_of(&OTHER_LIMITS);
                if top && folds_to("messages") {
                    self.shape.chat = true;
                }
                if top && folds_to("input") {
                    self.shape.responses = true;
                }
                match kind {
                    _ if top && folds_to("prompt") => Place::Prompt,
                    _ if top && (folds_to("text") || folds_to("input_ids")) => Place::NativePrompt,
                    _ if top && folds_to(EXTRA_BODY) => Place::Extra,
                    _ if !top && folds_to(EXTRA_BODY_PROVIDER) => Place::Extra,
                    _ if folds_to(TEMPLATE_KWARGS) => Place::TemplateKwargs,
                    _ if any_of(&BEYOND_MEMBERS) => Place::Beyond,
                    _ if any_of(&GENERATION_CONFIGS) => Place::GenerationConfig,
                    Named::Type => Place::Type,
                    _ => Place::Other,
                }
            }
            Place::GenerationConfig if any_of(&CANDIDATES) => Place::Beyond,
            Place::TemplateKwargs if folds_to("chat_template") => Place::Beyond,
            _ => match kind {
                Named::Schema => Place::Schema,
                Named::Type => Place::Type,
                _ => Place::Other,
            },
        }
    }

    fn inner(&mut self, place: Place) -> Scan<'_> {
        Scan {
            depth: self.depth + 1,
            place,
            shape: &mut *self.shape,
            seen: 0,
        }
    }

    /// A scalar here (not `null`).
    fn scalar(self, text: Option<&str>) {
        match self.place {
            Place::Beyond => self.shape.beyond = true,
            Place::Prompt => self.shape.chat = true,
            Place::Type => {
                self.shape.beyond |= text.is_some_and(|t| {
                    MEDIA_TYPES.contains(&t) || BEYOND_TYPES.iter().any(|b| t.starts_with(b))
                })
            }
            _ => {}
        }
    }
}

impl<'de> DeserializeSeed<'de> for Scan<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, v: bool) -> Result<(), E> {
        // `"background": false` asks for nothing more.
        if v || self.place != Place::Beyond {
            self.scalar(None);
        }
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        self.scalar(None);
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        self.scalar(None);
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        self.scalar(None);
        Ok(())
    }

    fn visit_str<E>(self, v: &str) -> Result<(), E> {
        self.scalar(Some(v));
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(mut self, mut map: A) -> Result<(), A::Error> {
        if self.depth >= MAX_DEPTH {
            self.shape.beyond = true;
            return Ok(());
        }
        // A stored prompt, or a conversation or batch given as an object.
        if matches!(self.place, Place::Prompt | Place::Beyond) {
            self.shape.beyond = true;
        }
        while let Some(Key(name)) = map.next_key::<Key<'de>>()? {
            let kind = named(&name);
            self.shape.beyond |= kind == Named::Beyond;
            let place = self.member(&name, kind);
            // Once the input is known unbounded, only the top level's names tell more.
            match self.shape.beyond || place == Place::Schema {
                true => map.next_value::<IgnoredAny>().map(drop)?,
                false => map.next_value_seed(self.inner(place))?,
            }
        }
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(mut self, mut seq: A) -> Result<(), A::Error> {
        if self.depth >= MAX_DEPTH {
            self.shape.beyond = true;
            return Ok(());
        }
        match self.place {
            Place::Beyond => self.shape.beyond = true,
            Place::Prompt | Place::NativePrompt => {
                // Several prompts (texts, or token lists) are a batch: one completion
                // each. A list of numbers is one prompt's tokens.
                self.shape.chat |= self.place == Place::Prompt;
                let mut prompts = 0;
                while let Some(own) = seq.next_element::<PromptItem>()? {
                    prompts += usize::from(own.0);
                }
                self.shape.beyond |= prompts > 1;
                return Ok(());
            }
            _ => {}
        }
        loop {
            let next = match self.shape.beyond {
                true => seq.next_element::<IgnoredAny>()?.map(drop),
                false => seq.next_element_seed(self.inner(Place::Other))?,
            };
            if next.is_none() {
                return Ok(());
            }
        }
    }
}

#[cfg(test)]
mod tests;
