//! Whether the store answers and takes writes, asked on a timer of its own whatever the
//! traffic: what `/readyz` and the single node's breaker go by.

use std::sync::Arc;
use std::time::Duration;

use std::collections::BTreeMap;

use redis::cluster_routing::{RoutingInfo, SingleNodeRoutingInfo};
use redis::Value;

use super::breaker::{probe_key, tag_in_slots};
use super::{Connection, RedisStore, PROBE};
use crate::metrics::Metrics;
use crate::store::error::StoreError;

/// How soon a missed liveness probe is asked again.
const RECHECK: Duration = Duration::from_millis(250);
/// The time between two liveness probes that found the store answering.
const LIVENESS: Duration = Duration::from_millis(250);

impl RedisStore {
    /// Probes the store's liveness until the process stops, on a timer of its own: a turn's
    /// other calls (INFO, the secret, the membership) each wait their whole timeout on a
    /// store that hangs, and would put `/readyz` seconds behind it.
    pub async fn watch_liveness(self: Arc<Self>, metrics: Arc<Metrics>) {
        loop {
            self.probe_liveness(&metrics).await;
            tokio::time::sleep(LIVENESS).await;
        }
    }

    /// Asks the store whether it answers and takes writes, whatever the traffic (and
    /// before the fleet's secret is known): a failure is recorded with its cause at once,
    /// and two in a row say the store is unreachable — logged once, `/readyz` 503. The
    /// second is asked [`RECHECK`] after a first miss; a timed-out miss's cause is looked
    /// for meanwhile, not before (with a store that hangs, each call waits its whole
    /// timeout).
    /// A single node's (or Sentinel's master's) breaker is opened then, so requests take
    /// the `on_error` path at once instead of each waiting for its timeout. A Cluster is
    /// unreachable when one of its masters does not answer (with the default full
    /// coverage the Cluster then refuses every write), but its breakers stay per group:
    /// one dead master must not stop the others' slots where they still answer.
    async fn probe_liveness(&self, metrics: &Metrics) {
        let mut seen: Option<StoreError> = None;
        for attempt in 0..2 {
            let e = match self.liveness_call().await {
                Ok(()) => {
                    // Two misses minutes apart are no run: counted from the last answer,
                    // whatever a breaker says. Back only once no breaker is open (a
                    // Cluster's refusing master answers PING).
                    self.health.answered();
                    if !self.breakers.any_open() && self.health.came_back() {
                        tracing::info!(address = %self.address(), "store reachable again");
                    }
                    return;
                }
                // A timed-out call hides its cause (the client retries a refused
                // connection until the deadline): the first miss's, found meanwhile.
                Err(StoreError::Timeout(t)) => seen.take().unwrap_or(StoreError::Timeout(t)),
                Err(e) => e,
            };
            let e = if attempt == 0 {
                // A fresh connection attempt tells a timeout's cause, while the
                // recheck waits its turn, not before it.
                let (cause, ()) = tokio::join!(self.explain(e), tokio::time::sleep(RECHECK));
                cause
            } else {
                e
            };
            self.health.record(&e);
            if self.health.missed_probe() >= 2 {
                self.went_down(metrics, &e);
                return;
            }
            seen = Some(e);
        }
    }

    /// A timed-out call's cause, as a fresh connection attempt finds it (the client
    /// retries a refused connection until the deadline, so the timeout hides it); any
    /// other error says its own.
    pub(super) async fn explain(&self, e: StoreError) -> StoreError {
        match e {
            StoreError::Timeout(_) => self.diagnose().await.unwrap_or(e),
            e => e,
        }
    }

    /// One liveness call: the breaker's write probe, not a PING — a node that answers but
    /// refuses writes (a demoted master, out of memory under `noeviction`, a failed
    /// snapshot, too few replicas) fails every decision, and with no traffic a PING would
    /// call it ready. A Cluster gets one to each master, on a slot it serves (one of them
    /// refusing fails the decisions of its slots as surely as one that is gone). With
    /// `replica_ack`, the write is waited on until the replicas have it. One small write
    /// per node every 250 ms per gateway.
    async fn liveness_call(&self) -> Result<(), StoreError> {
        match &self.connection {
            Connection::Cluster(slot) => {
                let mut c = self.cluster(slot)?;
                let mut slots = redis::cmd("CLUSTER");
                slots.arg("SLOTS");
                let any = RoutingInfo::SingleNode(SingleNodeRoutingInfo::Random);
                let reply = self.bounded(c.route_command(slots, any)).await?;
                for key in master_probe_keys(&reply).ok_or(StoreError::Reply)? {
                    self.probe_write(&key).await?;
                }
                Ok(())
            }
            _ => self.write_probe(0).await,
        }
    }

    /// The breaker's probe: a write to slot group `group`'s probe key.
    pub(super) async fn write_probe(&self, group: usize) -> Result<(), StoreError> {
        self.probe_write(&self.probe_keys[group]).await
    }

    /// The probe's write to `key`. On a single node or Sentinel's master with
    /// `replica_ack`, waited on until the replicas have it: a master whose replicas are
    /// gone takes writes and fails every admission.
    async fn probe_write(&self, key: &str) -> Result<(), StoreError> {
        let mut probe = PROBE.prepare_invoke();
        probe.key(key);
        self.invoke::<redis::Value>(&probe).await?;
        match (&self.acker, &self.connection) {
            (Some(acker), Connection::Single(_) | Connection::Sentinel(_)) => acker.acked().await,
            _ => Ok(()),
        }
    }

    /// Two probes missed: a single node's breaker opens, and the store is said down.
    fn went_down(&self, metrics: &Metrics, e: &StoreError) {
        if !self.is_cluster() {
            self.breakers.get(0).trip();
            metrics.store_breaker_open.set(1);
        }
        if self.health.went_down() {
            tracing::warn!(
                address = %self.address(),
                cause = super::health::cause(e),
                error = %e,
                "store unreachable; decisions follow on_error until it answers"
            );
        }
    }
}

/// One probe key per master named in a `CLUSTER SLOTS` reply, on a slot of the widest
/// range it serves; `None` for a reply of another shape or no slot served.
fn master_probe_keys(reply: &Value) -> Option<Vec<String>> {
    let Value::Array(ranges) = reply else {
        return None;
    };
    let mut widest: BTreeMap<String, (u16, u16)> = BTreeMap::new();
    for range in ranges {
        let Value::Array(fields) = range else {
            return None;
        };
        let [Value::Int(first), Value::Int(last), Value::Array(master), ..] = fields.as_slice()
        else {
            return None;
        };
        let (first, last) = (u16::try_from(*first).ok()?, u16::try_from(*last).ok()?);
        let address: Vec<String> = master
            .iter()
            .take(2)
            .map(|part| match part {
                Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
                Value::SimpleString(s) => s.clone(),
                Value::Int(n) => n.to_string(),
                _ => String::new(),
            })
            .collect();
        let held = widest.entry(address.join(":")).or_insert((first, last));
        if last.saturating_sub(first) > held.1.saturating_sub(held.0) {
            *held = (first, last);
        }
    }
    if widest.is_empty() {
        return None;
    }
    widest
        .values()
        .map(|&(first, last)| Some(probe_key(&tag_in_slots(first, last)?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::redis::breaker::slot;

    fn range(first: i64, last: i64, port: i64) -> Value {
        let node = vec![
            Value::BulkString(b"127.0.0.1".to_vec()),
            Value::Int(port),
            Value::BulkString(b"id".to_vec()),
        ];
        Value::Array(vec![
            Value::Int(first),
            Value::Int(last),
            Value::Array(node),
        ])
    }

    #[test]
    fn one_key_per_master_on_a_slot_of_its_widest_range() {
        let reply = Value::Array(vec![
            range(0, 5460, 7000),
            range(5461, 5461, 7001),
            range(5462, 10922, 7001),
            range(10923, 16383, 7002),
        ]);
        let keys = master_probe_keys(&reply).expect("keys");
        let slots: Vec<u16> = keys
            .iter()
            .map(|k| {
                let tag = &k[k.find('{').expect("{") + 1..k.find('}').expect("}")];
                slot(tag.as_bytes())
            })
            .collect();
        assert_eq!(slots.len(), 3, "{keys:?}");
        assert!(slots[0] <= 5460, "{slots:?}");
        assert!((5462..=10922).contains(&slots[1]), "{slots:?}");
        assert!(slots[2] >= 10923, "{slots:?}");
    }

    #[test]
    fn a_reply_of_another_shape_or_without_slots_names_no_key() {
        assert_eq!(master_probe_keys(&Value::Array(vec![])), None);
        assert_eq!(master_probe_keys(&Value::Int(1)), None);
        assert_eq!(
            master_probe_keys(&Value::Array(vec![range(9, 3, 7000)])),
            None
        );
        assert_eq!(tag_in_slots(0, 16_384), None);
        let one = tag_in_slots(12_345, 12_345).expect("a tag for one slot");
        assert_eq!(slot(one.as_bytes()), 12_345);
    }
}
