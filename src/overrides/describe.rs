//! What is told of the runtime overrides: `tollgate check`'s word on `[server]
//! overrides_file` (how many it holds, which this config would not apply or applies with
//! a route refusing their key), and the overrides as `GET /admin/overrides` lists them
//! (all, or a page).

use std::fmt::Write;

use serde::Serialize;

use super::journal::FileError;
use super::stored::{OverrideId, Stored};
use super::{apply, journal, Overrides};
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

/// Which overrides a `GET /admin/overrides` lists: all by default, or one page.
#[derive(Debug, Default)]
pub struct Page {
    /// Only this policy's.
    pub policy: Option<String>,
    /// Those after this one in the list's order (policy, then key).
    pub after: Option<OverrideId>,
    /// At most this many.
    pub limit: Option<usize>,
}

impl Overrides {
    /// The overrides of `page` that are set and not expired, in order (policy, then key),
    /// with whether each is in effect under `config` (and which routes refuse its key);
    /// and, when the page was cut short, the last one listed (where the next page starts).
    /// The routes refusing each are worked out after the lock is let go: a change waits
    /// for a copy of the page, not for every override checked against every route.
    pub fn list(
        &self,
        config: &Config,
        now_ms: u64,
        page: &Page,
    ) -> (Vec<Listed>, Option<OverrideId>) {
        let limit = page.limit.unwrap_or(usize::MAX);
        let (live, more): (Vec<(Stored, Vec<OverrideProblem>)>, bool) = {
            let state = self.state.lock();
            let mut live = (state.set.from(page.after.as_ref(), page.policy.as_deref()))
                .filter(|s| !s.expired(now_ms));
            let taken = live
                .by_ref()
                .take(limit)
                .map(|s| (s.clone(), state.set.problems(&s.id).to_vec()))
                .collect();
            (taken, live.next().is_some())
        };
        let next = more
            .then(|| live.last().map(|(s, _)| s.id.clone()))
            .flatten();
        let listed = live
            .into_iter()
            .map(|(s, problems)| {
                let refused_routes = match problems.is_empty() {
                    true => apply::refused_by(config, &s).unwrap_or_default(),
                    false => Vec::new(),
                };
                Listed {
                    policy: s.id.policy.clone(),
                    key: s.id.key.clone(),
                    set: s.set.clone(),
                    expires_at_ms: s.expires_at_ms,
                    expires_in_ms: s.expires_at_ms.map(|at| at.saturating_sub(now_ms)),
                    active: problems.is_empty(),
                    refused_routes,
                    problems,
                }
            })
            .collect();
        (listed, next)
    }
}
