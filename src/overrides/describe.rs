//! What is told of the runtime overrides: `tollgate check`'s word on `[server]
//! overrides_file` (how many it holds, which this config would not apply or applies with
//! a route refusing their key), and one override as `GET /admin/overrides` lists it.

use std::fmt::Write;

use serde::Serialize;

use super::journal::FileError;
use super::stored::Stored;
use super::{apply, journal};
use crate::config::override_spec::{OverrideProblem, OverrideSpec};
use crate::config::Config;

/// The file's summary; a file that does not parse is an error.
pub fn describe_file(config: &Config, now_ms: u64) -> Result<Option<String>, FileError> {
    let Some(path) = &config.server.overrides_file else {
        return Ok(None);
    };
    crate::files::refuse_link(path)?;
    let all = journal::read(path)?.overrides;
    let live: Vec<&Stored> = all.iter().filter(|s| !s.expired(now_ms)).collect();
    let mut out = format!(
        "\nruntime overrides: {} in {}\n",
        live.len(),
        path.display()
    );
    for stored in live {
        let name = format!("{}/{}", stored.id.policy, stored.id.key.join("/"));
        if let Err(problems) = apply::resolve_stored(config, stored) {
            for p in problems {
                let _ = writeln!(
                    out,
                    "  {name} - warning: not applied: {}{}",
                    p.message,
                    p.hint.map(|h| format!(" ({h})")).unwrap_or_default()
                );
            }
        } else if let Some(routes) = apply::refused_by(config, stored) {
            let word = apply::bound_field(config, &stored.id.policy);
            let _ = writeln!(
                out,
                "  {name} - warning: its {word} is below the cost of route(s) {}: they refuse its key (429 cost_above_burst)",
                routes.join(", ")
            );
        }
    }
    Ok(Some(out))
}

/// One override as `GET /admin/overrides` lists it.
#[derive(Debug, Serialize)]
pub struct Listed {
    pub policy: String,
    pub key: Vec<String>,
    pub set: OverrideSpec,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub expires_in_ms: Option<u64>,
    /// Whether requests see it: `false` when the running config refuses it (`problems`).
    pub active: bool,
    /// Routes that refuse its key whenever it comes (its burst below their cost).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused_routes: Vec<String>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub problems: Vec<OverrideProblem>,
}
