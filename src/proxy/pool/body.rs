//! An upstream response body that gives its connection back to the worker's pool when it
//! ends (HTTP/1.1), or its stream's place on a shared connection (HTTP/2). A body dropped
//! before its end takes an HTTP/1.1 connection with it: hyper closes it, so the unread
//! rest of a response can never be mistaken for the next one; an HTTP/2 stream is reset.

use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Body as HttpBody, Frame, SizeHint};
use hyper::body::Incoming;
use hyper::client::conn::http1::SendRequest;
use quanta::Instant;

use super::local::{with_existing, Idle};
use super::streams::StreamGuard;
use crate::reply::Body;

/// Where a connection goes back to when its response ends.
pub struct CheckIn {
    pub pool: u64,
    pub target: usize,
    pub serial: u64,
    pub max_idle: usize,
    pub sender: SendRequest<Body>,
    /// The client connection's last upstream connection, for affinity.
    pub affinity: Arc<AtomicU64>,
}

impl CheckIn {
    fn run(self) {
        if self.sender.is_closed() {
            return;
        }
        let CheckIn {
            pool,
            target,
            serial,
            max_idle,
            sender,
            affinity,
        } = self;
        if !sender.is_ready() {
            // Still writing the request body the upstream did not wait for, or about to
            // close: pool it once it is ready, if it ever is.
            tokio::spawn(async move {
                let mut sender = sender;
                if sender.ready().await.is_ok() {
                    put_back(pool, target, serial, max_idle, sender, &affinity);
                }
            });
            return;
        }
        put_back(pool, target, serial, max_idle, sender, &affinity);
    }
}

fn put_back(
    pool: u64,
    target: usize,
    serial: u64,
    max_idle: usize,
    sender: SendRequest<Body>,
    affinity: &AtomicU64,
) {
    let idle = Idle {
        serial,
        sender,
        since: Instant::now(),
    };
    if with_existing(pool, |local| local.check_in(target, idle, max_idle)).is_some() {
        affinity.store(serial, Ordering::Relaxed);
    }
}

pin_project_lite::pin_project! {
    /// The upstream's response body, returning its connection at the end.
    pub struct PooledBody {
        #[pin]
        body: Incoming,
        check_in: Option<CheckIn>,
        stream: Option<StreamGuard>,
    }
}

impl PooledBody {
    pub fn new(body: Incoming, check_in: Option<CheckIn>) -> Self {
        let mut this = Self {
            body,
            check_in,
            stream: None,
        };
        if this.body.is_end_stream() {
            // Nothing to read (204, 304, HEAD, Content-Length: 0): the connection is free now.
            if let Some(c) = this.check_in.take() {
                c.run();
            }
        }
        this
    }

    /// A response on a shared HTTP/2 connection: its stream counts against the
    /// connection's `max_streams` until the body ends or is dropped.
    pub fn streamed(body: Incoming, stream: StreamGuard) -> Self {
        let ended = body.is_end_stream();
        Self {
            body,
            check_in: None,
            stream: (!ended).then_some(stream),
        }
    }
}

impl HttpBody for PooledBody {
    type Data = Bytes;
    type Error = hyper::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, hyper::Error>>> {
        let mut this = self.project();
        let polled = this.body.as_mut().poll_frame(cx);
        let ended = match &polled {
            Poll::Ready(None) => true,
            Poll::Ready(Some(Ok(_))) => this.body.is_end_stream(),
            _ => false,
        };
        if ended {
            if let Some(c) = this.check_in.take() {
                c.run();
            }
            this.stream.take();
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}
