//! The JSON log's lines as tracing-subscriber writes them, with one change: an access line's
//! `key` (written as JSON text, so the text log reads `key=["acme", "alice"]`) is a JSON
//! list in the JSON log, not a string holding one. tracing's fields are strings, numbers
//! and booleans; this is the one field that is a list.

use std::fmt;

use tracing::{Event, Subscriber};
use tracing_subscriber::fmt::format::{Format, Json, Writer};
use tracing_subscriber::fmt::{FmtContext, FormatEvent, FormatFields};
use tracing_subscriber::registry::LookupSpan;

/// tracing-subscriber's JSON lines, the access line's `key` as a list.
pub struct JsonLines(Format<Json>);

impl Default for JsonLines {
    fn default() -> Self {
        Self(Format::default().json())
    }
}

impl<S, N> FormatEvent<S, N> for JsonLines
where
    S: Subscriber + for<'a> LookupSpan<'a>,
    N: for<'a> FormatFields<'a> + 'static,
{
    fn format_event(
        &self,
        ctx: &FmtContext<'_, S, N>,
        mut writer: Writer<'_>,
        event: &Event<'_>,
    ) -> fmt::Result {
        if event.metadata().target() != "tollgate::access" {
            return self.0.format_event(ctx, writer, event);
        }
        let mut line = String::new();
        self.0.format_event(ctx, Writer::new(&mut line), event)?;
        match key_as_list(&line) {
            Some(fixed) => writeln!(writer, "{fixed}"),
            None => writer.write_str(&line),
        }
    }
}

/// `line` (one JSON object) with `fields.key` parsed from its text into a list; `None` when
/// there is nothing to change.
fn key_as_list(line: &str) -> Option<String> {
    let mut value: serde_json::Value = serde_json::from_str(line.trim_end()).ok()?;
    let key = value.get_mut("fields")?.get_mut("key")?;
    let list: serde_json::Value = serde_json::from_str(key.as_str()?).ok()?;
    *key = list;
    serde_json::to_string(&value).ok()
}

#[cfg(test)]
mod tests {
    use super::key_as_list;

    #[test]
    fn the_key_text_becomes_a_list_and_nothing_else_changes() {
        let line = r#"{"level":"INFO","fields":{"decision":"denied","key":"[\"acme\",\"al\\\"ice\"]","status":429},"target":"tollgate::access"}"#;
        let fixed: serde_json::Value =
            serde_json::from_str(&key_as_list(line).expect("changed")).expect("json");
        assert_eq!(
            fixed["fields"]["key"],
            serde_json::json!(["acme", "al\"ice"])
        );
        assert_eq!(fixed["fields"]["status"], 429);
        assert_eq!(key_as_list(r#"{"fields":{"message":"x"}}"#), None);
    }
}
