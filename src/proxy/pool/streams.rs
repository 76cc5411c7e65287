//! One worker's HTTP/2 connections to one target and the streams open on each: which
//! connection a request's stream goes to (`pick`), and which connections close when idle.
//! The sending itself, openings and resends are in `multiplex.rs`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use hyper::client::conn::http2::SendRequest;
use quanta::Instant;

use super::connect::Slot;
use crate::reply::Body;

/// One worker's HTTP/2 connections to one target.
#[derive(Default)]
pub struct Streams {
    conns: Vec<Multiplexed>,
    /// A connection is being opened; requests that find every connection full wait.
    pub(super) opening: bool,
    /// The last opening that failed, and why: the requests that waited for it fail with
    /// it, rather than each trying again in turn (a dead target would keep every one of
    /// them for a `connect_timeout` per request ahead of it).
    pub(super) failed: Option<(Instant, Arc<str>)>,
}

/// One HTTP/2 connection and the streams open on it.
struct Multiplexed {
    sender: SendRequest<Body>,
    open: Arc<AtomicUsize>,
    /// When a stream last started or was seen running (by the reaper).
    last_used: Instant,
}

/// A stream's place on its connection, given back when its response ends or is dropped.
pub struct StreamGuard(Arc<AtomicUsize>);

impl Drop for StreamGuard {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

/// What a request found among a target's connections.
pub(super) enum Pick {
    Stream(SendRequest<Body>, StreamGuard),
    Open(Slot),
    /// Another request is opening a connection, or every place is taken: wait.
    Wait,
}

impl Streams {
    /// Takes a newly opened connection, and its first stream.
    pub(super) fn add(&mut self, sender: SendRequest<Body>) -> Pick {
        let mut conn = Multiplexed {
            sender,
            open: Arc::new(AtomicUsize::new(0)),
            last_used: Instant::now(),
        };
        let pick = conn.stream();
        self.conns.push(conn);
        pick
    }

    /// A stream on the oldest connection with room, else a place to open one, else (at
    /// the share) a stream on the least busy connection.
    pub(super) fn pick(&mut self, max_streams: usize, slot: impl FnOnce() -> Option<Slot>) -> Pick {
        self.conns.retain(|c| !c.sender.is_closed());
        let room = self
            .conns
            .iter_mut()
            .find(|c| c.open.load(Ordering::Relaxed) < max_streams);
        if let Some(conn) = room {
            return conn.stream();
        }
        if self.opening {
            return Pick::Wait;
        }
        if let Some(slot) = slot() {
            self.opening = true;
            return Pick::Open(slot);
        }
        match self
            .conns
            .iter_mut()
            .min_by_key(|c| c.open.load(Ordering::Relaxed))
        {
            Some(conn) => conn.stream(),
            None => Pick::Wait,
        }
    }

    /// Why the opening the caller waited for (since `since`) failed, if it did and no
    /// connection has come up since.
    pub(super) fn failed_since(&self, since: Instant) -> Option<Arc<str>> {
        let (at, why) = self.failed.as_ref()?;
        (*at >= since && self.conns.is_empty()).then(|| why.clone())
    }

    /// Closes connections without a stream since before `cutoff`; a busy one counts as
    /// used now.
    pub fn close_idle(&mut self, cutoff: Instant, now: Instant) {
        self.conns.retain_mut(|c| {
            if c.open.load(Ordering::Relaxed) > 0 {
                c.last_used = now;
            }
            c.last_used > cutoff && !c.sender.is_closed()
        });
    }

    /// Closes the least busy idle connection, so its place under the share frees.
    pub fn close_one_idle(&mut self) -> bool {
        let idle = self
            .conns
            .iter()
            .position(|c| c.open.load(Ordering::Relaxed) == 0);
        idle.map(|i| self.conns.remove(i)).is_some()
    }
}

impl Multiplexed {
    fn stream(&mut self) -> Pick {
        self.open.fetch_add(1, Ordering::Relaxed);
        self.last_used = Instant::now();
        Pick::Stream(self.sender.clone(), StreamGuard(self.open.clone()))
    }
}
