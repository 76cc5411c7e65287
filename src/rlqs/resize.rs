//! A stream's buckets answered again between reports, or together at a report's end: a
//! key another Envoy joined or the admin API changed (its buckets re-sized without a
//! charge), and a key the stream holds through several buckets (sized together once
//! their report's usages are all charged: `together.rs`).

use std::collections::HashMap;

use arrayvec::ArrayVec;

use super::assign::{Asked, Stream};
use super::keys::{bucket_key, holder_key, BucketKey};
use super::proto::{BucketAction, BucketId};
use crate::limit::MAX_TIERS;
use crate::proxy::snapshot::Snapshot;
use crate::store::limiter::Descriptor;
use crate::store::Admission;

impl Stream<'_> {
    /// Re-sizes every bucket of this stream that is a share of `key` (another Envoy
    /// joined it, the admin API changed it): the key's state read without a charge, the
    /// demand kept. Buckets with siblings are sized together by [`Stream::resplit`].
    pub async fn resize(&mut self, snapshot: &Snapshot, key: &str) -> Vec<BucketAction> {
        let members = self.together.members(key);
        if members.len() > 1 {
            self.together.resplit.insert(key.to_owned());
            return Vec::new();
        }
        let mut actions = Vec::new();
        for member in &members {
            actions.extend(self.again(snapshot, member).await);
        }
        actions
    }

    /// Sizes the buckets of every key a report (or re-size) left to size together into
    /// `actions`, in place of an action a bucket was given earlier in it (`domain`: the
    /// report's): one action a bucket.
    pub async fn resplit(
        &mut self,
        snapshot: &Snapshot,
        domain: &str,
        actions: &mut Vec<BucketAction>,
    ) {
        let mut answered: Option<HashMap<BucketKey, usize>> = None;
        // A bucket answered alone here may join another key (a reload): until none is left.
        while let Some(key) = self.together.resplit.iter().next().cloned() {
            self.together.resplit.remove(&key);
            let mut members = self.together.members(&key);
            members.sort();
            let sized = match members.len() {
                0 => Vec::new(),
                1 => self
                    .again(snapshot, &members[0])
                    .await
                    .into_iter()
                    .collect(),
                _ => self.together_sized(snapshot, &key, &members).await,
            };
            let answered = answered.get_or_insert_with(|| {
                (actions.iter().enumerate())
                    .filter_map(|(i, a)| Some((bucket_key(domain, a.bucket_id.as_ref()?), i)))
                    .collect()
            });
            for action in sized {
                let Some(id) = action.bucket_id.as_ref() else {
                    continue;
                };
                match answered.get(&bucket_key(domain, id)) {
                    Some(&i) => actions[i] = action,
                    None => {
                        answered.insert(bucket_key(domain, id), actions.len());
                        actions.push(action);
                    }
                }
            }
        }
    }

    /// One bucket answered without a charge, its demand kept.
    async fn again(
        &mut self,
        snapshot: &Snapshot,
        (domain, pairs): &BucketKey,
    ) -> Option<BucketAction> {
        let id = BucketId {
            bucket: pairs.iter().cloned().collect(),
        };
        let asked = Asked {
            domain,
            id: &id,
            allowed: 0,
            requests: None,
        };
        self.answer(snapshot, asked).await
    }

    /// `members` of `key` sized together: the key's state read once without a charge,
    /// the stream's weight held once, split between them by their demands.
    async fn together_sized(
        &mut self,
        snapshot: &Snapshot,
        key: &str,
        members: &[BucketKey],
    ) -> Vec<BucketAction> {
        let ids: Vec<BucketId> = (members.iter())
            .map(|(_, pairs)| BucketId {
                bucket: pairs.iter().cloned().collect(),
            })
            .collect();
        let (domain, first) = (&members[0].0, &ids[0]);
        let entry = snapshot.config.rls.as_ref().and_then(|rls| {
            let entry = rls.buckets.find(domain, &first.bucket)?;
            Some((
                rls.buckets.get(entry)?,
                snapshot.rlqs_plans.get(entry)?.as_ref()?,
            ))
        });
        let Some((bucket, plan)) = entry.filter(|(b, _)| b.rule.policy.is_some()) else {
            // Their entry went away (a reload): each is answered alone, abandoned.
            return self.each_again(snapshot, members).await;
        };
        let Some(policy) = bucket.rule.policy.as_deref() else {
            return Vec::new();
        };
        let parts: ArrayVec<&str, MAX_TIERS> = bucket.key_parts(&first.bucket).collect();
        let spelled: ArrayVec<std::borrow::Cow<'_, str>, MAX_TIERS> = (parts.iter().enumerate())
            .map(|(i, part)| policy.spelled(i, part))
            .collect();
        let named: ArrayVec<&str, MAX_TIERS> = spelled.iter().map(AsRef::as_ref).collect();
        if holder_key(&policy.name, &named) != key {
            // The entry now keys them apart (a reload): each is answered alone, re-keyed.
            return self.each_again(snapshot, members).await;
        }
        let mut admission = Admission::default();
        let descriptor = Descriptor {
            position: 0,
            policy,
            plan,
            parts,
            cost: 0,
            forced: true,
        };
        let clock = &*self.shared.clock;
        let limiter = &self.shared.limiter;
        limiter
            .check_descriptors(std::iter::once(descriptor), clock, &mut admission)
            .await;
        let ttl_s = bucket.ttl.as_secs().max(1);
        let demand = self.together.demand(key);
        let weight = self.weight(key, demand, (clock.now_ns(), ttl_s)).await;
        let demands: Vec<f64> = (members.iter())
            .map(|m| self.buckets.get(m).map_or(0.0, |t| t.demand))
            .collect();
        let split = super::render::split(&admission, policy.mode, (weight, &demands), ttl_s);
        ids.iter()
            .zip(split)
            .map(|(id, assignment)| self.render(id, assignment, ttl_s))
            .collect()
    }

    async fn each_again(
        &mut self,
        snapshot: &Snapshot,
        members: &[BucketKey],
    ) -> Vec<BucketAction> {
        let mut actions = Vec::new();
        for member in members {
            actions.extend(self.again(snapshot, member).await);
        }
        actions
    }
}
