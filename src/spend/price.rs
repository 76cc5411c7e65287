//! Per-token prices and the two costs a priced request has: the most it can cost (its
//! reserve, from what its body declares) and what it cost (its usage, priced).

use super::usage::Usage;

/// Prices are kept in millionths of a unit per token, so a price table may say
/// `0.15` micro-dollars per token and every cost stays whole-number arithmetic.
pub const PRICE_SCALE: u64 = 1_000_000;

/// One row of a price table: units per token (× [`PRICE_SCALE`]) for input, cached input,
/// input written to a prompt cache (five minutes' and an hour's, Anthropic's) and output,
/// and the model's most output tokens when a request names none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenPrice {
    pub input: u64,
    pub cached_input: u64,
    pub cache_write: u64,
    pub cache_write_1h: u64,
    pub output: u64,
    pub max_output: Option<u64>,
}

/// What a request body declares about its own size: an upper bound on its input tokens
/// (its length in bytes: a token is at least one byte of text), on each choice's output
/// tokens (`max_tokens`) and the number of choices (`n`), each `None` when the body does
/// not bound it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Estimate {
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub choices: Option<u64>,
}

impl TokenPrice {
    /// What `usage` costs, rounded up to a whole unit.
    pub fn cost(&self, usage: &Usage) -> u64 {
        let cached = usage.cached.min(usage.input);
        let written = usage.written.min(usage.input - cached);
        let written_1h = usage.written_1h.min(written);
        let part = |tokens: u64, price: u64| u128::from(tokens) * u128::from(price);
        let scaled = part(usage.input - cached - written, self.input)
            .saturating_add(part(cached, self.cached_input))
            .saturating_add(part(written - written_1h, self.cache_write))
            .saturating_add(part(written_1h, self.cache_write_1h))
            .saturating_add(part(usage.output, self.output));
        whole_units(scaled)
    }

    /// The most a request with `estimate` can cost (every input token at its dearest:
    /// uncached, or written to a cache when that costs more), `None` when its output is
    /// unbounded (no `max_tokens` and no `max_output` for the model; choices not known)
    /// or its input unknown.
    pub fn most(&self, estimate: Estimate) -> Option<u64> {
        let input = estimate.input_tokens?;
        let each = estimate.output_tokens.or(self.max_output)?;
        let output = each.saturating_mul(estimate.choices?);
        Some(self.dearest_input().cost(&Usage {
            input,
            output,
            ..Usage::default()
        }))
    }

    /// What the input the body shows costs at its dearest (none when the body was not
    /// read).
    pub fn input_cost(&self, estimate: Estimate) -> u64 {
        self.dearest_input().cost(&Usage {
            input: estimate.input_tokens.unwrap_or(0),
            ..Usage::default()
        })
    }

    /// This row with every input token priced at the dearest way the answer may count it.
    fn dearest_input(&self) -> Self {
        Self {
            input: self.input.max(self.cache_write).max(self.cache_write_1h),
            ..*self
        }
    }
}

/// `scaled` / [`PRICE_SCALE`], rounded up, saturating at `u64::MAX`.
fn whole_units(scaled: u128) -> u64 {
    u64::try_from(scaled.div_ceil(u128::from(PRICE_SCALE))).unwrap_or(u64::MAX)
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINI: TokenPrice = TokenPrice {
        input: 150_000,
        cached_input: 75_000,
        cache_write: 150_000,
        cache_write_1h: 150_000,
        output: 600_000,
        max_output: Some(16_384),
    };

    #[test]
    fn usage_is_priced_and_rounded_up() {
        let usage = Usage {
            input: 1000,
            cached: 400,
            output: 10,
            ..Usage::default()
        };
        // 600 × 0.15 + 400 × 0.075 + 10 × 0.6 = 90 + 30 + 6.
        assert_eq!(MINI.cost(&usage), 126);
        let one = Usage {
            input: 1,
            cached: 0,
            output: 0,
            ..Usage::default()
        };
        assert_eq!(MINI.cost(&one), 1, "a started unit counts");
        assert_eq!(MINI.cost(&Usage::default()), 0);
        let lying = Usage {
            input: 10,
            cached: 50,
            output: 0,
            ..Usage::default()
        };
        assert_eq!(MINI.cost(&lying), 1, "cached tokens are at most the input");
    }

    #[test]
    fn the_most_a_request_can_cost_needs_both_bounds() {
        let declared = Estimate {
            input_tokens: Some(2000),
            output_tokens: Some(100),
            choices: Some(1),
        };
        assert_eq!(MINI.most(declared), Some(300 + 60));
        let three = Estimate {
            choices: Some(3),
            ..declared
        };
        assert_eq!(MINI.most(three), Some(300 + 180));
        let unknown_choices = Estimate {
            choices: None,
            ..declared
        };
        assert_eq!(MINI.most(unknown_choices), None, "n could be anything");
        let open = Estimate {
            output_tokens: None,
            ..declared
        };
        assert_eq!(MINI.most(open), Some(300 + 9831), "the model's max_output");
        let open_three = Estimate {
            choices: Some(3),
            ..open
        };
        let three_outputs = Usage {
            input: 0,
            cached: 0,
            output: 3 * MINI.max_output.expect("set"),
            ..Usage::default()
        };
        assert_eq!(
            MINI.most(open_three),
            Some(300 + MINI.cost(&three_outputs)),
            "max_output is each choice's"
        );
        let unknown_model = TokenPrice {
            max_output: None,
            ..MINI
        };
        assert_eq!(unknown_model.most(open), None);
        let unknown_input = Estimate {
            input_tokens: None,
            ..declared
        };
        assert_eq!(MINI.most(unknown_input), None);
        let huge = TokenPrice {
            output: u64::MAX,
            ..MINI
        };
        let many = Estimate {
            input_tokens: Some(u64::MAX),
            output_tokens: Some(u64::MAX),
            choices: Some(128),
        };
        assert_eq!(huge.most(many), Some(u64::MAX), "saturates");
    }

    /// Anthropic's cache writes at their own prices, an hour's apart from five minutes',
    /// never below what the usage says was written; the bound counts every input token at
    /// the dearest of the three.
    #[test]
    fn cache_writes_are_priced_as_written() {
        let row = TokenPrice {
            cache_write: 187_500,
            cache_write_1h: 300_000,
            ..MINI
        };
        let usage = Usage {
            input: 1000,
            cached: 100,
            written: 600,
            written_1h: 200,
            output: 10,
        };
        // 300 × 0.15 + 100 × 0.075 + 400 × 0.1875 + 200 × 0.3 + 10 × 0.6.
        assert_eq!(row.cost(&usage), 45 + 8 + 75 + 60 + 6);
        let lying = Usage {
            input: 10,
            written: 50,
            written_1h: 70,
            ..Usage::default()
        };
        assert_eq!(
            row.cost(&lying),
            3,
            "written is at most the input: 10 × 0.3"
        );
        let bound = Estimate {
            input_tokens: Some(1000),
            output_tokens: Some(0),
            choices: Some(1),
        };
        assert_eq!(row.most(bound), Some(300), "1,000 at the hour's 0.3");
    }
}
