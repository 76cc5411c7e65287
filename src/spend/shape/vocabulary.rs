//! The names a body's shape is read by: part `type`s and member names that bring input
//! the body's bytes do not bound, JSON Schema holders, and the top level's members that
//! keep, multiply or limit what the upstream bills.

use crate::json::names;

/// Content part `type`s that name non-text input (OpenAI Chat Completions and Responses,
/// Anthropic Messages; vLLM's and SGLang's video and audio by URL).
pub(super) const MEDIA_TYPES: [&str; 11] = [
    "image_url",
    "video_url",
    "audio_url",
    "video",
    "input_image",
    "image",
    "input_audio",
    "audio",
    "file",
    "input_file",
    "document",
];

/// `type` values (by prefix) of parts and tools whose input the upstream fetches or keeps:
/// an item of a stored response, and server-side tools (OpenAI's and Anthropic's web
/// search and fetch, file search, MCP servers, code runs, image generation, computer use).
pub(super) const BEYOND_TYPES: [&str; 9] = [
    "item_reference",
    "web_search",
    "web_fetch",
    "file_search",
    "mcp",
    "code_interpreter",
    "code_execution",
    "image_generation",
    "computer_use",
];

/// What a member's name tells wherever it stands, one `match` (a switch on its length,
/// then a compare: the scan asks it of every member).
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum Named {
    /// Input the body's bytes do not bound, whatever a part's `type` says: media (Gemini's
    /// parts, OpenAI's part payloads, an assistant turn's earlier audio) and Gemini's
    /// server-side tools.
    Beyond,
    /// A JSON Schema (a tool's parameters, a response format): a description of data,
    /// never input, so nothing in it counts.
    Schema,
    Type,
    Other,
}

/// The names [`named`] knows, for a name spelled in another case.
const KNOWN: [(&str, Named); 30] = [
    ("image_url", Named::Beyond),
    // SGLang's native `/generate`: media given by URL or data beside the text.
    ("image_data", Named::Beyond),
    ("video_data", Named::Beyond),
    ("audio_data", Named::Beyond),
    ("video_url", Named::Beyond),
    ("audio_url", Named::Beyond),
    ("images", Named::Beyond),
    ("input_audio", Named::Beyond),
    ("inline_data", Named::Beyond),
    ("inlineData", Named::Beyond),
    ("file_data", Named::Beyond),
    ("fileData", Named::Beyond),
    ("audio", Named::Beyond),
    ("googleSearch", Named::Beyond),
    ("google_search", Named::Beyond),
    ("googleSearchRetrieval", Named::Beyond),
    ("google_search_retrieval", Named::Beyond),
    ("urlContext", Named::Beyond),
    ("url_context", Named::Beyond),
    ("codeExecution", Named::Beyond),
    ("code_execution", Named::Beyond),
    ("parameters", Named::Schema),
    ("input_schema", Named::Schema),
    ("inputSchema", Named::Schema),
    ("schema", Named::Schema),
    ("json_schema", Named::Schema),
    ("properties", Named::Schema),
    ("response_schema", Named::Schema),
    ("responseSchema", Named::Schema),
    ("type", Named::Type),
];

pub(super) fn named(name: &str) -> Named {
    // Go's readers (Ollama's OpenAI API among them) match member names under case
    // folding at every level: `"IMAGE_URL"` is their `image_url`. A name with a capital
    // or a non-ASCII letter is folded against the known ones.
    let folds = || {
        name.bytes()
            .any(|b| b.is_ascii_uppercase() || !b.is_ascii())
    };
    match exactly(name) {
        Named::Other if folds() => KNOWN
            .iter()
            .find(|(known, _)| names(known, name))
            .map_or(Named::Other, |&(_, kind)| kind),
        exact => exact,
    }
}

/// [`KNOWN`] as spelled, as one `match`.
fn exactly(name: &str) -> Named {
    match name {
        "image_url" | "video_url" | "audio_url" | "images" | "input_audio" | "inline_data"
        | "inlineData" | "file_data" | "fileData" | "audio" | "image_data" | "video_data"
        | "audio_data" => Named::Beyond,
        "googleSearch"
        | "google_search"
        | "googleSearchRetrieval"
        | "google_search_retrieval"
        | "urlContext"
        | "url_context"
        | "codeExecution"
        | "code_execution" => Named::Beyond,
        "parameters" | "input_schema" | "inputSchema" | "schema" | "json_schema" | "properties"
        | "response_schema" | "responseSchema" => Named::Schema,
        "type" => Named::Type,
        _ => Named::Other,
    }
}

/// Top-level members (not `null`) that make the upstream bill more than the body holds:
/// a conversation or response chain kept upstream (OpenAI Responses), a cached context
/// (Gemini), a batch of requests, several completions generated for one returned, a
/// predicted output (OpenAI: its rejected tokens are billed as output, at the output
/// price, however many of them the client packs into its text), a search the upstream
/// runs into the prompt (OpenAI's `web_search_options`), MCP servers and a code container
/// (its skills) the upstream reads from (Anthropic).
pub(super) const BEYOND_MEMBERS: [&str; 12] = [
    // A chat template the request brings (vLLM's with `--trust-request-chat-template`;
    // SGLang's inside `chat_template_kwargs`, see `TEMPLATE_KWARGS`): the prompt it
    // renders is any length.
    "chat_template",
    "previous_response_id",
    "conversation",
    "cachedContent",
    "cached_content",
    "requests",
    "best_of",
    "background",
    "prediction",
    "web_search_options",
    "mcp_servers",
    "container",
];

/// The top-level member whose `chat_template` (SGLang's) is a template the request
/// brings; its other members (`enable_thinking`) are settings, bounded by the body.
pub(super) const TEMPLATE_KWARGS: &str = "chat_template_kwargs";

/// The top-level member whose members some upstreams read as settings of their own:
/// Gemini's OpenAI-compatible API reads `extra_body.google.cached_content` (a cached
/// context of any length) as written, and a proxy in front may merge it into the
/// request it sends on. The OpenAI Python client's `extra_body=` argument is merged by the client
/// itself and reaches the wire at the top level.
pub(super) const EXTRA_BODY: &str = "extra_body";
/// The member of an `extra_body` holding Gemini's settings.
pub(super) const EXTRA_BODY_PROVIDER: &str = "google";

/// Members of Gemini's `generationConfig` that multiply its output.
pub(super) const GENERATION_CONFIGS: [&str; 2] = ["generationConfig", "generation_config"];
pub(super) const CANDIDATES: [&str; 2] = ["candidateCount", "candidate_count"];

/// The top-level members whose values bound output (see `config::prices`).
pub const CHAT_LIMITS: [&str; 2] = ["max_tokens", "max_completion_tokens"];
pub const RESPONSES_LIMIT: &str = "max_output_tokens";
/// Top-level members some upstreams read as the output limit instead of (or before) the
/// ones quoted by: llama.cpp's `n_predict` wins over `max_tokens`, Ollama's native API
/// reads `options.num_predict`, Hugging Face's `max_new_tokens` (TGI's native API under
/// `parameters`), SGLang's native API under `sampling_params`. Any of them makes the
/// quoted limit unsure.
pub(super) const OTHER_LIMITS: [&str; 6] = [
    "n_predict",
    "num_predict",
    "max_new_tokens",
    "options",
    "parameters",
    "sampling_params",
];
pub(super) const CHOICES: &str = "n";

#[cfg(test)]
mod tests {
    use super::{exactly, named, KNOWN};

    /// The `match` a name is decided by and the list a folded name is looked up in are
    /// one vocabulary written twice (the `match` for speed): each known name means the
    /// same in both, as spelled and in another case.
    #[test]
    fn the_match_and_the_folded_list_name_the_same() {
        for (name, kind) in KNOWN {
            assert!(exactly(name) == kind, "{name}");
            assert!(named(&name.to_uppercase()) == kind, "{name}");
        }
    }
}
