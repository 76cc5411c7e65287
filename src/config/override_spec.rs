//! A runtime override as the gateway keeps it: the numbers it sets (`OverrideSpec`, what
//! the admin API and the overrides file carry), what it makes of a key's limit
//! (`Applied`) and why one is refused (`OverrideProblem`). Checked against the running
//! policy by `compile::runtime`; used by the overrides, the store and the admin API.

use serde::{Deserialize, Serialize};

use crate::limit::Quota;

/// The numbers one runtime override sets, as given; the policy supplies the rest, so a
/// reload that changes the policy changes what an override leaves unset.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct OverrideSpec {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub limit: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub period: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub burst: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_in_flight: Option<i64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub quota: Option<i64>,
}

/// What an override makes of its key's limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Applied {
    Rate(Quota),
    Concurrency(u32),
}

/// One reason an override is refused, with what to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OverrideProblem {
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}

impl Applied {
    /// What it makes of its key's limit, in the units `/admin/config` uses.
    pub fn describe(&self) -> serde_json::Value {
        match self {
            Applied::Rate(q) => serde_json::json!({
                "kind": "rate",
                "burst": q.burst(),
                "t_ns": q.interval_ns(),
                "tau_ns": q.tolerance_ns(),
            }),
            Applied::Concurrency(max) => {
                serde_json::json!({"kind": "concurrency", "max_in_flight": max})
            }
        }
    }
}
