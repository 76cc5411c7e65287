//! Who the quota service limits: each bucket usage counted in the top-keys sketches under
//! its `[[rlqs.buckets]]` entry — the entries are one more "route" after the rate limit
//! service's rules (`Snapshot::build`) — so `GET /admin/top` and `tollgate top` list the
//! keys Envoys refuse beside proxied and RLS ones. One event per bucket per report,
//! counted refused when the Envoy denied any of its requests.

use crate::store::Admission;
use crate::top::TopKeys;

/// Counts one usage of the bucket of `entry`, keyed by `parts`.
pub fn record(
    top: &TopKeys,
    (route, entry): (usize, usize),
    admission: &Admission,
    parts: &[impl AsRef<str>],
    refused: bool,
) {
    let Some(outcome) = admission.per_policy().next() else {
        return;
    };
    let worker = crate::conn::worker::current();
    let now = admission.now();
    top.on_route(worker, route, |tiers| {
        tiers.record(entry, outcome.key, refused, now, |text| {
            for (i, part) in parts.iter().enumerate() {
                text.push_part(i, part.as_ref());
            }
        });
    });
}
