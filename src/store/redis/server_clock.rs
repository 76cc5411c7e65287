//! What this gateway knows of each Redis node's clock, learned from its replies: the
//! deadline a decision carries (a call that ran later decides nothing) and the early
//! estimate a settle's refund is compared with a reset by. One estimate per slot group:
//! Cluster masters' clocks differ, and one shared estimate flipped between them, so that
//! every call to the master ahead read as late once its difference passed the margin.

use super::RedisStore;

/// An instant of the server's clock (ns since the Unix epoch) as the scripts read a
/// deadline or a rate's TAT: `s:ns`.
pub fn stamp(abs_ns: u128) -> String {
    const NANOS: u128 = 1_000_000_000;
    format!("{}:{:09}", abs_ns / NANOS, abs_ns % NANOS)
}

impl RedisStore {
    /// The server's time (ns since the Unix epoch) after which a decision sent at
    /// `sent_ns` (this gateway's clock) to the node of hash tag `tag` is too late to
    /// apply: twice the store timeout after it, so clock estimates and round trips never
    /// make a timely call late. `None` before that node's clock was seen.
    pub fn server_deadline(&self, tag: &str, sent_ns: u64) -> Option<u128> {
        let at = self.server_unix_ns_at(tag, sent_ns)?;
        Some(u128::from(at) + u128::from(self.clock_margin_ns()))
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

    /// The estimate of the clock of the node holding hash tag `tag` (its slot group's).
    fn server_offset(&self, tag: &str) -> &std::sync::atomic::AtomicI64 {
        &self.server_offsets[self
            .breakers
            .group_of(tag)
            .min(self.server_offsets.len() - 1)]
    }

    /// The time (ns since the Unix epoch) of the node holding `tag` at `local_ns` on this
    /// gateway's clock, as learned from its replies (late by up to a round trip); `None`
    /// before one.
    pub fn server_unix_ns_at(&self, tag: &str, local_ns: u64) -> Option<u64> {
        let offset = self
            .server_offset(tag)
            .load(std::sync::atomic::Ordering::Relaxed);
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
    /// `sent_ns`. The estimate runs late by up to the round trip, which only moves
    /// deadlines later; the lowest estimate is kept (the quickest round trip's), replaced
    /// when it grew by more than 10 ms (the clocks drifted): written rarely, never per
    /// request.
    pub fn learn_server_clock(&self, tag: &str, sent_ns: u64, server_ns: u128) {
        use std::sync::atomic::Ordering::Relaxed;
        let Ok(offset) = i64::try_from(server_ns as i128 - i128::from(sent_ns)) else {
            return;
        };
        let slot = self.server_offset(tag);
        let known = slot.load(Relaxed);
        if known == 0 || offset < known || offset > known + 10_000_000 {
            slot.store(offset.max(1), Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;
    use std::time::Duration;

    use super::RedisStore;
    use crate::store::redis::breaker::tag_in_group;

    const S: u128 = 1_000_000_000;

    fn cluster() -> RedisStore {
        let urls = ["redis://127.0.0.1:1".to_owned()];
        let fleet = Arc::new(crate::key::FleetSecret::from_redis());
        RedisStore::new(&urls, true, None, Duration::from_millis(50), fleet).expect("a store")
    }

    /// Two masters a second apart: each call's deadline is its own master's clock plus
    /// the margin, whichever was heard from last.
    #[test]
    fn each_masters_clock_is_its_own() {
        let store = cluster();
        let (behind, ahead) = (tag_in_group(0), tag_in_group(40));
        let sent = 5_000_000_000u64;
        store.learn_server_clock(&behind, sent, 1_000 * S);
        store.learn_server_clock(&ahead, sent, 1_001 * S);
        let margin = 100_000_000u128;
        assert_eq!(
            store.server_deadline(&ahead, sent),
            Some(1_001 * S + margin)
        );
        assert_eq!(
            store.server_deadline(&behind, sent),
            Some(1_000 * S + margin)
        );
        store.learn_server_clock(&behind, sent, 1_000 * S);
        assert_eq!(
            store.server_deadline(&ahead, sent),
            Some(1_001 * S + margin)
        );
        assert_eq!(
            store.server_deadline(&tag_in_group(7), sent),
            None,
            "not heard from"
        );
    }
}
