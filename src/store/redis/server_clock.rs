//! What this gateway knows of each Redis node's clock, learned from its replies: the
//! deadline a decision carries (a call that ran later decides nothing) and the early
//! estimate a settle's refund is compared with a reset by. One estimate per slot group:
//! Cluster masters' clocks differ, and one shared estimate flipped between them, so that
//! every call to the master ahead read as late once its difference passed the margin.

use std::sync::atomic::AtomicI64;
use std::sync::atomic::Ordering::Relaxed;

use super::RedisStore;

/// An instant of the server's clock (ns since the Unix epoch) as the scripts read a
/// deadline or a rate's TAT: `s:ns`.
pub fn stamp(abs_ns: u128) -> String {
    const NANOS: u128 = 1_000_000_000;
    format!("{}:{:09}", abs_ns / NANOS, abs_ns % NANOS)
}

/// What this gateway learned of one node's clock: the server's time minus this gateway's
/// monotonic clock, bounded from both sides by the replies (0: not known yet).
#[derive(Default)]
pub(super) struct NodeClock {
    /// Not below the true offset: the lowest (time the script read − time it was sent),
    /// late by up to a round trip. What the node's time is estimated by.
    at_most: AtomicI64,
    /// Not above the true offset: the highest (time the script read − time its reply was
    /// in), early by up to a round trip. What a deadline is dated by: a deadline must
    /// never fall after the moment its gateway gave up.
    at_least: AtomicI64,
}

impl RedisStore {
    /// The server's time (ns since the Unix epoch) after which a call sent at `sent_ns`
    /// (this gateway's clock) to the node of hash tag `tag` is too late to apply: the
    /// store timeout after it on the earliest the node's clock can have read then, so
    /// that a call that runs after this gateway answered for it (a timeout) changes
    /// nothing; one that runs within a round trip of the timeout is refused as late
    /// (and answered so). Sent now, if that is later: a call is sent as its deadline is
    /// made and its timeout runs from then (a request's second Cluster group is sent a
    /// round trip after the instant it was decided at). `None` before that node's clock
    /// was seen.
    pub fn server_deadline(&self, tag: &str, sent_ns: u64) -> Option<u128> {
        let sent_ns = sent_ns.max(self.clock.now_ns());
        let offset = self.node_clock(tag).at_least.load(Relaxed);
        if offset == 0 {
            return None;
        }
        let at = u128::try_from(i128::from(sent_ns) + i128::from(offset)).ok()?;
        Some(at + self.timeout.as_nanos())
    }

    /// [`Self::server_deadline`] as the scripts read it ([`stamp`]).
    pub fn server_deadline_arg(&self, tag: &str, sent_ns: u64) -> Option<String> {
        self.server_deadline(tag, sent_ns).map(stamp)
    }

    /// How far a server time learned from replies may be off: twice the store timeout (a
    /// reply slower than one is an error, not a lesson).
    fn clock_margin_ns(&self) -> u64 {
        2 * u64::try_from(self.timeout.as_nanos()).unwrap_or(u64::MAX / 4)
    }

    /// What is known of the clock of the node holding hash tag `tag` (its slot group's).
    fn node_clock(&self, tag: &str) -> &NodeClock {
        &self.node_clocks[self.breakers.group_of(tag).min(self.node_clocks.len() - 1)]
    }

    /// The time (ns since the Unix epoch) of the node holding `tag` at `local_ns` on this
    /// gateway's clock, as learned from its replies (late by up to a round trip); `None`
    /// before one.
    pub fn server_unix_ns_at(&self, tag: &str, local_ns: u64) -> Option<u64> {
        let offset = self.node_clock(tag).at_most.load(Relaxed);
        if offset == 0 {
            return None;
        }
        u64::try_from(i128::from(local_ns) + i128::from(offset)).ok()
    }

    /// A time (µs since the Unix epoch) the clock of the node holding `tag` had not
    /// passed when a call sent at `local_ns` ran: the estimate less twice the call
    /// timeout, which bounds how late a learned offset can run (a reply slower than the
    /// timeout is an error). 0 before the clock was seen. A reset marked after it holds
    /// the call's refund (`settle.lua`): early errs toward holding.
    pub fn server_unix_us_early(&self, tag: &str, local_ns: u64) -> u64 {
        self.server_unix_ns_at(tag, local_ns)
            .map_or(0, |ns| ns.saturating_sub(self.clock_margin_ns()) / 1_000)
    }

    /// Learns the clock of the node holding `tag` from a reply to a call sent at
    /// `sent_ns` whose script read `server_ns`; the reply is in now. Each bound keeps
    /// its tightest value (the quickest round trip's) and is written rarely, never per
    /// request: the upper one is replaced when it grew by more than 10 ms (the clocks
    /// drifted, or the node's stepped ahead), the lower one when a reply's upper bound
    /// fell below it (the node's clock stepped back).
    pub fn learn_server_clock(&self, tag: &str, sent_ns: u64, server_ns: u128) {
        let reply_ns = self.clock.now_ns().max(sent_ns);
        let offset_at = |local_ns: u64| i64::try_from(server_ns as i128 - i128::from(local_ns));
        let (Ok(at_most), Ok(at_least)) = (offset_at(sent_ns), offset_at(reply_ns)) else {
            return;
        };
        let node = self.node_clock(tag);
        let known = node.at_most.load(Relaxed);
        if known == 0 || at_most < known || at_most > known + 10_000_000 {
            node.at_most.store(at_most.max(1), Relaxed);
        }
        let known = node.at_least.load(Relaxed);
        if known == 0 || at_least > known || at_most < known {
            node.at_least.store(at_least.max(1), Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::RedisStore;
    use crate::clock::FakeClock;
    use crate::store::redis::breaker::tag_in_group;

    const S: u128 = 1_000_000_000;
    const MS: u64 = 1_000_000;
    /// The store timeout of [`cluster`].
    const TIMEOUT: u128 = 50_000_000;

    fn cluster(clock: &FakeClock) -> RedisStore {
        let urls = ["redis://127.0.0.1:1".to_owned()];
        let fleet = Arc::new(crate::key::FleetSecret::from_redis());
        let clock = Arc::new(clock.clone());
        RedisStore::new(&urls, true, None, Duration::from_millis(50), (fleet, clock))
            .expect("a store")
    }

    /// Two masters a second apart: each call's deadline is its own master's clock plus
    /// the timeout, whichever was heard from last.
    #[test]
    fn each_masters_clock_is_its_own() {
        let sent = 5_000_000_000u64;
        let clock = FakeClock::at(sent);
        let store = cluster(&clock);
        let (behind, ahead) = (tag_in_group(0), tag_in_group(40));
        store.learn_server_clock(&behind, sent, 1_000 * S);
        store.learn_server_clock(&ahead, sent, 1_001 * S);
        let deadline = |tag: &str| store.server_deadline(tag, sent);
        assert_eq!(deadline(&ahead), Some(1_001 * S + TIMEOUT));
        assert_eq!(deadline(&behind), Some(1_000 * S + TIMEOUT));
        store.learn_server_clock(&behind, sent, 1_000 * S);
        assert_eq!(deadline(&ahead), Some(1_001 * S + TIMEOUT));
        assert_eq!(deadline(&tag_in_group(7)), None, "not heard from");
    }

    /// A deadline never falls after the moment its gateway gave up, however long the
    /// round trip it was learned from: it is dated from the earliest the node's clock can
    /// have read, and a quicker round trip later moves it closer.
    #[test]
    fn a_deadline_is_dated_from_the_earliest_the_nodes_clock_can_read() {
        let clock = FakeClock::at(5_000 * MS);
        let store = cluster(&clock);
        let tag = tag_in_group(0);
        // Sent at 5 s, the script read 1,000.010 s, the reply came 30 ms after sending:
        // the node read between 1,000.010 − 0.030 and 1,000.010 s when it was sent.
        clock.set(5_030 * MS);
        store.learn_server_clock(&tag, 5_000 * MS, 1_000 * S + 10_000_000);
        let sent = 6_000 * MS;
        let earliest = 1_001 * S - 20_000_000;
        assert_eq!(store.server_deadline(&tag, sent), Some(earliest + TIMEOUT));
        assert_eq!(
            store.server_unix_ns_at(&tag, sent),
            Some((1_001 * S + 10_000_000) as u64),
            "the estimate is the latest the node can have read"
        );
        // A 2 ms round trip: the node read 1,000.011 s at most 2 ms before the reply.
        clock.set(5_102 * MS);
        store.learn_server_clock(&tag, 5_100 * MS, 1_000 * S + 111_000_000);
        assert_eq!(
            store.server_deadline(&tag, sent),
            Some(1_001 * S + 9_000_000 + TIMEOUT)
        );
        // A longer round trip teaches nothing new of the lower bound.
        clock.set(5_300 * MS);
        store.learn_server_clock(&tag, 5_200 * MS, 1_000 * S + 250_000_000);
        assert_eq!(
            store.server_deadline(&tag, sent),
            Some(1_001 * S + 9_000_000 + TIMEOUT)
        );
        // Sent a second after the instant it was decided at: its timeout runs from then.
        clock.set(7_000 * MS);
        assert_eq!(
            store.server_deadline(&tag, sent),
            Some(1_002 * S + 9_000_000 + TIMEOUT)
        );
    }

    /// A node whose clock stepped back a second is believed at once: its old lower bound
    /// would date every deadline a second late; one that stepped ahead, too.
    #[test]
    fn a_node_clock_that_steps_is_followed_both_ways() {
        let clock = FakeClock::at(5_000 * MS);
        let store = cluster(&clock);
        let tag = tag_in_group(0);
        store.learn_server_clock(&tag, 5_000 * MS, 1_000 * S);
        clock.set(6_000 * MS);
        store.learn_server_clock(&tag, 6_000 * MS, 1_000 * S);
        assert_eq!(
            store.server_deadline(&tag, 6_000 * MS),
            Some(1_000 * S + TIMEOUT)
        );
        clock.set(7_000 * MS);
        store.learn_server_clock(&tag, 7_000 * MS, 1_003 * S);
        assert_eq!(
            store.server_deadline(&tag, 7_000 * MS),
            Some(1_003 * S + TIMEOUT)
        );
    }
}
