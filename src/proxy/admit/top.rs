//! The top-keys view's part of the admission: each decided policy's key counted in its
//! route's sketch, admitted or refused.

use super::Routed;
use crate::key::{KeySource, RequestView};
use crate::store::{Admission, Counted, PolicyOutcome};

/// Counts the request's decided tiers in the top-keys sketches; a key's parts are
/// written only when it enters one.
pub(super) fn record(
    top: &crate::top::TopKeys,
    routed: &Routed<'_>,
    (admission, decided): (&Admission, &[PolicyOutcome]),
    view: &RequestView<'_>,
) {
    let worker = crate::conn::worker::current();
    let now = admission.now();
    top.on_route(worker, routed.index, |tiers| {
        for outcome in decided {
            let refused = match outcome.counted {
                Counted::Denied => true,
                Counted::Admitted => false,
                _ => continue,
            };
            let policy = &routed.route.policies[outcome.position];
            if policy.key.iter().all(|k| matches!(k, KeySource::Route)) {
                // One key per route: its counts are the route's, in /admin/stats.
                continue;
            }
            tiers.record(outcome.position, outcome.key, refused, now, |text| {
                let values: Vec<_> = (policy.key.iter())
                    .map(|source| source.extract(view).unwrap_or_default())
                    .collect();
                // The values that made the key counted (the one that refused: decoys
                // sent beside it must not hide it), from its index among the policy's
                // keys, each source's values combined in order, the last one's fastest.
                let mut rest = outcome.index;
                let mut picks = vec![0; values.len()];
                for (pick, v) in picks.iter_mut().zip(&values).rev() {
                    *pick = rest % v.len().max(1);
                    rest /= v.len().max(1);
                }
                for (i, (v, pick)) in values.iter().zip(picks).enumerate() {
                    let value = v.get(pick).map(|v| v.as_text());
                    text.push_part(i, value.as_deref().unwrap_or_default());
                }
            });
        }
    });
}
