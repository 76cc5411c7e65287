//! Hints for what the TOML reader reports, in the config's own words.

/// A hint for what the TOML reader reports, in the config's own words: the nearest known
/// name for an unknown field or table, and what a value of the wrong type should look like.
pub(super) fn parse_hint(message: &str) -> Option<String> {
    if let Some(rest) = message.strip_prefix("unknown field `") {
        let (name, rest) = rest.split_once('`')?;
        let known: Vec<String> = rest
            .split('`')
            .skip(1)
            .step_by(2)
            .map(str::to_owned)
            .collect();
        if known.iter().any(|k| k == "limit") && RATE_SPELLINGS.contains(&name) {
            return Some("tollgate writes a rate as `limit` requests per `period` (nginx's rate = \"10r/s\" is limit = 10, period = \"1s\"), with a `burst`".to_owned());
        }
        // A table's name only where tables are named: at the top level.
        let top_level = known.iter().any(|k| k == "server");
        let (distance, best) = known
            .iter()
            .map(|k| (strsim::levenshtein(name, k), k))
            .min_by_key(|(d, _)| *d)?;
        let close = distance <= 3 || best.starts_with(name) || name.starts_with(best.as_str());
        return close.then(|| match best.as_str() {
            "policies" | "upstreams" if top_level => format!("did you mean `[{best}.NAME]`?"),
            "routes" if top_level => "did you mean `[[routes]]`?".to_owned(),
            _ => format!("did you mean `{best}`?"),
        });
    }
    if let Some(hint) = syntax_hint(message) {
        return Some(hint.to_owned());
    }
    if message.starts_with("invalid type: string") && message.ends_with("expected i64") {
        return Some("a number, not a string: write it without quotes (limit = 100)".to_owned());
    }
    if message.starts_with("invalid type: string") && message.ends_with("expected a sequence") {
        return Some(
            "this field takes a list, even of one: put the value in brackets (targets = [\"http://10.0.0.1:8000\"])"
                .to_owned(),
        );
    }
    if message.starts_with("invalid type: floating point") && message.ends_with("expected i64") {
        return Some(
            "a whole number: counts have no fraction (limit = 10); for a rate below one per unit, lengthen the period (limit = 21, period = \"2s\" for 10.5 a second)"
                .to_owned(),
        );
    }
    if message.starts_with("invalid type: integer") && message.ends_with("expected a string") {
        return Some(
            "this field takes a string, in quotes: a duration with its unit (\"30s\", \"500ms\"), a name or an address"
                .to_owned(),
        );
    }
    None
}

/// Other limiters' names for a rate, answered with tollgate's own fields.
const RATE_SPELLINGS: &[&str] = &[
    "rate",
    "rps",
    "requests_per_second",
    "rate_limit",
    "requests",
];

/// What the TOML reader's terse syntax errors usually mean.
fn syntax_hint(message: &str) -> Option<&'static str> {
    Some(match message {
        m if m.starts_with("invalid basic string") || m.starts_with("invalid literal string") => {
            "a string is not closed on its line: end it with its quote (`\"` or `'`); a string over several lines needs `\"\"\"`"
        }
        m if m.starts_with("expected `.`, `=`") => {
            "each line is `field = value`, a `[table]` header or a comment (`#`)"
        }
        m if m.starts_with("duplicate key") => "a field is set twice in this table: keep one",
        m if m.starts_with("invalid table header") => {
            "a table header is `[name]`, `[name.sub]` or `[[routes]]`, alone on its line"
        }
        m if m.starts_with("invalid array") || m.starts_with("unclosed array") => {
            "a list is `[\"a\", \"b\"]`: values separated by commas, closed by `]`"
        }
        m if m.starts_with("invalid string") || m.starts_with("invalid unquoted") => {
            "text values need quotes: name = \"api\""
        }
        _ => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::parse_hint;

    #[test]
    fn a_string_for_a_list_and_a_fraction_for_a_count_get_hints() {
        let list = parse_hint("invalid type: string \"http://a\", expected a sequence");
        assert!(list.is_some_and(|h| h.contains("brackets")));
        let count = parse_hint("invalid type: floating point `10.5`, expected i64");
        assert!(count.is_some_and(|h| h.contains("whole number")));
    }
}
