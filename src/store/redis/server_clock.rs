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
    const NANOS: u128 = crate::limit::gcra::NANOS_PER_SEC as u128;
    format!("{}:{:09}", abs_ns / NANOS, abs_ns % NANOS)
}

/// What this gateway learned of one node's clock: the server's time minus this gateway's
/// monotonic clock, the lowest (time the script read − time it was sent) over the
/// replies — never below the true offset, above it by at most the quickest reply's way
/// out (0: not known yet).
#[derive(Default)]
pub(super) struct NodeClock {
    offset: AtomicI64,
}

impl RedisStore {
    /// The server's time (ns since the Unix epoch) after which a call sent at `sent_ns`
    /// (this gateway's clock) to the node of hash tag `tag` is too late to apply: the
    /// store timeout after it on the node's clock as learned. Never before the true
    /// moment a timeout after the send (the estimate is never early), so a timely call is
    /// never judged late; after it by at most the quickest reply's way out, so what runs
    /// later than that after this gateway answered for it (a timeout) changes nothing.
    /// Sent now, if that is later: a call is sent as its deadline is made and its timeout
    /// runs from then (a request's second Cluster group is sent a round trip after the
    /// instant it was decided at). `None` before that node's clock was seen.
    pub fn server_deadline(&self, tag: &str, sent_ns: u64) -> Option<u128> {
        let sent_ns = sent_ns.max(self.clock.now_ns());
        let at = self.server_unix_ns_at(tag, sent_ns)?;
        Some(u128::from(at) + self.timeout.as_nanos())
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
        let offset = self.node_clock(tag).offset.load(Relaxed);
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
    /// `sent_ns` whose script read `server_ns`. The estimate keeps its lowest value (the
    /// quickest reply's), replaced when it grew by more than 10 ms (the clocks drifted,
    /// or the node's stepped ahead): written rarely, never per request.
    pub fn learn_server_clock(&self, tag: &str, sent_ns: u64, server_ns: u128) {
        let Ok(offset) = i64::try_from(server_ns as i128 - i128::from(sent_ns)) else {
            return;
        };
        let node = self.node_clock(tag);
        let known = node.offset.load(Relaxed);
        if known == 0 || offset < known || offset > known + 10_000_000 {
            node.offset.store(offset.max(1), Relaxed);
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

    /// A deadline is the timeout after the send on the node's clock as learned from the
    /// quickest reply; a call sent after the instant it was decided at is dated from its
    /// send.
    #[test]
    fn a_deadline_is_dated_from_the_quickest_reply_and_the_send() {
        let clock = FakeClock::at(5_000 * MS);
        let store = cluster(&clock);
        let tag = tag_in_group(0);
        // Sent at 5 s, the script read 1,000.030 s (its way out took up to 30 ms).
        store.learn_server_clock(&tag, 5_000 * MS, 1_000 * S + 30_000_000);
        let sent = 6_000 * MS;
        assert_eq!(
            store.server_deadline(&tag, sent),
            Some(1_001 * S + 30_000_000 + TIMEOUT)
        );
        // A quicker reply: 1 ms out.
        store.learn_server_clock(&tag, 5_100 * MS, 1_000 * S + 101_000_000);
        assert_eq!(
            store.server_deadline(&tag, sent),
            Some(1_001 * S + 1_000_000 + TIMEOUT)
        );
        // A slower one (by less than 10 ms: more is the clocks drifting) teaches nothing.
        store.learn_server_clock(&tag, 5_200 * MS, 1_000 * S + 206_000_000);
        assert_eq!(
            store.server_deadline(&tag, sent),
            Some(1_001 * S + 1_000_000 + TIMEOUT)
        );
        // Sent a second after the instant it was decided at: its timeout runs from then.
        clock.set(7_000 * MS);
        assert_eq!(
            store.server_deadline(&tag, sent),
            Some(1_002 * S + 1_000_000 + TIMEOUT)
        );
    }

    /// A node whose clock stepped back is believed at once (the lowest estimate); one
    /// that stepped ahead more than 10 ms, too.
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
