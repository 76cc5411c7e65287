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

/// Content part `type`s that name non-text input (OpenAI Chat Completions and Responses,
/// Anthropic Messages).
const MEDIA_TYPES: [&str; 8] = [
    "image_url",
    "input_image",
    "image",
    "input_audio",
    "audio",
    "file",
    "input_file",
    "document",
];

/// Members that hold non-text input whatever their part's `type` says (Gemini's parts,
/// OpenAI's part payloads and an assistant turn's earlier audio).
const MEDIA_MEMBERS: [&str; 7] = [
    "image_url",
    "input_audio",
    "inline_data",
    "inlineData",
    "file_data",
    "fileData",
    "audio",
];

/// Top-level members (not `null`) that make the upstream bill more than the body holds:
/// a conversation or response chain kept upstream (OpenAI Responses), a cached context
/// (Gemini), a batch of requests, several completions generated for one returned.
const BEYOND_MEMBERS: [&str; 7] = [
    "previous_response_id",
    "conversation",
    "cachedContent",
    "cached_content",
    "requests",
    "best_of",
    "background",
];

/// Members of Gemini's `generationConfig` that multiply its output.
const GENERATION_CONFIGS: [&str; 2] = ["generationConfig", "generation_config"];
const CANDIDATES: [&str; 2] = ["candidateCount", "candidate_count"];

/// The top-level members whose values bound output (see `config::prices`).
pub const CHAT_LIMITS: [&str; 2] = ["max_tokens", "max_completion_tokens"];
pub const RESPONSES_LIMIT: &str = "max_output_tokens";
const CHOICES: &str = "n";

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
    /// An output limit or `n` is spelled in another case than its API's: neither the
    /// output nor the choices bound the quote (one reader may take it, another not).
    pub folded_limit: bool,
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
    /// Gemini's generation settings.
    GenerationConfig,
    /// A value that multiplies or extends what is billed when it is not `null`.
    Beyond,
    Other,
}

/// One value of the body at `depth`, recording what it tells in `shape`.
struct Scan<'s> {
    depth: usize,
    place: Place,
    shape: &'s mut BodyShape,
}

impl Scan<'_> {
    /// The place of a member `name`'s value inside this value.
    fn member(&mut self, name: &str) -> Place {
        let named = |list: &[&str]| list.iter().any(|m| names(m, name));
        match self.place {
            Place::Top => {
                for limit in CHAT_LIMITS.iter().chain([&RESPONSES_LIMIT, &CHOICES]) {
                    self.shape.folded_limit |= names(limit, name) && *limit != name;
                }
                if names("messages", name) {
                    self.shape.chat = true;
                }
                if names("input", name) {
                    self.shape.responses = true;
                }
                match name {
                    _ if names("prompt", name) => Place::Prompt,
                    _ if named(&BEYOND_MEMBERS) => Place::Beyond,
                    _ if named(&GENERATION_CONFIGS) => Place::GenerationConfig,
                    "type" => Place::Type,
                    _ => Place::Other,
                }
            }
            Place::GenerationConfig if named(&CANDIDATES) => Place::Beyond,
            _ if name == "type" => Place::Type,
            _ => Place::Other,
        }
    }

    fn inner(&mut self, place: Place) -> Scan<'_> {
        Scan {
            depth: self.depth + 1,
            place,
            shape: &mut *self.shape,
        }
    }

    /// A scalar here (not `null`).
    fn scalar(self, text: Option<&str>) {
        match self.place {
            Place::Beyond => self.shape.beyond = true,
            Place::Prompt => self.shape.chat = true,
            Place::Type => self.shape.beyond |= text.is_some_and(|t| MEDIA_TYPES.contains(&t)),
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
            if MEDIA_MEMBERS.contains(&&*name) {
                self.shape.beyond = true;
            }
            let place = self.member(&name);
            // Once the input is known unbounded, only the top level's names tell more.
            match self.shape.beyond {
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
            Place::Prompt => self.shape.chat = true,
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
mod tests {
    use super::{body_shape, BodyShape};

    fn carries_media(json: &[u8]) -> bool {
        body_shape(json).beyond
    }
    #[test]
    fn text_alone_carries_none() {
        for text in [
            r#"{"model":"m","messages":[{"role":"user","content":"describe an image"}]}"#,
            r#"{"model":"m","messages":[{"role":"user","content":[{"type":"text","text":"image_url"}]}]}"#,
            r#"{"model":"m","input":[{"type":"message","content":[{"type":"input_text","text":"file"}]}]}"#,
            r#"{"model":"m","tools":[{"type":"function","function":{"name":"file"}}]}"#,
            r#"{"model":"m","response_format":{"type":"json_schema"}}"#,
        ] {
            assert!(!carries_media(text.as_bytes()), "{text}");
        }
    }

    #[test]
    fn images_audio_files_and_documents_are_found_however_spelled() {
        for media in [
            // OpenAI Chat Completions
            r#"{"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"input_audio","input_audio":{"data":"AAA","format":"wav"}}]}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"file","file":{"file_id":"file-1"}}]}]}"#,
            r#"{"messages":[{"role":"assistant","audio":{"id":"audio_1"}}]}"#,
            // OpenAI Responses
            r#"{"input":[{"role":"user","content":[{"type":"input_image","image_url":"https://x/a.png"}]}]}"#,
            r#"{"input":[{"role":"user","content":[{"type":"input_file","file_id":"file-1"}]}]}"#,
            // Anthropic Messages
            r#"{"messages":[{"role":"user","content":[{"type":"image","source":{"type":"url","url":"https://x"}}]}]}"#,
            r#"{"messages":[{"role":"user","content":[{"type":"document","source":{"type":"file","file_id":"f"}}]}]}"#,
            // Gemini
            r#"{"contents":[{"parts":[{"inlineData":{"mimeType":"image/png","data":"AAA"}}]}]}"#,
            r#"{"contents":[{"parts":[{"file_data":{"file_uri":"gs://b/o"}}]}]}"#,
            // Escaped, nested, after a text part, a part without its type
            r#"{"messages":[{"content":[{"type":"text","text":"hi"},{"type":"image\u005furl","image\u005furl":{"url":"u"}}]}]}"#,
            r#"{"messages":[{"content":[{"image_url":{"url":"u"}}]}]}"#,
            r#"{"a":{"b":[[{"c":{"type":"input_audio"}}]]}}"#,
        ] {
            assert!(carries_media(media.as_bytes()), "{media}");
        }
    }

    #[test]
    fn what_does_not_parse_or_nests_too_deep_counts_as_media() {
        assert!(carries_media(b"{\"messages\": ["));
        let deep = format!("{}{}", "[".repeat(100), "]".repeat(100));
        assert!(carries_media(deep.as_bytes()));
    }

    #[test]
    fn what_the_upstream_keeps_or_multiplies_is_beyond_the_body() {
        for beyond in [
            r#"{"model":"m","input":"go on","previous_response_id":"resp_1"}"#,
            r#"{"model":"m","input":"go on","Previous_Response_ID":"resp_1"}"#,
            r#"{"model":"m","input":"hi","conversation":{"id":"conv_1"}}"#,
            r#"{"model":"m","prompt":{"id":"pmpt_1","version":"2"}}"#,
            r#"{"model":"m","input":"hi","background":true}"#,
            r#"{"requests":[{"custom_id":"a","params":{"model":"m","max_tokens":9}}]}"#,
            r#"{"model":"m","prompt":"once","best_of":4}"#,
            r#"{"contents":[],"cachedContent":"cachedContents/x"}"#,
            r#"{"contents":[],"generationConfig":{"candidateCount":8}}"#,
        ] {
            assert!(carries_media(beyond.as_bytes()), "{beyond}");
        }
        for within in [
            r#"{"model":"m","input":"hi","previous_response_id":null,"background":false}"#,
            r#"{"model":"m","prompt":"once upon a time"}"#,
            r#"{"model":"m","messages":[],"tools":[{"type":"function","function":{"parameters":{"properties":{"conversation":{},"requests":{}}}}}]}"#,
            r#"{"contents":[],"generationConfig":{"maxOutputTokens":8}}"#,
        ] {
            assert!(!carries_media(within.as_bytes()), "{within}");
        }
    }

    #[test]
    fn an_output_limit_belongs_to_the_api_its_body_speaks() {
        let shape = |json: &str| body_shape(json.as_bytes());
        let chat = BodyShape {
            chat: true,
            ..BodyShape::default()
        };
        let responses = BodyShape {
            responses: true,
            ..BodyShape::default()
        };
        assert_eq!(shape(r#"{"messages":[],"max_tokens":9}"#), chat);
        assert_eq!(shape(r#"{"prompt":["a","b"],"max_tokens":9}"#), chat);
        assert_eq!(shape(r#"{"input":"a","max_output_tokens":9}"#), responses);
        assert!(shape(r#"{"messages":[],"input":"a"}"#).chat);
        assert!(shape(r#"{"messages":[],"input":"a"}"#).responses);
        for folded in [
            r#"{"messages":[],"MAX_TOKENS":1}"#,
            r#"{"messages":[],"max_to\u212Aens":1}"#,
            r#"{"input":"a","Max_Output_Tokens":1}"#,
            r#"{"messages":[],"N":1}"#,
        ] {
            assert!(shape(folded).folded_limit, "{folded}");
        }
        assert!(!shape(r#"{"messages":[],"max_tokens":1,"n":2}"#).folded_limit);
    }
}
