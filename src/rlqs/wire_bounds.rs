//! A report's bounds counted on the wire, before it is decoded (see `crate::proto_wire`):
//! what a stream would refuse once decoded, refused while it is still bytes.

/// The most keys one bucket id may have: Envoy's `bucket_id_builder` names a few.
pub const MAX_BUCKET_ID_KEYS: usize = 64;

/// Refuses, before it is decoded, a report (`message`, a `RateLimitQuotaUsageReports`)
/// of more than twice the buckets a stream tracks, or a bucket id of more keys than
/// [`MAX_BUCKET_ID_KEYS`]: counted on the wire, since an empty usage is two bytes there
/// and a hundred decoded (two million of them took 330 MiB). A report whose fields the
/// count cannot read (a group, which the decoder would skip) is refused too.
pub fn within_bounds(message: &[u8]) -> Result<(), String> {
    use crate::proto_wire::{count, each_field};
    // Twice what a stream tracks: a report past the bound has its extra buckets
    // charged and refused (the contract's answer), up to this.
    let most = 2 * super::tracked::MAX_BUCKETS_PER_STREAM;
    let (mut widest, mut unreadable) = (0, false);
    // BucketQuotaUsage's field 1 is its id (given twice, the decoder merges the two);
    // BucketId's field 1, its map's entries.
    let usages = each_field(message, 2, |usage| {
        let mut keys = 0;
        let ids = each_field(usage, 1, |id| match count(id, 1) {
            Some(n) => keys += n,
            None => unreadable = true,
        });
        unreadable |= ids.is_none();
        widest = widest.max(keys);
    });
    match usages.filter(|_| !unreadable) {
        None => Err("not a RateLimitQuotaUsageReports: its fields cannot be read (a group, or a field past the end)".to_owned()),
        Some(n) if n > most => Err(format!(
            "a report names at most {most} buckets; this one names {n}"
        )),
        _ if widest > MAX_BUCKET_ID_KEYS => Err(format!(
            "a bucket id has at most {MAX_BUCKET_ID_KEYS} keys; one of this report has {widest}"
        )),
        _ => Ok(()),
    }
}
