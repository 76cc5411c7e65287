//! Token counts that model servers' own APIs write as plain members of the answer's root
//! object rather than in a `usage` object: Ollama's `/api/chat`, `/api/generate` and
//! `/api/embed` (`prompt_eval_count`, `eval_count`, on the last line of a stream) and
//! llama.cpp's `/completion` (`tokens_evaluated`, `tokens_predicted`, on the last event;
//! not its `tokens_cached`, the slot's whole cache — prompt and output — rather than the
//! prompt tokens it took from it, which would price every prompt as a cache hit) — and SGLang's, the members of the root's `meta_info` object
//! (`prompt_tokens`, `cached_tokens`, `completion_tokens`), which is not kept whole as a
//! `usage` is: with logprobs asked for it holds them, far past what a usage may be.
//!
//! Only the root's members count, and only a plain non-negative integer: the text a model
//! writes is inside JSON strings, so it cannot be read as one.

/// A root member whose integer value is a token count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Count {
    /// Prompt tokens: Ollama's (those it evaluated: a prefix it kept from an earlier
    /// request is not among them), llama.cpp's and SGLang's (cached ones among them).
    Input,
    /// SGLang's prompt tokens taken from its cache.
    Cached,
    /// Generated tokens.
    Output,
}

impl Count {
    /// The count a root member `name` holds, if it is one.
    pub(super) fn named(name: &[u8]) -> Option<Self> {
        match name {
            b"prompt_eval_count" | b"tokens_evaluated" => Some(Count::Input),
            b"eval_count" | b"tokens_predicted" => Some(Count::Output),
            _ => None,
        }
    }

    /// The count a member `name` of SGLang's `meta_info` holds, if it is one.
    pub(super) fn in_meta_info(name: &[u8]) -> Option<Self> {
        match name {
            b"prompt_tokens" => Some(Count::Input),
            b"cached_tokens" => Some(Count::Cached),
            b"completion_tokens" => Some(Count::Output),
            _ => None,
        }
    }
}

/// The counts one root object wrote so far.
#[derive(Debug, Default, Clone, Copy)]
pub(super) struct Counts {
    input: Option<u64>,
    cached: Option<u64>,
    output: Option<u64>,
}

impl Counts {
    pub(super) fn set(&mut self, count: Count, value: u64) {
        let field = match count {
            Count::Input => &mut self.input,
            Count::Cached => &mut self.cached,
            Count::Output => &mut self.output,
        };
        // Named twice, the larger: parsers disagree on which of two members wins.
        *field = Some(field.map_or(value, |v| v.max(value)));
    }

    /// The usage they report, when they report any; the object's counts are taken.
    pub(super) fn take(&mut self) -> Option<super::Usage> {
        let Counts {
            input,
            cached,
            output,
        } = std::mem::take(self);
        if input.is_none() && output.is_none() {
            return None;
        }
        let input = input.unwrap_or(0);
        Some(super::Usage {
            input,
            cached: cached.unwrap_or(0).min(input),
            output: output.unwrap_or(0),
            ..super::Usage::default()
        })
    }
}

/// A count's digits being read.
#[derive(Debug, Clone, Copy)]
pub(super) struct Digits {
    count: Count,
    /// `None` until the first digit; saturates.
    value: Option<u64>,
    /// Space came after the digits: the number is over.
    ended: bool,
}

/// What a byte did to a count being read.
pub(super) enum Step {
    /// Part of it (a digit, or space around it).
    More,
    /// It ended at this byte (which is the lexer's to read): the count and its value,
    /// `None` when the value was no plain integer (`12.5`, `-1`, `"12"`, `null`).
    Done(Option<(Count, u64)>),
}

impl Digits {
    pub(super) fn of(count: Count) -> Self {
        Self {
            count,
            value: None,
            ended: false,
        }
    }

    /// Reads `b`.
    pub(super) fn push(&mut self, b: u8) -> Step {
        match b {
            b'0'..=b'9' if !self.ended => {
                let digit = u64::from(b - b'0');
                let value = self.value.unwrap_or(0);
                self.value = Some(value.saturating_mul(10).saturating_add(digit));
                Step::More
            }
            b' ' | b'\t' | b'\r' | b'\n' => {
                self.ended = self.value.is_some();
                Step::More
            }
            b',' | b'}' | b']' => Step::Done(self.value.map(|v| (self.count, v))),
            _ => Step::Done(None),
        }
    }
}
