//! The buckets one stream holds, and the bounds on them: how many (65,536) and how many
//! bytes of ids (16 MiB) a stream tracks, and the listener's bound over every stream.
//! A full stream makes room by forgetting the buckets no report used for a minute and
//! telling Envoy to abandon them; a bucket it does not hold, named with no request while
//! it is full, is abandoned rather than let back in.

use std::collections::HashMap;

use tokio::sync::mpsc;

use super::holders::{Holders, StreamId};
use super::keys::{id_bytes, BucketKey, MAX_BUCKET_ID_BYTES, MAX_STREAM_ID_BYTES};
use super::proto::{AbandonAction, Action, BucketAction, BucketId};
use super::share::Assignment;
use super::together::Together;
use crate::proxy::snapshot::Shared;

/// Buckets one stream may hold; a bucket beyond is charged its usage but refused for a
/// while and not tracked (a stream cannot grow the server's memory without bound). Checked
/// here, where a bucket's key is made.
pub const MAX_BUCKETS_PER_STREAM: usize = 65_536;

/// A tracked bucket whose reports carried no request for this long is forgotten when the
/// stream is full, and Envoy told to abandon it. Envoy names every bucket it caches in
/// every report, used or not, so forgetting one it still names — or waiting for it to go
/// unnamed — held its place for good: 1,024 ids of 16 KiB, one client request each,
/// filled a stream, and every new tenant on that Envoy got `DENY_ALL` from then on.
const STALE_NS: u64 = 60 * 1_000_000_000;

/// A bucket this stream has reported, as last answered. Its domain and id are the map's
/// key, not kept a second time here.
pub struct Tracked {
    /// The key it is a share of (policy and key parts), among [`Holders`].
    pub key: String,
    /// When a report last named it.
    pub last_ns: u64,
    /// When a report of it last carried a request (or it was first tracked).
    pub used_ns: u64,
    pub demand: f64,
    /// Its id's bytes, counted in the stream's [`Stream::id_bytes`].
    pub bytes: usize,
    /// What it was last told: sized with siblings, one the report did not name is told
    /// again only when that changed.
    pub told: Option<Assignment>,
}

/// What one stream answers with: the process's shared parts and its own identity.
pub struct Stream<'a> {
    pub shared: &'a Shared,
    pub holders: &'a Holders,
    pub id: StreamId,
    pub nudge: &'a mpsc::Sender<String>,
    pub buckets: HashMap<BucketKey, Tracked>,
    /// The domain of the stream's reports: the last one a report gave.
    pub domain: String,
    /// When stale buckets were last looked for (a full stream looks at most every 10 s).
    pub swept_ns: u64,
    /// The bytes of every tracked bucket's id, bounded by [`MAX_STREAM_ID_BYTES`].
    pub id_bytes: usize,
    /// The tracked buckets by the key they are shares of.
    pub together: Together,
    /// Buckets forgotten to make room, to be abandoned in the report's answer (and not
    /// let back in by the same report naming them idle).
    pub forgotten: std::collections::HashSet<BucketKey>,
}

impl<'a> Stream<'a> {
    /// A new stream `id` of the listener's `holders`, nudged through `nudge`.
    pub fn new(
        (shared, holders): (&'a Shared, &'a Holders),
        id: StreamId,
        nudge: &'a mpsc::Sender<String>,
    ) -> Self {
        Self {
            shared,
            holders,
            id,
            nudge,
            buckets: HashMap::new(),
            domain: String::new(),
            swept_ns: 0,
            forgotten: Default::default(),
            id_bytes: 0,
            together: Default::default(),
        }
    }
}

/// An ended stream's buckets leave the listener's count (their holds stay until their
/// assignments expire: `Holders::ended`).
impl Drop for Stream<'_> {
    fn drop(&mut self) {
        self.holders
            .tracked
            .give_back(self.buckets.len(), self.id_bytes);
    }
}

/// How often a full stream looks for buckets to forget.
const SWEEP_EVERY_NS: u64 = 10 * 1_000_000_000;

/// What tracking a bucket came to.
pub enum Room {
    /// Held (it was, or it is now).
    Tracked,
    /// No room: answered `DENY_ALL` for a while, its usage charged all the same.
    Full,
    /// Named with no request and not held while the stream is full: abandoned.
    Idle,
}

/// `member` leaves the stream's buckets of `key`; the stream's hold of the key among its
/// holders goes with the last of them.
pub(super) fn leave(
    together: &mut Together,
    (holders, stream): (&Holders, StreamId),
    key: &str,
    member: &BucketKey,
) {
    if together.leave(key, member) {
        holders.release(key, stream);
    }
}

impl Stream<'_> {
    /// Tracks the bucket `bkey` (a share of `key`) if it is new, unless the stream's or the
    /// listener's bounds on buckets leave it no room (`idle`: its report carried no
    /// request).
    pub(super) fn track(
        &mut self,
        id: &BucketId,
        (bkey, key): (&BucketKey, &str),
        idle: bool,
        now: u64,
    ) -> Room {
        let bytes = id_bytes(id);
        let over = |s: &Self| {
            s.buckets.len() >= MAX_BUCKETS_PER_STREAM || s.id_bytes + bytes > MAX_STREAM_ID_BYTES
        };
        let new = !self.buckets.contains_key(bkey);
        if new && idle && (over(self) || self.forgotten.contains(bkey)) {
            // Named with no request, and not held: one this stream forgot to make room
            // (abandoned in this answer or an earlier one), or one from before a
            // reconnection. Abandoned again rather than taking a place back.
            return Room::Idle;
        }
        let full = new && over(self) && (self.forget_stale(now) == 0 || over(self));
        // The listener's bound on every stream's buckets, taken last (nothing to give
        // back when the stream's own refused); when it is full, this stream's unused
        // buckets make room as for its own bound (other streams' make room on theirs).
        let mut listener_full = || {
            new && !self.holders.tracked.take(bytes)
                && (self.forget_stale(now) == 0 || !self.holders.tracked.take(bytes))
        };
        if full || bytes > MAX_BUCKET_ID_BYTES || listener_full() {
            return Room::Full;
        }
        if new {
            self.id_bytes += bytes;
            self.together.join(key, bkey);
            let tracked = Tracked {
                key: key.to_owned(),
                last_ns: now,
                used_ns: now,
                demand: 0.0,
                bytes,
                told: None,
            };
            self.buckets.insert(bkey.clone(), tracked);
        }
        Room::Tracked
    }

    /// Forgets the buckets no report used for [`STALE_NS`] (their holds go with them), to
    /// be abandoned in the answer (Envoy drops them; a client's next request makes the
    /// bucket anew); how many.
    fn forget_stale(&mut self, now: u64) -> usize {
        if self.swept_ns != 0 && now.saturating_sub(self.swept_ns) < SWEEP_EVERY_NS {
            return 0;
        }
        self.swept_ns = now;
        let before = self.buckets.len();
        let (holders, id, counted) = (self.holders, self.id, &mut self.id_bytes);
        let (together, forgotten) = (&mut self.together, &mut self.forgotten);
        self.buckets.retain(|member, t| {
            let live = now.saturating_sub(t.used_ns) < STALE_NS;
            if !live {
                forgotten.insert(member.clone());
                leave(together, (holders, id), &t.key, member);
                holders.tracked.give_back(1, t.bytes);
                *counted -= t.bytes;
            }
            live
        });
        before - self.buckets.len()
    }

    /// The buckets forgotten to make room since the last call, as actions abandoning them.
    pub fn take_abandoned(&mut self) -> Vec<BucketAction> {
        let forgotten = std::mem::take(&mut self.forgotten);
        let ids = forgotten.iter().map(super::keys::bucket_id);
        ids.map(|id| self.abandon(&id)).collect()
    }

    /// The action that tells Envoy to drop the bucket `id` (its next request starts it
    /// over); counted.
    pub(super) fn abandon(&self, id: &BucketId) -> BucketAction {
        self.shared.metrics.rlqs.abandon.inc();
        BucketAction {
            bucket_id: Some(id.clone()),
            action: Some(Action::Abandon(AbandonAction {})),
        }
    }
}
