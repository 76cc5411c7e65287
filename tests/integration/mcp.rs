//! Agents' tool calls through the gateway with the official MCP SDKs on both sides: a
//! real MCP server (streamable HTTP, Python's `mcp` package) upstream and its client
//! through tollgate, refused per tool with a JSON-RPC error the client surfaces as one.

use std::process::Command;

use crate::support::*;

/// `tests/mcp/server.py`, the official Python SDK's server.
async fn mcp_server() -> ScriptUpstream {
    ScriptUpstream::start("python3", "tests/mcp/server.py", "mcp").await
}

#[tokio::test]
#[ignore = "needs Python's mcp package: scripts/test installs it"]
async fn the_mcp_client_is_refused_per_tool_with_a_json_rpc_error() {
    let server = mcp_server().await;
    let toml = Fixture::new()
        .policy_raw(
            "per_tool",
            "key = \"json:/params/name\"\nmissing = \"skip\"\nlimit = 3\nperiod = \"1h\"\nburst = 3\n",
        )
        .policy_raw(
            "per_session",
            "key = \"header:mcp-session-id\"\nmissing = \"shared\"\nlimit = 100\nperiod = \"1h\"\nburst = 100\n",
        )
        .route("mcp", "/mcp", "api", &["per_tool", "per_session"])
        .build();
    let gw = TestGateway::start(&toml, &server.url("")).await;
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp/client.py");
    let url = gw.url("/mcp");
    let out = tokio::task::spawn_blocking(move || {
        Command::new("python3")
            .arg(script)
            .args([&url, "5"])
            .output()
            .expect("python3 runs (scripts/test installs mcp)")
    })
    .await
    .expect("join");
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "the mcp client failed:\n{stderr}");
    let got: serde_json::Value = serde_json::from_slice(&out.stdout).expect("json out");
    let search = got["search"].as_array().expect("search calls");
    for ok in &search[..3] {
        assert_eq!(ok["ok"], true, "{got}");
    }
    for refused in &search[3..] {
        assert_eq!(refused["ok"], false, "{got}");
        assert_eq!(
            refused["code"], -32029,
            "the client sees tollgate's code: {got}"
        );
        assert_eq!(refused["message"], "rate limited by per_tool");
        assert_eq!(refused["data"]["policy"], "per_tool");
        assert!(
            refused["data"]["retry_after_ms"].as_u64() > Some(1000),
            "{got}"
        );
    }
    assert_eq!(got["fetch"]["ok"], true, "another tool has its own budget");
    assert_eq!(
        got["reached"],
        serde_json::json!({"search": 3, "fetch": 1}),
        "refused calls never reached the server"
    );
}
