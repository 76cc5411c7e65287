//! gRPC through the gateway, with real gRPC software on both sides: tonic's client calls
//! the gateway, which forwards over HTTP/2 to tonic's server. Every call kind, trailers,
//! errors, deadlines, refusals answered as gRPC, per-method routes and tiers, settling from
//! a trailer. How the calls travel (connections, GOAWAY, flow control, TLS) is in
//! `upstream_http2`.

use std::time::Duration;

use tonic::Code;

use crate::support::*;

/// A gateway in front of a gRPC upstream: `test.Echo` routed, per tenant when
/// `policies` names `tenant` (1 call per 10 s, 2 at once).
pub fn grpc_config(upstream_extra: &str, policies: &[&str]) -> Fixture {
    Fixture::new()
        .server("workers = 2")
        .upstream("api", format!("protocol = \"h2c\"\n{upstream_extra}"))
        .policy("tenant", "header:x-tenant-id", 1, "10s", 2)
        .route("echo", "/test.Echo/", "api", policies)
}

#[tokio::test]
async fn every_call_kind_passes_through_with_its_trailers() {
    let up = GrpcUpstream::start().await;
    let gw = TestGateway::start(&grpc_config("", &[]).build(), &up.url()).await;
    let mut client = EchoClient::connect(&gw.url("")).await;

    let said = client.say(say_as("ada", &[])).await.expect("unary");
    assert_eq!(said.get_ref().text, "hello ada");

    let mut replies = client
        .count(tonic::Request::new(Msg {
            text: "n".into(),
            count: 3,
            ..Msg::default()
        }))
        .await
        .expect("server streaming")
        .into_inner();
    let mut texts = Vec::new();
    while let Some(msg) = replies.message().await.expect("a reply") {
        texts.push(msg.text);
    }
    assert_eq!(texts, ["n 0", "n 1", "n 2"]);
    let trailers = replies.trailers().await.expect("trailers").expect("some");
    assert_eq!(trailers.get("x-usage-tokens").expect("trailer"), "3");

    let parts = futures_util::stream::iter((1..=4).map(|count| Msg {
        count,
        ..Msg::default()
    }));
    let summed = client.sum(parts).await.expect("client streaming");
    assert_eq!(
        (summed.get_ref().count, summed.get_ref().text.as_str()),
        (10, "4 parts")
    );

    // Bidi: each message is answered before the next is sent.
    let (tx, rx) = tokio::sync::mpsc::channel::<Msg>(1);
    let outgoing = tokio_stream_from(rx);
    let mut echoed = client.chat(outgoing).await.expect("bidi").into_inner();
    for word in ["one", "two", "three"] {
        tx.send(Msg::text(word)).await.expect("send");
        let got = echoed.message().await.expect("echo").expect("a message");
        assert_eq!(got.text, format!("echo {word}"));
    }
    drop(tx);
    assert!(echoed.message().await.expect("clean end").is_none());

    // The upstream's own error, trailers-only, with its metadata.
    let failed = client.say(say_as("fail", &[])).await.expect_err("an error");
    assert_eq!(failed.code(), Code::InvalidArgument);
    assert_eq!(failed.message(), "told to fail");
    assert_eq!(
        failed.metadata().get("x-detail").expect("metadata"),
        "failed-on-purpose"
    );
}

/// An mpsc receiver as a stream (tokio-stream is not a dependency).
fn tokio_stream_from(
    rx: tokio::sync::mpsc::Receiver<Msg>,
) -> impl futures_util::Stream<Item = Msg> + Send + 'static {
    futures_util::stream::unfold(rx, |mut rx| async move { rx.recv().await.map(|m| (m, rx)) })
}

#[tokio::test]
async fn a_refused_call_is_resource_exhausted_with_the_exact_pushback() {
    let up = GrpcUpstream::start().await;
    let gw = TestGateway::start(&grpc_config("", &["tenant"]).build(), &up.url()).await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    let tenant = [("x-tenant-id", "acme")];
    for _ in 0..2 {
        client
            .say(say_as("a", &tenant))
            .await
            .expect("within the burst");
    }
    let refused = client.say(say_as("a", &tenant)).await.expect_err("refused");
    assert_eq!(refused.code(), Code::ResourceExhausted, "{refused:?}");
    let md = refused.metadata();
    // The fake clock stands still: the wait is exactly one emission interval.
    assert_eq!(md.get("grpc-retry-pushback-ms").expect("pushback"), "10000");
    assert_eq!(md.get("retry-after").expect("retry-after"), "10");
    assert!(md.get("ratelimit-policy").is_some(), "{md:?}");
    assert!(
        refused.message().contains("tenant"),
        "{}",
        refused.message()
    );
    assert_eq!(up.calls(), 2, "a refused call never reaches the upstream");

    // On the wire: HTTP 200, trailers-only (no body), whatever the client's version.
    for client in [http2(), http1()] {
        let headers = [
            ("x-tenant-id", "acme"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ];
        let r = send(&client, "POST", &gw.url("/test.Echo/Say"), &headers, b"").await;
        assert_eq!(r.status, 200);
        assert_eq!(r.header("grpc-status"), Some("8"));
        assert_eq!(r.header("grpc-retry-pushback-ms"), Some("10000"));
        assert_eq!(r.header("content-type"), Some("application/grpc"));
        assert!(r.body.is_empty(), "{:?}", r.body);
    }
    // A plain HTTP request to the same route is still answered 429.
    let r = send(&http1(), "GET", &gw.url("/test.Echo/Say"), &tenant, b"").await;
    assert_eq!(r.status, 429);
    // Once the wait has passed, the call goes through.
    gw.advance(10 * S);
    client
        .say(say_as("a", &tenant))
        .await
        .expect("admitted again");
}

#[tokio::test]
async fn gateway_errors_are_grpc_statuses() {
    let dead = dead_port().await;
    let toml = Fixture::new()
        .upstream("api", "protocol = \"h2c\"")
        .policy_raw(
            "tenant",
            r#"
            key = "header:x-tenant-id"
            limit = 100
            period = "1s"
            burst = 100
            missing = "reject"
            "#,
        )
        .route("echo", "/test.Echo/", "api", &["tenant"])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{dead}")).await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    let missing = client.say(say_as("a", &[])).await.expect_err("no key");
    assert_eq!(missing.code(), Code::InvalidArgument, "{missing:?}");
    assert_eq!(
        missing.message(),
        "tollgate: the key of policy tenant is missing"
    );
    let down = client
        .say(say_as("a", &[("x-tenant-id", "t")]))
        .await
        .expect_err("no upstream");
    assert_eq!(down.code(), Code::Unavailable, "{down:?}");
    assert_eq!(down.message(), "tollgate: the upstream is unavailable");
    let unrouted = EchoClient::connect(&gw.url(""))
        .await
        .grpc_call("/other.Service/Method")
        .await;
    assert_eq!(unrouted.code(), Code::Unimplemented, "{unrouted:?}");
    assert_eq!(unrouted.message(), "tollgate: no route for this call");
}

#[tokio::test]
async fn grpc_timeout_bounds_the_wait_for_the_upstream() {
    // An upstream that takes connections and never answers anything.
    let (addr, held) = silent_upstream().await;
    let toml = grpc_config("timeout = \"60s\"", &[]).build();
    let gw = TestGateway::start(&toml, &format!("http://{addr}")).await;
    // A raw HTTP/2 client: tonic's would give up on its own at the same moment.
    let headers = [
        ("content-type", "application/grpc"),
        ("te", "trailers"),
        ("grpc-timeout", "300m"),
    ];
    let started = std::time::Instant::now();
    let r = send(&http2(), "POST", &gw.url("/test.Echo/Say"), &headers, b"").await;
    assert_eq!(
        (r.status.as_u16(), r.header("grpc-status")),
        (200, Some("4")),
        "{r:?}"
    );
    // The call's own deadline passed first: its answer, not the upstream's timeout.
    let message = r.header("grpc-message").unwrap_or_default();
    assert_eq!(
        message,
        "tollgate: the call's deadline passed before the upstream answered"
    );
    // The call's 300 ms, not the route's 60 s (a generous margin for a busy machine).
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    // The upstream's own timeout the shorter: the upstream's answer.
    let toml = grpc_config("timeout = \"300ms\"", &[]).build();
    let gw = TestGateway::start(&toml, &format!("http://{addr}")).await;
    let headers = [("grpc-timeout", "60S"), headers[0], headers[1]];
    let r = send(&http2(), "POST", &gw.url("/test.Echo/Say"), &headers, b"").await;
    assert_eq!(r.header("grpc-status"), Some("4"), "{r:?}");
    let message = r.header("grpc-message").unwrap_or_default();
    assert_eq!(message, "tollgate: the upstream did not answer in time");
    held.abort();
}

#[tokio::test]
async fn routes_per_method_and_limits_per_method() {
    let up = GrpcUpstream::start().await;
    let toml = Fixture::new()
        .upstream("api", "protocol = \"h2c\"")
        .policy("per_method", "path", 1, "1h", 1)
        .policy("say", "header:x-tenant-id", 1, "1h", 1)
        .route("say", "/test.Echo/Say", "api", &["say"])
        .route("echo", "/test.Echo/", "api", &["per_method"])
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    let tenant = [("x-tenant-id", "t")];
    client.say(say_as("a", &tenant)).await.expect("first Say");
    let again = client
        .say(say_as("a", &tenant))
        .await
        .expect_err("Say's own route");
    assert_eq!(again.code(), Code::ResourceExhausted);
    // The service route's tier is keyed by the method: one Sum, then one Count.
    let one = || futures_util::stream::iter([Msg::default()]);
    client.sum(one()).await.expect("first Sum");
    let sum_again = client.sum(one()).await.expect_err("second Sum");
    assert_eq!(sum_again.code(), Code::ResourceExhausted);
    let counted = client.count(tonic::Request::new(Msg::default())).await;
    counted.expect("Count has a bucket of its own");
}

/// grpcio (gRPC's C core) as the upstream and as the client: tests/grpcio/echo.py.
struct GrpcioServer(std::process::Child);

impl Drop for GrpcioServer {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn grpcio_script() -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/grpcio/echo.py")
}

async fn grpcio_server() -> (GrpcioServer, u16) {
    let port = free_port();
    let child = std::process::Command::new("python3")
        .arg(grpcio_script())
        .args(["server", &port.to_string()])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("python3 runs (scripts/test installs grpcio)");
    let server = GrpcioServer(child);
    let listening = eventually_async(Duration::from_secs(30), || async move {
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    })
    .await;
    assert!(listening, "the grpcio server listens on {port}");
    (server, port)
}

/// Runs the grpcio client against `target`; its output, once it has passed.
async fn grpcio_client(target: String, tenant: Option<&str>) -> String {
    let tenant = tenant.map(str::to_owned);
    let run = tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new("python3");
        cmd.arg(grpcio_script()).args(["client", &target]);
        cmd.args(tenant);
        cmd.output()
    });
    let out = tokio::time::timeout(Duration::from_secs(120), run)
        .await
        .expect("the grpcio client finishes")
        .expect("task")
        .expect("python3 runs");
    let text = String::from_utf8_lossy(&out.stdout).into_owned();
    let errors = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "grpcio client failed:\n{text}\n{errors}"
    );
    text
}

#[tokio::test]
async fn grpcio_client_and_server_pass_every_call_kind_and_the_refusal() {
    let (_server, port) = grpcio_server().await;
    let upstream = format!("http://127.0.0.1:{port}");
    let gw = TestGateway::start(&grpc_config("", &[]).build(), &upstream).await;
    let out = grpcio_client(gw.addr.to_string(), None).await;
    for check in [
        "unary",
        "server streaming",
        "trailers",
        "client streaming",
        "bidi streaming",
        "error",
        "error metadata",
        "deadline",
    ] {
        assert!(
            out.contains(&format!("ok {check} ")),
            "{check} missing:\n{out}"
        );
    }
    let limited = TestGateway::start(&grpc_config("", &["tenant"]).build(), &upstream).await;
    let out = grpcio_client(limited.addr.to_string(), Some("acme")).await;
    assert!(
        out.contains("ok refusal ") && out.contains("ok pushback "),
        "{out}"
    );
}
