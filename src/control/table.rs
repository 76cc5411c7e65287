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

/// One key's cells.
fn row(k: &Value) -> [String; 6] {
    let parts: Vec<String> = k["key"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|p| p.as_str().unwrap_or_default().escape_debug().to_string())
        .collect();
    let mut key = parts.join(" / ");
    if key.chars().count() > KEY_WIDTH {
        key = key.chars().take(KEY_WIDTH - 1).collect::<String>() + "…";
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
}
