//! What a reload of the config answers: the report of what it applied (what changed,
//! `changes.rs`), or why it applied nothing.

use super::changes::Changes;
use super::ConfigError;

/// What a successful reload applied: the new file's counts, what changed by name, and
/// what changed that only a restart applies. `POST /admin/reload` answers it as JSON, and
/// `tollgate reload` reads it back.
#[derive(Debug, Default, Clone, serde::Serialize, serde::Deserialize)]
pub struct ReloadReport {
    pub routes: usize,
    pub policies: usize,
    pub needs_restart: Vec<String>,
    /// Routes, policies and upstreams added, removed and changed; live `[server]` settings.
    pub changes: Changes,
    /// What the new file says that is valid but likely not meant (also logged).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub warnings: Vec<String>,
}

impl ReloadReport {
    /// What `tollgate reload` prints: the counts, one line per kind that changed (or
    /// `nothing changed`), then what waits for a restart and the warnings.
    pub fn lines(&self) -> Vec<String> {
        let mut lines = vec![format!(
            "reloaded: {} routes, {} policies",
            self.routes, self.policies
        )];
        lines.extend(self.changes.lines());
        if self.changes.is_empty() && self.needs_restart.is_empty() {
            lines.push("nothing changed".to_owned());
        }
        for what in &self.needs_restart {
            lines.push(format!(
                "{what} changed: this takes effect only after a restart"
            ));
        }
        lines.extend(self.warnings.iter().cloned());
        lines
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ReloadError {
    #[error(transparent)]
    Config(#[from] ConfigError),
    /// The task that read the files panicked or was cancelled (tokio's `JoinError`, as
    /// said: the config stays free of the runtime).
    #[error("the reload task failed: {0}")]
    Task(String),
    /// The outcome of a reload this caller joined (it was waiting to begin), as said.
    #[error("{0}")]
    Joined(String),
    /// The file drops the rate limit service, which only a restart stops: its Envoys would
    /// be answered `UNAVAILABLE` at once, and those failing open let every request pass.
    #[error("{0}: [rls] is gone from the file, and the rate limit service stops only with a restart: nothing reloaded (keep [rls] until the gateway restarts)")]
    RlsRemoved(std::path::PathBuf),
}
