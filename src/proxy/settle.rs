//! Costs known only once the upstream has answered (`settle` policies): the value read
//! from a response header or trailer, or counted from body bytes, turned into units and
//! settled on each tier's key. Every pending tier is settled exactly once: a
//! [`Settlement`] settles on drop whatever it has not yet, as cut short.

use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use bytes::Bytes;
use http::HeaderMap;
use http_body::{Body, Frame, SizeHint};
use smallvec::SmallVec;

use super::response::BoxError;
use crate::config::SettleSource;
use crate::metrics::SettleLabels;
use crate::state::Shared;
use crate::store::settle::PendingSettle;

/// What was learned of one tier's cost.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Measured {
    /// The value the upstream reported.
    Value(u64),
    /// No value where one was expected.
    Missing,
    /// A value that is not a whole number of at least zero.
    Invalid,
    /// The whole body went through: this many bytes.
    Bytes(u64),
    /// The upstream failed before the cost was known (no answer, or a 5xx without the
    /// value), after this many bytes.
    UpstreamFailed(u64),
    /// The exchange was cut short (client gone, upstream broke mid-body, an upgraded
    /// connection), after this many bytes.
    Aborted(u64),
}

/// The units `pending` settles at for `measured`, and why, when it is not the value as
/// measured: the reserve when the value is missing, invalid or cut short (bytes: at least
/// what moved, so a client cannot take a large answer, hang up and pay the reserve), a
/// cap when it is above `max_cost`.
pub fn units_for(pending: &PendingSettle, measured: Measured) -> (u64, Option<&'static str>) {
    let settle = pending.settle();
    let reserve = pending.reserve;
    let bytes = |n: u64| n.div_ceil(settle.unit.get());
    let measures_bytes = settle.source.measures_bytes();
    let (units, why) = match measured {
        Measured::Value(v) => (v, None),
        Measured::Missing => (reserve, Some("missing")),
        Measured::Invalid => (reserve, Some("invalid")),
        Measured::Bytes(n) => (bytes(n), None),
        Measured::UpstreamFailed(n) => {
            let measured = if measures_bytes { bytes(n) } else { 0 };
            let units = if settle.refund_on_upstream_error {
                measured
            } else {
                reserve.max(measured)
            };
            (units, Some("upstream_error"))
        }
        Measured::Aborted(n) => {
            let moved = if measures_bytes { bytes(n) } else { 0 };
            (reserve.max(moved), Some("aborted"))
        }
    };
    if units > settle.max_cost {
        (settle.max_cost, Some("capped"))
    } else {
        (units, why)
    }
}

/// A header or trailer value: a whole number, surrounding spaces allowed.
pub fn parse_value(headers: &HeaderMap, name: &http::HeaderName) -> Measured {
    let Some(value) = headers.get(name) else {
        return Measured::Missing;
    };
    match std::str::from_utf8(value.as_bytes().trim_ascii()).map(str::parse::<u64>) {
        Ok(Ok(v)) => Measured::Value(v),
        _ => Measured::Invalid,
    }
}

/// `(tier index, debt after)` of each tier the store answered for.
type Settled = SmallVec<[(usize, u64); 1]>;
/// Tiers whose keys Redis holds, with the units each settles at.
type Remote = SmallVec<[(PendingSettle, u64); 1]>;

/// The tiers of one request still to settle, and what settles them.
pub struct Settlement {
    shared: Arc<Shared>,
    pending: SmallVec<[PendingSettle; 1]>,
}

impl Settlement {
    pub fn new(shared: Arc<Shared>, pending: SmallVec<[PendingSettle; 1]>) -> Self {
        Self { shared, pending }
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Settles every pending tier by `measure`, without waiting: at once in the local
    /// store, in a task for Redis.
    pub fn finish(mut self, measure: impl Fn(&PendingSettle) -> Measured) {
        let measured = self.measure(measure);
        let (_, remote, now) = self.count_and_settle_local(measured);
        let _detached = spawn_remote(self.shared.clone(), remote, now);
    }

    /// What `measure` says of each pending tier, in order.
    pub fn measure(&self, measure: impl Fn(&PendingSettle) -> Measured) -> SmallVec<[Measured; 1]> {
        self.pending.iter().map(measure).collect()
    }

    /// Settles every pending tier at its `measured` value and waits for it, so what the
    /// response says about the limit is the settled state: `(tier index, debt after)` of
    /// each tier the store answered for. The Redis calls run in a task of their own, so a
    /// request dropped while it waits (its client gone) still settles every tier: a
    /// client cannot hang up at the right moment to leave a debt unpaid.
    pub async fn finish_waiting(mut self, measured: SmallVec<[Measured; 1]>) -> Settled {
        let (mut settled, remote, now) = self.count_and_settle_local(measured);
        if let Some(task) = spawn_remote(self.shared.clone(), remote, now) {
            match task.await {
                Ok(remote) => settled.extend(remote),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // The runtime shutting down: nothing left to describe.
                Err(_) => {}
            }
        }
        settled
    }

    /// Takes every pending tier, counts its units (at `measured`, in order) and settles
    /// those the local store holds; the rest (Redis keys) are returned with their units,
    /// and the clock reading they settle at.
    fn count_and_settle_local(
        &mut self,
        measured: SmallVec<[Measured; 1]>,
    ) -> (Settled, Remote, u64) {
        let pending = std::mem::take(&mut self.pending);
        debug_assert_eq!(pending.len(), measured.len(), "one measure per tier");
        let now = self.shared.clock.now_ns();
        let (mut settled, mut remote) = (SmallVec::new(), SmallVec::new());
        for (p, measured) in pending.into_iter().zip(measured) {
            let units = self.units(&p, measured);
            match self.shared.limiter.settle_local(&p, units, now) {
                Some(debt) => settled.push((p.tier, debt)),
                None => remote.push((p, units)),
            }
        }
        (settled, remote, now)
    }

    /// The units for `measured`, counted.
    fn units(&self, p: &PendingSettle, measured: Measured) -> u64 {
        let (units, why) = units_for(p, measured);
        let policy = p.policy.name.clone();
        let metrics = &self.shared.metrics;
        metrics
            .settled_units
            .get_or_create(&crate::metrics::PolicyLabels {
                policy: policy.clone(),
            })
            .observe(units as f64);
        let result = match units.cmp(&p.reserve) {
            std::cmp::Ordering::Equal => "exact",
            std::cmp::Ordering::Greater => "debt",
            std::cmp::Ordering::Less => "refund",
        };
        metrics
            .settlements
            .get_or_create(&SettleLabels { policy, result })
            .inc();
        if let Some(why) = why {
            count_fallback(&self.shared, p, why);
        }
        units
    }

    /// Takes out the tiers settled by `source`'s kind, leaving the others.
    pub fn split(&mut self, which: impl Fn(&SettleSource) -> bool) -> Settlement {
        let (taken, kept) = std::mem::take(&mut self.pending)
            .into_iter()
            .partition(|p| which(&p.settle().source));
        self.pending = kept;
        Settlement {
            shared: self.shared.clone(),
            pending: taken,
        }
    }
}

impl Drop for Settlement {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let rest = Settlement {
                shared: self.shared.clone(),
                pending: std::mem::take(&mut self.pending),
            };
            rest.finish(|_| Measured::Aborted(0));
        }
    }
}

/// Settles `remote` (Redis keys, with their units) in a task of its own, one tier after the
/// other: `(tier index, debt after)` of each the store answered for. `None` when there is
/// nothing to settle, or outside a runtime (a process shutting down).
fn spawn_remote(
    shared: Arc<Shared>,
    remote: Remote,
    now: u64,
) -> Option<tokio::task::JoinHandle<Settled>> {
    if remote.is_empty() {
        return None;
    }
    let runtime = tokio::runtime::Handle::try_current().ok()?;
    Some(runtime.spawn(async move {
        let mut settled = Settled::new();
        for (p, units) in remote {
            match shared.limiter.settle(&p, units, now).await {
                Ok(debt) => settled.push((p.tier, debt)),
                Err(_) => count_fallback(&shared, &p, "store_error"),
            }
        }
        settled
    }))
}

fn count_fallback(shared: &Shared, p: &PendingSettle, reason: &'static str) {
    shared
        .metrics
        .settle_fallbacks
        .get_or_create(&SettleLabels {
            policy: p.policy.name.clone(),
            result: reason,
        })
        .inc();
}

/// A body whose bytes (and, for a response, trailers) settle the tiers it carries when
/// it ends, fails or is dropped.
pub struct Metered<B> {
    inner: B,
    bytes: u64,
    /// A response with a 5xx status: a trailer it does not carry is the upstream's failure.
    server_error: bool,
    settlement: Option<Settlement>,
}

impl<B: Body> Metered<B> {
    /// Meters `inner`; `server_error` when it is a response with a 5xx status.
    pub fn new(inner: B, settlement: Settlement, server_error: bool) -> Self {
        let mut metered = Self {
            inner,
            bytes: 0,
            server_error,
            settlement: Some(settlement),
        };
        // An empty body may never be polled.
        if metered.inner.is_end_stream() {
            metered.finish(End::Complete);
        }
        metered
    }
}

impl<B> Metered<B> {
    fn finish(&mut self, end: End<'_>) {
        let Some(settlement) = self.settlement.take() else {
            return;
        };
        let (bytes, server_error) = (self.bytes, self.server_error);
        settlement.finish(|p| match (&p.settle().source, &end) {
            (SettleSource::ResponseTrailer(name), End::Trailers(t)) => match parse_value(t, name) {
                Measured::Missing if server_error => Measured::UpstreamFailed(bytes),
                measured => measured,
            },
            (SettleSource::ResponseTrailer(_), End::Complete) if server_error => {
                Measured::UpstreamFailed(bytes)
            }
            (SettleSource::ResponseTrailer(_), End::Complete) => Measured::Missing,
            (_, End::Trailers(_) | End::Complete) => Measured::Bytes(bytes),
            (_, End::Cut) => Measured::Aborted(bytes),
        });
    }
}

/// How a metered body ended.
enum End<'a> {
    Complete,
    Trailers(&'a HeaderMap),
    Cut,
}

impl<B> Body for Metered<B>
where
    B: Body<Data = Bytes, Error = BoxError> + Unpin,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.bytes = self.bytes.saturating_add(data.len() as u64);
                    // A body of known length may not be polled past its last bytes.
                    if self.inner.is_end_stream() {
                        self.finish(End::Complete);
                    }
                } else if let Some(trailers) = frame.trailers_ref() {
                    self.finish(End::Trailers(trailers));
                }
            }
            Poll::Ready(Some(Err(_))) => self.finish(End::Cut),
            Poll::Ready(None) => self.finish(End::Complete),
            Poll::Pending => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B> Drop for Metered<B> {
    fn drop(&mut self) {
        self.finish(End::Cut);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(settle: &str, extra: &str) -> PendingSettle {
        let text = format!(
            "[server]\nlisten = \"127.0.0.1:0\"\n[policies.p]\nkey = \"ip\"\nlimit = 60\nperiod = \"1m\"\nburst = 100\nreserve = 10\nsettle = \"{settle}\"\n{extra}"
        );
        let config = crate::config::compile(std::path::Path::new("t.toml"), &text).expect("valid");
        PendingSettle {
            policy: config.policies[0].clone(),
            tier: 0,
            key: 1,
            redis_key: None,
            t_ns: 1_000_000_000,
            reserve: 10,
            ahead_ns: 10_000_000_000,
            admitted_at: 0,
        }
    }

    #[test]
    fn values_and_their_fallbacks() {
        let p = pending(
            "response_header:x-used",
            "max_cost = 50\nrefund_on_upstream_error = true\n",
        );
        assert_eq!(units_for(&p, Measured::Value(30)), (30, None));
        assert_eq!(units_for(&p, Measured::Value(0)), (0, None));
        assert_eq!(units_for(&p, Measured::Value(51)), (50, Some("capped")));
        assert_eq!(units_for(&p, Measured::Missing), (10, Some("missing")));
        assert_eq!(units_for(&p, Measured::Invalid), (10, Some("invalid")));
        assert_eq!(
            units_for(&p, Measured::UpstreamFailed(999)),
            (0, Some("upstream_error"))
        );
        assert_eq!(units_for(&p, Measured::Aborted(999)), (10, Some("aborted")));
        let keep = pending("response_header:x-used", "");
        assert_eq!(
            units_for(&keep, Measured::UpstreamFailed(0)),
            (10, Some("upstream_error"))
        );
    }

    #[test]
    fn bytes_count_in_units_and_a_cut_pays_at_least_the_reserve() {
        let p = pending("response_bytes", "settle_unit = 1024\n");
        assert_eq!(units_for(&p, Measured::Bytes(0)), (0, None));
        assert_eq!(
            units_for(&p, Measured::Bytes(1)),
            (1, None),
            "a started unit counts"
        );
        assert_eq!(units_for(&p, Measured::Bytes(20 * 1024)), (20, None));
        assert_eq!(
            units_for(&p, Measured::Aborted(2048)),
            (10, Some("aborted"))
        );
        assert_eq!(
            units_for(&p, Measured::Aborted(20 * 1024)),
            (20, Some("aborted"))
        );
        assert_eq!(
            units_for(&p, Measured::UpstreamFailed(0)),
            (10, Some("upstream_error"))
        );
        let refund = pending("response_bytes", "refund_on_upstream_error = true\n");
        assert_eq!(
            units_for(&refund, Measured::UpstreamFailed(3)),
            (3, Some("upstream_error"))
        );
    }

    #[test]
    fn header_values_are_whole_numbers() {
        let name = http::HeaderName::from_static("x-used");
        let mut h = HeaderMap::new();
        assert_eq!(parse_value(&h, &name), Measured::Missing);
        for (text, expected) in [
            ("42", Measured::Value(42)),
            (" 7 ", Measured::Value(7)),
            ("-1", Measured::Invalid),
            ("1e3", Measured::Invalid),
            ("", Measured::Invalid),
            ("99999999999999999999999", Measured::Invalid),
        ] {
            h.insert(&name, http::HeaderValue::from_str(text).unwrap());
            assert_eq!(parse_value(&h, &name), expected, "{text:?}");
        }
    }
}
