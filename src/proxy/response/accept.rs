//! Reading `Accept` for the one choice the gateway makes from it: whether a refusal's body
//! is RFC 9457 problem details.

use http::header::ACCEPT;
use http::HeaderMap;

/// The thousandths of a qvalue (`1`, `0.5`, `0.001`, `1.000`; RFC 9110 § 12.4.2), `None`
/// when it is not one.
fn qvalue(text: &[u8]) -> Option<u16> {
    let (whole, fraction) = match text.iter().position(|&b| b == b'.') {
        Some(dot) => (&text[..dot], &text[dot + 1..]),
        None => (text, &[][..]),
    };
    if fraction.len() > 3 || !fraction.iter().all(u8::is_ascii_digit) {
        return None;
    }
    let mut thousandths = 0u16;
    for i in 0..3 {
        thousandths = thousandths * 10 + fraction.get(i).map_or(0, |d| u16::from(d - b'0'));
    }
    match whole {
        b"0" => Some(thousandths),
        b"1" if thousandths == 0 => Some(1000),
        _ => None,
    }
}

/// Whether the request's `Accept` asks for `application/problem+json` by name, with a
/// weight above 0 and not below that of `application/json` (when that is named too).
/// `*/*` and `application/*` do not count: a client that did not name the type gets
/// the plain JSON body it always got. Reads the header in place, allocating nothing.
pub fn wants_problem_json(headers: &HeaderMap) -> bool {
    // The highest weight each type is named with, in thousandths.
    let (mut problem, mut json) = (None::<u16>, None::<u16>);
    for value in headers.get_all(ACCEPT) {
        for range in value.as_bytes().split(|&b| b == b',') {
            let mut parts = range.split(|&b| b == b';');
            let media_type = parts.next().unwrap_or_default().trim_ascii();
            let slot = if media_type.eq_ignore_ascii_case(b"application/problem+json") {
                &mut problem
            } else if media_type.eq_ignore_ascii_case(b"application/json") {
                &mut json
            } else {
                continue;
            };
            let mut weight = Some(1000);
            for param in parts {
                let param = param.trim_ascii();
                if let Some(q) = param
                    .strip_prefix(b"q=")
                    .or_else(|| param.strip_prefix(b"Q="))
                {
                    weight = qvalue(q.trim_ascii());
                }
            }
            // A range with an unreadable weight is ignored.
            if let Some(w) = weight {
                *slot = Some(slot.map_or(w, |seen| seen.max(w)));
            }
        }
    }
    problem.is_some_and(|p| p > 0 && p >= json.unwrap_or(0))
}

#[cfg(test)]
mod tests {
    use super::*;
    use http::HeaderValue;

    fn accept(values: &[&'static str]) -> bool {
        let mut h = HeaderMap::new();
        for v in values {
            h.append(ACCEPT, HeaderValue::from_static(v));
        }
        wants_problem_json(&h)
    }

    #[test]
    fn qvalues_are_read_in_thousandths() {
        for (text, q) in [
            ("1", Some(1000)),
            ("1.", Some(1000)),
            ("1.000", Some(1000)),
            ("0", Some(0)),
            ("0.000", Some(0)),
            ("0.5", Some(500)),
            ("0.05", Some(50)),
            ("0.001", Some(1)),
            ("1.001", None),
            ("2", None),
            ("0.0001", None),
            (".5", None),
            ("", None),
            ("0.x", None),
            ("-1", None),
        ] {
            assert_eq!(qvalue(text.as_bytes()), q, "{text:?}");
        }
    }

    #[test]
    fn problem_json_only_when_named_with_a_weight_above_zero() {
        for (values, wanted) in [
            (&[][..], false),
            (&["*/*"], false),
            (&["application/*"], false),
            (&["application/json"], false),
            (&["application/problem+jsonx"], false),
            (&["application/problem+json;q=0"], false),
            (&["application/problem+json; q=0.0"], false),
            (&["application/problem+json;q=oops"], false),
            (&["application/problem+json"], true),
            (&["  Application/Problem+JSON  "], true),
            (&["application/problem+json;charset=utf-8;Q=0.2"], true),
            (&["text/html", "application/problem+json;q=0.1"], true),
            // application/json preferred by weight: plain JSON.
            (&["application/json, application/problem+json;q=0.9"], false),
            (&["application/json;q=0.9, application/problem+json"], true),
            (&["application/json, application/problem+json"], true),
            // The highest weight a type is named with counts.
            (
                &["application/problem+json;q=0", "application/problem+json"],
                true,
            ),
        ] {
            assert_eq!(accept(values), wanted, "{values:?}");
        }
    }
}
