//! Which Envoys hold a share of which key, and how much each asks for: the split of
//! [`super::share`] is over these. A holder whose stream ended keeps its place until its
//! last assignment expires (Envoy runs on a cached assignment through a reconnect), so
//! its share returns to the others only once it can no longer be used.

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};

use parking_lot::Mutex;
use tokio::sync::mpsc;

/// A stream's id, unique in this process.
pub type StreamId = u64;

struct Holder {
    stream: StreamId,
    demand: f64,
    /// When its last assignment of the key expires (clock ns).
    expires_ns: u64,
    /// Its stream, told to re-size its share when another Envoy joins the key; `None`
    /// once the stream ended.
    nudge: Option<mpsc::Sender<String>>,
    /// The tokens its buckets of the key were last told to hold at most: what it may
    /// still admit of what the key has free (its spending since is not reported yet).
    told: u64,
    /// Its part of the key's demand when its share was last sized (0 to 1): what it
    /// keeps until it is sized again, whatever the others ask since.
    sized_part: f64,
    /// Nudged to re-size and not sized since: the re-sizes of the others pushed with it
    /// do not push it again (each would, until enough of them had re-sized: N²/2
    /// nudges for N Envoys on a key).
    pushed: bool,
}

/// Every key's holders; a key's list is short (the Envoys that route its traffic).
pub struct Holders {
    keys: Mutex<HashMap<String, Vec<Holder>>>,
    /// When the map was last swept of holds that expired after their streams ended (clock
    /// ns): a key no stream reports again would otherwise be kept for ever.
    swept_ns: std::sync::atomic::AtomicU64,
    next: std::sync::atomic::AtomicU64,
    /// This listener among a fleet's servers (its streams' names in Redis).
    server: String,
    /// The buckets every stream tracks, together.
    pub tracked: Tracked,
}

impl Default for Holders {
    fn default() -> Self {
        Self::new(crate::config::rls::DEFAULT_MAX_QUOTA_BUCKETS)
    }
}

impl Holders {
    /// The listener's holders, its streams tracking at most `max_buckets` buckets
    /// together (`[rls] max_quota_buckets`).
    pub fn new(max_buckets: usize) -> Self {
        Self {
            keys: Mutex::default(),
            swept_ns: std::sync::atomic::AtomicU64::default(),
            next: std::sync::atomic::AtomicU64::default(),
            server: crate::random::suffix(),
            tracked: Tracked::new(max_buckets),
        }
    }
}

/// What every stream of the listener tracks together: buckets, and their ids' bytes (256
/// a bucket on average, at most). A stream's own bounds do not bound the listener's
/// memory: 16,384 streams of 65,536 buckets each were 0.9 TiB.
pub struct Tracked {
    buckets: AtomicUsize,
    bytes: AtomicUsize,
    max_buckets: usize,
    max_bytes: usize,
}

impl Tracked {
    fn new(max_buckets: usize) -> Self {
        Self {
            buckets: AtomicUsize::new(0),
            bytes: AtomicUsize::new(0),
            max_buckets,
            max_bytes: max_buckets.saturating_mul(256),
        }
    }

    /// A place for one more bucket whose id has `bytes`; `false` (nothing taken) when the
    /// listener is full.
    pub fn take(&self, bytes: usize) -> bool {
        if self.buckets.fetch_add(1, Ordering::Relaxed) >= self.max_buckets {
            self.buckets.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        if self.bytes.fetch_add(bytes, Ordering::Relaxed) + bytes > self.max_bytes {
            self.bytes.fetch_sub(bytes, Ordering::Relaxed);
            self.buckets.fetch_sub(1, Ordering::Relaxed);
            return false;
        }
        true
    }

    /// Gives back the places of `buckets` buckets whose ids had `bytes` together.
    pub fn give_back(&self, buckets: usize, bytes: usize) {
        self.buckets.fetch_sub(buckets, Ordering::Relaxed);
        self.bytes.fetch_sub(bytes, Ordering::Relaxed);
    }

    /// Buckets tracked now.
    pub fn buckets(&self) -> usize {
        self.buckets.load(Ordering::Relaxed)
    }
}

/// What the holders of a key other than `stream` keep above their parts of its demand
/// now, together (0 to 1 of the key): each keeps the share it was last sized at until it
/// is sized again, so while they keep more, the key refills at its rate plus this part
/// of it (two Envoys told 9/s each of 10/s).
fn others_excess(holders: &[Holder], stream: StreamId, all: f64) -> f64 {
    use super::share::part;
    (holders.iter())
        .filter(|h| h.stream != stream && h.nudge.is_some())
        .map(|h| (h.sized_part - part(h.demand, all)).max(0.0))
        .sum()
}

/// The excess above which the others are pushed their new shares at once: smaller moves
/// (demand moves a little at every report) re-size at the others' next reports, not a
/// push to each; however small the steps, the excess adds up across reports.
const PUSH_EXCESS: f64 = 0.05;

/// One holder's place in a key's split.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Weight {
    pub mine: f64,
    pub all: f64,
    /// The tokens this server's other holders of the key were last told to hold: a share
    /// that starts full must leave them room, as their spending since is not charged yet
    /// (0 for a newcomer: the others are nudged to shrink at once).
    pub others_told: u64,
}

impl Holders {
    pub fn new_stream(&self) -> StreamId {
        self.next.fetch_add(1, std::sync::atomic::Ordering::Relaxed)
    }

    /// `stream`'s name among every server's streams.
    pub fn field(&self, stream: StreamId) -> String {
        format!("{}{stream}", self.server_prefix())
    }

    /// What every one of this server's streams' names starts with.
    pub fn server_prefix(&self) -> String {
        format!("{}:", self.server)
    }

    /// The tokens `stream`'s buckets of `key` were last told to hold (0 when none).
    pub fn told_of(&self, key: &str, stream: StreamId) -> u64 {
        let keys = self.keys.lock();
        let holders = keys.get(key).map(Vec::as_slice).unwrap_or_default();
        holders
            .iter()
            .find(|h| h.stream == stream)
            .map_or(0, |h| h.told)
    }

    /// Records `stream`'s demand for `key` (holding its share until `expires_ns`) and
    /// returns its weight among the key's holders now. When it is new to the key, the
    /// other live holders are nudged to re-size their shares at once; otherwise those
    /// whose parts shrank are, once the others together keep a twentieth of the key or
    /// more above their parts (see [`others_excess`]).
    pub fn hold(
        &self,
        key: &str,
        (stream, nudge): (StreamId, &mpsc::Sender<String>),
        demand: f64,
        (now, expires_ns): (u64, u64),
    ) -> Weight {
        use super::share::part;
        let mut keys = self.keys.lock();
        self.sweep(&mut keys, now);
        let holders = keys.entry(key.to_owned()).or_default();
        holders.retain(|h| h.nudge.is_some() || h.expires_ns > now);
        let joined = match holders.iter_mut().find(|h| h.stream == stream) {
            Some(h) => {
                h.demand = demand;
                h.expires_ns = expires_ns;
                false
            }
            None => {
                holders.push(Holder {
                    stream,
                    demand,
                    expires_ns,
                    nudge: Some(nudge.clone()),
                    told: 0,
                    sized_part: 1.0,
                    pushed: false,
                });
                true
            }
        };
        let all: f64 = holders.iter().map(|h| h.demand).sum();
        // A newcomer starts with none of the others' tokens counted: they shrink at once.
        if joined || others_excess(holders, stream, all) >= PUSH_EXCESS {
            for other in holders.iter_mut().filter(|h| h.stream != stream) {
                let shrank = part(other.demand, all) < other.sized_part;
                if let (Some(n), false, true) = (&other.nudge, other.pushed, joined || shrank) {
                    // A full queue already has work queued for that stream (maybe not
                    // this key: then the next report tries again).
                    other.pushed = n.try_send(key.to_owned()).is_ok();
                }
            }
        }
        let others_told = if joined {
            0
        } else {
            others_told(holders, stream)
        };
        if let Some(h) = holders.iter_mut().find(|h| h.stream == stream) {
            h.sized_part = part(demand, all);
            h.pushed = false;
        }
        Weight {
            mine: demand,
            all,
            others_told,
        }
    }

    /// `stream` told its buckets of `key` to hold at most `tokens` together; what it had
    /// told them before (0 when none).
    pub fn told(&self, key: &str, stream: StreamId, tokens: u64) -> u64 {
        let mut keys = self.keys.lock();
        let holder = keys
            .get_mut(key)
            .and_then(|holders| holders.iter_mut().find(|h| h.stream == stream));
        holder.map_or(0, |h| std::mem::replace(&mut h.told, tokens))
    }

    /// `stream`'s weight for `key` as things stand, without a report (the tests: a
    /// stream's re-size reports again, through [`hold`](Self::hold)).
    #[cfg(test)]
    pub fn weight(&self, key: &str, stream: StreamId, now: u64) -> Option<Weight> {
        let mut keys = self.keys.lock();
        let holders = keys.get_mut(key)?;
        holders.retain(|h| h.nudge.is_some() || h.expires_ns > now);
        let mine = holders.iter().find(|h| h.stream == stream)?.demand;
        Some(Weight {
            mine,
            all: holders.iter().map(|h| h.demand).sum(),
            others_told: others_told(holders, stream),
        })
    }

    /// `stream` ended at `now`: its holds stay until their assignments expire.
    pub fn ended<'a>(
        &self,
        (stream, now): (StreamId, u64),
        keys_held: impl Iterator<Item = &'a str>,
    ) {
        let mut keys = self.keys.lock();
        self.sweep(&mut keys, now);
        for key in keys_held {
            if let Some(holders) = keys.get_mut(key) {
                for h in holders.iter_mut().filter(|h| h.stream == stream) {
                    h.nudge = None;
                    // Its Envoy may still spend its cached assignment, and its share
                    // stays out of the split until it expires; but the room a share
                    // leaves is for holders still told: an Envoy reconnecting would
                    // otherwise be cut by its own old stream's tokens (refused until
                    // they expire). What it spends meanwhile is one assignment per TTL.
                    h.told = 0;
                }
            }
        }
    }

    /// `stream` no longer holds `key` (its bucket was abandoned).
    pub fn release(&self, key: &str, stream: StreamId) {
        let mut keys = self.keys.lock();
        if let Some(holders) = keys.get_mut(key) {
            holders.retain(|h| h.stream != stream);
            if holders.is_empty() {
                keys.remove(key);
            }
        }
    }

    /// Drops the holds that expired after their streams ended, and keys left without
    /// one: at most once a second, so the map holds what the last assignments' TTLs
    /// cover, whatever keys streams reported and left.
    fn sweep(&self, keys: &mut HashMap<String, Vec<Holder>>, now: u64) {
        use std::sync::atomic::Ordering;
        let last = self.swept_ns.load(Ordering::Relaxed);
        if now.saturating_sub(last) < 1_000_000_000 {
            return;
        }
        self.swept_ns.store(now, Ordering::Relaxed);
        keys.retain(|_, holders| {
            holders.retain(|h| h.nudge.is_some() || h.expires_ns > now);
            !holders.is_empty()
        });
    }

    /// Keys with a holder (the metrics, the tests).
    pub fn len(&self) -> usize {
        self.keys.lock().len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// What the holders of a key other than `stream` were last told to hold, together.
fn others_told(holders: &[Holder], stream: StreamId) -> u64 {
    (holders.iter())
        .filter(|h| h.stream != stream)
        .fold(0u64, |sum, h| sum.saturating_add(h.told))
}

#[cfg(test)]
#[path = "holders_tests.rs"]
mod tests;
