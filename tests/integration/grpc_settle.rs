//! A tier settled from a gRPC call's trailers: a streamed call's trailer, whatever the
//! client takes (HTTP/1.1, HTTP/2, no `te: trailers`), and a trailers-only answer (an
//! error after work done, no message) whose value is in its head.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn a_tier_settles_from_a_grpc_trailer() {
    let up = GrpcUpstream::start().await;
    let toml = Fixture::new()
        .upstream("api", "protocol = \"h2c\"")
        .policy_raw(
            "tokens",
            r#"
            key = "header:x-tenant-id"
            limit = 100
            period = "100s"
            burst = 100
            reserve = 1
            settle = "response_trailer:x-usage-tokens"
            "#,
        )
        .route("echo", "/test.Echo/", "api", &["tokens"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    let mut req = tonic::Request::new(Msg {
        count: 60,
        ..Msg::default()
    });
    req.metadata_mut()
        .insert("x-tenant-id", "t".parse().expect("v"));
    let mut replies = client.count(req).await.expect("stream").into_inner();
    while replies.message().await.expect("reply").is_some() {}
    // 1 reserved at admission, 59 more settled from the trailer's 60: 40 of 100 left
    // (the fake clock stands still, so nothing has been earned back).
    let url = gw.admin_url("/admin/limits/tokens/t");
    let remaining = |left: u64| {
        let url = url.clone();
        async move {
            let settled = eventually_async(Duration::from_secs(30), || async {
                get(&url, &[]).await.json()["remaining"] == left
            })
            .await;
            assert!(settled, "not {left}: {}", get(&url, &[]).await.text());
        }
    };
    remaining(40).await;
    // Clients that do not take trailers (no `te: trailers`), over HTTP/1.1 and HTTP/2,
    // pay the same: the gateway asks the upstream for them anyway. Count{count: 15}.
    let call: &'static [u8] = b"\x00\x00\x00\x00\x02\x10\x0f";
    let headers = [("content-type", "application/grpc"), ("x-tenant-id", "t")];
    let mut left = 40;
    for client in [http1(), http2()] {
        let r = send(&client, "POST", &gw.url("/test.Echo/Count"), &headers, call).await;
        assert_eq!(r.status, 200, "{r:?}");
        left -= 15;
        remaining(left).await;
    }
}

/// A call answered trailers-only (its error's status and metadata in the one HEADERS
/// frame, no message) pays the usage that head reports, not the reserve of a value that
/// never came.
#[tokio::test]
async fn a_trailers_only_answer_settles_from_its_head() {
    let up = GrpcUpstream::start().await;
    let toml = Fixture::new()
        .upstream("api", "protocol = \"h2c\"")
        .policy_raw(
            "tokens",
            "key = \"header:x-tenant-id\"\nlimit = 100\nperiod = \"100s\"\nburst = 100\nreserve = 1\nsettle = \"response_trailer:x-usage-tokens\"\n",
        )
        .route("echo", "/test.Echo/", "api", &["tokens"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    let mut req = tonic::Request::new(Msg {
        text: "fail".to_owned(),
        count: 30,
        ..Msg::default()
    });
    req.metadata_mut()
        .insert("x-tenant-id", "t".parse().expect("v"));
    let failed = client.say(req).await.expect_err("an error");
    assert_eq!(failed.code(), tonic::Code::InvalidArgument);
    assert_eq!(
        failed.metadata().get("x-usage-tokens").expect("usage"),
        "30"
    );
    let url = gw.admin_url("/admin/limits/tokens/t");
    let settled = eventually_async(Duration::from_secs(30), || async {
        get(&url, &[]).await.json()["remaining"] == 70
    })
    .await;
    assert!(settled, "30 of 100 used: {}", get(&url, &[]).await.text());
}

/// A call whose own deadline (`grpc-timeout`, shorter than the upstream's `timeout`)
/// passes before the upstream answers chose when to stop waiting, as a client hanging up
/// does: it pays `max_cost`, not the reserve an upstream timeout settles at — else a
/// request header lowered the charge. Answered DEADLINE_EXCEEDED, over HTTP/1.1 and
/// HTTP/2.
#[tokio::test]
async fn a_call_whose_own_deadline_passes_pays_max_cost() {
    // An upstream that takes requests and never answers.
    let silent = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr = silent.local_addr().expect("addr");
    tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((conn, _)) = silent.accept().await {
            held.push(conn);
        }
    });
    let toml = Fixture::new()
        .policy_raw(
            "tokens",
            "key = \"header:x-tenant-id\"\nlimit = 1000\nperiod = \"1000s\"\nburst = 1000\nreserve = 10\nmax_cost = 400\nsettle = \"response_header:x-usage-tokens\"\n",
        )
        .route("echo", "/test.Echo/", "api", &["tokens"])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{addr}")).await;
    let call: &[u8] = b"\x00\x00\x00\x00\x02\x10\x0f";
    for (tenant, client) in [("h1", http1()), ("h2", http2())] {
        let headers = [
            ("content-type", "application/grpc"),
            ("grpc-timeout", "200m"),
            ("x-tenant-id", tenant),
        ];
        let r = send(&client, "POST", &gw.url("/test.Echo/Count"), &headers, call).await;
        assert_eq!(r.status, 200, "{r:?}");
        assert_eq!(
            r.header("grpc-status"),
            Some("4"),
            "DEADLINE_EXCEEDED: {r:?}"
        );
        let url = gw.admin_url(&format!("/admin/limits/tokens/{tenant}"));
        let settled = eventually_async(Duration::from_secs(30), || async {
            get(&url, &[]).await.json()["remaining"] == 600
        })
        .await;
        assert!(
            settled,
            "{tenant}: 400 charged, not 10: {}",
            get(&url, &[]).await.text()
        );
    }
}
