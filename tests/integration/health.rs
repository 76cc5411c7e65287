//! `tollgate health` (the container's HEALTHCHECK) as the real binary, against a real
//! gateway's admin listener: exit 0 on 200, exit 1 with a reason on a refused connection,
//! another status or a silent server, within its timeout.

use std::net::SocketAddr;
use std::process::Output;
use std::time::{Duration, Instant};

use crate::support::*;

/// Runs `tollgate health ARGS` (with `TOLLGATE_HEALTH_URL` set when given) off the
/// runtime, so the gateway in this process keeps serving; its output and how long it took.
async fn health(args: &[&str], env_url: Option<&str>) -> (Output, Duration) {
    let args: Vec<String> = args.iter().map(|a| (*a).to_owned()).collect();
    let env_url = env_url.map(str::to_owned);
    tokio::task::spawn_blocking(move || {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_tollgate"));
        cmd.arg("health").args(&args);
        match env_url {
            Some(url) => cmd.env("TOLLGATE_HEALTH_URL", url),
            None => cmd.env_remove("TOLLGATE_HEALTH_URL"),
        };
        let started = Instant::now();
        let out = cmd.output().expect("run tollgate health");
        (out, started.elapsed())
    })
    .await
    .expect("join")
}

fn report(out: &Output) -> String {
    format!(
        "exit {:?}\nstdout: {}\nstderr: {}",
        out.status.code(),
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test]
async fn health_exits_0_on_200_and_1_with_a_reason_otherwise() {
    let up = Upstream::start().await;
    let gw = TestGateway::start(&Fixture::new().build(), &up.url()).await;
    let healthz = gw.admin_url("/healthz");

    let (out, _) = health(&["--url", &healthz], None).await;
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout).contains("answered 200 OK"),
        "{}",
        report(&out)
    );

    // The URL from the environment, as the image sets it.
    let (out, _) = health(&[], Some(&healthz)).await;
    assert_eq!(out.status.code(), Some(0), "{}", report(&out));

    // Another status: unhealthy, and said.
    let (out, _) = health(&["--url", &gw.admin_url("/no-such-page")], None).await;
    assert_eq!(out.status.code(), Some(1), "{}", report(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("answered 404 Not Found"),
        "{}",
        report(&out)
    );

    // Nothing listening.
    let dead = dead_port().await;
    let (out, _) = health(&["--url", &format!("http://{dead}/healthz")], None).await;
    assert_eq!(out.status.code(), Some(1), "{}", report(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("cannot connect"),
        "{}",
        report(&out)
    );

    // Not a URL it can ask: a usage error, before any connection.
    let (out, _) = health(&["--url", "https://127.0.0.1:9901/healthz"], None).await;
    assert_eq!(out.status.code(), Some(2), "{}", report(&out));
}

#[tokio::test]
async fn health_gives_up_on_a_silent_server_after_its_timeout() {
    // Accepts connections and never answers.
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("bind");
    let addr: SocketAddr = listener.local_addr().expect("addr");
    let silent = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((stream, _)) = listener.accept().await {
            held.push(stream);
        }
    });
    let url = format!("http://{addr}/healthz");
    let (out, took) = health(&["--url", &url, "--timeout", "300ms"], None).await;
    silent.abort();
    assert_eq!(out.status.code(), Some(1), "{}", report(&out));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("no answer within 300ms"),
        "{}",
        report(&out)
    );
    // The timeout bounds the wait; the rest is the process starting on a busy machine.
    assert!(took < Duration::from_secs(20), "took {took:?}");
}
