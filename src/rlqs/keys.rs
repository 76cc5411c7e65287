//! What a reported bucket is kept as: the stream's map key (its domain and id) and the
//! holders' key (the policy and the id's key parts), and the bounds on what they hold.

use super::proto::BucketId;

/// The most bytes of keys and values one bucket id may have to be tracked (a token in a
/// header fits), and all of a stream's tracked ids together: an id is copied into the
/// stream's map and the holders'. Past either, a bucket is charged and refused a while,
/// not tracked, as a bucket past the count.
pub const MAX_BUCKET_ID_BYTES: usize = 16 * 1024;
pub const MAX_STREAM_ID_BYTES: usize = 16 * 1024 * 1024;

/// A bucket as a stream tracks it, in a form that hashes: the domain it was reported
/// under and its id's pairs, sorted. The same id under two domains is two buckets (two
/// entries may share it out by different policies).
pub type BucketKey = (String, Vec<(String, String)>);

pub fn bucket_key(domain: &str, id: &BucketId) -> BucketKey {
    let mut pairs: Vec<(String, String)> = id
        .bucket
        .iter()
        .map(|(k, v)| (k.clone(), v.clone()))
        .collect();
    pairs.sort();
    (domain.to_owned(), pairs)
}

/// The id a stream's bucket was reported under (the inverse of [`bucket_key`]).
pub fn bucket_id((_, pairs): &BucketKey) -> BucketId {
    BucketId {
        bucket: pairs.iter().cloned().collect(),
    }
}

/// The bytes of an id's keys and values.
pub fn id_bytes(id: &BucketId) -> usize {
    id.bucket.iter().map(|(k, v)| k.len() + v.len()).sum()
}

/// The key a bucket's `parts` hold a share of under `policy`, among the holders: each
/// part after its length, so no two lists of parts make one key (`a\0b`, `c` and `a`,
/// `b\0c` joined by a separator did, pooling two keys' demand).
pub fn holder_key(policy: &str, parts: &[impl AsRef<str>]) -> String {
    use std::fmt::Write as _;
    let parts = parts.iter().map(AsRef::as_ref);
    let mut key =
        String::with_capacity(policy.len() + parts.clone().map(|p| p.len() + 4).sum::<usize>());
    key.push_str(policy);
    for p in parts {
        let _ = write!(key, "\0{}:", p.len());
        key.push_str(p);
    }
    key
}

#[cfg(test)]
mod tests {
    #[test]
    fn no_two_lists_of_parts_make_one_holder_key() {
        let one = super::holder_key("p", &["a\0b", "c"]);
        let other = super::holder_key("p", &["a", "b\0c"]);
        assert_ne!(one, other);
        assert_ne!(
            super::holder_key("p", &["ab"]),
            super::holder_key("p", &["a", "b"])
        );
    }
}
