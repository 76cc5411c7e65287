//! Every answer the gateway makes itself says why, the same way over HTTP/1.1, HTTP/2 and
//! gRPC: an overloaded gateway, an upload cut at `max_cost` or over `max_body`, and a store
//! that fails mid-upload (503 store_unavailable, as at admission — not the client's 413).

use std::time::Duration;

use bytes::Bytes;
use http_body_util::BodyExt;
use tonic::Code;

use crate::support::*;

const GRPC: (&str, &str) = ("content-type", "application/grpc");

/// A gRPC-shaped call (raw HTTP/2, as any gRPC client sends it): its grpc-status and
/// grpc-message.
async fn grpc_answer(url: &str, headers: &[(&str, &str)]) -> (u16, String, String) {
    let mut all = vec![GRPC, ("te", "trailers")];
    all.extend_from_slice(headers);
    let r = send(&http2(), "POST", url, &all, b"").await;
    let status = r.header("grpc-status").unwrap_or_default().to_owned();
    let message = r.header("grpc-message").unwrap_or_default().to_owned();
    (r.status.as_u16(), status, message)
}

#[tokio::test]
async fn an_overloaded_gateway_says_so_to_http_and_grpc_clients() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .server("workers = 1\nmax_requests = 4\n")
        .route("api", "/", "api", &[])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    let held: Vec<_> = (0..4)
        .map(|_| {
            let url = gw.url("/v1/echo");
            tokio::spawn(async move { get(&url, &[("x-delay-ms", "3000")]).await.status })
        })
        .collect();
    assert!(eventually(Duration::from_secs(10), || up.requests() == 4).await);
    for client in [http1(), http2()] {
        let r = send(&client, "GET", &gw.url("/v1/echo"), &[], b"").await;
        assert_eq!(
            (r.status.as_u16(), r.json()["error"].clone()),
            (503, "overloaded".into())
        );
    }
    let (http, code, message) = grpc_answer(&gw.url("/pkg.Svc/Call"), &[]).await;
    assert_eq!((http, code.as_str()), (200, "14"), "UNAVAILABLE");
    assert_eq!(message, "tollgate: overloaded: retry in 1 s");
    for h in held {
        assert_eq!(h.await.expect("held"), 200);
    }
}

#[tokio::test]
async fn an_upload_over_max_cost_is_named_as_the_tiers_cut() {
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .policy_raw(
            "up",
            "key = \"header:x-tenant-id\"\nlimit = 1024\nperiod = \"1h\"\nburst = 2048\nmax_debt = 0\nsettle = \"request_bytes\"\nsettle_unit = 1024\nmax_cost = 16\n",
        )
        .route("up", "/", "api", &["up"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    // Declared 1 MiB on a gRPC call (raw HTTP/2, the body never sent): cut at once.
    let grpc = [("x-tenant-id", "t"), GRPC, ("te", "trailers")];
    let (status, h, _) = h2_declared(gw.addr, "/pkg.Svc/Upload", &grpc, 1 << 20).await;
    assert_eq!(status, 200);
    assert_eq!(h["grpc-status"], "8", "RESOURCE_EXHAUSTED");
    assert_eq!(
        h["grpc-message"],
        "tollgate: request body cut: policy up's max_cost reached"
    );
    let h = [("x-tenant-id", "t")];
    let plain = upload(&stream_client(false), &gw.url("/v1/echo"), &h, 1 << 20).await;
    if let Ok(r) = plain {
        assert_eq!(
            (r.status.as_u16(), r.json()["error"].clone()),
            (413, "budget_exhausted".into())
        );
    }
}

/// A body whose chunks the test sends when it likes.
fn held_body() -> (
    tokio::sync::mpsc::Sender<Bytes>,
    http_body_util::combinators::BoxBody<Bytes, std::io::Error>,
) {
    let (tx, rx) = tokio::sync::mpsc::channel::<Bytes>(4);
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        let chunk = rx.recv().await?;
        Some((Ok::<_, std::io::Error>(hyper::body::Frame::data(chunk)), rx))
    });
    (tx, BodyExt::boxed(http_body_util::StreamBody::new(stream)))
}

/// An upload's head, as a plain POST or a gRPC call, keyed by how it is sent.
fn upload_head(gw: &TestGateway, http2: bool, grpc: bool) -> http::request::Builder {
    let req = http::Request::builder()
        .method("POST")
        .uri(gw.url(if grpc { "/pkg.Svc/Upload" } else { "/v1/echo" }))
        .header("x-tenant-id", format!("t-{http2}-{grpc}"));
    if grpc {
        req.header(GRPC.0, GRPC.1).header("te", "trailers")
    } else {
        req
    }
}

#[tokio::test]
async fn a_store_failing_mid_upload_is_the_stores_503_not_the_clients_413() {
    let redis = RedisServer::start();
    let up = Upstream::start().await;
    let toml = Fixture::new()
        .store(format!(
            "backend = \"redis\"\nurl = \"{}\"\ntimeout = \"200ms\"\non_error = \"deny\"",
            redis.url()
        ))
        .policy_raw(
            "up",
            "key = \"header:x-tenant-id\"\nlimit = 100000\nperiod = \"1h\"\nburst = 512\nsettle = \"request_bytes\"\nsettle_unit = 1024\n",
        )
        .route("up", "/", "api", &["up"])
        .build();
    let gw = TestGateway::start_real_clock(&toml, &up.url()).await;
    gw.wait_for_store("/v1/echo", "warm-up").await;
    for (http2, grpc) in [(false, false), (true, false), (true, true)] {
        let (tx, body) = held_body();
        let req = upload_head(&gw, http2, grpc);
        let client = stream_client(http2);
        let scripts = redis.script_calls();
        let call = tokio::spawn(client.request(req.body(body).expect("request")));
        tx.send(Bytes::from(vec![b'a'; 16 * 1024]))
            .await
            .expect("first chunk");
        // Admitted and the first chunk's units drawn (two scripts) before the store hangs.
        let drawn = eventually(Duration::from_secs(10), || {
            redis.script_calls() >= scripts + 2
        })
        .await;
        assert!(drawn, "admitted and drawn");
        redis.pause();
        // Past what was drawn: the next draw finds no store.
        // (A draw covers 64 KiB: a burst of 512 KiB, an eighth of it.)
        for _ in 0..16 {
            if tx.send(Bytes::from(vec![b'b'; 16 * 1024])).await.is_err() {
                break;
            }
        }
        drop(tx);
        let resp = tokio::time::timeout(Duration::from_secs(30), call)
            .await
            .expect("answered")
            .expect("task")
            .expect("an answer, not a reset");
        redis.resume();
        let status = resp.status().as_u16();
        let headers = resp.headers().clone();
        let body = resp
            .into_body()
            .collect()
            .await
            .map(|b| b.to_bytes())
            .unwrap_or_default();
        if grpc {
            assert_eq!(
                (
                    status,
                    headers.get("grpc-status").map(|v| v.to_str().unwrap_or(""))
                ),
                (200, Some("14"))
            );
            assert_eq!(
                headers["grpc-message"],
                "tollgate: the rate-limit store could not meter the request body (policy up)"
            );
        } else {
            let json: serde_json::Value = serde_json::from_slice(&body).expect("JSON");
            assert_eq!(
                (status, json["error"].as_str()),
                (503, Some("store_unavailable")),
                "{json}"
            );
            assert_eq!(json["policy"], "up");
        }
        // Let the breaker close again before the next round.
        gw.wait_for_store("/v1/echo", &format!("again-{http2}-{grpc}"))
            .await;
    }
}

/// Over `max_body`, a real gRPC client (tonic) is told RESOURCE_EXHAUSTED and why.
#[tokio::test]
async fn a_call_over_max_body_is_resource_exhausted() {
    let up = GrpcUpstream::start().await;
    let toml = Fixture::new()
        .upstream("api", "protocol = \"h2c\"")
        .route_raw(
            r#"
            name = "echo"
            path = "/test.Echo/"
            upstream = "api"
            policies = []
            max_body = 64
            "#,
        )
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    client
        .say(say_as("small", &[]))
        .await
        .expect("within max_body");
    let big = "x".repeat(1000);
    let refused = client.say(say_as(&big, &[])).await.expect_err("too large");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    assert_eq!(refused.message(), "tollgate: request body over max_body");
}
