//! Each worker's own connections to each upstream: idle connections per target in a stack
//! (the most recently used first, so a few warm connections carry the load), checked out
//! and in on the worker's thread without locks or channels. Entries are keyed by the
//! upstream's identity, so a reload that keeps an upstream's settings keeps its
//! connections; an upstream that is gone has its connections closed by its reaper.

use std::cell::RefCell;
use std::sync::{Arc, Weak};
use std::time::Duration;

use hyper::client::conn::http1::SendRequest;
// quanta reads the TSC: a connection is stamped at every check-in, and the system clock
// call cost more than the rest of the check-in.
use quanta::Instant;

use super::connect::Slots;
use super::streams::Streams;
use super::UpstreamPool;
use crate::reply::Body;

/// An idle connection, ready for its next request.
pub struct Idle {
    /// Unique within the worker: what a client connection remembers for affinity.
    pub serial: u64,
    pub sender: SendRequest<Body>,
    pub since: Instant,
}

/// One worker's connections to one upstream.
pub struct LocalPool {
    id: u64,
    owner: Weak<UpstreamPool>,
    /// Per target, the idle connections; the last is the most recently used.
    pub idle: Box<[Vec<Idle>]>,
    /// Per target, the HTTP/2 connections (an upstream with `protocol = "h2c"`/`"h2"`).
    pub streams: Box<[Streams]>,
    pub slots: Arc<Slots>,
    /// Round robin position over the targets.
    pub next: usize,
}

thread_local! {
    static POOLS: RefCell<Vec<LocalPool>> = const { RefCell::new(Vec::new()) };
    static SERIAL: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// A new connection serial (never 0, which means "none").
pub fn next_serial() -> u64 {
    SERIAL.with(|s| {
        let next = s.get() + 1;
        s.set(next);
        next
    })
}

/// Runs `f` on this worker's pool for `pool`, creating it (and its reaper) on first use.
pub fn with_local<R>(pool: &Arc<UpstreamPool>, f: impl FnOnce(&mut LocalPool) -> R) -> R {
    POOLS.with(|cell| {
        let mut pools = cell.borrow_mut();
        let index = match pools.iter().position(|p| p.id == pool.id) {
            Some(index) => index,
            None => {
                pools.push(LocalPool {
                    id: pool.id,
                    owner: Arc::downgrade(pool),
                    idle: pool.upstream.targets.iter().map(|_| Vec::new()).collect(),
                    streams: pool
                        .upstream
                        .targets
                        .iter()
                        .map(|_| Streams::default())
                        .collect(),
                    slots: Slots::new(pool.worker_share(), pool.connections.clone()),
                    next: crate::conn::worker::current(),
                });
                tokio::spawn(reap(pool.id, pool.idle_timeout()));
                pools.len() - 1
            }
        };
        f(&mut pools[index])
    })
}

/// Runs `f` on this worker's pool with identity `id`, if there is one (and the thread is
/// not being torn down).
pub fn with_existing<R>(id: u64, f: impl FnOnce(&mut LocalPool) -> R) -> Option<R> {
    POOLS
        .try_with(|cell| {
            let mut pools = cell.try_borrow_mut().ok()?;
            pools.iter_mut().find(|p| p.id == id).map(f)
        })
        .ok()
        .flatten()
}

impl LocalPool {
    /// Takes an idle connection to `target`: the one with serial `preferred` if it is idle,
    /// else the most recently used. Closed connections met on the way are dropped.
    pub fn checkout(&mut self, target: usize, preferred: u64) -> Option<Idle> {
        let idle = &mut self.idle[target];
        if preferred != 0 {
            if let Some(i) = idle.iter().rposition(|c| c.serial == preferred) {
                // `remove`, not `swap_remove`: the stack stays ordered by last use, so
                // `pop` takes the most recent and the cap closes the longest idle.
                let conn = idle.remove(i);
                if !conn.sender.is_closed() {
                    return Some(conn);
                }
            }
        }
        while let Some(conn) = idle.pop() {
            if !conn.sender.is_closed() {
                return Some(conn);
            }
        }
        None
    }

    /// Returns a connection to the idle stack; past `max_idle`, the oldest is closed.
    pub fn check_in(&mut self, target: usize, conn: Idle, max_idle: usize) {
        let idle = &mut self.idle[target];
        if idle.len() >= max_idle {
            idle.remove(0);
        }
        idle.push(conn);
        // Every waiter looks again: the one for this target takes the connection; those
        // for other targets may now close an idle one to make room.
        self.slots.wake_waiters();
    }

    /// Closes the longest-idle connection to some target other than `target` (from the
    /// fullest idle stack), so its place under the share frees for `target`.
    pub fn close_idle_elsewhere(&mut self, target: usize) {
        for (t, streams) in self.streams.iter_mut().enumerate() {
            if t != target && streams.close_one_idle() {
                return;
            }
        }
        let fullest = self
            .idle
            .iter_mut()
            .enumerate()
            .filter(|(t, idle)| *t != target && !idle.is_empty())
            .max_by_key(|(_, idle)| idle.len());
        if let Some((_, idle)) = fullest {
            idle.remove(0);
        }
    }

    /// Closes connections idle since before `cutoff`, and those the upstream closed.
    fn close_idle(&mut self, cutoff: Instant) {
        for idle in self.idle.iter_mut() {
            idle.retain(|c| c.since > cutoff && !c.sender.is_closed());
        }
        let now = Instant::now();
        for streams in self.streams.iter_mut() {
            streams.close_idle(cutoff, now);
        }
    }
}

/// Closes this worker's connections of pool `id` once idle for `timeout`; when the pool is
/// gone (a reload replaced it), closes them all and ends.
async fn reap(id: u64, timeout: Duration) {
    let tick = (timeout / 4).clamp(Duration::from_millis(100), Duration::from_secs(5));
    loop {
        tokio::time::sleep(tick).await;
        let alive = POOLS.with(|cell| {
            let mut pools = cell.borrow_mut();
            let Some(index) = pools.iter().position(|p| p.id == id) else {
                return false;
            };
            if pools[index].owner.strong_count() == 0 {
                pools.swap_remove(index);
                return false;
            }
            let cutoff = Instant::now().checked_sub(timeout);
            if let Some(cutoff) = cutoff {
                pools[index].close_idle(cutoff);
            }
            true
        });
        if !alive {
            return;
        }
    }
}
