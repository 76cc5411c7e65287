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
    /// Which sequence of a batch the object reports (SGLang's and llama.cpp's streams of
    /// several prompts: each event counts its own sequence).
    Index,
}

impl Count {
    /// The count a root member `name` holds, if it is one.
    pub(super) fn named(name: &[u8]) -> Option<Self> {
        match name {
            b"prompt_eval_count" | b"tokens_evaluated" => Some(Count::Input),
            b"eval_count" | b"tokens_predicted" => Some(Count::Output),
            b"index" => Some(Count::Index),
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
    index: Option<u64>,
}

impl Counts {
    pub(super) fn set(&mut self, count: Count, value: u64) {
        let field = match count {
            Count::Input => &mut self.input,
            Count::Cached => &mut self.cached,
            Count::Output => &mut self.output,
            Count::Index => &mut self.index,
        };
        // Named twice, the larger: parsers disagree on which of two members wins.
        *field = Some(field.map_or(value, |v| v.max(value)));
    }

    /// The usage they report, when they report any, and the sequence it is of (0 when
    /// none is named); the object's counts are taken.
    pub(super) fn take(&mut self) -> Option<(u64, super::Usage)> {
        let Counts {
            input,
            cached,
            output,
            index,
        } = std::mem::take(self);
        if input.is_none() && output.is_none() {
            return None;
        }
        let input = input.unwrap_or(0);
        let usage = super::Usage {
            input,
            cached: cached.unwrap_or(0).min(input),
            output: output.unwrap_or(0),
            ..super::Usage::default()
        };
        Some((index.unwrap_or(0), usage))
    }
}

/// Most sequences of one answer counted apart (as many as a quote believes choices).
const MAX_SEQUENCES: usize = 128;

/// What an answer reported so far: its `usage` reports, merged (each field's largest),
/// and a model server's own counts by sequence — each event of a stream counts its own
/// sequence so far, so a sequence's largest, summed over sequences, is what the answer
/// used (the largest of all would charge a batch of a thousand prompts for one).
#[derive(Debug, Default)]
pub(super) struct Reported {
    pub(super) usage: Option<super::Usage>,
    /// Allocated only for an answer of a model server's own API.
    sequences: Vec<(u64, super::Usage)>,
    /// More sequences than kept: what they used is unknown.
    too_many: bool,
}

impl Reported {
    /// One object's counts, of sequence `index`.
    pub(super) fn counted(&mut self, (index, usage): (u64, super::Usage)) {
        let full = self.sequences.len() >= MAX_SEQUENCES;
        match self.sequences.iter_mut().find(|(i, _)| *i == index) {
            Some((_, seen)) => super::shapes::merge_into(seen, usage),
            None if full => self.too_many = true,
            None => self.sequences.push((index, usage)),
        }
    }

    /// The usage reported, `None` when none was or when its sequences could not all be
    /// counted (then it settles as a usage never reported).
    pub(super) fn total(&self) -> Option<super::Usage> {
        if self.too_many {
            return None;
        }
        let mut usage = self.usage;
        let summed = (self.sequences.iter()).fold(None, |sum: Option<super::Usage>, (_, u)| {
            let mut sum = sum.unwrap_or_default();
            sum.input = sum.input.saturating_add(u.input);
            sum.cached = sum.cached.saturating_add(u.cached);
            sum.output = sum.output.saturating_add(u.output);
            Some(sum)
        });
        super::shapes::merge(&mut usage, summed);
        usage
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
