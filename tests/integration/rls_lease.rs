//! The same leased key named twice in one rate limit service call (two identical
//! descriptors): decided as one take of both units, as the exact store decides it. Taken
//! one descriptor at a time, the verdict read the key's debt as the second take left it
//! and counted the first's units twice: a call the slice covers was refused, and the first
//! take's unit lost.

use super::lease::{four_requests_under, leased};
use crate::support::*;

const TENANT: [(&str, &str); 1] = [("x-tenant-id", "acme")];

#[tokio::test]
async fn the_same_leased_key_twice_in_a_call_takes_both_units_at_once() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = leased(&redis, "limit = 1\nperiod = \"1s\"\nburst = 100\n")
        .raw(
            "[rls]\nlisten = \"127.0.0.1:0\"\n\
             [[rls.rules]]\ndomain = \"edge\"\ndescriptor = [\"tenant\"]\npolicy = \"hot\"\n",
        )
        .build();
    // The slice four requests leave (22 units, the fake clock standing still), then all
    // but two of them used.
    let gw = four_requests_under(&toml, &up).await;
    for _ in 0..20 {
        assert_eq!(get(&gw.url("/"), &TENANT).await.status, 200);
    }
    let mut rls = RlsClient::connect(gw.rls.expect("rls")).await;
    let twice = vec![descriptor(&[("tenant", "acme")]); 2];
    let answer = rls.ask("edge", twice).await;
    assert_eq!(
        answer.overall_code, OK,
        "the slice's last two units cover both"
    );
    // Both units spent, none lost or left: the next request fetches a new slice.
    let admin = gw.admin_url("/admin/limits/hot/acme");
    assert_eq!(
        get(&admin, &[]).await.json()["remaining"],
        74,
        "no call yet"
    );
    assert_eq!(get(&gw.url("/"), &TENANT).await.status, 200);
    let left = get(&admin, &[]).await.json()["remaining"].as_u64();
    assert!(
        left.is_some_and(|l| l < 74),
        "a new slice was fetched: {left:?}"
    );
}
