//! Upstream connections: per upstream, round robin over targets with passive health; per
//! worker, a pool of HTTP/1.1 connections (`hyper::client::conn::http1`, `local.rs`) that
//! the worker drives itself, or for an HTTP/2 upstream a few connections per target with
//! every request a stream on one of them (`streams.rs`, `multiplex.rs`). An HTTP/1.1
//! request checks a connection out (preferring the one its client connection used last),
//! sends, and the connection goes back when the response body ends — no lock, channel or
//! other thread on the way. `connect.rs` opens connections (TLS too), `body.rs` is a
//! pooled response body, `error.rs` classifies a failed exchange and its answer,
//! `fate.rs` says why a request body sent to an HTTP/2 upstream failed, and `sent.rs` is
//! the mark a request gets as it is handed to a connection.

mod body;
mod connect;
mod error;
mod fate;
mod local;
mod multiplex;
mod sent;
mod streams;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use http::uri::{PathAndQuery, Uri};
use http::{Request, Response};
use hyper::body::Incoming;
use hyper_util::rt::TokioIo;

pub use body::PooledBody;
pub use connect::ConnectError;
pub use error::{ClientBodyFault, ForwardError};
pub use sent::SentMark;

use body::CheckIn;
use connect::Connector;
use local::{next_serial, with_local, Idle};

use crate::config::Upstream;
use crate::conn::ClientMemory;
use crate::metrics::Metrics;
use crate::metrics::ShardedHistogram as Histogram;
use crate::reply::Body;

/// How long a target that refused a connection is passed over while others answer.
pub const TARGET_COOLDOWN: Duration = Duration::from_secs(5);
/// A pooled connection idle for longer than this may have been closed by the upstream
/// just as a request goes out on it: an idempotent request without a body sent on one is
/// kept, so it can be sent again on another connection if this one turns out closed.
const STALE_AFTER: Duration = Duration::from_secs(1);
/// Response bytes read ahead from an upstream connection (hyper's default is ~400 KiB).
const UPSTREAM_READ_BUFFER: usize = 32 * 1024;

/// Distinguishes pools, so workers can key their connections by upstream identity.
static NEXT_POOL_ID: AtomicU64 = AtomicU64::new(1);

/// One upstream as the request path sees it: its settings, its targets' health and how to
/// connect. The connections themselves are per worker (see `local`). Kept across reloads
/// while the upstream's settings do not change, so warm connections survive a reload.
pub struct UpstreamPool {
    pub upstream: Arc<Upstream>,
    id: u64,
    workers: usize,
    connector: Connector,
    /// Per target: clock nanoseconds until which it is passed over.
    resting_until: Box<[AtomicU64]>,
    /// Time to response headers, by status class (1xx … 5xx).
    latency: [Histogram; 5],
    /// Connections open to the upstream, every worker's.
    connections: prometheus_client::metrics::gauge::Gauge,
    /// Clock nanoseconds of the last warning that a call's own deadline passed before
    /// this upstream answered, and how many such went unwarned since.
    deadline_warned: (AtomicU64, AtomicU64),
}

impl UpstreamPool {
    pub fn new(upstream: Arc<Upstream>, workers: usize, metrics: &Metrics) -> Self {
        let connector = Connector::new(&upstream);
        let resting_until = upstream.targets.iter().map(|_| AtomicU64::new(0)).collect();
        let latency = ["1xx", "2xx", "3xx", "4xx", "5xx"]
            .map(|class| metrics.upstream_histogram(&upstream.name, class));
        let upstream_name = upstream.name.clone();
        Self {
            upstream,
            id: NEXT_POOL_ID.fetch_add(1, Ordering::Relaxed),
            workers: workers.max(1),
            connector,
            resting_until,
            latency,
            connections: metrics.upstream_connections(&upstream_name),
            deadline_warned: Default::default(),
        }
    }

    /// Whether a call's deadline passing before this upstream answered is worth a warning
    /// at `now_ns`: once a second at most, for a client chooses it (`grpc-timeout: 1n`),
    /// yet a hung upstream shows this way when callers set deadlines. `Some(n)`: warn,
    /// with `n` that went unwarned since the last.
    pub fn warn_of_deadline(&self, now_ns: u64) -> Option<u64> {
        let (last, quiet) = &self.deadline_warned;
        let seen = last.load(Ordering::Relaxed);
        let due = seen == 0 || now_ns.saturating_sub(seen) >= 1_000_000_000;
        if due
            && (last.compare_exchange(seen, now_ns.max(1), Ordering::Relaxed, Ordering::Relaxed))
                .is_ok()
        {
            return Some(quiet.swap(0, Ordering::Relaxed));
        }
        quiet.fetch_add(1, Ordering::Relaxed);
        None
    }

    /// Whether this pool was built for the same settings.
    pub fn serves(&self, other: &Upstream) -> bool {
        self.upstream.same_settings(other)
    }

    /// This worker's share of `max_connections` (the remainder goes to the first workers).
    fn worker_share(&self) -> usize {
        let (cap, workers) = (self.upstream.max_connections, self.workers);
        let worker = crate::conn::worker::slot_of(crate::conn::worker::current(), workers);
        (cap / workers + usize::from(worker < cap % workers)).max(1)
    }

    fn idle_timeout(&self) -> Duration {
        self.upstream.idle_timeout
    }

    /// Records the time to an upstream's response headers.
    pub fn observe(&self, status: u16, seconds: f64) {
        let class = usize::from((status / 100).clamp(1, 5) - 1);
        self.latency[class].observe(seconds);
    }

    /// Round robin (per worker) over targets that are not resting; if all rest, plain
    /// round robin.
    fn pick(self: &Arc<Self>, now_ns: u64) -> usize {
        let n = self.upstream.targets.len();
        if n == 1 {
            return 0;
        }
        let start = with_local(self, |local| {
            local.next = local.next.wrapping_add(1);
            local.next
        });
        (0..n)
            .map(|i| (start + i) % n)
            .find(|&i| self.resting_until[i].load(Ordering::Relaxed) <= now_ns)
            .unwrap_or(start % n)
    }

    /// Sends `req` (its URI already origin-form) to a target, within `timeout` (the
    /// upstream's, or a shorter one of the request's own). A connection refused by one target is retried once on another when the
    /// request has no body to replay. `client` is what the client connection keeps between
    /// its requests: the upstream connection it used last, and its deadline timer.
    pub async fn send(
        self: &Arc<Self>,
        req: Request<Body>,
        now_ns: u64,
        replayable: bool,
        client: &ClientMemory,
        timeout: Duration,
    ) -> Result<Response<PooledBody>, ForwardError> {
        let first = self.pick(now_ns);
        let timed_out = || ForwardError::Timeout {
            target: self.upstream.targets[first].to_string(),
            timeout,
        };
        let deadline = tokio::time::Instant::now() + timeout;
        let spare = (replayable && self.upstream.targets.len() > 1).then(|| copy_head(&req));
        let affinity = &client.affinity;
        let result = client
            .timer
            .within(
                deadline,
                self.send_once(first, req, now_ns, replayable, affinity),
            )
            .await
            .unwrap_or_else(|| Err(timed_out()));
        match (result, spare) {
            (Err(e @ ForwardError::Connect { .. }), Some(copy)) => {
                let second = self.pick(now_ns);
                if second == first {
                    return Err(e);
                }
                client
                    .timer
                    .within(
                        deadline,
                        self.send_once(second, copy, now_ns, replayable, affinity),
                    )
                    .await
                    .unwrap_or_else(|| Err(timed_out()))
            }
            (other, _) => other,
        }
    }

    async fn send_to(
        self: &Arc<Self>,
        index: usize,
        mut req: Request<Body>,
        now_ns: u64,
        replayable: bool,
        affinity: &Arc<AtomicU64>,
    ) -> Result<Response<PooledBody>, ForwardError> {
        let target = &self.upstream.targets[index];
        // HTTP/1.1 to the upstream: origin-form target, the authority is in `Host`. An
        // HTTP/1.1 client's target usually is already.
        let uri = req.uri();
        if uri.scheme().is_some() || uri.authority().is_some() || uri.path_and_query().is_none() {
            let path = uri
                .path_and_query()
                .cloned()
                .unwrap_or_else(|| PathAndQuery::from_static("/"));
            if let Ok(uri) = Uri::builder().path_and_query(path).build() {
                *req.uri_mut() = uri;
            }
        }
        *req.version_mut() = http::Version::HTTP_11;
        if !req.headers().contains_key(http::header::HOST) {
            // Only an HTTP/1.0 client can come without a host: name the target.
            if let Ok(host) = http::HeaderValue::from_str(target.authority.as_str()) {
                req.headers_mut().insert(http::header::HOST, host);
            }
        }
        let mut resend = replayable && req.method().is_idempotent();
        loop {
            let (conn, reused) = self.checkout(index, now_ns, affinity).await?;
            let Idle {
                serial,
                mut sender,
                since,
            } = conn;
            // Only a connection that sat idle is worth the copy (see STALE_AFTER).
            let spare =
                (resend && reused && since.elapsed() > STALE_AFTER).then(|| copy_head(&req));
            if let Err(e) = sender.ready().await {
                if reused {
                    continue; // closed while idle: take another
                }
                return Err(ForwardError::classify(target, e));
            }
            sent::mark(&req);
            match sender.try_send_request(req).await {
                Ok(resp) => {
                    // A 101 hands the connection to the tunnel; anything else comes back.
                    let check_in =
                        (resp.status() != http::StatusCode::SWITCHING_PROTOCOLS).then(|| CheckIn {
                            pool: self.id,
                            target: index,
                            serial,
                            max_idle: self.upstream.max_idle,
                            sender,
                            affinity: affinity.clone(),
                        });
                    return Ok(resp.map(|body: Incoming| PooledBody::new(body, check_in)));
                }
                Err(mut e) => match (e.take_message(), spare) {
                    // Never written: the pooled connection was closing. Another one.
                    (Some(unsent), _) if reused => req = unsent,
                    // Written, but the upstream had closed the idle connection: once more.
                    (_, Some(copy)) if e.error().is_incomplete_message() => {
                        resend = false;
                        req = copy;
                    }
                    _ => return Err(ForwardError::classify(target, e.into_error())),
                },
            }
        }
    }

    /// An idle connection to target `index`, or a new one within this worker's share of
    /// `max_connections`; at the share, waits for either until a little before the
    /// request's own timeout, so a full pool answers 503 (busy), not 504 (slow upstream).
    async fn checkout(
        self: &Arc<Self>,
        index: usize,
        now_ns: u64,
        affinity: &AtomicU64,
    ) -> Result<(Idle, bool), ForwardError> {
        let target = &self.upstream.targets[index];
        // When to stop waiting for a place, read from the clock only once a request
        // waits (most find an idle connection): its first wait starts with no await
        // before it, so the deadline is the one counted from the checkout.
        let mut give_up = None;
        let preferred = affinity.load(Ordering::Relaxed);
        loop {
            let taken = with_local(self, |local| {
                if let Some(idle) = local.checkout(index, preferred) {
                    return Ok(idle);
                }
                let slot = local.slots.try_take();
                if slot.is_none() {
                    // At the share with nothing idle for this target: an idle
                    // connection to another target gives its place up (it closes, and
                    // its place frees), or that target's idle stack could starve this
                    // one for as long as it stays warm.
                    local.close_idle_elsewhere(index);
                }
                Err(slot.ok_or_else(|| local.slots.clone()))
            });
            let slots = match taken {
                Ok(conn) => return Ok((conn, true)),
                // Boxed: connecting (TCP, TLS, handshake) is a large future and a rare
                // one; inline, every request's future would carry and move its size.
                Err(Ok(slot)) => {
                    return Box::pin(self.open(index, slot, now_ns))
                        .await
                        .map(|c| (c, false))
                }
                Err(Err(slots)) => slots,
            };
            let give_up = *give_up.get_or_insert_with(|| {
                let busy_wait = self.upstream.timeout - self.upstream.timeout / 20;
                tokio::time::Instant::now() + busy_wait
            });
            if !slots.wait_freed(give_up).await {
                return Err(ForwardError::Busy {
                    target: target.to_string(),
                    cap: self.upstream.max_connections,
                });
            }
        }
    }

    /// Opens a connection to target `index` and starts driving it on this worker.
    async fn open(
        &self,
        index: usize,
        slot: connect::Slot,
        now_ns: u64,
    ) -> Result<Idle, ForwardError> {
        let target = &self.upstream.targets[index];
        let connected = match self.connector.connect(target, slot).await {
            Ok(io) => hyper::client::conn::http1::Builder::new()
                .max_buf_size(UPSTREAM_READ_BUFFER)
                .handshake(TokioIo::new(io))
                .await
                .map_err(ConnectError::Handshake),
            Err(e) => Err(e),
        };
        let (sender, connection) = connected.map_err(|e| self.refused(index, now_ns, e))?;
        tokio::spawn(async move {
            if let Err(e) = connection.with_upgrades().await {
                tracing::debug!(error = %e, "upstream connection ended with an error");
            }
        });
        Ok(Idle {
            serial: next_serial(),
            sender,
            since: quanta::Instant::now(),
        })
    }
}

impl UpstreamPool {
    /// Target `index` could not be connected to (`source`): it is passed over for
    /// [`TARGET_COOLDOWN`], and the request gets the error.
    fn refused(&self, index: usize, now_ns: u64, source: ConnectError) -> ForwardError {
        let cooldown = u64::try_from(TARGET_COOLDOWN.as_nanos()).unwrap_or(u64::MAX);
        self.resting_until[index].store(now_ns.saturating_add(cooldown), Ordering::Relaxed);
        ForwardError::Connect {
            target: self.upstream.targets[index].to_string(),
            source,
        }
    }

    /// Sends `req` to target `index` as the upstream's protocol wants.
    async fn send_once(
        self: &Arc<Self>,
        index: usize,
        req: Request<Body>,
        now_ns: u64,
        replayable: bool,
        affinity: &Arc<AtomicU64>,
    ) -> Result<Response<PooledBody>, ForwardError> {
        if self.upstream.protocol.multiplexed() {
            self.send_streamed(index, req, now_ns, replayable).await
        } else {
            self.send_to(index, req, now_ns, replayable, affinity).await
        }
    }
}

/// A copy of a request without a body, to send again.
fn copy_head(req: &Request<Body>) -> Request<Body> {
    let mut copy = Request::new(crate::reply::empty());
    *copy.method_mut() = req.method().clone();
    *copy.uri_mut() = req.uri().clone();
    *copy.version_mut() = req.version();
    *copy.headers_mut() = req.headers().clone();
    copy
}
