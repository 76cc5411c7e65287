//! OpenTelemetry through a real OTLP receiver (the official opentelemetry-proto
//! definitions, grpcio and an HTTP server: tests/telemetry/receiver.py): a sampled
//! caller's trace followed from its `traceparent` (its `tracestate` unchanged) through
//! tollgate's server and client spans to the upstream, over HTTP/1.1 and HTTP/2; a
//! refusal's span naming the policy, the wait and the key as a hash; unsampled requests
//! building nothing and passing `traceparent` unchanged; a ratio of one over OTLP/HTTP
//! after a reload; a dead collector costing requests nothing. The rate limit and quota
//! services' spans: `telemetry_services.rs`.

use std::io::BufRead;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use serde_json::Value;

use crate::support::*;

pub(crate) const IGNORED: &str =
    "needs Python's opentelemetry-proto and grpcio: scripts/test installs them";

/// tests/telemetry/receiver.py on two free ports, its spans collected as they come.
pub(crate) struct Receiver {
    child: Child,
    pub(crate) grpc: u16,
    pub(crate) http: u16,
    spans: Arc<Mutex<Vec<Value>>>,
}

impl Receiver {
    pub(crate) async fn start() -> Self {
        Self::start_on("127.0.0.1").await
    }

    /// The same, listening on `host` (`::1` for IPv6).
    pub(crate) async fn start_on(host: &str) -> Self {
        let (grpc, http) = (free_port(), free_port());
        let script =
            std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/telemetry/receiver.py");
        let mut child = Command::new("python3")
            .arg(script)
            .args([grpc.to_string(), http.to_string(), host.to_owned()])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect(IGNORED);
        let stdout = child.stdout.take().expect("stdout");
        let spans: Arc<Mutex<Vec<Value>>> = Arc::default();
        let ready = Arc::new(Mutex::new(false));
        let (sink, up) = (spans.clone(), ready.clone());
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                let Ok(v) = serde_json::from_str::<Value>(&line) else {
                    continue;
                };
                if v["ready"] == true {
                    *up.lock().unwrap() = true;
                } else {
                    sink.lock().unwrap().push(v);
                }
            }
        });
        let started = eventually(Duration::from_secs(60), || *ready.lock().unwrap()).await;
        assert!(started, "the OTLP receiver starts ({IGNORED})");
        Self {
            child,
            grpc,
            http,
            spans,
        }
    }

    /// The spans of `trace_id`, once `n` have come (within 30 s).
    pub(crate) async fn trace(&self, trace_id: &str, n: usize) -> Vec<Value> {
        let of = |spans: &[Value]| -> Vec<Value> {
            spans
                .iter()
                .filter(|s| s["trace_id"] == trace_id)
                .cloned()
                .collect()
        };
        let came = eventually(Duration::from_secs(30), || {
            of(&self.spans.lock().unwrap()).len() >= n
        })
        .await;
        assert!(
            came,
            "{n} spans of {trace_id}: {:?}",
            self.spans.lock().unwrap()
        );
        of(&self.spans.lock().unwrap())
    }

    pub(crate) fn all(&self) -> Vec<Value> {
        self.spans.lock().unwrap().clone()
    }
}

impl Drop for Receiver {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn toml(telemetry: &str) -> String {
    Fixture::new()
        .policy("tenant", "header:x-tenant", 1, "1h", 1)
        .route("api", "/api", "api", &["tenant"])
        .raw(format!("[telemetry]\n{telemetry}\n"))
        .build()
}

/// A gateway (on `up`) exporting to a port nothing listens on: spans are built, their
/// export fails and is counted; `more`: `[telemetry]` lines besides the endpoint.
pub(crate) async fn exporting_nowhere(up: &Upstream, more: &str) -> TestGateway {
    let dead = free_port();
    let telemetry = format!("otlp_endpoint = \"http://127.0.0.1:{dead}\"\n{more}");
    TestGateway::start(&toml(&telemetry), &up.url()).await
}

/// A receiver, an upstream and a gateway exporting to the receiver over OTLP/gRPC, a
/// request sampled only when its caller samples it; `more`: further `[telemetry]` lines.
pub(crate) async fn traced(more: &str) -> (Receiver, Upstream, TestGateway) {
    let receiver = Receiver::start().await;
    let up = Upstream::start().await;
    let config = format!(
        "otlp_endpoint = \"http://127.0.0.1:{}\"\nsample_ratio = 0.0\n{more}",
        receiver.grpc
    );
    let gw = TestGateway::start(&toml(&config), &up.url()).await;
    (receiver, up, gw)
}

pub(crate) const CALLER_TRACE: &str = "4bf92f3577b34da6a3ce929d0e0e4736";

pub(crate) fn traceparent(trace: &str, parent: &str, flags: &str) -> String {
    format!("00-{trace}-{parent}-{flags}")
}

pub(crate) fn kind(spans: &[Value], kind: u64) -> &Value {
    spans
        .iter()
        .find(|s| s["kind"] == kind)
        .unwrap_or_else(|| panic!("a span of kind {kind}: {spans:?}"))
}

#[tokio::test]
#[ignore = "needs Python's opentelemetry-proto and grpcio: scripts/test installs them"]
async fn a_sampled_callers_trace_runs_through_the_gateway_to_the_upstream() {
    let more = "service_name = \"edge-gw\"\nresource = { \"deployment.environment\" = \"test\" }";
    let (receiver, up, gw) = traced(more).await;
    for (i, client) in [http1(), http2()].iter().enumerate() {
        let tenant = format!("tenant-{i}");
        let trace = format!("{}{i:02x}", &CALLER_TRACE[..30]);
        let caller = traceparent(&trace, "00f067aa0ba902b7", "01");
        let headers = [
            ("x-tenant", tenant.as_str()),
            ("traceparent", caller.as_str()),
            ("tracestate", "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"),
        ];
        let ok = send(client, "GET", &gw.url("/api/x"), &headers, b"").await;
        assert_eq!(ok.status, 200);
        let upstream_saw = up.last_headers()["traceparent"]
            .to_str()
            .unwrap()
            .to_owned();
        assert_eq!(
            up.last_headers()["tracestate"],
            "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7",
            "the caller's tracestate goes on unchanged"
        );
        let spans = receiver.trace(&trace, 2).await;
        let (server, client_span) = (kind(&spans, 2), kind(&spans, 3));
        assert_eq!(
            server["parent"], "00f067aa0ba902b7",
            "the caller's span is the parent"
        );
        assert_eq!(server["name"], "GET /api");
        assert_eq!(server["resource"]["service.name"], "edge-gw");
        assert_eq!(server["resource"]["deployment.environment"], "test");
        let a = &server["attributes"];
        assert_eq!(a["http.request.method"], "GET");
        assert_eq!(a["url.path"], "/api/x");
        assert_eq!(a["http.route"], "/api");
        assert_eq!(a["http.response.status_code"], 200);
        assert_eq!(a["tollgate.decision"], "admitted");
        // Admitted, it names the policy nearest to refusing it, which made it wait for nothing.
        assert_eq!(a["tollgate.policy"], "tenant");
        assert_eq!(a["tollgate.retry_after_ms"], 0);
        assert!(a["tollgate.key_hash"].is_string(), "{a}");
        assert_eq!(client_span["parent"], server["span_id"]);
        // The state the gateway passes on is its spans' own.
        for span in [server, client_span] {
            assert_eq!(
                span["trace_state"],
                "congo=t61rcWkgMzE,rojo=00f067aa0ba902b7"
            );
        }
        assert_eq!(
            upstream_saw,
            traceparent(&trace, client_span["span_id"].as_str().unwrap(), "01"),
            "the upstream's parent is tollgate's client span"
        );
        // The same tenant again: refused, its span says by whom and for how long.
        let refused = send(client, "GET", &gw.url("/api/x"), &headers, b"").await;
        assert_eq!(refused.status, 429);
        let spans = receiver.trace(&trace, 3).await;
        let denied = spans
            .iter()
            .find(|s| s["attributes"]["tollgate.decision"] == "denied")
            .expect("the refusal's span");
        let a = &denied["attributes"];
        assert_eq!(a["http.response.status_code"], 429);
        assert_eq!(a["tollgate.policy"], "tenant");
        assert!(
            a["tollgate.retry_after_ms"].as_i64() > Some(3_000_000),
            "{a}"
        );
        let hash = a["tollgate.key_hash"].as_str().expect("the key, hashed");
        assert!(!hash.contains(&tenant), "never in clear: {hash}");
        assert_eq!(spans.len(), 3, "a refusal has no client span");
    }
}

#[tokio::test]
#[ignore = "needs Python's opentelemetry-proto and grpcio: scripts/test installs them"]
async fn unsampled_requests_build_nothing_and_a_reload_turns_the_ratio_up_over_otlp_http() {
    let receiver = Receiver::start().await;
    let up = Upstream::start().await;
    // OTLP/HTTP told by the endpoint's path, on a port other than 4318.
    let endpoint = |ratio: &str| {
        format!(
            "otlp_endpoint = \"http://127.0.0.1:{}/v1/traces\"\nsample_ratio = {ratio}",
            receiver.http
        )
    };
    let gw = TestGateway::start(&toml(&endpoint("0.0")), &up.url()).await;
    let unsampled = traceparent(CALLER_TRACE, "00f067aa0ba902b7", "00");
    let r = send(
        &http1(),
        "GET",
        &gw.url("/api/x"),
        &[("x-tenant", "u1"), ("traceparent", &unsampled)],
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    assert_eq!(
        up.last_headers()["traceparent"],
        unsampled.as_str(),
        "passed unchanged"
    );
    let r = send(
        &http1(),
        "GET",
        &gw.url("/api/x"),
        &[("x-tenant", "u2")],
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    assert!(
        up.last_headers().get("traceparent").is_none(),
        "none made up"
    );
    // A ratio of one on reload: a request without a caller starts a trace.
    gw.rewrite(&toml(&endpoint("1.0")), &up.url());
    gw.gw().reload().await.expect("reload");
    let r = send(
        &http2(),
        "GET",
        &gw.url("/api/x"),
        &[("x-tenant", "u3")],
        b"",
    )
    .await;
    assert_eq!(r.status, 200);
    let started = up.last_headers()["traceparent"]
        .to_str()
        .unwrap()
        .to_owned();
    let trace = &started[3..35];
    let spans = receiver.trace(trace, 2).await;
    let server = kind(&spans, 2);
    assert_eq!(server["transport"], "http");
    assert_eq!(server["parent"], "", "a trace of its own");
    assert_eq!(
        receiver.all().len(),
        2,
        "the unsampled requests sent nothing: {:?}",
        receiver.all()
    );
}

#[tokio::test]
async fn a_dead_collector_costs_requests_nothing_and_its_spans_are_counted_dropped() {
    let up = Upstream::start().await;
    let dead = free_port();
    let config = format!("otlp_endpoint = \"http://127.0.0.1:{dead}\"\nsample_ratio = 1.0");
    let toml = Fixture::new()
        .route("open", "/open", "api", &[])
        .raw(format!("[telemetry]\n{config}\n"))
        .build();
    let gw = TestGateway::start(&toml, &up.url()).await;
    for _ in 0..20 {
        assert_eq!(
            send(&http1(), "GET", &gw.url("/open"), &[], b"")
                .await
                .status,
            200
        );
    }
    let url = gw.admin_url("/metrics");
    let counted = eventually_async(Duration::from_secs(30), || {
        let url = url.clone();
        async move {
            let text = send(&http1(), "GET", &url, &[], b"").await.text();
            text.lines()
                .find_map(|l| {
                    l.strip_prefix("tollgate_telemetry_dropped_total{reason=\"export_failed\"} ")
                })
                .and_then(|v| v.parse::<u64>().ok())
                .is_some_and(|n| n >= 20)
        }
    })
    .await;
    assert!(counted, "20 spans counted dropped");
}
