//! Which limit applies to one key, in the one order every reader uses (the request path
//! and the admin API alike): a runtime override set for the key, else the config file's
//! override for the key's text (single-source keys), else the policy's own numbers.

use std::borrow::Cow;

use crate::config::override_spec::Applied;
use crate::config::{Policy, PolicyKind};

/// The limit `policy` puts on a key. `runtime` is the key's runtime override, if any;
/// `text` gives the key's text for the file's overrides, asked only when the policy has
/// some (so a request pays for no text it does not need).
#[inline]
pub fn limit_for<'t>(
    policy: &Policy,
    runtime: Option<Applied>,
    text: impl FnOnce() -> Option<Cow<'t, str>>,
) -> Applied {
    match (&policy.kind, runtime) {
        (PolicyKind::Rate(_), Some(applied @ Applied::Rate(_)))
        | (PolicyKind::Concurrency(_), Some(applied @ Applied::Concurrency(_))) => applied,
        (PolicyKind::Rate(rate), _) if rate.overrides.is_empty() => Applied::Rate(rate.quota),
        (PolicyKind::Rate(rate), _) => Applied::Rate(rate.quota_for(text().as_deref())),
        (PolicyKind::Concurrency(cap), _) if cap.overrides.is_empty() => {
            Applied::Concurrency(cap.max_in_flight)
        }
        (PolicyKind::Concurrency(cap), _) => Applied::Concurrency(cap.max_for(text().as_deref())),
    }
}
