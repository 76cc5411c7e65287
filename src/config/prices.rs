//! `[prices.NAME]`: a price table — which model a request names (a key source, usually
//! `json:/model`), each model's per-token prices, and a `default` row for the others (or
//! none: a request for a model the table does not price is refused). A priced policy
//! quotes a request from it: the row, and the most the request can cost.

use std::collections::HashMap;
use std::sync::Arc;

use crate::json::JsonPointer;
use crate::key::{KeySource, RequestView};
use crate::spend::{Estimate, TokenPrice};

/// Largest `n` (choices per request) believed; OpenAI allows 128.
const MAX_CHOICES: u64 = 128;

/// The body members that bound a request's output tokens (the largest one given counts)
/// and the number of choices they apply to each.
const OUTPUT_LIMITS: [&str; 3] = [
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
    /// Every row, `default` (when given) last; looked up through `by_model`.
    pub rows: Vec<TokenPrice>,
    by_model: HashMap<Box<[u8]>, u32>,
    default: Option<u32>,
    output_limits: [Arc<JsonPointer>; 3],
    choices: Arc<JsonPointer>,
}

/// A request's quote: the row its model is priced by, and the most it can cost (`None`:
/// unbounded — its input or output is unknown).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quote {
    pub row: u32,
    pub most: Option<u64>,
}

/// The request names a model the table does not price, and it has no `default`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unpriced;

impl Prices {
    pub fn new(
        name: String,
        model: KeySource,
        named: Vec<(String, TokenPrice)>,
        default: Option<TokenPrice>,
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
        let pointer = |text: &str| Arc::new(text.parse::<JsonPointer>().expect("a valid pointer"));
        Self {
            name,
            model,
            rows,
            by_model,
            default,
            output_limits: OUTPUT_LIMITS.map(pointer),
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

    /// Quotes `view`. A request naming several models (a member given twice) is quoted
    /// on the dearest; one naming none is priced by the default.
    pub fn quote(&self, view: &RequestView<'_>) -> Result<Quote, Unpriced> {
        let estimate = self.estimate(view);
        let models = self.model.extract(view).map_err(|_| Unpriced)?;
        let mut rows = models.iter().map(|m| self.row_of(m.as_text().as_bytes()));
        let first = if models.is_empty() {
            self.default
        } else {
            rows.next().flatten()
        };
        let mut best = self.quote_row(first.ok_or(Unpriced)?, estimate);
        for row in rows {
            let quote = self.quote_row(row.ok_or(Unpriced)?, estimate);
            if quote.most.is_none_or(|m| best.most.is_some_and(|b| m > b)) {
                best = quote;
            }
        }
        Ok(best)
    }

    fn quote_row(&self, row: u32, estimate: Estimate) -> Quote {
        Quote {
            row,
            most: self.rows[row as usize].most(estimate),
        }
    }

    /// What the body bounds: its length in input tokens, and the largest output limit
    /// given times the number of choices.
    fn estimate(&self, view: &RequestView<'_>) -> Estimate {
        let Some(body) = view.body else {
            return Estimate::default();
        };
        let largest = |pointer: &JsonPointer| {
            body.values(pointer)
                .filter_map(|v| std::str::from_utf8(v).ok()?.parse::<u64>().ok())
                .max()
        };
        let output = self.output_limits.iter().filter_map(|p| largest(p)).max();
        let choices = largest(&self.choices).unwrap_or(1).clamp(1, MAX_CHOICES);
        Estimate {
            input_tokens: body.len,
            output_tokens: output.map(|o| o.saturating_mul(choices)),
        }
    }
}
