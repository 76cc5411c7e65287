//! Whether a request body carries input its length does not bound: an image, audio, a
//! file or a document, inline or by reference. A quote counts a body's bytes as its most
//! input tokens (a token is at least one byte of text), which holds for text only: a
//! 90-byte image URL is thousands of tokens, a `file_id` a whole PDF. Such a body's input
//! is unknown to the quote.

use serde::de::{DeserializeSeed, Deserializer, IgnoredAny, MapAccess, SeqAccess, Visitor};
use std::fmt;

use crate::json::Key;

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

/// Bodies nested deeper than this are read as carrying media (serde_json refuses 128
/// levels anyway).
const MAX_DEPTH: usize = 64;

/// Whether `json` (a body the walk read as JSON) names non-text input anywhere: a member
/// of [`MEDIA_MEMBERS`], or a `type` of [`MEDIA_TYPES`]. Names and values are compared
/// after JSON unescaping, so `"image\u005furl"` is found. A body that does not parse is
/// read as carrying media.
pub fn carries_media(json: &[u8]) -> bool {
    let mut de = serde_json::Deserializer::from_slice(json);
    let top = Scan {
        depth: 0,
        is_type: false,
    };
    top.deserialize(&mut de).unwrap_or(true)
}

/// One value of the body at `depth`: `true` once media is found. `is_type`: the value
/// of a `type` member, media when it is a string of [`MEDIA_TYPES`] (anything else,
/// nested values included, is scanned as any value is).
struct Scan {
    depth: usize,
    is_type: bool,
}

impl Scan {
    /// The scan of a member `name`'s value, or an element's (`None`), inside this value.
    fn inner(&self, name: Option<&str>) -> Self {
        Self {
            depth: self.depth + 1,
            is_type: name == Some("type"),
        }
    }
}

impl<'de> DeserializeSeed<'de> for Scan {
    type Value = bool;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<bool, D::Error> {
        d.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for Scan {
    type Value = bool;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_i64<E>(self, _: i64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_u64<E>(self, _: u64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_f64<E>(self, _: f64) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_str<E>(self, v: &str) -> Result<bool, E> {
        Ok(self.is_type && MEDIA_TYPES.contains(&v))
    }

    fn visit_unit<E>(self) -> Result<bool, E> {
        Ok(false)
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<bool, A::Error> {
        if self.depth >= MAX_DEPTH {
            return Ok(true);
        }
        let mut found = false;
        while let Some(Key(name)) = map.next_key::<Key<'de>>()? {
            found |= match found || MEDIA_MEMBERS.contains(&&*name) {
                true => map.next_value::<IgnoredAny>().map(|_| true)?,
                false => map.next_value_seed(self.inner(Some(&name)))?,
            };
        }
        Ok(found)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<bool, A::Error> {
        if self.depth >= MAX_DEPTH {
            return Ok(true);
        }
        let mut found = false;
        loop {
            let next = match found {
                true => seq.next_element::<IgnoredAny>()?.map(|_| true),
                false => seq.next_element_seed(self.inner(None))?,
            };
            match next {
                None => return Ok(found),
                Some(media) => found |= media,
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::carries_media;

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
}
