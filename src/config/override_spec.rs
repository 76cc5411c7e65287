//! A runtime override as the gateway keeps it: the numbers it sets (`OverrideSpec`, what
//! the admin API and the overrides file carry) and why one is refused
//! (`OverrideProblem`). Checked against the running policy by `compile::runtime`, into
//! what it makes of a key's limit (`policy::Applied`, beside the kinds it is one of).

use serde::{Deserialize, Serialize};

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

/// One reason an override is refused, with what to change.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct OverrideProblem {
    pub message: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub hint: Option<String>,
}
