//! `[prices.NAME]`: `model` (where the model's name is read), `default` (the row of models
//! not listed; without it they are refused), `upstream_reads` (the output limits the
//! upstream reads) and one row per model:
//! `{ input = …, output = …, cached_input = …, max_output = … }`, prices in units per
//! token (fractions allowed, to a millionth).

use super::names::valid_name;
use super::*;
use crate::spend::{TokenPrice, PRICE_SCALE};

/// Highest price accepted per token, in units: a mistake beyond this (a price per million
/// tokens written as per token, say 10^9 for 1,000) is caught.
const MAX_PRICE: f64 = 1e9;

type RawTable = S<BTreeMap<String, S<toml::Value>>>;

impl Compiler {
    pub(super) fn price_table(&mut self, name: String, raw: RawTable) -> Option<Prices> {
        let span = raw.span();
        let mut table = raw.into_inner();
        if !valid_name(&name) {
            self.error(span.clone(), format!("price table name `{name}` has characters that cannot go into headers, JSON and metric labels unescaped"), Some("use letters, digits and _ . : - only".to_owned()));
        }
        let model = match table.remove("model") {
            Some(m) => self.price_model(&name, &m),
            None => {
                self.error(
                    span.clone(),
                    format!("[prices.{name}] has no `model`"),
                    Some(
                        "say where a request names its model, e.g. model = \"json:/model\""
                            .to_owned(),
                    ),
                );
                None
            }
        };
        let default = table
            .remove("default")
            .map(|d| self.price_row(&name, "default", &d));
        let reads = match table.remove("upstream_reads") {
            Some(r) => self.upstream_reads(&name, &r),
            None => Some([true; 3]),
        };
        let mut rows = Vec::with_capacity(table.len());
        let mut ok = true;
        for (model, row) in &table {
            match self.price_row(&name, model, row) {
                Some(price) => rows.push((model.clone(), price)),
                None => ok = false,
            }
        }
        if rows.is_empty() && default.is_none() {
            self.error(span, format!("[prices.{name}] prices no model"), Some("add a row, e.g. \"gpt-4o-mini\" = { input = 0.15, output = 0.6 }, or default = { … }".to_owned()));
            return None;
        }
        let default = match default {
            Some(None) => return None,
            Some(Some(d)) => Some(d),
            None => None,
        };
        let (model, reads) = (model?, reads?);
        ok.then(|| Prices::new(name, model, (rows, default), reads))
    }

    /// `upstream_reads = ["max_tokens", …]`: the output limits the upstream reads, of
    /// those a quote knows.
    fn upstream_reads(&mut self, name: &str, raw: &S<toml::Value>) -> Option<[bool; 3]> {
        use crate::config::prices::OUTPUT_LIMITS;
        let known = OUTPUT_LIMITS.map(|l| l.trim_start_matches('/'));
        let hint = || {
            Some(format!(
                "name those the upstream reads, of {} (Ollama's OpenAI endpoint: [\"max_tokens\"])",
                known.join(", ")
            ))
        };
        let Some(list) = raw.get_ref().as_array() else {
            let what = format!("[prices.{name}] upstream_reads must be a list of output limits");
            self.error(raw.span(), what, hint());
            return None;
        };
        let mut reads = [false; 3];
        for item in list {
            match known.iter().position(|k| item.as_str() == Some(*k)) {
                Some(i) => reads[i] = true,
                None => {
                    let what = format!(
                        "[prices.{name}] upstream_reads: {item} is no output limit a quote reads"
                    );
                    self.error(raw.span(), what, hint());
                    return None;
                }
            }
        }
        Some(reads)
    }

    fn price_model(&mut self, name: &str, raw: &S<toml::Value>) -> Option<KeySource> {
        let Some(text) = raw.get_ref().as_str() else {
            self.error(
                raw.span(),
                format!("[prices.{name}] model must be a key source"),
                Some("e.g. model = \"json:/model\"".to_owned()),
            );
            return None;
        };
        match text.parse::<KeySource>() {
            Ok(source) => Some(source),
            Err(e) => {
                self.error(
                    raw.span(),
                    format!("[prices.{name}] model: {e}"),
                    Some("e.g. model = \"json:/model\" or \"header:x-model\"".to_owned()),
                );
                None
            }
        }
    }

    /// One row: `input` and `output` required; `cached_input`, `cache_write` (default:
    /// `input`), `cache_write_1h` (default: `cache_write`) and `max_output` (tokens)
    /// optional.
    fn price_row(&mut self, name: &str, model: &str, raw: &S<toml::Value>) -> Option<TokenPrice> {
        let where_ = format!("[prices.{name}] \"{model}\"");
        let Some(fields) = raw.get_ref().as_table() else {
            self.error(
                raw.span(),
                format!("{where_} must be a table of prices"),
                Some("e.g. { input = 0.15, output = 0.6 } (units per token)".to_owned()),
            );
            return None;
        };
        let bad = self.unknown_row_fields(&where_, fields, raw.span());
        let mut price = |field: &str, required: bool| {
            self.row_price(&where_, fields, raw.span(), (field, required))
        };
        let input = price("input", true);
        let output = price("output", true);
        let cached = price("cached_input", false);
        let written = price("cache_write", false);
        let written_1h = price("cache_write_1h", false);
        let max_output = match fields.get("max_output") {
            None => Some(None),
            Some(v) => match v.as_integer().filter(|&i| i >= 1) {
                Some(i) => Some(Some(i as u64)),
                None => {
                    self.error(raw.span(), format!("{where_}: `max_output` must be a whole number of tokens, at least 1"), Some("the model's most output tokens, used when a request names no max_tokens".to_owned()));
                    None
                }
            },
        };
        let (input, output) = (input??, output??);
        if bad {
            return None;
        }
        let cache_write = written?.unwrap_or(input);
        Some(TokenPrice {
            input,
            output,
            cached_input: cached?.unwrap_or(input),
            cache_write,
            cache_write_1h: written_1h?.unwrap_or(cache_write),
            max_output: max_output?,
        })
    }

    /// Refuses a row's fields no price has; whether there was one.
    fn unknown_row_fields(
        &mut self,
        where_: &str,
        fields: &toml::map::Map<String, toml::Value>,
        span: std::ops::Range<usize>,
    ) -> bool {
        const FIELDS: [&str; 6] = [
            "input",
            "output",
            "cached_input",
            "cache_write",
            "cache_write_1h",
            "max_output",
        ];
        let mut bad = false;
        for key in fields.keys().filter(|k| !FIELDS.contains(&k.as_str())) {
            self.error(
                span.clone(),
                format!("{where_} has an unknown field `{key}`"),
                Some(format!("fields: {}", FIELDS.join(", "))),
            );
            bad = true;
        }
        bad
    }

    /// A row's price `field` (`None`: refused; `Some(None)`: not given, and not
    /// `required`).
    fn row_price(
        &mut self,
        where_: &str,
        fields: &toml::map::Map<String, toml::Value>,
        span: std::ops::Range<usize>,
        (field, required): (&str, bool),
    ) -> Option<Option<u64>> {
        match fields.get(field) {
            None if required => {
                self.error(
                    span,
                    format!("{where_} has no `{field}` price"),
                    Some("prices are units per token, e.g. input = 0.15".to_owned()),
                );
                None
            }
            None => Some(None),
            Some(v) => match kept_price(v) {
                Ok(kept) => Some(Some(kept)),
                Err(Unkept::Finer(n)) => {
                    self.error(
                        span,
                        format!("{where_}: `{field}` = {n} is finer than a millionth of a unit"),
                        Some("prices are kept to a millionth of a unit per token: use a smaller unit (e.g. micro-dollars: 0.15 for $0.15 per million tokens)".to_owned()),
                    );
                    None
                }
                Err(Unkept::Range) => {
                    self.error(span, format!("{where_}: `{field}` must be a number from 0 to {MAX_PRICE:e} (units per token)"), None::<String>);
                    None
                }
            },
        }
    }
}

/// Why a price cannot be kept.
enum Unkept {
    /// Not a number from 0 to `MAX_PRICE`.
    Range,
    /// Finer than a millionth of a unit.
    Finer(f64),
}

/// A price in millionths of a unit. Kept to a millionth: a finer price would be charged
/// rounded (a tiny one as nothing), so it is refused, not bent.
fn kept_price(v: &toml::Value) -> Result<u64, Unkept> {
    let number = v.as_float().or_else(|| v.as_integer().map(|i| i as f64));
    let n = number
        .filter(|n| n.is_finite() && (0.0..=MAX_PRICE).contains(n))
        .ok_or(Unkept::Range)?;
    let scaled = n * PRICE_SCALE as f64;
    let whole = scaled.round();
    // Beyond what a decimal's float form is off by: a finer price.
    if (scaled - whole).abs() > (scaled * 4.0 * f64::EPSILON).max(1e-6) {
        return Err(Unkept::Finer(n));
    }
    Ok(whole as u64)
}
