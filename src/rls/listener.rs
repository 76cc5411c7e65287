//! The `[rls]` listener: HTTP/2 only (gRPC over h2c, or TLS with `[rls.tls]`), bounded
//! like the admin listener (a connection cap, the header deadline, a graceful drain), on
//! the main runtime beside it; each call is decided against the same snapshot, store and
//! metrics as a proxied request.

use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::proxy::snapshot::Shared;
use crate::server::deadline::SendDeadline;
use crate::server::{accept_bounded, handshake, preface};

/// Envoys (and their connections) one service answers at once.
pub const RLS_MAX_CONNECTIONS: usize = 4096;
/// Calls one connection may have in flight: Envoy multiplexes its calls on few.
const RLS_MAX_STREAMS: u32 = 1024;

/// What the listener's calls are answered with: the rate limit service's unary calls and
/// the quota service's streams.
#[derive(Clone)]
struct Services {
    shared: Arc<Shared>,
    /// Calls in flight, every connection's.
    in_flight: Arc<Semaphore>,
    /// Which Envoys hold which keys' quota shares: the listener's, across connections.
    holders: Arc<crate::rlqs::holders::Holders>,
    /// Quota streams open, every connection's.
    streams: crate::rlqs::stream::StreamBound,
    /// Ends the quota streams at shutdown.
    ending: watch::Receiver<bool>,
}

impl Services {
    /// The listener's services, bounded as the config at start says.
    fn new(shared: &Arc<Shared>, ending: watch::Receiver<bool>) -> Self {
        let config = shared.config();
        use crate::config::rls::{DEFAULT_MAX_QUOTA_BUCKETS, DEFAULT_MAX_QUOTA_STREAMS};
        let (max_quota_streams, max_quota_buckets) = config.rls.as_ref().map_or(
            (DEFAULT_MAX_QUOTA_STREAMS, DEFAULT_MAX_QUOTA_BUCKETS),
            |rls| (rls.max_quota_streams, rls.max_quota_buckets),
        );
        Self {
            shared: shared.clone(),
            // Calls in flight, every connection's: beyond it a call is answered
            // RESOURCE_EXHAUSTED at once, so parked calls cannot grow memory without bound.
            in_flight: Arc::new(Semaphore::new(config.server.max_requests)),
            holders: Arc::new(crate::rlqs::holders::Holders::new(max_quota_buckets)),
            streams: crate::rlqs::stream::StreamBound::new(max_quota_streams),
            ending,
        }
    }

    async fn answer(
        self,
        peer: std::net::SocketAddr,
        req: hyper::Request<hyper::body::Incoming>,
    ) -> Result<hyper::Response<crate::reply::Body>, std::convert::Infallible> {
        if req.uri().path() == crate::rlqs::proto::STREAM_RATE_LIMIT_QUOTAS {
            let open = (self.holders, &self.streams);
            return Ok(crate::rlqs::stream::handle(
                self.shared,
                open,
                self.ending,
                req,
            ));
        }
        super::service::handle(self.shared, self.in_flight, peer, req).await
    }
}

/// Serves rate limit service connections until `shutdown` flips, then drains them.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let permits = Arc::new(Semaphore::new(RLS_MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let services = Services::new(&shared, shutdown.clone());
    let mut http = hyper::server::conn::http2::Builder::new(TokioExecutor::new());
    http.timer(TokioTimer::new())
        .max_concurrent_streams(RLS_MAX_STREAMS)
        .max_header_list_size(16 * 1024)
        // Pings find an Envoy that went away without closing its connection, which would
        // otherwise hold one of the listener's connection places for good.
        .keep_alive_interval(crate::server::H2_PING_INTERVAL)
        .keep_alive_timeout(crate::server::H2_PING_TIMEOUT);
    loop {
        let Some((permit, stream, peer)) =
            accept_bounded(&listener, &permits, &mut shutdown, "rls accept failed").await
        else {
            break;
        };
        let _ = stream.set_nodelay(true);
        let config = shared.config();
        let tls = config
            .rls
            .as_ref()
            .and_then(|r| r.tls.as_ref())
            .map(|t| t.config.clone());
        let (deadline, send_timeout) = (
            config.server.header_read_timeout,
            config.server.send_timeout,
        );
        let (services, http, watcher) = (services.clone(), http.clone(), graceful.watcher());
        tokio::spawn(async move {
            let svc = service_fn(move |req| services.clone().answer(peer, req));
            match tls {
                Some(cfg) => {
                    let Some(stream) = handshake(stream, cfg).await else {
                        return drop(permit);
                    };
                    if let Some(io) = preface::read_start(stream, deadline).await {
                        let io = SendDeadline::new(io, send_timeout);
                        let _ = watcher
                            .watch(http.serve_connection(TokioIo::new(io), svc))
                            .await;
                    }
                }
                None => {
                    if let Some(io) = preface::read_start(stream, deadline).await {
                        let io = SendDeadline::new(io, send_timeout);
                        let _ = watcher
                            .watch(http.serve_connection(TokioIo::new(io), svc))
                            .await;
                    }
                }
            }
            drop(permit);
        });
    }
    drop(listener);
    let drain = shared.config().server.drain_timeout;
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!(
            "rls drain deadline passed; closing remaining rate limit service connections"
        );
    }
}
