//! HTTP/2 upstream connections over their life: kept by a reload that keeps the upstream,
//! and one failed connection attempt failing every request that waited for it at once.

use std::time::Duration;

use crate::support::*;

#[tokio::test]
async fn http2_connections_survive_a_reload_that_keeps_the_upstream() {
    let up = GrpcUpstream::start().await;
    let config = |extra: &str, second_route: bool| {
        let mut f = Fixture::new()
            .server("workers = 1")
            .upstream("api", format!("protocol = \"h2c\"\n{extra}"))
            .route("echo", "/test.Echo/", "api", &[]);
        if second_route {
            f = f.route("other", "/other/", "api", &[]);
        }
        f.build()
    };
    let gw = TestGateway::start(&config("", false), &up.url()).await;
    let mut client = EchoClient::connect(&gw.url("")).await;
    client.say(say_as("a", &[])).await.expect("before");
    assert_eq!(up.connections(), 1);
    // Routes change, the upstream does not: the same connection carries the next call.
    gw.rewrite(&config("", true), &up.url());
    gw.gw().reload().await.expect("reload");
    client.say(say_as("b", &[])).await.expect("after a reload");
    assert_eq!(
        up.connections(),
        1,
        "the HTTP/2 connection survived the reload"
    );
    // Its settings change: a new pool and a new connection.
    gw.rewrite(&config("max_streams = 10", false), &up.url());
    gw.gw().reload().await.expect("reload");
    client.say(say_as("c", &[])).await.expect("after a change");
    assert_eq!(up.connections(), 2);
}

#[tokio::test]
async fn requests_waiting_for_a_connection_that_fails_fail_with_it() {
    // A target whose connections hang: a listener with a backlog of 0 whose one place is
    // taken, so the gateway's connection attempts are never answered.
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    let addr: std::net::SocketAddr = "127.0.0.1:0".parse().expect("addr");
    socket.bind(&addr.into()).expect("bind");
    socket.listen(0).expect("listen");
    let addr = socket
        .local_addr()
        .expect("addr")
        .as_socket()
        .expect("inet");
    let _taken = std::net::TcpStream::connect(addr).expect("the backlog's one place");
    let toml = Fixture::new()
        .server("workers = 1")
        .upstream(
            "api",
            "protocol = \"h2c\"\nconnect_timeout = \"1s\"\ntimeout = \"60s\"",
        )
        .route("all", "/", "api", &[])
        .build();
    let gw = TestGateway::start(&toml, &format!("http://{addr}")).await;
    let started = std::time::Instant::now();
    let mut calls = tokio::task::JoinSet::new();
    for i in 0..10 {
        let url = gw.url(&format!("/{i}"));
        calls.spawn(async move { send(&http1(), "GET", &url, &[], b"").await.status });
    }
    while let Some(status) = calls.join_next().await {
        assert_eq!(status.expect("task"), 502);
    }
    // One attempt for all (1 s), not one after another (10 s): a wide margin either way.
    let took = started.elapsed();
    assert!(took < Duration::from_secs(8), "{took:?}");
}
