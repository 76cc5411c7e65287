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
        let models = self.model.extract(view).map_err(|_| Unpriced)?;
        let mut rows = models.iter().map(|m| self.row_of(m.as_text().as_bytes()));
        let row = match rows.next() {
            None => {
                let unread = matches!(self.model, KeySource::Json(_))
                    && view.body.is_none_or(|b| !b.read_whole());
                if unread {
                    // Without a `default`, a model not shown is refused as one not priced.
                    self.default.and(self.dearest)
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
    /// `max_cost`.
    fn estimate(&self, view: &RequestView<'_>) -> Estimate {
        let Some(body) = view.body else {
            return Estimate::default();
        };
        let complete = body.read_whole() && !body.overflowed();
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
        let output = self
            .output_limits
            .iter()
            .try_fold(None, |most: Option<u64>, p| {
                Ok::<_, ()>(most.max(largest(p)?))
            })
            .ok()
            .flatten()
            .filter(|_| complete);
        let choices = match largest(&self.choices) {
            Ok(n) if complete => Some(n.unwrap_or(1).clamp(1, MAX_CHOICES)),
            _ => None,
        };
        // A body's bytes bound its text's tokens, not an image's or a file's.
        let input_tokens = match body.json() {
            Some(json) if crate::spend::carries_media(json) => None,
            _ => body.len,
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
mod tests {
    use super::*;

    fn compile(table: &str) -> Result<Arc<Prices>, String> {
        compile_with("json:/model", table)
    }

    /// A table whose model is read from `model` (a key source).
    fn compile_with(model: &str, table: &str) -> Result<Arc<Prices>, String> {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[upstreams.api]\ntargets = [\"http://127.0.0.1:1\"]\n[prices.llm]\nmodel = \"{model}\"\n{table}\n[policies.p]\nkey = \"ip\"\nquota = 1000000\nwindow = \"day\"\nreserve = \"price:llm\"\nsettle = \"usage:llm\"\nmax_cost = 1000\n[[routes]]\nname = \"r\"\npath = \"/\"\nupstream = \"api\"\npolicies = [\"p\"]\n"
        );
        let config = crate::config::compile(std::path::Path::new("t.toml"), &text)
            .map_err(|e| e.to_string())?;
        Ok(config.prices[0].clone())
    }

    /// `prices`' quote of a POST whose body told `facts`.
    fn quote_of(prices: &Prices, facts: &crate::json::BodyFacts<'_>) -> Quote {
        let (method, uri, headers) = (
            http::Method::POST,
            http::Uri::from_static("/"),
            http::HeaderMap::new(),
        );
        let view = RequestView {
            method: &method,
            uri: &uri,
            headers: &headers,
            client_ip: std::net::Ipv4Addr::LOCALHOST.into(),
            route: "r",
            body: Some(facts),
        };
        prices.quote(&view).expect("priced")
    }

    #[test]
    fn prices_are_kept_to_a_millionth_and_a_finer_one_is_refused() {
        let prices = compile("\"m\" = { input = 0.15, output = 0.000001 }").expect("valid");
        assert_eq!((prices.rows[0].input, prices.rows[0].output), (150_000, 1));
        for finer in ["0.0000004", "0.0000015", "1e-9", "0.6000004", "2.0000004"] {
            let e = compile(&format!("\"m\" = {{ input = {finer}, output = 1 }}")).unwrap_err();
            assert!(
                e.contains("finer than a millionth of a unit"),
                "{finer}: {e}"
            );
        }
    }

    #[test]
    fn two_models_named_are_priced_at_the_dearest_of_every_price() {
        // A cheap row without max_output (unbounded) beside a dear bounded one: naming
        // both must not settle on the cheap row's prices.
        let prices = compile(
            "default = { input = 1, output = 1 }\n\"cheap\" = { input = 1, output = 2 }\n\"dear\" = { input = 10, output = 30, max_output = 100 }",
        )
        .expect("valid");
        let model = prices.pointers().next().expect("the model's").clone();
        let body = br#"{"model":"cheap","model":"dear"}"#;
        let mut facts = crate::json::BodyFacts::default();
        crate::json::walk(body, &[&model], &mut facts).expect("json");
        let row = prices.rows[quote_of(&prices, &facts).row as usize];
        assert_eq!((row.input, row.output), (10_000_000, 30_000_000));
    }

    #[test]
    fn a_body_not_read_is_priced_at_the_dearest_of_every_price() {
        let prices = compile(
            "default = { input = 5, output = 15 }\n\"big\" = { input = 10, output = 30, max_output = 100 }\n\"cached\" = { input = 1, cached_input = 20, output = 2 }",
        )
        .expect("valid");
        let unread = crate::json::BodyFacts::unread(Some(70_000));
        let quote = quote_of(&prices, &unread);
        let row = prices.rows[quote.row as usize];
        assert_eq!(
            (row.input, row.cached_input, row.output, row.max_output),
            (10_000_000, 20_000_000, 30_000_000, None),
            "the dearest of each price; no max_output, as a row has none"
        );
        assert_eq!(quote.most, None, "no output bound");
        assert_eq!(
            quote.input, 700_000,
            "its declared length at the dearest input price"
        );
    }

    /// Choices and output limits only bound a quote when the gateway counts them as the
    /// upstream will: a spelling lax validators read (pydantic takes `"1_28"` and
    /// `" 128"` for 128) or more values than the walk keeps leave the choices unknown
    /// and the quote no bound; `null` is not given; a number's spellings are one value.
    #[test]
    fn choices_the_gateway_cannot_count_bound_nothing() {
        let prices = compile("\"m\" = { input = 1, output = 1, max_output = 100 }").expect("valid");
        let most = |body: &str| {
            let mut facts = crate::json::BodyFacts::unread(Some(body.len() as u64));
            let pointers: Vec<&JsonPointer> = prices.pointers().map(|p| &**p).collect();
            crate::json::walk(body.as_bytes(), &pointers, &mut facts).expect("json");
            let most = quote_of(&prices, &facts).most;
            most.map(|m| m - body.len() as u64)
        };
        let with = |n: &str| format!(r#"{{"model":"m","max_tokens":10,"n":{n}}}"#);
        assert_eq!(most(&with("2")), Some(20));
        for same in ["128", "128.0", "1.28e2", "\"128\""] {
            assert_eq!(most(&with(same)), Some(1280), "{same}");
        }
        assert_eq!(most(&with("null")), Some(10), "not given: one choice");
        assert_eq!(most(&with("200")), Some(1280), "at most 128 believed");
        for unread in ["\"1_28\"", "\" 128\"", "-1", "1e300", "true"] {
            assert_eq!(most(&with(unread)), None, "{unread}");
        }
        // An output limit the gateway cannot read is the model's max_output.
        let spelled = r#"{"model":"m","max_tokens":"1_0","n":2}"#;
        assert_eq!(most(spelled), Some(200));
    }

    /// Past the values the walk keeps, `n` may be among those dropped: with the model
    /// named in a header (the body's model would be refused as unread), the quote is no
    /// bound.
    #[test]
    fn choices_past_what_the_walk_keeps_bound_nothing() {
        let table = "default = { input = 1, output = 1, max_output = 100 }";
        let prices = compile_with("header:x-model", table).expect("valid");
        let padded: String = (0..20).map(|i| format!(r#""max_tokens":{i},"#)).collect();
        let padded = format!(r#"{{{padded}"n":128}}"#);
        let mut facts = crate::json::BodyFacts::unread(Some(padded.len() as u64));
        let pointers: Vec<&JsonPointer> = prices.pointers().map(|p| &**p).collect();
        crate::json::walk(padded.as_bytes(), &pointers, &mut facts).expect("json");
        assert!(facts.overflowed());
        assert_eq!(quote_of(&prices, &facts).most, None);
    }
}
