//! The `usage` objects answers report, in OpenAI's shapes (chat: `prompt_tokens`;
//! responses: `input_tokens`, cached tokens among them), Anthropic's (`input_tokens`
//! without the cache, its reads and writes beside it) and Gemini's (`usageMetadata`:
//! `promptTokenCount` with its cached part, thinking beside the answer's tokens), read
//! into one [`Usage`], and two reports of one answer merged.

use serde::Deserialize;

/// Tokens an answer reports: input (cached and written to the cache included), the part
/// read from a prompt cache, the part written to one (Anthropic's), of which at the
/// one-hour cache's price, and output.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    pub input: u64,
    pub cached: u64,
    pub written: u64,
    pub written_1h: u64,
    pub output: u64,
}

#[derive(Deserialize)]
struct Details {
    cached_tokens: Option<u64>,
}

/// Anthropic's cache writes by the cache's lifetime.
#[derive(Deserialize)]
struct CacheCreation {
    ephemeral_1h_input_tokens: Option<u64>,
}

/// The usage shapes answered by OpenAI (chat: `prompt_tokens`; responses:
/// `input_tokens`, cached tokens among them) and Anthropic (`input_tokens` without the
/// cache, `cache_read_input_tokens` and `cache_creation_input_tokens` beside it).
#[derive(Deserialize)]
struct RawUsage {
    prompt_tokens: Option<u64>,
    completion_tokens: Option<u64>,
    input_tokens: Option<u64>,
    output_tokens: Option<u64>,
    prompt_tokens_details: Option<Details>,
    input_tokens_details: Option<Details>,
    cache_read_input_tokens: Option<u64>,
    cache_creation_input_tokens: Option<u64>,
    cache_creation: Option<CacheCreation>,
    /// Gemini's: the prompt (its cached part included), what tools read into it, the
    /// answer's candidates and the thinking before them (billed as output).
    #[serde(rename = "promptTokenCount")]
    gemini_prompt: Option<u64>,
    #[serde(rename = "toolUsePromptTokenCount")]
    gemini_tool_prompt: Option<u64>,
    #[serde(rename = "cachedContentTokenCount")]
    gemini_cached: Option<u64>,
    #[serde(rename = "candidatesTokenCount")]
    gemini_candidates: Option<u64>,
    #[serde(rename = "thoughtsTokenCount")]
    gemini_thoughts: Option<u64>,
}

/// A kept `usage` object; `None` when it is not one (no token counts, a wrong type).
pub(super) fn parse(bytes: &[u8]) -> Option<Usage> {
    let raw: RawUsage = serde_json::from_slice(bytes).ok()?;
    if raw.gemini_prompt.is_some() || raw.gemini_candidates.is_some() {
        return Some(gemini(&raw));
    }
    let reported = [
        raw.prompt_tokens,
        raw.input_tokens,
        raw.completion_tokens,
        raw.output_tokens,
    ];
    if reported.iter().all(Option::is_none) {
        return None;
    }
    let cache_read = raw.cache_read_input_tokens.unwrap_or(0);
    let cache_written = raw.cache_creation_input_tokens.unwrap_or(0);
    let input = raw
        .prompt_tokens
        .or(raw.input_tokens)
        .unwrap_or(0)
        .saturating_add(cache_read)
        .saturating_add(cache_written);
    let cached = [raw.prompt_tokens_details, raw.input_tokens_details]
        .into_iter()
        .flatten()
        .find_map(|d| d.cached_tokens)
        .unwrap_or(cache_read);
    let cached = cached.min(input);
    let written = cache_written.min(input - cached);
    let written_1h = raw
        .cache_creation
        .and_then(|c| c.ephemeral_1h_input_tokens)
        .unwrap_or(0)
        .min(written);
    Some(Usage {
        input,
        cached,
        written,
        written_1h,
        output: raw.completion_tokens.or(raw.output_tokens).unwrap_or(0),
    })
}

/// Gemini's `usageMetadata`: input is the prompt and what tools read into it, its cached
/// part within; output the candidates and the thinking.
fn gemini(raw: &RawUsage) -> Usage {
    let input = raw
        .gemini_prompt
        .unwrap_or(0)
        .saturating_add(raw.gemini_tool_prompt.unwrap_or(0));
    Usage {
        input,
        cached: raw.gemini_cached.unwrap_or(0).min(input),
        written: 0,
        written_1h: 0,
        output: raw
            .gemini_candidates
            .unwrap_or(0)
            .saturating_add(raw.gemini_thoughts.unwrap_or(0)),
    }
}

/// Keeps the larger of two reports, field by field, the cached and written parts going
/// with their input.
pub(super) fn merge(into: &mut Option<Usage>, next: Option<Usage>) {
    let Some(next) = next else { return };
    match into {
        None => *into = Some(next),
        Some(u) => merge_into(u, next),
    }
}

/// [`merge`] into a report already had.
pub(super) fn merge_into(u: &mut Usage, next: Usage) {
    if next.input > u.input || (next.input == u.input && next.cached < u.cached) {
        u.input = next.input;
        u.cached = next.cached;
        u.written = next.written;
        u.written_1h = next.written_1h;
    }
    u.output = u.output.max(next.output);
}
