//! `[prices.NAME]`: a price table — which model a request names (a key source, usually
//! `json:/model`), each model's per-token prices, and a `default` row for the others (or
//! none: a request for a model the table does not price is refused). A priced policy
//! quotes a request from it: the row, and the most the request can cost.

use std::collections::HashMap;
use std::sync::Arc;

use crate::json::JsonPointer;
use crate::key::{KeySource, RequestView};
use crate::spend::{Estimate, TokenPrice};

/// Largest `n` (choices per request) believed, OpenAI's cap; more are unknown (an
/// upstream without the cap generates them all).
const MAX_CHOICES: u64 = 128;

/// The body members that bound a request's output tokens (the largest one given counts,
/// of those of the API its body speaks: `spend::BodyShape`) and the number of choices
/// they apply to each. The last is the Responses API's.
/// The output limits a quote reads, as `upstream_reads` names them (without the `/`).
pub const OUTPUT_LIMITS: [&str; 3] = [
    "/max_tokens",
    "/max_completion_tokens",
    "/max_output_tokens",
];
const CHOICES: &str = "/n";

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prices {
    pub name: String,
    /// Where the model's name is read.
    pub model: KeySource,
    /// Every row, then `default` (when given), then the dearest of each price;
    /// looked up through `by_model`.
    pub rows: Vec<TokenPrice>,
    by_model: HashMap<Box<[u8]>, u32>,
    default: Option<u32>,
    /// A row of the dearest of each price (`None`: the table prices nothing), for a
    /// request whose model cannot be trusted: its body was not read (too large, not JSON;
    /// on a table with a `default`), or it names several — a client cannot pick a cheaper
    /// row by padding its body or naming a cheap model beside a dear one.
    dearest: Option<u32>,
    output_limits: [Arc<JsonPointer>; 3],
    /// Which of [`OUTPUT_LIMITS`] the upstream reads (`upstream_reads`, all by default): a
    /// limit it ignores bounds nothing it generates (Ollama's OpenAI endpoint ignores
    /// `max_completion_tokens`).
    upstream_reads: [bool; 3],
    choices: Arc<JsonPointer>,
}

/// A request's quote: the row its model is priced by, the most it can cost (`None`:
/// unbounded — its input or output is unknown), and what its input alone costs (as far
/// as the body shows it).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quote {
    pub row: u32,
    pub most: Option<u64>,
    pub input: u64,
}

/// The request names a model the table does not price, and it has no `default`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unpriced;

impl Prices {
    /// A table in front of an upstream that reads the output limits `upstream_reads`
    /// marks (in [`OUTPUT_LIMITS`]' order; all three for most).
    pub fn new(
        name: String,
        model: KeySource,
        (named, default): (Vec<(String, TokenPrice)>, Option<TokenPrice>),
        upstream_reads: [bool; 3],
    ) -> Self {
        let mut rows = Vec::with_capacity(named.len() + 1);
        let mut by_model = HashMap::with_capacity(named.len());
        for (model, price) in named {
            by_model.insert(model.into_bytes().into_boxed_slice(), rows.len() as u32);
            rows.push(price);
        }
        let default = default.map(|price| {
            rows.push(price);
            (rows.len() - 1) as u32
        });
        let dearest = (!rows.is_empty()).then(|| {
            rows.push(dearest(&rows));
            (rows.len() - 1) as u32
        });
        let pointer = |text: &str| Arc::new(text.parse::<JsonPointer>().expect("a valid pointer"));
        Self {
            name,
            model,
            rows,
            by_model,
            default,
            dearest,
            output_limits: OUTPUT_LIMITS.map(pointer),
            upstream_reads,
            choices: pointer(CHOICES),
        }
    }

    /// The body pointers a quote reads: the model's (when it is in the body), the output
    /// limits and the number of choices.
    pub fn pointers(&self) -> impl Iterator<Item = &Arc<JsonPointer>> {
        let model = match &self.model {
            KeySource::Json(p) => Some(p),
            _ => None,
        };
        model
            .into_iter()
            .chain(&self.output_limits)
            .chain(std::iter::once(&self.choices))
    }

    /// The row of `model`: its own, else the default.
    fn row_of(&self, model: &[u8]) -> Option<u32> {
        self.by_model.get(model).copied().or(self.default)
    }

    /// Quotes `view`: on its model's row (one naming none: the default). A request
    /// naming several models (a member given twice: parsers upstream disagree on which
    /// wins) is quoted and settled on the dearest of each price in the table, as is one
    /// whose body was not read; no row it names could be trusted to dominate the others.
    pub fn quote(&self, view: &RequestView<'_>) -> Result<Quote, Unpriced> {
        let estimate = self.estimate(view);
        let Ok(models) = self.model.extract(view) else {
            // More models named than a key takes: priced as models not seen.
            let row = self.dearest_if_default().ok_or(Unpriced)?;
            return Ok(self.quote_row(row, estimate));
        };
        let mut rows = models.iter().map(|m| self.row_of(m.as_text().as_bytes()));
        let row = match rows.next() {
            None => {
                let unread = matches!(self.model, KeySource::Json(_))
                    && view.body.is_none_or(|b| !b.read_whole());
                if unread {
                    self.dearest_if_default()
                } else {
                    self.default
                }
            }
            Some(first) => {
                let first = first.ok_or(Unpriced)?;
                let mut row = Some(first);
                for other in rows {
                    if other.ok_or(Unpriced)? != first {
                        row = self.dearest;
                    }
                }
                row
            }
        };
        Ok(self.quote_row(row.ok_or(Unpriced)?, estimate))
    }

    /// The row of models the gateway cannot all see (a body not read, more named than a
    /// key takes): with a `default` every model is priced, so the dearest prices bound
    /// them all; without, one may be priced by no row (refused as unpriced).
    fn dearest_if_default(&self) -> Option<u32> {
        self.default.and(self.dearest)
    }

    fn quote_row(&self, row: u32, estimate: Estimate) -> Quote {
        let price = &self.rows[row as usize];
        Quote {
            row,
            most: price.most(estimate),
            input: price.input_cost(estimate),
        }
    }

    /// What the body bounds: its length in input tokens, the largest output limit given
    /// and the number of choices. Only a body read whole as JSON, with every value at
    /// those members kept and each a plain integer, bounds its output: a spelling the
    /// gateway cannot read (`"n": "1_28"`, `" 128"`, `128.0`, which lax validators such
    /// as pydantic's read as 128), values past what the walk keeps, or a body not read
    /// (too large, a form) leave the limit to the model's `max_output` and the choices
    /// unknown — the quote is then no bound, and a usage that never comes pays
    /// `max_cost`. So do a limit the upstream may not read (another API's, or any on a
    /// path that is none of the APIs these limits belong to: [`reads_these_limits`]),
    /// more than 128 choices, and input beyond the body's bytes (`spend::BodyShape`).
    fn estimate(&self, view: &RequestView<'_>) -> Estimate {
        let Some(body) = view.body else {
            return Estimate::default();
        };
        let complete = body.read_whole() && !body.overflowed();
        let shape = body
            .json()
            .map(crate::spend::body_shape)
            .unwrap_or_default();
        // The largest value at `pointer` (`None`: none given, or `null`, which readers
        // take as not given), or `Err` when one is no plain integer.
        let largest = |pointer: &JsonPointer| -> Result<Option<u64>, ()> {
            body.values(pointer)
                .filter(|v| *v != b"null")
                .try_fold(None, |most: Option<u64>, v| {
                    let n = std::str::from_utf8(v)
                        .ok()
                        .and_then(plain_integer)
                        .ok_or(())?;
                    Ok(Some(most.map_or(n, |m| m.max(n))))
                })
        };
        // A limit of another API than the body's, or one spelled in another case, may be
        // ignored upstream: no limit counts then but the row's `max_output`.
        let read_by_upstream = |limit: usize| match limit {
            2 => !shape.chat,
            _ => !shape.responses,
        };
        let output = self
            .output_limits
            .iter()
            .enumerate()
            .filter(|&(i, _)| self.upstream_reads[i] && read_by_upstream(i))
            .try_fold(None, |most: Option<u64>, (_, p)| {
                // 0 is no limit to some upstreams (Ollama's `num_predict`, llama.cpp's
                // `n_predict`), never a promise of no output: it bounds nothing.
                match largest(p)? {
                    Some(0) => Err(()),
                    limit => Ok(most.max(limit)),
                }
            })
            .ok()
            .flatten()
            .filter(|_| complete && !shape.unsure_limit && reads_these_limits(view.uri.path()));
        // More choices than believed are unknown, not the most believed: an upstream
        // without OpenAI's cap generates them all.
        let choices = match largest(&self.choices) {
            Ok(n) if complete && !shape.unsure_limit => {
                Some(n.unwrap_or(1).max(1)).filter(|&n| n <= MAX_CHOICES)
            }
            _ => None,
        };
        // A body's bytes bound its text's tokens, not an image's or a file's, nor what
        // the upstream keeps or multiplies.
        let input_tokens = match shape.beyond {
            true => None,
            false => body.len,
        };
        Estimate {
            input_tokens,
            output_tokens: output,
            choices,
        }
    }
}

/// A JSON number that is a plain non-negative integer, as the walk keeps it (`12`), read
/// as one: no sign, fraction, exponent or quotes.
fn plain_integer(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// A row with the dearest of each price of `rows` (and the largest `max_output`, none
/// when a row has none).
fn dearest(rows: &[TokenPrice]) -> TokenPrice {
    let most = |f: fn(&TokenPrice) -> u64| rows.iter().map(f).max().unwrap_or(0);
    TokenPrice {
        input: most(|r| r.input),
        cached_input: most(|r| r.cached_input),
        cache_write: most(|r| r.cache_write),
        cache_write_1h: most(|r| r.cache_write_1h),
        output: most(|r| r.output),
        max_output: rows
            .iter()
            .map(|r| r.max_output)
            .try_fold(0, |a, b| Some(a.max(b?))),
    }
}

#[cfg(test)]
mod tests;

/// Whether a request to `path` goes to an API that reads the output limits a quote reads
/// (`max_tokens`, `max_completion_tokens`, `max_output_tokens`): OpenAI's Chat Completions,
/// Completions and Responses and Anthropic's Messages, as any compatible server serves
/// them (`/v1/chat/completions`, Azure's `/openai/deployments/D/chat/completions`). A
/// server's own API elsewhere (Ollama's `/api/chat`, TGI's `/generate`, llama.cpp's
/// `/completion`) reads a limit of its own and ignores these: `"max_tokens": 1` there
/// bounds nothing, and Ollama's default generates until its context is full.
fn reads_these_limits(path: &str) -> bool {
    let path = path.trim_end_matches('/').as_bytes();
    // `/completions` ends Chat Completions' path too.
    ["/completions", "/responses", "/messages"]
        .iter()
        .any(|api| {
            path.len() >= api.len()
                && path[path.len() - api.len()..].eq_ignore_ascii_case(api.as_bytes())
        })
}
