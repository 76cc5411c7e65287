//! A stream's buckets answered again between reports, or together at a report's end: a
//! key another Envoy joined or the admin API changed (its buckets re-sized without a
//! charge), and a key the stream holds through several buckets (sized together once
//! their report's usages are all charged: `together.rs`).

use std::collections::HashMap;

use super::assign::{share_of, Asked, Share};
use super::keys::{bucket_id, bucket_key, BucketKey};
use super::proto::{BucketAction, BucketId};
use super::share::Assignment;
use super::tracked::{Stream, Tracked};
use crate::proxy::snapshot::Snapshot;

/// A member that reported within this long still asks for what it last did: Envoy
/// reports every bucket every 5 s.
const LIVE_NS: u64 = 2 * super::share::REPORT_INTERVAL_NS;

impl Stream<'_> {
    /// Re-sizes every bucket of this stream that is a share of `key` (another Envoy
    /// joined it, the admin API changed it): the key's state read without a charge, the
    /// demand kept. Buckets with siblings are sized together by [`Stream::resplit`].
    pub async fn resize(&mut self, snapshot: &Snapshot, key: &str) -> Vec<BucketAction> {
        let mut actions = if self.together.count(key) > 1 {
            self.together.resplit.insert(key.to_owned());
            Vec::new()
        } else {
            let members = self.together.members(key);
            self.each_again(snapshot, &members).await
        };
        let domain = self.domain.clone();
        self.resplit(snapshot, &domain, &mut actions).await;
        actions
    }

    /// Sizes the buckets of every key a report (or re-size) left to size together into
    /// `actions`, in place of an action a bucket was given earlier in them (`domain`:
    /// the report's).
    pub async fn resplit(
        &mut self,
        snapshot: &Snapshot,
        domain: &str,
        actions: &mut Vec<BucketAction>,
    ) {
        let mut answered: Option<HashMap<BucketKey, usize>> = None;
        // A bucket answered alone here may join another key (a reload): until none is left.
        while !self.together.resplit.is_empty() {
            for key in std::mem::take(&mut self.together.resplit) {
                let members = self.together.members(&key);
                let sized = match members.len() {
                    0 => Vec::new(),
                    1 => self.each_again(snapshot, &members).await,
                    _ => self.together_sized(snapshot, &key, &members).await,
                };
                merge(domain, actions, &mut answered, sized);
            }
        }
        self.together.reported.clear();
    }

    /// Each of `members` answered alone without a charge, its demand kept.
    async fn each_again(
        &mut self,
        snapshot: &Snapshot,
        members: &[BucketKey],
    ) -> Vec<BucketAction> {
        let mut actions = Vec::new();
        for member in members {
            let id = bucket_id(member);
            let asked = Asked {
                domain: &member.0,
                id: &id,
                allowed: 0,
                requests: None,
            };
            actions.extend(self.answer(snapshot, asked).await);
        }
        actions
    }

    /// `members` of `key` sized together: the key's state read once without a charge,
    /// the stream's demand (what its members that reported within two report intervals
    /// ask for) held once, split between them by their demands. A member its entry now
    /// keys apart (a reload) is answered alone; one the report did not name is told
    /// only what changed.
    async fn together_sized(
        &mut self,
        snapshot: &Snapshot,
        key: &str,
        members: &[BucketKey],
    ) -> Vec<BucketAction> {
        let Some(rls) = snapshot.config.rls.as_ref() else {
            return Vec::new();
        };
        let ids: Vec<BucketId> = members.iter().map(bucket_id).collect();
        let mut kept = Vec::with_capacity(members.len());
        let mut apart = Vec::new();
        let mut check = None;
        for (member, id) in members.iter().zip(&ids) {
            let share = (rls.buckets.find(&member.0, &id.bucket))
                .and_then(|entry| share_of(snapshot, entry, id))
                .filter(|share| share.key == key);
            match share {
                Some(share) => {
                    kept.push((member, id, share.ttl_s));
                    check.get_or_insert(share);
                }
                None => apart.push(member.clone()),
            }
        }
        let mut actions = self.each_again(snapshot, &apart).await;
        let Some(Share {
            policy,
            plan,
            parts,
            ..
        }) = check
        else {
            return actions;
        };
        let admission = self.charge((policy, plan, parts), 0).await;
        let now = self.shared.clock.now_ns();
        // A member that stopped reporting asks for nothing: its last demand would hold
        // the key's share away from its siblings (and other Envoys) until it is swept.
        let live = |t: &&Tracked| now.saturating_sub(t.last_ns) <= LIVE_NS;
        let demands: Vec<f64> = (kept.iter())
            .map(|(m, ..)| self.buckets.get(*m).filter(live).map_or(0.0, |t| t.demand))
            .collect();
        let demand = super::share::demand(demands.iter().sum());
        // Held as long as the longest assignment it backs can be spent; sized (a debt
        // repaid within it) and turned over the shortest.
        let ttls = kept.iter().map(|&(.., ttl)| ttl);
        let (longest, ttl_s) = (ttls.clone().max().unwrap_or(1), ttls.min().unwrap_or(1));
        let weight = self.weight(key, demand, (now, longest)).await;
        let period = (ttl_s, now / 1_000_000_000 / ttl_s);
        let mut turn = (self.together).turn(key, period, kept.iter().map(|&(m, ..)| m));
        let mode = policy.mode;
        let split = super::render::split(&admission, mode, (weight, &demands), (ttl_s, &mut turn));
        let split: Vec<Assignment> = (kept.iter().zip(split))
            .map(|(&(m, ..), a)| a.told_apart_from(self.buckets.get(m).and_then(|t| t.told)))
            .collect();
        let holder = turn.holder.and_then(|i| kept.get(i)).map(|&(m, ..)| m);
        self.together.keep_turn(key, period, holder);
        let tokens = split
            .iter()
            .map(Assignment::tokens)
            .fold(0u64, u64::saturating_add);
        self.told(key, tokens, (demand, longest)).await;
        self.tell(kept.into_iter().zip(split), &mut actions);
        actions
    }

    /// Each sized member told its share into `actions`: every one the report named, and
    /// another only when its share changed.
    fn tell<'m>(
        &mut self,
        sized: impl Iterator<Item = ((&'m BucketKey, &'m BucketId, u64), Assignment)>,
        actions: &mut Vec<BucketAction>,
    ) {
        for ((member, id, ttl_s), assignment) in sized {
            let reported = self.together.reported.contains(member);
            let Some(tracked) = self.buckets.get_mut(member) else {
                continue;
            };
            if reported || tracked.told != Some(assignment) {
                tracked.told = Some(assignment);
                actions.push(self.render(id, assignment, ttl_s));
            }
        }
    }
}

/// `sized` into `actions`, in place of an action a bucket was given earlier in them
/// (`domain`: the report's).
fn merge(
    domain: &str,
    actions: &mut Vec<BucketAction>,
    answered: &mut Option<HashMap<BucketKey, usize>>,
    sized: Vec<BucketAction>,
) {
    let answered = answered.get_or_insert_with(|| {
        (actions.iter().enumerate())
            .filter_map(|(i, a)| Some((bucket_key(domain, a.bucket_id.as_ref()?), i)))
            .collect()
    });
    for action in sized {
        let Some(id) = action.bucket_id.as_ref() else {
            continue;
        };
        let at = bucket_key(domain, id);
        match answered.get(&at) {
            Some(&i) => actions[i] = action,
            None => {
                answered.insert(at, actions.len());
                actions.push(action);
            }
        }
    }
}
