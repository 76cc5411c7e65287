//! `tollgate check`'s word on `[server] overrides_file`: how many overrides it holds and
//! which of them this config would not apply.

use std::fmt::Write;

use super::journal::FileError;
use super::stored::Stored;
use super::{apply, journal};
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
        let age = crate::config::compile::runtime::OverrideAge::New;
        let (problems, what) = match apply::resolve_stored(config, stored) {
            Err(problems) => (problems, "not applied"),
            Ok(_) => match apply::resolve(config, &stored.id, &stored.set, age) {
                Err(problems) => (problems, "applied, refusing a route (429 cost_above_burst)"),
                Ok(_) => continue,
            },
        };
        for p in problems {
            let _ = writeln!(
                out,
                "  {}/{} - warning: {what}: {}{}",
                stored.id.policy,
                stored.id.key.join("/"),
                p.message,
                p.hint.map(|h| format!(" ({h})")).unwrap_or_default()
            );
        }
    }
    Ok(Some(out))
}
