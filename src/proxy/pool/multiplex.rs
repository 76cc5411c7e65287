//! HTTP/2 upstreams (`protocol = "h2c"` or `"h2"`): each worker keeps a few connections
//! per target and sends every request as a stream on one of them, requests from HTTP/1.1
//! and HTTP/2 clients alike. A request takes the oldest connection with fewer than
//! `max_streams` streams open, so the load packs onto as few connections as it needs; a
//! new one is opened only when all are full, one at a time (the requests that arrive
//! meanwhile wait for it, rather than each opening its own). At the worker's share of
//! `max_connections`, the least busy connection takes the stream anyway: beyond the
//! upstream's own `SETTINGS_MAX_CONCURRENT_STREAMS` it waits on that connection.
//!
//! An upstream that drains a connection (GOAWAY) stops getting streams on it at once;
//! the streams it accepted finish, and a request it never processed — never sent, or
//! above the GOAWAY's last stream, or refused with REFUSED_STREAM (RFC 9113 §8.7) — is
//! sent again on another connection, when it can be: never a request the upstream may
//! have seen, and a body only if it was never given to a connection.

use std::sync::Arc;
use std::time::Duration;

use http::uri::{Authority, PathAndQuery, Scheme, Uri};
use http::{Request, Response};
use hyper::client::conn::http2::{Builder, SendRequest};
use hyper_util::rt::{TokioExecutor, TokioIo, TokioTimer};
use quanta::Instant;

use super::connect::{ConnectError, Slot};
use super::local::{with_existing, with_local};
use super::streams::{Pick, StreamGuard};
use super::{copy_head, ForwardError, PooledBody, UpstreamPool};
use crate::config::Protocol;
use crate::reply::Body;

/// Response bytes an upstream may send ahead on one stream before the client has taken
/// them: what a stalled client holds here (with 64 KiB, 64 stalled HTTP/1.1 readers
/// measured 256 KiB of RSS each, at the contract's bound; with 32 KiB, 192 KiB).
const STREAM_WINDOW: u32 = 32 * 1024;
/// Request bytes buffered per stream waiting for the upstream's window.
const SEND_BUFFER: usize = 64 * 1024;
/// A response head (trailers too) larger than this is refused.
const MAX_HEADER_LIST: u32 = 64 * 1024;
/// Pings find a dead upstream connection that would otherwise hold its streams.
const PING_INTERVAL: Duration = Duration::from_secs(30);
const PING_TIMEOUT: Duration = Duration::from_secs(10);
/// Times a request the upstream never saw is sent again before the failure is answered.
const MAX_RESENDS: usize = 2;

/// Clears a target's `opening` mark however the opening ends — dropped with a client that
/// hung up included — and wakes the requests waiting for it.
struct Opening<'a> {
    pool: &'a Arc<UpstreamPool>,
    target: usize,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        // `with_existing`: a drop at the worker's teardown must not make a pool.
        with_existing(self.pool.id, |local| {
            local.streams[self.target].opening = false;
            local.slots.wake_waiters();
        });
    }
}

impl UpstreamPool {
    /// Sends `req` as a stream to target `index`, again on another connection when the
    /// upstream did not process it (see the module's comment).
    pub(super) async fn send_streamed(
        self: &Arc<Self>,
        index: usize,
        req: Request<Body>,
        now_ns: u64,
        replayable: bool,
    ) -> Result<Response<PooledBody>, ForwardError> {
        let target = &self.upstream.targets[index];
        let mut req = req;
        self.http2_head(index, &mut req);
        let mut spare = replayable.then(|| copy_head(&req));
        let (mut req, fate) = super::fate::watch(req);
        let mut resends = 0;
        loop {
            let (mut sender, stream) = self.stream_checkout(index, now_ns).await?;
            super::sent::mark(&req);
            match sender.try_send_request(req).await {
                Ok(resp) => return Ok(resp.map(|body| PooledBody::streamed(body, stream))),
                Err(mut e) => {
                    drop(stream);
                    let unsent = e.take_message();
                    let again = match unsent {
                        Some(unsent) => Some(unsent),
                        None if never_processed(e.error()) => spare.take(),
                        None => None,
                    };
                    match again {
                        Some(again) if resends < MAX_RESENDS => {
                            resends += 1;
                            tracing::debug!(target = %target, error = %e.error(), "upstream did not process the request: sending it again");
                            req = again;
                        }
                        _ => {
                            let fault = fate.as_ref().and_then(|f| f.get().cloned());
                            let e = e.into_error();
                            return Err(ForwardError::with_fault(target, e, fault));
                        }
                    }
                }
            }
        }
    }

    /// The head as an HTTP/2 request: absolute URI (`:scheme`, `:authority` from the
    /// client's `Host`, or the target's), no `Host` line.
    fn http2_head(&self, index: usize, req: &mut Request<Body>) {
        let target = &self.upstream.targets[index];
        let scheme = match self.upstream.protocol {
            Protocol::H2 => Scheme::HTTPS,
            _ => Scheme::HTTP,
        };
        let authority = req
            .headers_mut()
            .remove(http::header::HOST)
            .and_then(|host| Authority::try_from(host.as_bytes()).ok())
            .or_else(|| req.uri().authority().cloned())
            .unwrap_or_else(|| target.authority.clone());
        let path = req
            .uri()
            .path_and_query()
            .cloned()
            .unwrap_or_else(|| PathAndQuery::from_static("/"));
        let uri = Uri::builder()
            .scheme(scheme)
            .authority(authority)
            .path_and_query(path)
            .build();
        if let Ok(uri) = uri {
            *req.uri_mut() = uri;
        }
        *req.version_mut() = http::Version::HTTP_2;
    }

    /// A stream on a connection to target `index`, opening one when all are full; waits
    /// for a connection being opened, or at the share for a place, until a little before
    /// the request's own timeout (then 503, as the HTTP/1.1 pool).
    async fn stream_checkout(
        self: &Arc<Self>,
        index: usize,
        now_ns: u64,
    ) -> Result<(SendRequest<Body>, StreamGuard), ForwardError> {
        let busy_wait = self.upstream.timeout - self.upstream.timeout / 20;
        let give_up = tokio::time::Instant::now() + busy_wait;
        let max_streams = self.upstream.max_streams;
        loop {
            let (pick, slots) = with_local(self, |local| {
                let slots = local.slots.clone();
                let pick = local.streams[index].pick(max_streams, || slots.try_take());
                if matches!(pick, Pick::Wait) && !local.streams[index].opening {
                    // At the share with no connection to this target: an idle one to
                    // another target gives its place up.
                    local.close_idle_elsewhere(index);
                }
                (pick, slots)
            });
            match pick {
                Pick::Stream(sender, guard) => return Ok((sender, guard)),
                Pick::Open(slot) => {
                    let opening = Opening {
                        pool: self,
                        target: index,
                    };
                    // Boxed: connecting is a large future and a rare one.
                    let opened = Box::pin(self.open_multiplexed(index, slot, now_ns)).await;
                    let sender = match opened {
                        Ok(sender) => sender,
                        Err(e) => {
                            let why: Arc<str> = Arc::from(e.to_string());
                            with_local(self, |local| {
                                local.streams[index].failed = Some((Instant::now(), why));
                            });
                            return Err(e); // `opening` drops after: the waiters see why
                        }
                    };
                    let pick = with_local(self, |local| local.streams[index].add(sender));
                    drop(opening);
                    if let Pick::Stream(sender, guard) = pick {
                        return Ok((sender, guard));
                    }
                }
                Pick::Wait => {
                    let since = Instant::now();
                    if !slots.wait_freed(give_up).await {
                        return Err(ForwardError::Busy {
                            target: self.upstream.targets[index].to_string(),
                            cap: self.upstream.max_connections,
                        });
                    }
                    let failed = with_local(self, |local| local.streams[index].failed_since(since));
                    if let Some(why) = failed {
                        return Err(ForwardError::Connect {
                            target: self.upstream.targets[index].to_string(),
                            source: ConnectError::Shared(why),
                        });
                    }
                }
            }
        }
    }

    /// Opens an HTTP/2 connection to target `index` and starts driving it on this worker.
    async fn open_multiplexed(
        &self,
        index: usize,
        slot: Slot,
        now_ns: u64,
    ) -> Result<SendRequest<Body>, ForwardError> {
        let target = &self.upstream.targets[index];
        let connected = match self.connector.connect(target, slot).await {
            Ok(io) => builder(self.upstream.max_streams)
                .handshake(TokioIo::new(io))
                .await
                .map_err(ConnectError::Handshake),
            Err(e) => Err(e),
        };
        let (sender, connection) = connected.map_err(|e| self.refused(index, now_ns, e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.await {
                tracing::debug!(error = %e, "upstream HTTP/2 connection ended with an error");
            }
        });
        Ok(sender)
    }
}

/// The HTTP/2 client settings: small per-stream windows (what a stalled client can hold),
/// and a connection window that lets every stream have its own, so streams stalled by
/// slow clients never stop the others on the connection.
fn builder(max_streams: usize) -> Builder<TokioExecutor> {
    let streams = u32::try_from(max_streams).unwrap_or(u32::MAX);
    let connection_window = STREAM_WINDOW.saturating_mul(streams).min(i32::MAX as u32);
    let mut b = Builder::new(TokioExecutor::new());
    b.timer(TokioTimer::new())
        .initial_stream_window_size(STREAM_WINDOW)
        .initial_connection_window_size(connection_window.max(STREAM_WINDOW))
        .max_send_buf_size(SEND_BUFFER)
        .max_header_list_size(MAX_HEADER_LIST)
        .keep_alive_interval(PING_INTERVAL)
        .keep_alive_timeout(PING_TIMEOUT);
    b
}

/// Whether the upstream said it did not process the stream: it was above a GOAWAY's last
/// stream id, or refused with REFUSED_STREAM (RFC 9113 §8.7 — both safe to send again).
fn never_processed(e: &hyper::Error) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = std::error::Error::source(e);
    while let Some(s) = source {
        if let Some(h2) = s.downcast_ref::<h2::Error>() {
            let refused = h2.is_reset() && h2.reason() == Some(h2::Reason::REFUSED_STREAM);
            return h2.is_remote() && (h2.is_go_away() || refused);
        }
        source = s.source();
    }
    false
}
