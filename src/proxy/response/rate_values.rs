//! The rate-limit headers' values of one response: `X-RateLimit-*` of the reported tier,
//! and the IETF draft's `RateLimit-Policy` and `RateLimit` lists, one item per enforcing
//! tier — the first from the lists built once per config load when it can be, the second
//! written per response (on the stack when it fits).

use http::header::HeaderValue;
use http::HeaderMap;

use super::headers::{
    number, value_or_empty, PolicyHeaders, RouteHeaders, TierItem, RATELIMIT, RATELIMIT_POLICY,
    X_RATELIMIT_LIMIT, X_RATELIMIT_REMAINING, X_RATELIMIT_RESET,
};
use crate::config::policy_item;
use crate::reply::ceil_secs;

/// The longest `RateLimit` value written on the stack: the usual few tiers' (longer
/// ones are written on the heap). On the stack, the value's one allocation is the copy a
/// `HeaderValue` keeps.
const STACK_TEXT: usize = 256;

/// Writes X-RateLimit-* (from the reported tier) and the IETF draft's RateLimit-Policy /
/// RateLimit lists, one item per enforcing rate tier in route order (`items`). `route`:
/// the route's constant values, used when every item is its policy's own.
pub fn rate_limit_headers(
    headers: &mut HeaderMap,
    r: &TierItem<'_>,
    items: &[TierItem<'_>],
    route: Option<&RouteHeaders>,
) {
    RateLimitValues::of(r, items, route).insert_into(headers);
}

/// The values of the rate-limit headers of one response (see [`rate_limit_headers`]).
pub(super) struct RateLimitValues {
    pub(super) limit: HeaderValue,
    pub(super) remaining: HeaderValue,
    pub(super) reset: HeaderValue,
    pub(super) policy: HeaderValue,
    pub(super) current: HeaderValue,
}

impl RateLimitValues {
    pub(super) fn of(
        r: &TierItem<'_>,
        items: &[TierItem<'_>],
        route: Option<&RouteHeaders>,
    ) -> Self {
        let built;
        let constant = match r.constant {
            Some(c) => c,
            None => {
                built = PolicyHeaders::new(r.policy, &r.quota, r.window_s);
                &built
            }
        };
        let (policy, current) = lists(items, route);
        Self {
            limit: constant.limit.clone(),
            remaining: number(r.remaining),
            reset: number(ceil_secs(r.until_full_ns)),
            policy,
            current,
        }
    }

    fn insert_into(self, headers: &mut HeaderMap) {
        headers.insert(X_RATELIMIT_LIMIT.clone(), self.limit);
        headers.insert(X_RATELIMIT_REMAINING.clone(), self.remaining);
        headers.insert(X_RATELIMIT_RESET.clone(), self.reset);
        headers.insert(RATELIMIT_POLICY.clone(), self.policy);
        headers.insert(RATELIMIT.clone(), self.current);
    }
}

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
    use super::super::headers::tests::{tenant_item, user_item};
    use super::*;

    #[test]
    fn headers_follow_the_contract() {
        let mut h = HeaderMap::new();
        let user = user_item(2);
        rate_limit_headers(&mut h, &user, &[user], None);
        assert_eq!(h["x-ratelimit-limit"], "5");
        assert_eq!(h["x-ratelimit-remaining"], "2");
        assert_eq!(h["x-ratelimit-reset"], "1");
        assert_eq!(h["ratelimit-policy"], "\"user\";q=5;w=1");
        assert_eq!(h["ratelimit"], "\"user\";r=2;t=1");

        // One list item per enforcing tier, in route order.
        let tenant = tenant_item();
        let mut h = HeaderMap::new();
        rate_limit_headers(&mut h, &user, &[tenant, user], None);
        assert_eq!(
            h["ratelimit-policy"],
            "\"tenant\";q=20;w=12, \"user\";q=5;w=1"
        );
        assert_eq!(h["ratelimit"], "\"tenant\";r=19;t=3, \"user\";r=2;t=1");
        assert_eq!(
            h["x-ratelimit-remaining"], "2",
            "X-RateLimit-* stay one tier's"
        );
    }

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
