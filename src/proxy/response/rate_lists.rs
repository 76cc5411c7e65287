//! The IETF draft's `RateLimit-Policy` and `RateLimit` list values of a response: one
//! item per enforcing tier, the first from the lists built once per config load when it
//! can be, the second written per response (on the stack when it fits).

use http::header::HeaderValue;

use super::headers::{value_or_empty, RouteHeaders, TierItem};
use crate::config::policy_item;
use crate::reply::ceil_secs;

/// The longest `RateLimit` value written on the stack: the usual few tiers' (longer
/// ones are written on the heap). On the stack, the value's one allocation is the copy a
/// `HeaderValue` keeps.
const STACK_TEXT: usize = 256;

/// The IETF draft's `RateLimit-Policy` and `RateLimit` values of `items`, one list item
/// each in order (`route`: its constant list, used when every item is its policy's own).
pub fn lists(items: &[TierItem<'_>], route: Option<&RouteHeaders>) -> (HeaderValue, HeaderValue) {
    let all_constant = items.iter().all(|i| i.constant.is_some());
    let policy = match (items, route.and_then(|r| r.rate_list.as_ref())) {
        // Every enforcing tier, each on its own quota: the list built at config load.
        (_, Some((count, list))) if all_constant && *count == items.len() => list.clone(),
        (
            [TierItem {
                constant: Some(c), ..
            }],
            _,
        ) => c.policy.clone(),
        _ => {
            let mut policies = Vec::with_capacity(items.len() * 32);
            for (i, item) in items.iter().enumerate() {
                if i > 0 {
                    policies.extend_from_slice(b", ");
                }
                match item.constant {
                    Some(c) => policies.extend_from_slice(c.policy.as_bytes()),
                    None => policy_item(&mut policies, item.policy, &item.quota, item.window_s),
                }
            }
            value_or_empty(policies)
        }
    };
    (policy, current_list(items))
}

/// The `RateLimit` value of `items`: each one's name, requests left and seconds until
/// full — written on the stack when it fits.
fn current_list(items: &[TierItem<'_>]) -> HeaderValue {
    let mut text = arrayvec::ArrayVec::<u8, STACK_TEXT>::new();
    if write_current(items, |part| text.try_extend_from_slice(part).map_err(drop)).is_ok() {
        return HeaderValue::from_bytes(&text).unwrap_or_else(|_| HeaderValue::from_static(""));
    }
    let mut long = Vec::with_capacity(items.len() * 32);
    let _ = write_current(items, |part| {
        long.extend_from_slice(part);
        Ok(())
    });
    value_or_empty(long)
}

/// Writes the `RateLimit` list of `items` part by part into `out`, until it fails.
#[inline]
fn write_current(
    items: &[TierItem<'_>],
    mut out: impl FnMut(&[u8]) -> Result<(), ()>,
) -> Result<(), ()> {
    items.iter().enumerate().try_for_each(|(i, item)| {
        let (mut left, mut full) = (itoa::Buffer::new(), itoa::Buffer::new());
        let parts: [&[u8]; 6] = [
            if i > 0 { b", \"" } else { b"\"" },
            item.policy.as_bytes(),
            b"\";r=",
            left.format(item.remaining).as_bytes(),
            b";t=",
            full.format(ceil_secs(item.until_full_ns)).as_bytes(),
        ];
        parts.iter().try_for_each(|part| out(part))
    })
}

#[cfg(test)]
mod tests {
    use super::super::headers::tests::user_item;
    use super::*;

    /// A `RateLimit` list too long for the stack is written on the heap, the same.
    #[test]
    fn a_list_past_the_stack_reads_the_same() {
        let names: Vec<String> = (0..8)
            .map(|i| format!("policy-{i}-{}", "x".repeat(30)))
            .collect();
        let items: Vec<TierItem> = (names.iter())
            .map(|n| TierItem {
                policy: n,
                ..user_item(7)
            })
            .collect();
        let want: Vec<String> = names.iter().map(|n| format!("\"{n}\";r=7;t=1")).collect();
        let want = want.join(", ");
        assert!(want.len() > STACK_TEXT);
        assert_eq!(current_list(&items), want.as_str());
        assert_eq!(
            current_list(&items[..2]),
            want[..want.find(", \"policy-2").unwrap()]
        );
    }
}
