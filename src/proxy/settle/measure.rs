//! What a response tells of a settled tier's cost, and the units that settles at: the
//! value reported, the bytes that moved, or the fallback when neither is usable.

use http::HeaderMap;

use crate::metrics::SettleFallback;
use crate::store::PendingSettle;

/// What was learned of one tier's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measured {
    /// The value the upstream reported.
    Value(u64),
    /// No value where one was expected, though the exchange completed.
    Missing,
    /// A successful answer that reported no usage (a stream without `include_usage`),
    /// one cut for another tier, or none before the upstream timeout (the upstream may
    /// still run the request): what the request used is unknown, and the client could
    /// have chosen it so.
    Unreported,
    /// A value that is not a whole number of at least zero.
    Invalid,
    /// The whole body went through: this many bytes.
    Bytes(u64),
    /// The upstream failed before the cost was known (no answer, or a 5xx without the
    /// value, or its body broke), after this many bytes.
    UpstreamFailed(u64),
    /// The client left (hung up, reset its stream, its own body failed) before the cost
    /// was known, after this many bytes; or the answer was a tunnel.
    Aborted(u64),
    /// The gateway cut the body where a tier's budget (or `max_cost`) ran out, after this
    /// many bytes.
    Cut(u64),
    /// The client left before the request was handed to an upstream connection: nothing
    /// was used upstream.
    NotSent,
}

/// The units `pending` settles at for `measured`, and why, when it is not the value as
/// measured. No choice of the client lowers the charge: a value that never arrives
/// because the client left, or because the gateway cut the body for another tier,
/// settles at `max_cost`; bytes at least at what moved (and the
/// reserve, for a client that left). A value the upstream did not send is the reserve;
/// one above `max_cost` is capped there. Nothing settles below `min_cost`.
pub fn units_for(pending: &PendingSettle, measured: Measured) -> (u64, Option<SettleFallback>) {
    let settle = pending.settle();
    // What the request is charged when its cost is not known: the reserve as written,
    // also where the key's burst cut what was reserved (`RequestTiers::cap_reserves`).
    let reserve = pending.fallback;
    let bytes = |n: u64| n.div_ceil(settle.unit.get());
    let measures_bytes = settle.source.measures_bytes();
    let (units, why) = match measured {
        Measured::Value(v) if v > settle.max_cost => {
            (settle.max_cost, Some(SettleFallback::Capped))
        }
        Measured::Value(v) => (v, None),
        Measured::Missing => (reserve, Some(SettleFallback::Missing)),
        // The reserve is the most the request could cost only when its quote was bounded.
        Measured::Unreported if pending.unbounded => {
            (settle.max_cost, Some(SettleFallback::Missing))
        }
        Measured::Unreported => (reserve, Some(SettleFallback::Missing)),
        Measured::Invalid => (reserve, Some(SettleFallback::Invalid)),
        Measured::Bytes(n) => (bytes(n), None),
        Measured::UpstreamFailed(n) => {
            let measured = if measures_bytes { bytes(n) } else { 0 };
            let units = if settle.refund_on_upstream_error {
                measured
            } else {
                reserve.max(measured)
            };
            (units, Some(SettleFallback::UpstreamError))
        }
        Measured::Aborted(n) if measures_bytes => {
            (reserve.max(bytes(n)), Some(SettleFallback::Aborted))
        }
        Measured::Aborted(_) => (settle.max_cost, Some(SettleFallback::Aborted)),
        Measured::Cut(n) if measures_bytes => (bytes(n), Some(SettleFallback::Budget)),
        // A value (a trailer's) that the gateway's cut for another tier kept from
        // arriving: the client can cause that cut (by spending its bytes tier), so it
        // settles at the most, like a value the client hung up on.
        Measured::Cut(_) => (settle.max_cost, Some(SettleFallback::Budget)),
        Measured::NotSent => (0, Some(SettleFallback::NotSent)),
    };
    if units < settle.min_cost {
        (settle.min_cost, why.or(Some(SettleFallback::MinCost)))
    } else {
        (units, why)
    }
}

/// A header or trailer value: a whole number, surrounding spaces allowed. One past
/// what a u64 holds is the most there is (capped at `max_cost` like any large value),
/// never an invalid one settled at the smaller reserve.
pub fn parse_value(headers: &HeaderMap, name: &http::HeaderName) -> Measured {
    let Some(value) = headers.get(name) else {
        return Measured::Missing;
    };
    match std::str::from_utf8(value.as_bytes().trim_ascii()).map(str::parse::<u64>) {
        Ok(Ok(v)) => Measured::Value(v),
        Ok(Err(e)) if *e.kind() == std::num::IntErrorKind::PosOverflow => Measured::Value(u64::MAX),
        _ => Measured::Invalid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(settle: &str, extra: &str) -> PendingSettle {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[policies.p]\nkey = \"ip\"\nlimit = 60\nperiod = \"1m\"\nburst = 100\nreserve = 10\nsettle = \"{settle}\"\n{extra}"
        );
        let config = crate::config::compile(std::path::Path::new("t.toml"), &text).expect("valid");
        PendingSettle {
            reset_mark: 0,
            charged_us: 0,
            policy: config.policies[0].clone(),
            tier: 0,
            position: 0,
            key: 1,
            redis_key: None,
            t_ns: 1_000_000_000,
            tau_ns: 100_000_000_000,
            reserve: 10,
            fallback: 10,
            drawn: 0,
            unchecked: 0,
            ahead_ns: 10_000_000_000,
            window: None,
            admitted_at: 0,
            row: None,
            unbounded: false,
        }
    }

    #[test]
    fn values_and_their_fallbacks() {
        let p = pending(
            "response_header:x-used",
            "max_cost = 50\nrefund_on_upstream_error = true\n",
        );
        assert_eq!(units_for(&p, Measured::Value(30)), (30, None));
        assert_eq!(
            units_for(&p, Measured::Value(0)),
            (1, Some(SettleFallback::MinCost)),
            "min_cost 1"
        );
        assert_eq!(
            units_for(&p, Measured::Value(51)),
            (50, Some(SettleFallback::Capped))
        );
        assert_eq!(
            units_for(&p, Measured::Missing),
            (10, Some(SettleFallback::Missing))
        );
        assert_eq!(
            units_for(&p, Measured::Invalid),
            (10, Some(SettleFallback::Invalid))
        );
        assert_eq!(
            units_for(&p, Measured::UpstreamFailed(999)),
            (1, Some(SettleFallback::UpstreamError)),
            "refunded, down to min_cost"
        );
        assert_eq!(
            units_for(&p, Measured::Aborted(999)),
            (50, Some(SettleFallback::Aborted)),
            "the client left before the value came: max_cost"
        );
        assert_eq!(
            units_for(&p, Measured::Cut(0)),
            (50, Some(SettleFallback::Budget)),
            "a value cut off for another tier: max_cost, not the bytes that moved"
        );
        let keep = pending("response_header:x-used", "");
        assert_eq!(
            units_for(&keep, Measured::UpstreamFailed(0)),
            (10, Some(SettleFallback::UpstreamError))
        );
    }

    #[test]
    fn min_cost_floors_every_value_and_bytes_cut_by_the_gateway_pay_what_moved() {
        let p = pending("response_bytes", "min_cost = 4\n");
        assert_eq!(
            units_for(&p, Measured::Bytes(3)),
            (4, Some(SettleFallback::MinCost))
        );
        assert_eq!(units_for(&p, Measured::Bytes(5)), (5, None));
        assert_eq!(
            units_for(&p, Measured::Cut(70)),
            (70, Some(SettleFallback::Budget))
        );
    }

    #[test]
    fn bytes_count_in_units_and_a_cut_pays_at_least_the_reserve() {
        let p = pending("response_bytes", "settle_unit = 1024\n");
        assert_eq!(
            units_for(&p, Measured::Bytes(0)),
            (1, Some(SettleFallback::MinCost))
        );
        assert_eq!(
            units_for(&p, Measured::Bytes(1)),
            (1, None),
            "a started unit counts"
        );
        assert_eq!(units_for(&p, Measured::Bytes(20 * 1024)), (20, None));
        assert_eq!(
            units_for(&p, Measured::Aborted(2048)),
            (10, Some(SettleFallback::Aborted))
        );
        assert_eq!(
            units_for(&p, Measured::Aborted(20 * 1024)),
            (20, Some(SettleFallback::Aborted))
        );
        assert_eq!(
            units_for(&p, Measured::UpstreamFailed(0)),
            (10, Some(SettleFallback::UpstreamError))
        );
        let refund = pending("response_bytes", "refund_on_upstream_error = true\n");
        assert_eq!(
            units_for(&refund, Measured::UpstreamFailed(3)),
            (3, Some(SettleFallback::UpstreamError))
        );
    }

    #[test]
    fn header_values_are_whole_numbers() {
        let name = http::HeaderName::from_static("x-used");
        let mut h = HeaderMap::new();
        assert_eq!(parse_value(&h, &name), Measured::Missing);
        for (text, expected) in [
            ("42", Measured::Value(42)),
            (" 7 ", Measured::Value(7)),
            ("-1", Measured::Invalid),
            ("1e3", Measured::Invalid),
            ("", Measured::Invalid),
            ("18446744073709551615", Measured::Value(u64::MAX)),
            ("99999999999999999999999", Measured::Value(u64::MAX)),
            ("-99999999999999999999999", Measured::Invalid),
        ] {
            h.insert(&name, http::HeaderValue::from_str(text).unwrap());
            assert_eq!(parse_value(&h, &name), expected, "{text:?}");
        }
    }
}
