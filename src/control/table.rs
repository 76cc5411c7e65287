//! `GET /admin/top`'s answer as a terminal table: each column as wide as its widest cell,
//! two spaces between columns, names left-aligned and numbers right-aligned.

use serde_json::Value;

/// Characters of a key shown; a longer one ends in `…` (`GET /admin/top` has it whole).
const KEY_WIDTH: usize = 64;

const HEADER: [&str; 6] = [
    "POLICY",
    "KEY",
    "REFUSED",
    "ADMITTED",
    "REMAINING",
    "RETRY (ms)",
];
/// Columns from this one on hold numbers.
const FIRST_NUMBER: usize = 2;

/// The table of `keys` (the answer's array); `window` is its window header (seconds, or
/// `off`).
pub fn top_table(keys: &[Value], window: Option<&str>) -> String {
    if window == Some("off") {
        return "top keys are off on this gateway ([server] top_keys = false)\n".to_owned();
    }
    let mut rows = vec![HEADER.map(str::to_owned)];
    rows.extend(keys.iter().map(row));
    let mut widths = [0; HEADER.len()];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let mut out = format!(
        "who is limited on this gateway, last {} s (each gateway of a fleet answers for itself)\n\n",
        window.unwrap_or("?")
    );
    for row in &rows {
        let cells: Vec<String> = row
            .iter()
            .zip(widths)
            .enumerate()
            .map(|(i, (cell, width))| {
                if i < FIRST_NUMBER {
                    format!("{cell:<width$}")
                } else {
                    format!("{cell:>width$}")
                }
            })
            .collect();
        out.push_str(cells.join("  ").trim_end());
        out.push('\n');
    }
    out
}

/// One key's cells. A part with white space at an end (or none at all) is quoted, so it
/// cannot pass for another key's; a key the gateway kept only the start of ends in `…`,
/// so a client's longer key cannot pass for the one it starts with.
fn row(k: &Value) -> [String; 6] {
    let parts: Vec<String> = k["key"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| shown_part(p.as_str().unwrap_or_default()))
        .collect();
    let overflow = k["overflow"].as_bool() == Some(true);
    // New keys while the store was full: no one client's key.
    let mut key = if overflow {
        "(overflow)".to_owned()
    } else {
        parts.join(" / ")
    };
    let cut = k["truncated"].as_bool() == Some(true) && !overflow;
    if cut || key.chars().count() > KEY_WIDTH {
        key = key.chars().take(KEY_WIDTH - 1).collect::<String>() + "…";
    }
    // The admin API cannot name it by the text shown: its bytes are not UTF-8 (that
    // text is another key's), or a part is missing (the key of `missing = "shared"`).
    if k["nameable"].as_bool() == Some(false) && !cut && !overflow {
        key.push_str(" (not nameable)");
    }
    let number = |v: &Value| match v {
        Value::Number(n) => n.to_string(),
        _ => "-".to_owned(),
    };
    [
        k["policy"].as_str().unwrap_or_default().to_owned(),
        key,
        number(&k["refused"]),
        number(&k["admitted"]),
        number(&k["remaining"]),
        number(&k["next_admit_ms"]),
    ]
}

/// A key part as the table shows it: escaped, and quoted when its ends are not plain.
fn shown_part(part: &str) -> String {
    let escaped = part.escape_debug().to_string();
    let plain_ends = |c: Option<char>| c.is_some_and(|c| !c.is_whitespace() && c != '"');
    if plain_ends(part.chars().next()) && plain_ends(part.chars().last()) {
        escaped
    } else {
        format!("\"{escaped}\"")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn columns_line_up_whatever_the_widths() {
        let keys = serde_json::json!([
            {"policy": "t", "key": ["a"], "refused": 12345, "admitted": 1, "remaining": 0, "next_admit_ms": 999},
            {"policy": "a-longer-policy", "key": ["user-42", "eu"], "refused": 3, "admitted": 100000, "remaining": null, "next_admit_ms": null},
        ]);
        let table = top_table(keys.as_array().expect("array"), Some("300"));
        let lines: Vec<&str> = table.lines().skip(2).collect();
        assert_eq!(
            lines,
            [
                "POLICY           KEY           REFUSED  ADMITTED  REMAINING  RETRY (ms)",
                "t                a               12345         1          0         999",
                "a-longer-policy  user-42 / eu        3    100000          -           -",
            ]
        );
    }

    #[test]
    fn a_long_key_is_cut() {
        let long = "k".repeat(200);
        let keys = serde_json::json!([{"policy": "p", "key": [long], "refused": 1, "admitted": 0}]);
        let table = top_table(keys.as_array().expect("array"), Some("300"));
        let row = table.lines().last().expect("a row");
        assert!(
            row.contains(&format!("{}… ", "k".repeat(KEY_WIDTH - 1))),
            "{row}"
        );
        assert_eq!(
            top_table(&[], Some("off")),
            "top keys are off on this gateway ([server] top_keys = false)\n"
        );
    }

    /// A key the gateway kept only the start of, or with white space at an end, does not
    /// read as the plain key it looks like.
    #[test]
    fn a_cut_or_padded_key_does_not_pass_for_another() {
        let victim = "v".repeat(48);
        let keys = serde_json::json!([
            {"policy": "p", "key": [victim], "truncated": true, "refused": 9, "admitted": 0},
            {"policy": "p", "key": ["acme  "], "refused": 1, "admitted": 0},
            {"policy": "p", "key": [""], "refused": 1, "admitted": 0},
            {"policy": "p", "key": ["caf\u{FFFD}"], "nameable": false, "refused": 1, "admitted": 0},
        ]);
        let table = top_table(keys.as_array().expect("array"), Some("300"));
        let rows: Vec<&str> = table.lines().skip(3).collect();
        assert!(
            rows[0].starts_with(&format!("p       {}…", "v".repeat(48))),
            "{table}"
        );
        assert!(rows[1].starts_with("p       \"acme  \""), "{table}");
        assert!(rows[2].starts_with("p       \"\""), "{table}");
        assert!(
            rows[3].starts_with("p       caf\u{FFFD} (not nameable)"),
            "{table}"
        );
    }
}
