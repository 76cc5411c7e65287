//! Keys read from the JSON request body: per model whatever the body's spelling, the body
//! forwarded unchanged, a body without the key rejected, a body over `max_key_body`
//! without a key; one bucket with an RLS descriptor of the same value; MCP tool calls per
//! tool, over HTTP/1.1 and HTTP/2 against a real upstream.

use crate::spend::post;
use crate::support::*;

#[tokio::test]
async fn a_key_from_the_body_limits_per_model_and_the_body_goes_upstream_unchanged() {
    let up = LlmUpstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "per_model",
            "key = \"json:/model\"\nlimit = 2\nperiod = \"1h\"\nburst = 2\nmissing = \"reject\"\n",
        )
        .route("llm", "/v1", "api", &["per_model"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let url = gw.url("/v1/chat/completions");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let model = format!("m{i}");
        // Spelled differently each time, the same model is the same key.
        let bodies = [
            format!("{{\"model\":\"{model}\",\"messages\":[]}}"),
            format!(
                "{{ \"messages\": [], \"model\" : \"{}\" }}",
                model.replace('m', "\\u006d")
            ),
            format!("{{\"model\":\"{model}\"}}"),
        ];
        let mut statuses = Vec::new();
        for b in &bodies {
            statuses.push(
                post(client, &url, "k", b.clone().into_bytes())
                    .await
                    .status
                    .as_u16(),
            );
        }
        assert_eq!(statuses, [200, 200, 429], "{model}");
        let other = post(
            client,
            &url,
            "k",
            format!("{{\"model\":\"other{i}\"}}").into_bytes(),
        )
        .await;
        assert_eq!(other.status, 200, "another model has its own bucket");
        // Not JSON, or no model: the key is missing and the policy rejects it.
        for bad in [
            "model=m",
            "{\"model\":\"m\"",
            "{\"messages\":[]}",
            "{\"model\":{\"id\":\"m\"}}",
        ] {
            let r = post(client, &url, "k", bad.as_bytes().to_vec()).await;
            assert_eq!(r.status, 400, "{bad}");
            assert_eq!(r.json()["error"], "missing_key", "{bad}");
        }
        let seen = up.bodies();
        for b in &bodies[..2] {
            assert!(
                seen.iter().any(|s| s == b.as_bytes()),
                "forwarded unchanged: {b}"
            );
        }
    }
}

#[tokio::test]
async fn mcp_tool_calls_are_limited_per_tool_whatever_the_agent_sends_around_them() {
    let up = LlmUpstream::start().await;
    let toml = Fixture::new()
        .policy_raw("per_tool", "key = \"json:/params/name\"\nmissing = \"skip\"\nlimit = 2\nperiod = \"1h\"\nburst = 2\n")
        .route("mcp", "/mcp", "api", &["per_tool"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let call = |id: u64, tool: &str| {
        serde_json::json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {"name": tool, "arguments": {"name": "decoy"}}})
            .to_string()
            .into_bytes()
    };
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let tool = format!("search-{i}");
        let mut statuses = Vec::new();
        for id in 0..3 {
            let r = post(
                client,
                &gw.url("/mcp"),
                &format!("agent-{id}"),
                call(id, &tool),
            )
            .await;
            statuses.push(r.status.as_u16());
            if r.status == 200 {
                assert_eq!(r.json()["id"], id, "the JSON-RPC answer passes through");
            } else {
                // The refusal is a JSON-RPC error to this call, still a 429 with its wait.
                let refusal = r.json();
                assert_eq!(refusal["jsonrpc"], "2.0");
                assert_eq!(refusal["id"], id, "{refusal}");
                assert_eq!(refusal["error"]["code"], -32029, "{refusal}");
                assert_eq!(refusal["error"]["data"]["policy"], "per_tool");
                assert!(refusal["error"]["data"]["retry_after_ms"].as_u64() > Some(0));
                assert!(r.header("retry-after").is_some(), "{refusal}");
            }
        }
        assert_eq!(
            statuses,
            [200, 200, 429],
            "a tool's budget, whichever agent calls"
        );
        let other = post(client, &gw.url("/mcp"), "a", call(9, &format!("fetch-{i}"))).await;
        assert_eq!(other.status, 200, "another tool has its own");
        // Not a tool call: this tier does not apply.
        let list = br#"{"jsonrpc":"2.0","id":1,"method":"tools/list"}"#.to_vec();
        for _ in 0..3 {
            assert_eq!(
                post(client, &gw.url("/mcp"), "a", list.clone())
                    .await
                    .status,
                200
            );
        }
    }
}

/// A policy keyed by `json:/model` keys a rate limit service rule too: the descriptor's
/// value is the body's model, and both doors draw on one bucket.
#[tokio::test]
async fn a_body_key_and_a_descriptor_of_the_same_model_share_one_bucket() {
    let up = LlmUpstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "per_model",
            "key = \"json:/model\"\nlimit = 3\nperiod = \"1h\"\nburst = 3\nmissing = \"reject\"\n",
        )
        .route("llm", "/v1", "api", &["per_model"])
        .raw("[rls]\nlisten = \"127.0.0.1:0\"\n\n[[rls.rules]]\ndomain = \"llm\"\ndescriptor = [\"model\"]\npolicy = \"per_model\"\n")
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut rls = RlsClient::connect(gw.rls.expect("rls")).await;
    let url = gw.url("/v1/chat/completions");
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let model = format!("m{i}");
        let body = || format!("{{\"model\":\"{model}\",\"messages\":[]}}").into_bytes();
        assert_eq!(post(client, &url, "k", body()).await.status, 200);
        let asked = rls.ask("llm", vec![descriptor(&[("model", &model)])]).await;
        assert_eq!(asked.codes(), [(OK, 1)], "{model}");
        assert_eq!(post(client, &url, "k", body()).await.status, 200);
        assert_eq!(post(client, &url, "k", body()).await.status, 429);
        let refused = rls.ask("llm", vec![descriptor(&[("model", &model)])]).await;
        assert_eq!(refused.overall_code, OVER_LIMIT, "{model}");
    }
}

/// A body larger than `[server] max_key_body` (64 KiB unless set) is not read for a key:
/// its key is missing, however early the pointer's value comes; one within it is keyed.
#[tokio::test]
async fn a_body_over_max_key_body_has_no_key_and_one_within_it_has() {
    // `{"model":"m","pad":"…"}` of exactly `len` bytes.
    let body = |len: usize| {
        let pad = len - "{\"model\":\"m\",\"pad\":\"\"}".len();
        format!("{{\"model\":\"m\",\"pad\":\"{}\"}}", "x".repeat(pad)).into_bytes()
    };
    let up = LlmUpstream::start().await;
    for (server, bound) in [("", 64 * 1024), ("max_key_body = 1024", 1024)] {
        let toml = Fixture::new()
            .server(server)
            .policy_raw(
                "per_model",
                "key = \"json:/model\"\nlimit = 100\nperiod = \"1h\"\nburst = 100\nmissing = \"reject\"\n",
            )
            .route("llm", "/v1", "api", &["per_model"])
            .build();
        let gw = TestGateway::start(&toml, &up.url()).await;
        let url = gw.url("/v1/chat/completions");
        for client in [http1(), http2()] {
            let within = post(&client, &url, "k", body(bound)).await;
            assert_eq!(within.status, 200, "{bound} bytes, bound {bound}");
            let over = post(&client, &url, "k", body(bound + 1)).await;
            assert_eq!(over.status, 400, "{} bytes, bound {bound}", bound + 1);
            assert_eq!(over.json()["error"], "missing_key");
        }
    }
}
