//! Redis data-loss events, as one gateway sees them: a restart (a node's `run_id`
//! changed), a failover (the master moved to another address, or its replication id
//! changed: a replica was promoted). Each upkeep turn reads `INFO` of the master (every
//! master of a Cluster) and compares it with the turn before; an event is logged once,
//! counted in `tollgate_store_events_total{kind}` and kept for the status page.

use parking_lot::Mutex;
use std::collections::{BTreeMap, VecDeque};

use serde::Serialize;

/// What kind of data loss a node may have had.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EventKind {
    /// The node restarted: without persistence, everything it held is gone.
    Restart,
    /// Another node took over as master: what the old one had not replicated is gone.
    Failover,
}

impl EventKind {
    pub fn as_str(self) -> &'static str {
        match self {
            EventKind::Restart => "restart",
            EventKind::Failover => "failover",
        }
    }
}

/// One event, as the status page shows it.
#[derive(Debug, Clone, Serialize)]
pub struct StoreEvent {
    pub kind: EventKind,
    /// Wall-clock milliseconds since the Unix epoch.
    pub at_ms: u64,
    pub detail: String,
}

/// A master as `INFO` describes it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NodeState {
    pub run_id: String,
    pub replid: String,
}

impl NodeState {
    /// The fields of an `INFO server` + `INFO replication` reply that matter here.
    pub fn from_info(info: &str) -> Option<Self> {
        let field = |name: &str| {
            info.lines()
                .find_map(|l| l.strip_prefix(name)?.strip_prefix(':'))
                .map(|v| v.trim().to_owned())
        };
        Some(Self {
            run_id: field("run_id")?,
            replid: field("master_replid").unwrap_or_default(),
        })
    }
}

/// How many events the status page keeps.
const KEPT: usize = 16;

/// The masters seen at the last turn, and the events seen so far.
#[derive(Default)]
pub struct Watch {
    masters: Mutex<Option<BTreeMap<String, NodeState>>>,
    /// Every master seen, as last seen: one that was gone for some turns (a Cluster
    /// master killed and started again on its address) is judged against what it was,
    /// not taken for a new master.
    known: Mutex<BTreeMap<String, NodeState>>,
    recent: Mutex<VecDeque<StoreEvent>>,
}

impl Watch {
    /// Compares the masters seen now (by address) with those of the turn before; the
    /// events, each logged once. The first turn sees no event.
    pub fn observe(&self, masters: BTreeMap<String, NodeState>, now_ms: u64) -> Vec<StoreEvent> {
        let mut last = self.masters.lock();
        let mut known = self.known.lock();
        let Some(before) = last.replace(masters.clone()) else {
            known.extend(masters);
            return Vec::new();
        };
        let mut events = Vec::new();
        for (addr, now) in &masters {
            let event = match before.get(addr).or_else(|| known.get(addr)) {
                None => Some((
                    EventKind::Failover,
                    format!("a new master at {addr} (before: {})", names(&before)),
                )),
                Some(was) if was.run_id != now.run_id => Some((
                    EventKind::Restart,
                    format!(
                        "{addr} restarted (run_id {} -> {})",
                        short(&was.run_id),
                        short(&now.run_id)
                    ),
                )),
                Some(was) if !was.replid.is_empty() && was.replid != now.replid => Some((
                    EventKind::Failover,
                    format!("{addr} has a new replication id: it was promoted"),
                )),
                Some(_) => None,
            };
            if let Some((kind, detail)) = event {
                tracing::warn!(kind = kind.as_str(), "Redis data-loss event: {detail}");
                events.push(StoreEvent {
                    kind,
                    at_ms: now_ms,
                    detail,
                });
            }
        }
        known.extend(masters);
        drop(known);
        let mut recent = self.recent.lock();
        for e in &events {
            if recent.len() == KEPT {
                recent.pop_front();
            }
            recent.push_back(e.clone());
        }
        events
    }

    /// The last events, oldest first.
    pub fn recent(&self) -> Vec<StoreEvent> {
        self.recent.lock().iter().cloned().collect()
    }
}

fn names(nodes: &BTreeMap<String, NodeState>) -> String {
    nodes.keys().cloned().collect::<Vec<_>>().join(", ")
}

fn short(id: &str) -> &str {
    id.get(..8).unwrap_or(id)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(run_id: &str, replid: &str) -> NodeState {
        NodeState {
            run_id: run_id.into(),
            replid: replid.into(),
        }
    }

    fn seen(nodes: &[(&str, NodeState)]) -> BTreeMap<String, NodeState> {
        nodes
            .iter()
            .map(|(a, n)| ((*a).to_owned(), n.clone()))
            .collect()
    }

    #[test]
    fn restarts_and_failovers_are_seen_once() {
        let w = Watch::default();
        assert!(w.observe(seen(&[("a:1", node("r1", "x"))]), 0).is_empty());
        assert!(w.observe(seen(&[("a:1", node("r1", "x"))]), 1).is_empty());
        let e = w.observe(seen(&[("a:1", node("r2", "y"))]), 2);
        assert_eq!(e.len(), 1);
        assert_eq!(e[0].kind, EventKind::Restart);
        assert!(
            w.observe(seen(&[("a:1", node("r2", "y"))]), 3).is_empty(),
            "once"
        );
        let e = w.observe(seen(&[("b:2", node("r3", "z"))]), 4);
        assert_eq!(e[0].kind, EventKind::Failover);
        let e = w.observe(seen(&[("b:2", node("r3", "w"))]), 5);
        assert_eq!(e[0].kind, EventKind::Failover, "promoted in place");
        assert_eq!(w.recent().len(), 3);
    }

    /// A Cluster master gone for some turns and started again on its address, its data
    /// lost: a restart of that master, not a new one; back with its data (a partition
    /// healed), nothing.
    #[test]
    fn a_master_back_on_its_address_is_judged_against_what_it_was() {
        let w = Watch::default();
        let three = |c: &str| {
            seen(&[
                ("a:1", node("r1", "x")),
                ("b:2", node("r2", "y")),
                ("c:3", node(c, "z")),
            ])
        };
        let two = seen(&[("a:1", node("r1", "x")), ("b:2", node("r2", "y"))]);
        assert!(w.observe(three("r3"), 0).is_empty());
        assert!(w.observe(two.clone(), 1).is_empty());
        assert!(w.observe(three("r3"), 2).is_empty(), "back with its data");
        assert!(w.observe(two, 3).is_empty());
        let e = w.observe(three("r4"), 4);
        assert_eq!(e.len(), 1, "{e:?}");
        assert_eq!(e[0].kind, EventKind::Restart);
        assert!(e[0].detail.starts_with("c:3 restarted"), "{}", e[0].detail);
    }

    #[test]
    fn reads_info() {
        let info = "# Server\r\nredis_version:7.0.15\r\nrun_id:abc123\r\n# Replication\r\nrole:master\r\nmaster_replid:def456\r\n";
        assert_eq!(NodeState::from_info(info), Some(node("abc123", "def456")));
        assert_eq!(NodeState::from_info("nothing"), None);
    }
}
