//! What an override is: which key of which policy, the numbers set for it and until
//! when, as kept in the file and in Redis; and the bounds on them.

use serde::{Deserialize, Serialize};

use crate::config::override_spec::OverrideSpec;

/// Which key of which policy.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct OverrideId {
    pub policy: String,
    /// One part per key source, as in `/admin/limits`.
    pub key: Vec<String>,
}

/// One runtime override as kept in the file and in Redis.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stored {
    #[serde(flatten)]
    pub id: OverrideId,
    pub set: OverrideSpec,
    /// Wall-clock milliseconds since the Unix epoch; absent: until deleted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expires_at_ms: Option<u64>,
    /// The policy's key sources when it was set (`header:x-tenant-id`, …): a reload that
    /// keys the policy by others leaves it aside, as the same text is then another
    /// client's key. Absent in what earlier versions kept: not checked.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub keyed_by: Option<Vec<String>>,
}

impl Stored {
    pub(super) fn expired(&self, now_ms: u64) -> bool {
        self.expires_at_ms.is_some_and(|at| now_ms >= at)
    }
}

/// The longest key part an override names: what bounds the overrides' memory, in this
/// gateway, in the file and in Redis (100,000 overrides of one such part: 100 MB), with
/// room for any key a request makes in practice (an API key, a user id, a network).
pub const MAX_KEY_PART: usize = 1024;

/// Runtime overrides one gateway keeps at most: each costs a look-up table entry and a
/// line in the file; a fleet needing more wants them in the config's overrides.
pub const MAX_OVERRIDES: usize = 100_000;
