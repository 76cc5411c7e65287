//! One bucket usage read and answered: the usage charged to the bucket's key (forced: it
//! was spent), the Envoy's demand recorded among the key's holders, and its next share
//! rendered as the action Envoy applies (`render.rs`, from the limiter's typed decision,
//! never re-derived: a store that cannot answer, an `on_error = "allow"` pass and a
//! shadow policy become blanket rules; a decided key becomes a token bucket). A stream's
//! buckets of one key split its share (`together.rs`).

use super::holders::Weight;
use super::keys::{bucket_key, holder_key, BucketKey};
use super::proto::{BucketAction, BucketId, BucketQuotaUsage};
use super::share::{self, Assignment};
use super::tracked::Stream;
pub use super::tracked::MAX_BUCKETS_PER_STREAM;
use super::tracked::{leave, Room};
use crate::config::rls::Unmatched;
use crate::config::Missing;
use crate::limit::MAX_TIERS;
use crate::metrics::rlqs::add_reported;
use crate::proxy::snapshot::Snapshot;
use crate::store::limiter::Descriptor;
use crate::store::tiers::PolicyPlan;
use crate::store::Admission;
use arrayvec::ArrayVec;

/// What one answer is about: a bucket, the usage to charge, and the requests it saw
/// with the time they took, by Envoy's own measure when it sent one (`None`: a re-size,
/// which keeps the demand).
pub(super) struct Asked<'a> {
    pub domain: &'a str,
    pub id: &'a BucketId,
    pub allowed: u64,
    pub requests: Option<(u64, Option<u64>)>,
}

/// What a bucket id is a share of under its `[[rlqs.buckets]]` entry: the entry's policy,
/// plan and assignment TTL, the id's values that key it, and the key as the holders and
/// the admin API name it (an address under `ip/64` as its network, so a reset or override
/// of it reaches the stream).
pub(super) struct Share<'s, 'i> {
    pub policy: &'s crate::config::Policy,
    pub plan: &'s PolicyPlan,
    pub ttl_s: u64,
    pub parts: ArrayVec<&'i str, MAX_TIERS>,
    pub named: ArrayVec<std::borrow::Cow<'i, str>, MAX_TIERS>,
    pub key: String,
}

/// The share of `entry` that `id` names; `None` when the entry shares nothing out.
pub(super) fn share_of<'s, 'i>(
    snapshot: &'s Snapshot,
    entry: usize,
    id: &'i BucketId,
) -> Option<Share<'s, 'i>> {
    let bucket = snapshot.config.rls.as_ref()?.buckets.get(entry)?;
    let policy = bucket.rule.policy.as_deref()?;
    let plan = snapshot.rlqs_plans.get(entry)?.as_ref()?;
    // Trimmed as the charge trims them (`push_parts`), so ` acme` and `acme` are one
    // key among the holders too: the holders' key named differently from the charged
    // one gave each spelling the key's whole share.
    let parts: ArrayVec<&str, MAX_TIERS> = (bucket.key_parts(&id.bucket))
        .map(crate::key::source::trim_ows_text)
        .collect();
    let named: ArrayVec<_, MAX_TIERS> = policy.spelled_parts(parts.iter().copied()).collect();
    let key = holder_key(&policy.name, &named);
    Some(Share {
        policy,
        plan,
        ttl_s: bucket.ttl.as_secs().max(1),
        parts,
        named,
        key,
    })
}

/// What a bucket lacking a value (Envoy left it out, or sent it empty) is told by its
/// policy's `missing`, as a request without the header is; `None` to charge it (all
/// values there, or `shared`: the one bucket of all such).
fn missing_answer(policy: &crate::config::Policy, parts: &[&str]) -> Option<Assignment> {
    if !parts.iter().any(|part| part.is_empty()) {
        return None;
    }
    match policy.missing {
        Missing::Shared => None,
        Missing::Skip => Some(Assignment::AllowAll),
        Missing::Reject => Some(Assignment::DenyAll),
    }
}

/// A bucket of no entry, answered per `[rls] on_unmatched` for this long.
pub(super) const UNMATCHED_TTL_S: u64 = 10;

impl Stream<'_> {
    /// Reads one usage of `domain`'s bucket and answers it; `None` for a bucket Envoy
    /// cannot be answered about (an empty id).
    pub async fn usage(
        &mut self,
        snapshot: &Snapshot,
        domain: &str,
        usage: &BucketQuotaUsage,
    ) -> Option<BucketAction> {
        let id = usage
            .bucket_id
            .as_ref()
            .filter(|id| !id.bucket.is_empty())?;
        let metrics = &self.shared.metrics.rlqs;
        metrics.usages.inc();
        add_reported(&metrics.allowed, usage.num_requests_allowed);
        add_reported(&metrics.denied, usage.num_requests_denied);
        let requests = usage
            .num_requests_allowed
            .saturating_add(usage.num_requests_denied);
        let asked = Asked {
            domain,
            id,
            allowed: usage.num_requests_allowed,
            requests: Some((requests, elapsed_ns(usage.time_elapsed.as_ref()))),
        };
        self.answer(snapshot, asked).await
    }

    /// `cost` units of usage already spent charged to a share's key (`policy`, its plan
    /// and the values that key it), forced (never refused; 0 reads the key's state
    /// without a charge): the decision a share is rendered from.
    pub(super) async fn charge(
        &self,
        (policy, plan, parts): (
            &crate::config::Policy,
            &PolicyPlan,
            ArrayVec<&str, MAX_TIERS>,
        ),
        cost: u64,
    ) -> Admission {
        let mut admission = Admission::default();
        let descriptor = Descriptor {
            position: 0,
            policy,
            plan,
            parts,
            cost,
            forced: true,
        };
        let (limiter, clock) = (&self.shared.limiter, &*self.shared.clock);
        limiter
            .check_descriptors(std::iter::once(descriptor), clock, &mut admission)
            .await;
        admission
    }

    /// Charges one usage and answers it; `None` for a bucket with siblings (sized with
    /// them once the report is answered: `resplit`).
    pub(super) async fn answer(
        &mut self,
        snapshot: &Snapshot,
        asked: Asked<'_>,
    ) -> Option<BucketAction> {
        let Asked {
            domain,
            id,
            allowed,
            requests,
        } = asked;
        let rls = snapshot.config.rls.as_ref()?;
        let bkey = bucket_key(domain, id);
        let Some(entry) = rls.buckets.find(domain, &id.bucket) else {
            return Some(self.unmatched(rls, id, &bkey));
        };
        let Share {
            policy,
            plan,
            ttl_s,
            parts,
            named,
            key,
        } = share_of(snapshot, entry, id)?;
        if let Some(blanket) = missing_answer(policy, &parts) {
            return Some(self.render(id, blanket, ttl_s));
        }
        let admission = self.charge((policy, plan, parts), allowed).await;
        let clock = &*self.shared.clock;
        if let (Some(top), Some((requests, _))) = (&snapshot.top, requests) {
            let route = snapshot.config.routes.len() + 1;
            super::top::record(top, (route, entry), &admission, &named, requests > allowed);
        }
        let now = clock.now_ns();
        let idle = requests.is_some_and(|(n, _)| n == 0);
        match self.track(id, (&bkey, &key), idle, now) {
            Room::Tracked => {}
            // Charged like any other, but not tracked: refused for a while.
            Room::Full => return Some(self.render(id, Assignment::DenyAll, UNMATCHED_TTL_S)),
            // Abandoned at the answer's end when it was forgotten in this report.
            Room::Idle => return (!self.forgotten.contains(&bkey)).then(|| self.abandon(id)),
        }
        let (together, tracked) = (&mut self.together, self.buckets.get_mut(&bkey)?);
        if tracked.key != key {
            // Its entry now names another policy or key (a reload): the old hold goes
            // with the last of the stream's buckets of it.
            leave(together, (self.holders, self.id), &tracked.key, &bkey);
            together.join(&key, &bkey);
            tracked.key.clone_from(&key);
        }
        if let Some((requests, reported)) = requests {
            // Envoy's `time_elapsed` when it gave one: a stream that reconnected reports
            // its bucket's usage since its last report on the old stream, not since now.
            let elapsed = reported.unwrap_or_else(|| now.saturating_sub(tracked.last_ns));
            tracked.demand = share::requests_per_s(requests, elapsed);
            tracked.last_ns = now;
            if requests > 0 {
                tracked.used_ns = now;
            }
        }
        if together.count(&key) > 1 {
            if requests.is_some() {
                together.reported.insert(bkey);
            }
            together.resplit.insert(key);
            return None;
        }
        let demand = share::demand(tracked.demand);
        let weight = self.weight(&key, demand, (now, ttl_s)).await;
        let told = self.buckets.get(&bkey).and_then(|t| t.told);
        let assignment =
            super::render::decided(&admission, policy.mode, weight, ttl_s).told_apart_from(told);
        self.told(&key, assignment.tokens(), (demand, ttl_s)).await;
        // What it holds now: sized with siblings later (one joins, in this report or
        // after), it is told again unless that is what it would be told.
        if let Some(tracked) = self.buckets.get_mut(&bkey) {
            tracked.told = Some(assignment);
        }
        Some(self.render(id, assignment, ttl_s))
    }

    /// A bucket no entry names: abandoned when its entry went away on reload (Envoy drops
    /// the bucket and starts over), else answered per `on_unmatched`.
    fn unmatched(
        &mut self,
        rls: &crate::config::Rls,
        id: &BucketId,
        bkey: &BucketKey,
    ) -> BucketAction {
        let metrics = &self.shared.metrics.rlqs;
        if let Some(gone) = self.buckets.remove(bkey) {
            leave(&mut self.together, (self.holders, self.id), &gone.key, bkey);
            self.holders.tracked.give_back(1, gone.bytes);
            self.id_bytes -= gone.bytes;
            return self.abandon(id);
        }
        metrics.unmatched.inc();
        let blanket = match rls.on_unmatched {
            Unmatched::Ok => Assignment::AllowAll,
            Unmatched::OverLimit => Assignment::DenyAll,
        };
        self.render(id, blanket, UNMATCHED_TTL_S)
    }

    /// The stream's place among the holders of `key` with `demand` (its buckets' of it
    /// together), its share held `ttl_s` from `now`: among every server's on Redis,
    /// among this one's otherwise (and when Redis fails).
    pub(super) async fn weight(&self, key: &str, demand: f64, (now, ttl_s): (u64, u64)) -> Weight {
        let expires = now.saturating_add(ttl_s * 1_000_000_000);
        let mut weight = self
            .holders
            .hold(key, (self.id, self.nudge), demand, (now, expires));
        let told = self.holders.told_of(key, self.id);
        if let Ok(fleet) = self.hold_in_fleet(key, (demand, told), ttl_s).await {
            weight.all = fleet.demand.max(weight.mine);
            weight.others_told = weight.others_told.saturating_add(fleet.others_told);
        }
        weight
    }

    /// Records that this stream's buckets of `key` (with `demand`, held `ttl_s`) were told
    /// to hold `tokens` together: here, and in the fleet's record when it changed, so the
    /// other servers leave room for them before this stream reports again.
    pub(super) async fn told(&self, key: &str, tokens: u64, (demand, ttl_s): (f64, u64)) {
        let before = self.holders.told(key, self.id, tokens);
        // None told is no room taken from the others; not written, they leave room a while
        // longer (until the next report), and a store that failed (a blanket answer) is
        // not called twice.
        if tokens != before && tokens > 0 {
            // A failure leaves the last record: the next report writes it again.
            let _unrecorded = self.hold_in_fleet(key, (demand, tokens), ttl_s).await;
        }
    }

    /// This stream's place among every server's holders of `key` on Redis, and what the
    /// fleet holds; `NotConnected` on the memory store.
    async fn hold_in_fleet(
        &self,
        key: &str,
        (demand, told): (f64, u64),
        ttl_s: u64,
    ) -> Result<super::fleet::FleetHolders, crate::store::StoreError> {
        let Some(remote) = self.shared.limiter.remote() else {
            return Err(crate::store::StoreError::NotConnected);
        };
        let (field, server) = (self.holders.field(self.id), self.holders.server_prefix());
        let place = super::fleet::Place {
            field: &field,
            server: &server,
            demand,
            told,
        };
        super::fleet::hold(remote, key, place, ttl_s * 1000).await
    }

    /// `assignment` as the action Envoy applies, for `ttl_s` seconds; counted.
    pub(super) fn render(&self, id: &BucketId, assignment: Assignment, ttl_s: u64) -> BucketAction {
        super::render::action(&self.shared.metrics.rlqs, id, assignment, ttl_s)
    }
}

/// A report's `time_elapsed` in nanoseconds; `None` when absent or zero (a bucket's first
/// report).
fn elapsed_ns(elapsed: Option<&prost_types::Duration>) -> Option<u64> {
    let d = elapsed?;
    let seconds = u64::try_from(d.seconds).ok()?;
    let nanos = u64::try_from(d.nanos).ok()?;
    let ns = seconds.saturating_mul(1_000_000_000).saturating_add(nanos);
    (ns > 0).then_some(ns)
}
