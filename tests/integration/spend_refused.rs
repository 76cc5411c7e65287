//! A 4xx without usage is charged by who answered it: a model API's (a registered status:
//! a bad request, its own rate limit) generated nothing and costs `min_cost`; another 4xx
//! is a gateway in front of the model speaking for itself — Portkey's `446`, an output
//! guardrail refusing what the model generated and billed — and costs the reserve, as an
//! answer that told no usage. Else a client could buy generations for one unit each by
//! asking for an output it knows the guardrail refuses.

use super::spend::{budget, chat, post, reserve_of, used, used_reaches};
use crate::support::*;

#[tokio::test]
async fn a_4xx_no_registry_names_costs_the_reserve_a_registered_one_min_cost() {
    let up = LlmUpstream::start().await;
    let gw = TestGateway::start(&budget(10_000_000).build(), &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        for (status, charged) in [(446, None), (499, None), (400, Some(1)), (422, Some(1))] {
            let key = format!("refused-{status}-{i}");
            let body = chat(&format!("refused-{status}"), 5, 200);
            let r = post(client, &url, &key, body.to_string().into_bytes()).await;
            assert_eq!(r.status, status, "{}", r.text());
            let charged = charged.unwrap_or_else(|| reserve_of(&body));
            assert_eq!(used_reaches(&gw, &key, charged).await, charged, "{status}");
            assert_eq!(used(&gw, &key).await, charged, "{status}");
        }
    }
}
