//! A key's state as the admin API tells it: the units it used this window.

use std::time::Duration;

use super::{get, TestGateway};

/// Units `policy`'s key `key` used this window, as the admin API says.
pub async fn used_of(gw: &TestGateway, (policy, key): (&str, &str)) -> u64 {
    let state = get(&gw.admin_url(&format!("/admin/limits/{policy}/{key}")), &[])
        .await
        .json();
    state["used"]
        .as_u64()
        .unwrap_or_else(|| panic!("used in {state}"))
}

/// Polls until `policy`'s key `key` has used `expected` (a settle may land just after the
/// last byte); what it last used.
pub async fn used_reaches_of(gw: &TestGateway, (policy, key): (&str, &str), expected: u64) -> u64 {
    let mut last = 0;
    for _ in 0..200 {
        last = used_of(gw, (policy, key)).await;
        if last == expected {
            return last;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    last
}
