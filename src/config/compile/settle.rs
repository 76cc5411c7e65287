//! `settle`, `reserve`, `max_cost`, `min_cost`, `max_debt`, `settle_unit`,
//! `refund_on_upstream_error`: a rate policy whose cost is settled after the response.

use std::num::NonZeroU64;

use super::*;
use crate::config::raw::IntOrText;

impl Compiler {
    /// The settle settings of rate policy `name` with `quota`, or `None` when it has
    /// none (`Some(None)`) or they are invalid (`None`).
    pub(super) fn settle(
        &mut self,
        name: &str,
        raw: &RawPolicy,
        quota: Option<&Quota>,
        max_delay: Option<Duration>,
    ) -> Option<Option<Settle>> {
        let Some(settle) = &raw.settle else {
            self.refuse_settle_fields(name, raw);
            return Some(None);
        };
        let source = self.settle_source(settle);
        let (reserve, priced) = self.settle_reserve(name, raw, quota, source.as_ref());
        let unit = self.settle_unit(name, raw, source.as_ref());
        let max_cost = self.settle_max_cost(name, raw, quota, max_delay);
        if let (Some(Some(_)), None) = (&priced, &raw.max_cost) {
            // A client that hangs up before the usage settles at max_cost (the rule of
            // every settle); by default that is far more than any request costs.
            self.warn(
                settle.span(),
                format!(
                    "policy `{name}` prices usage without max_cost: a client that hangs up \
                     before its usage arrives is charged max_cost, by default {}",
                    max_cost.map_or("the largest cost the store keeps".to_owned(), |m| m.to_string())
                ),
                Some("set max_cost to the most one request should be charged (e.g. the dearest reserve you expect)".to_owned()),
            );
        }
        let min_cost = self.settle_min_cost(name, raw, quota, max_cost);
        let max_debt = self.settle_max_debt(name, raw, quota, source.as_ref());
        Some(Some(Settle {
            source: source?,
            reserve: reserve.flatten_opt()?,
            priced: priced?,
            max_cost: max_cost?,
            max_cost_given: raw.max_cost.is_some(),
            min_cost: min_cost?,
            max_debt: max_debt?,
            unit: unit.flatten_opt()?.unwrap_or(NonZeroU64::MIN),
            refund_on_upstream_error: raw
                .refund_on_upstream_error
                .as_ref()
                .is_some_and(|r| *r.get_ref()),
        }))
    }

    /// Without `settle`, the fields that only tune settling are mistakes.
    fn refuse_settle_fields(&mut self, name: &str, raw: &RawPolicy) {
        self.refuse_fields(
            [
                ("reserve", raw.reserve.as_ref().map(S::span)),
                ("max_cost", raw.max_cost.as_ref().map(S::span)),
                ("settle_unit", raw.settle_unit.as_ref().map(S::span)),
                (
                    "refund_on_upstream_error",
                    raw.refund_on_upstream_error.as_ref().map(S::span),
                ),
                ("min_cost", raw.min_cost.as_ref().map(S::span)),
                ("max_debt", raw.max_debt.as_ref().map(S::span)),
            ],
            |field| format!("policy `{name}`: `{field}` applies only with `settle`"),
            "add settle = \"response_header:NAME\" (or response_trailer:NAME, response_bytes, request_bytes), or remove it",
        );
    }

    /// `reserve`: a number (`None` when absent, `Some(None)` when invalid; one above the
    /// burst is reported, as no request could pay it), or `"price:NAME"`: a quote from a
    /// price table (`None` when invalid). A `usage:NAME` settle quotes from its table
    /// unless told otherwise, and only from it.
    fn settle_reserve(
        &mut self,
        name: &str,
        raw: &RawPolicy,
        quota: Option<&Quota>,
        source: Option<&SettleSource>,
    ) -> (Option<Option<NonZeroU64>>, Option<Option<Arc<Prices>>>) {
        let usage = match source {
            Some(SettleSource::Usage(p)) => Some(p.clone()),
            _ => None,
        };
        let Some(r) = &raw.reserve else {
            return (None, Some(usage));
        };
        let number = match r.get_ref() {
            IntOrText::Int(n) => S::new(r.span(), *n),
            IntOrText::Text(text) => {
                let table = text
                    .strip_prefix("price:")
                    .and_then(|t| self.prices.get(t).cloned());
                let fits = table
                    .as_ref()
                    .zip(usage.as_ref())
                    .is_none_or(|(t, u)| t.name == u.name);
                if table.is_none() || !fits {
                    let hint = match (text.strip_prefix("price:"), &usage) {
                        (Some(_), Some(u)) if table.is_some() => format!("a usage:{} settle is priced by the same table: reserve = \"price:{}\"", u.name, u.name),
                        (Some(t), _) => format!("no [prices.{t}] table: define it, or name one of {:?}", self.prices.keys().collect::<Vec<_>>()),
                        _ => "write a number of units, or \"price:NAME\" for a quote from [prices.NAME]".to_owned(),
                    };
                    self.error(
                        r.span(),
                        format!(
                            "policy `{name}`: reserve `{text}` is not a number or a price table"
                        ),
                        Some(hint),
                    );
                    return (Some(None), None);
                }
                return (None, Some(table));
            }
        };
        if usage.is_some() {
            self.error(
                r.span(),
                format!("policy `{name}`: a usage settle is quoted per model, not a fixed reserve"),
                Some("remove reserve, or write reserve = \"price:NAME\"".to_owned()),
            );
            return (Some(None), None);
        }
        let reserve = Some(self.positive(&number, "reserve").and_then(NonZeroU64::new));
        let raw_reserve = Some(&number);
        if let (Some(Some(reserve)), Some(q), Some(r)) = (reserve, quota, raw_reserve) {
            if reserve.get() > q.burst() {
                self.error(
                    r.span(),
                    format!(
                        "policy `{name}`: reserve {reserve} exceeds burst {}",
                        q.burst()
                    ),
                    Some(
                        "no request could ever be admitted: lower reserve or raise burst"
                            .to_owned(),
                    ),
                );
            }
        }
        (reserve, Some(None))
    }

    /// `settle_unit`: `None` when absent, `Some(None)` when invalid. It divides measured
    /// bytes, so it is refused with a header or trailer source.
    fn settle_unit(
        &mut self,
        name: &str,
        raw: &RawPolicy,
        source: Option<&SettleSource>,
    ) -> Option<Option<NonZeroU64>> {
        let unit = raw
            .settle_unit
            .as_ref()
            .map(|u| self.positive(u, "settle_unit").and_then(NonZeroU64::new));
        if let (Some(u), Some(source)) = (&raw.settle_unit, source) {
            if !source.measures_bytes() {
                self.error(
                    u.span(),
                    format!(
                        "policy `{name}`: settle_unit divides measured bytes, and {} is not bytes",
                        source.describe()
                    ),
                    Some(
                        "a header or trailer already carries units: remove settle_unit".to_owned(),
                    ),
                );
            }
        }
        unit
    }

    /// `max_cost`, by default (and at most) the largest cost whose debt the store keeps
    /// exactly with this quota and `max_delay`.
    fn settle_max_cost(
        &mut self,
        name: &str,
        raw: &RawPolicy,
        quota: Option<&Quota>,
        max_delay: Option<Duration>,
    ) -> Option<u64> {
        let representable = quota.map(|q| {
            let room = MAX_SETTLED_DEBT_NS
                .saturating_sub(q.tolerance_ns())
                .saturating_sub(
                    u64::try_from(max_delay.unwrap_or_default().as_nanos()).unwrap_or(u64::MAX),
                );
            (room / q.interval_ns()).max(1)
        });
        match (&raw.max_cost, representable) {
            (Some(m), Some(limit)) => {
                let v = self.positive(m, "max_cost");
                if let Some(v) = v {
                    if v > limit {
                        self.error(
                            m.span(),
                            format!("policy `{name}`: max_cost {v} would owe more than 52 days"),
                            Some(format!("at most {limit} with this limit, period and burst")),
                        );
                    }
                }
                v
            }
            (None, limit) => limit,
            (Some(m), None) => self.positive(m, "max_cost"),
        }
    }

    /// `min_cost` (default 1): at most `max_cost` and the burst, or no request could be
    /// admitted and settle.
    fn settle_min_cost(
        &mut self,
        name: &str,
        raw: &RawPolicy,
        quota: Option<&Quota>,
        max_cost: Option<u64>,
    ) -> Option<u64> {
        let Some(m) = &raw.min_cost else {
            return Some(1);
        };
        let v = self.whole(m, "min_cost")?;
        let ceiling = [max_cost, quota.map(Quota::burst)]
            .into_iter()
            .flatten()
            .min();
        if let Some(ceiling) = ceiling.filter(|&c| v > c) {
            self.error(
                m.span(),
                format!("policy `{name}`: min_cost {v} exceeds {ceiling} (max_cost or burst)"),
                Some(
                    "min_cost is the least a request is charged: at most the burst and max_cost"
                        .to_owned(),
                ),
            );
            return None;
        }
        Some(v)
    }

    /// `max_debt` (bytes sources; default and at most one burst): how far beyond the
    /// burst a key's transfers may run at once.
    fn settle_max_debt(
        &mut self,
        name: &str,
        raw: &RawPolicy,
        quota: Option<&Quota>,
        source: Option<&SettleSource>,
    ) -> Option<u64> {
        let burst = quota.map_or(0, Quota::burst);
        let Some(m) = &raw.max_debt else {
            return Some(if source.is_some_and(SettleSource::measures_bytes) {
                burst
            } else {
                0
            });
        };
        if let Some(source) = source.filter(|s| !s.measures_bytes()) {
            self.error(
                m.span(),
                format!(
                    "policy `{name}`: max_debt bounds bytes in flight, and {} is not bytes",
                    source.describe()
                ),
                Some(
                    "a header or trailer value arrives whole, capped by max_cost: remove max_debt"
                        .to_owned(),
                ),
            );
            return None;
        }
        let v = self.whole(m, "max_debt")?;
        if quota.is_some() && v > burst {
            self.error(
                m.span(),
                format!("policy `{name}`: max_debt {v} exceeds the burst {burst}"),
                Some("a key may run at most one burst beyond its burst: lower max_debt".to_owned()),
            );
            return None;
        }
        Some(v)
    }

    fn settle_source(&mut self, raw: &S<String>) -> Option<SettleSource> {
        let text = raw.get_ref().trim();
        let header = |name: &str| http::HeaderName::from_bytes(name.trim().as_bytes()).ok();
        let parsed = match text.split_once(':') {
            Some(("response_header", name)) => header(name).map(SettleSource::ResponseHeader),
            Some(("response_trailer", name)) => header(name).map(SettleSource::ResponseTrailer),
            None if text == "response_bytes" => Some(SettleSource::ResponseBytes),
            None if text == "request_bytes" => Some(SettleSource::RequestBytes),
            Some(("usage", table)) => match self.prices.get(table.trim()) {
                Some(p) => Some(SettleSource::Usage(p.clone())),
                None => {
                    let known: Vec<&String> = self.prices.keys().collect();
                    self.error(
                        raw.span(),
                        format!("`{text}`: no [prices.{}] table", table.trim()),
                        Some(format!("define it, or name one of {known:?}")),
                    );
                    return None;
                }
            },
            _ => None,
        };
        if parsed.is_none() {
            self.error(
                raw.span(),
                format!("`{text}` is not a settle source"),
                Some("write \"response_header:NAME\", \"response_trailer:NAME\", \"response_bytes\", \"request_bytes\" or \"usage:PRICES\"".to_owned()),
            );
        }
        parsed
    }
}

/// `Option<Option<T>>` where the outer `None` is "given but invalid": `Some(None)` when
/// absent, `None` when invalid.
trait FlattenOpt<T> {
    fn flatten_opt(self) -> Option<Option<T>>;
}

impl<T> FlattenOpt<T> for Option<Option<T>> {
    fn flatten_opt(self) -> Option<Option<T>> {
        match self {
            None => Some(None),
            Some(Some(v)) => Some(Some(v)),
            Some(None) => None,
        }
    }
}

#[cfg(test)]
mod tests;
