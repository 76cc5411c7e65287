//! A real gRPC upstream (tonic's server) and client (tonic's channel) for the gRPC tests:
//! one service, `test.Echo`, with a method of every kind. The messages and the service's
//! routing are written out by hand (what tonic-build would generate), so the tests need
//! neither protoc nor a build script.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::{Stream, StreamExt};
use http::uri::PathAndQuery;
use tonic::body::Body as GrpcBody;
use tonic::server::NamedService;
use tonic::{Code, Request, Response, Status, Streaming};
use tonic_prost::ProstCodec;

/// The one message type every method takes and gives.
#[derive(Clone, PartialEq, prost::Message)]
pub struct Msg {
    #[prost(string, tag = "1")]
    pub text: String,
    /// Count: how many replies a stream gives, or the sum a client stream made.
    #[prost(uint32, tag = "2")]
    pub count: u32,
    /// The upstream waits this long before each reply.
    #[prost(uint64, tag = "3")]
    pub delay_ms: u64,
    /// Filler, for large messages.
    #[prost(bytes = "vec", tag = "4")]
    pub pad: Vec<u8>,
}

impl Msg {
    pub fn text(text: &str) -> Self {
        Self {
            text: text.to_owned(),
            ..Self::default()
        }
    }
}

type ReplyStream = Pin<Box<dyn Stream<Item = Result<Msg, Status>> + Send>>;

/// `test.Echo`: Say (unary; `text = "whoami"` answers the call's `x-tenant-id` and `x-role`;
/// `text = "fail"` answers INVALID_ARGUMENT with a trailer, and
/// `x-usage-tokens: count` when `count` is set),
/// Count (server streaming: `count` replies, `delay_ms` apart, `pad` bytes each; the
/// trailers carry `x-usage-tokens: count`), Sum (client streaming) and Chat (bidi: each
/// message echoed as it comes).
#[derive(Clone, Default)]
pub struct Echo {
    /// Calls the upstream has started, every method's.
    pub calls: Arc<AtomicUsize>,
    /// Replies Count has made (taken by the stream from the server).
    pub produced: Arc<AtomicUsize>,
}

impl NamedService for Echo {
    const NAME: &'static str = "test.Echo";
}

async fn say(req: Request<Msg>) -> Result<Response<Msg>, Status> {
    // `whoami`: the tenant and role the call's metadata names, as the handler reads them.
    let named = |name: &str| {
        let value = req.metadata().get(name).and_then(|t| t.to_str().ok());
        value.unwrap_or("none").to_owned()
    };
    let (tenant, role) = (named("x-tenant-id"), named("x-role"));
    let msg = req.into_inner();
    if msg.text == "whoami" {
        return Ok(Response::new(Msg::text(&format!(
            "tenant {tenant} role {role}"
        ))));
    }
    if msg.delay_ms > 0 {
        tokio::time::sleep(Duration::from_millis(msg.delay_ms)).await;
    }
    if msg.text == "fail" {
        let mut status = Status::invalid_argument("told to fail");
        status
            .metadata_mut()
            .insert("x-detail", "failed-on-purpose".parse().expect("value"));
        // The work a failed call still did, as a usage trailer (trailers-only).
        if msg.count > 0 {
            let usage = msg.count.to_string().parse().expect("value");
            status.metadata_mut().insert("x-usage-tokens", usage);
        }
        return Err(status);
    }
    Ok(Response::new(Msg {
        text: format!("hello {}", msg.text),
        ..Msg::default()
    }))
}

async fn count(
    req: Request<Msg>,
    produced: Arc<AtomicUsize>,
) -> Result<Response<ReplyStream>, Status> {
    let msg = req.into_inner();
    let replies = futures_util::stream::unfold(0u32, move |i| {
        let msg = msg.clone();
        let produced = produced.clone();
        async move {
            if i > msg.count {
                return None;
            }
            if i == msg.count {
                // The end, with trailers a tier can settle from.
                let mut done = Status::new(Code::Ok, "");
                let tokens = msg.count.to_string().parse().expect("value");
                done.metadata_mut().insert("x-usage-tokens", tokens);
                return Some((Err(done), i + 1));
            }
            if msg.delay_ms > 0 {
                tokio::time::sleep(Duration::from_millis(msg.delay_ms)).await;
            }
            produced.fetch_add(1, Ordering::SeqCst);
            let reply = Msg {
                text: format!("{} {i}", msg.text),
                count: i,
                pad: msg.pad.clone(),
                ..Msg::default()
            };
            Some((Ok(reply), i + 1))
        }
    });
    Ok(Response::new(Box::pin(replies) as ReplyStream))
}

async fn sum(req: Request<Streaming<Msg>>) -> Result<Response<Msg>, Status> {
    let mut incoming = req.into_inner();
    let (mut total, mut parts) = (0u32, 0u32);
    while let Some(msg) = incoming.message().await? {
        total += msg.count;
        parts += 1;
    }
    Ok(Response::new(Msg {
        text: format!("{parts} parts"),
        count: total,
        ..Msg::default()
    }))
}

async fn chat(req: Request<Streaming<Msg>>) -> Result<Response<ReplyStream>, Status> {
    let incoming = req.into_inner();
    let replies = incoming.map(|msg| {
        msg.map(|m| Msg {
            text: format!("echo {}", m.text),
            ..m
        })
    });
    Ok(Response::new(Box::pin(replies) as ReplyStream))
}

impl tower::Service<http::Request<GrpcBody>> for Echo {
    type Response = http::Response<GrpcBody>;
    type Error = Infallible;
    type Future =
        Pin<Box<dyn std::future::Future<Output = Result<Self::Response, Infallible>> + Send>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, req: http::Request<GrpcBody>) -> Self::Future {
        self.calls.fetch_add(1, Ordering::SeqCst);
        let path = req.uri().path().to_owned();
        let produced = self.produced.clone();
        Box::pin(async move {
            let mut grpc = tonic::server::Grpc::new(ProstCodec::<Msg, Msg>::default());
            let resp = match path.as_str() {
                "/test.Echo/Say" => grpc.unary(tower::service_fn(say), req).await,
                "/test.Echo/Count" => {
                    let count = move |req| count(req, produced.clone());
                    grpc.server_streaming(tower::service_fn(count), req).await
                }
                "/test.Echo/Sum" => grpc.client_streaming(tower::service_fn(sum), req).await,
                "/test.Echo/Chat" => grpc.streaming(tower::service_fn(chat), req).await,
                _ => Status::unimplemented(path).into_http(),
            };
            Ok(resp)
        })
    }
}

/// A tonic server serving [`Echo`] on 127.0.0.1, counting the connections it accepted.
pub struct GrpcUpstream {
    pub addr: SocketAddr,
    pub echo: Echo,
    pub connections: Arc<AtomicUsize>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    pub task: tokio::task::JoinHandle<()>,
}

impl GrpcUpstream {
    /// Plain HTTP/2 (h2c).
    pub async fn start() -> Self {
        Self::start_with(None).await
    }

    /// HTTP/2 over TLS (`cert`, `key`: PEM), offering only h2 by ALPN.
    pub async fn start_tls(cert: &str, key: &str) -> Self {
        let identity = tonic::transport::Identity::from_pem(cert, key);
        Self::start_with(Some(
            tonic::transport::ServerTlsConfig::new().identity(identity),
        ))
        .await
    }

    /// Plain HTTP/2 on `addr` (one that served before, to come back on).
    pub async fn start_on(addr: SocketAddr) -> Self {
        let listener = tokio::net::TcpListener::bind(addr).await.expect("bind");
        Self::serve(listener, None)
    }

    async fn start_with(tls: Option<tonic::transport::ServerTlsConfig>) -> Self {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("bind");
        Self::serve(listener, tls)
    }

    fn serve(
        listener: tokio::net::TcpListener,
        tls: Option<tonic::transport::ServerTlsConfig>,
    ) -> Self {
        let addr = listener.local_addr().expect("addr");
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let incoming = futures_util::stream::unfold(listener, move |listener| {
            let counted = counted.clone();
            async move {
                let accepted = listener.accept().await.map(|(stream, _)| {
                    counted.fetch_add(1, Ordering::SeqCst);
                    stream
                });
                Some((accepted, listener))
            }
        });
        let echo = Echo::default();
        let (shutdown, stop) = tokio::sync::oneshot::channel::<()>();
        let mut server = tonic::transport::Server::builder();
        if let Some(tls) = tls {
            server = server.tls_config(tls).expect("tls config");
        }
        let router = server.add_service(echo.clone());
        let task = tokio::spawn(async move {
            let stopped = async {
                let _ = stop.await;
            };
            if let Err(e) = router.serve_with_incoming_shutdown(incoming, stopped).await {
                eprintln!("grpc upstream ended: {e}");
            }
        });
        Self {
            addr,
            echo,
            connections,
            shutdown: Some(shutdown),
            task,
        }
    }

    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    pub fn calls(&self) -> usize {
        self.echo.calls.load(Ordering::SeqCst)
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }

    /// Starts a graceful shutdown: GOAWAY on every connection, the calls in flight finish.
    pub fn drain(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
    }
}

/// A tonic client for `test.Echo` at `url` (the gateway's), over one HTTP/2 connection.
#[derive(Clone)]
pub struct EchoClient {
    grpc: tonic::client::Grpc<tonic::transport::Channel>,
}

fn path(method: &str) -> PathAndQuery {
    PathAndQuery::try_from(format!("/test.Echo/{method}")).expect("path")
}

impl EchoClient {
    pub async fn connect(url: &str) -> Self {
        let channel = tonic::transport::Channel::from_shared(url.to_owned())
            .expect("url")
            .connect()
            .await
            .expect("connect to the gateway");
        Self {
            grpc: tonic::client::Grpc::new(channel),
        }
    }

    async fn ready(&mut self) {
        self.grpc.ready().await.expect("channel ready");
    }

    pub async fn say(&mut self, req: Request<Msg>) -> Result<Response<Msg>, Status> {
        self.ready().await;
        self.grpc
            .unary(req, path("Say"), ProstCodec::default())
            .await
    }

    pub async fn count(&mut self, req: Request<Msg>) -> Result<Response<Streaming<Msg>>, Status> {
        self.ready().await;
        self.grpc
            .server_streaming(req, path("Count"), ProstCodec::default())
            .await
    }

    pub async fn sum(
        &mut self,
        parts: impl Stream<Item = Msg> + Send + 'static,
    ) -> Result<Response<Msg>, Status> {
        self.ready().await;
        self.grpc
            .client_streaming(Request::new(parts), path("Sum"), ProstCodec::default())
            .await
    }

    /// A unary call to any `path` (one the service may not have); its failure.
    pub async fn grpc_call(&mut self, path: &str) -> Status {
        self.ready().await;
        let path = PathAndQuery::try_from(path.to_owned()).expect("path");
        let answer: Result<Response<Msg>, Status> = self
            .grpc
            .unary(Request::new(Msg::default()), path, ProstCodec::default())
            .await;
        answer.expect_err("the call fails")
    }

    pub async fn chat(
        &mut self,
        parts: impl Stream<Item = Msg> + Send + 'static,
    ) -> Result<Response<Streaming<Msg>>, Status> {
        self.ready().await;
        self.grpc
            .streaming(Request::new(parts), path("Chat"), ProstCodec::default())
            .await
    }
}

/// A unary request for `Say` with metadata (`x-tenant-id` and the like).
pub fn say_as(text: &str, metadata: &[(&'static str, &str)]) -> Request<Msg> {
    let mut req = Request::new(Msg::text(text));
    for (k, v) in metadata {
        req.metadata_mut()
            .insert(*k, v.parse().expect("metadata value"));
    }
    req
}
