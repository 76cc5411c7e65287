//! Costs known only once the upstream has answered (`settle` policies): the value read
//! from a response header or trailer, or counted from body bytes, turned into units and
//! settled on each tier's key. Every pending tier is settled exactly once: a
//! [`Settlement`] settles on drop whatever it has not yet, as cut short.

mod measure;
mod meter;
mod metered;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use smallvec::SmallVec;

use crate::config::SettleSource;
use crate::metrics::{SettleCounters, SettleFallback, SettleResult};
use crate::proxy::snapshot::{Current, Shared};
use crate::store::PendingSettle;

pub use crate::proxy::response::{BudgetExhausted, CutReason};
pub use measure::{parse_value, units_for, Measured};
pub use meter::{pause_for, Ahead, Cover};
pub use metered::{Metered, Side};

/// `(tier index, debt after)` of each tier the store answered for.
type Settled = SmallVec<[(usize, u64); 1]>;
/// Tiers whose keys Redis holds, with the units each settles at.
type Remote = SmallVec<[(PendingSettle, u64); 1]>;

/// The tiers of one request still to settle, and what settles them.
pub struct Settlement {
    shared: Arc<Shared>,
    /// The route's metric handles: the snapshot that admitted the request, and the route.
    counters: Counters,
    /// On the heap: an `Option<Settlement>` is moved with the request through every layer,
    /// and a request with nothing to settle (most) would carry the inline tier's bytes.
    pending: Vec<PendingSettle>,
    /// Set once the request was handed to an upstream connection (`SentMark`): what is
    /// dropped unsettled before that used nothing upstream. `None`: not watched (charged
    /// as a hang-up).
    sent: Option<Arc<AtomicBool>>,
}

/// Where a settled tier's series are: prebuilt on the snapshot, by route and position.
#[derive(Clone)]
struct Counters {
    snapshot: Current,
    route: usize,
}

impl Counters {
    fn of(&self, p: &PendingSettle) -> Option<&SettleCounters> {
        let route = self.snapshot.routes.get(self.route)?;
        route.policies.get(p.position)?.counters.settle.as_ref()
    }

    fn fallback(&self, p: &PendingSettle, why: SettleFallback) {
        if let Some(c) = self.of(p) {
            c.fallback(why).inc();
        }
    }

    /// Counts a refund the store held (its key reset since admission).
    fn held(&self, p: &PendingSettle, held: bool) {
        if held {
            self.fallback(p, SettleFallback::Reset);
        }
    }
}

impl Settlement {
    /// The settled tiers of an admitted request on route `route` of `snapshot`, split by
    /// which side settles them: `(response, request body)`, each `None` when it settles
    /// nothing. `tunnel`: an upgrade without a body, whose request bytes are what a tunnel
    /// sends upstream — settled with the response's tiers, when the tunnel ends.
    pub fn begin(
        shared: &Arc<Shared>,
        snapshot: &Current,
        (route, tunnel): (usize, bool),
        pending: Option<SmallVec<[PendingSettle; 1]>>,
    ) -> (Option<Self>, Option<Self>) {
        let Some(pending) = pending.filter(|p| !p.is_empty()) else {
            return (None, None);
        };
        let mut response = Self::new(shared.clone(), snapshot.clone(), route, pending);
        let uploaded = response.split(|source| !tunnel && *source == SettleSource::RequestBytes);
        let some = |s: Self| (!s.is_empty()).then_some(s);
        (some(response), some(uploaded))
    }

    /// The tiers of a request on route `route` of `snapshot` to settle.
    pub fn new(
        shared: Arc<Shared>,
        snapshot: Current,
        route: usize,
        pending: SmallVec<[PendingSettle; 1]>,
    ) -> Self {
        Self {
            shared,
            counters: Counters { snapshot, route },
            pending: pending.into_vec(),
            sent: None,
        }
    }

    /// Watches `sent` (the request's `SentMark`): dropped before it is set, the tiers left
    /// settle as a request that never left ([`Measured::NotSent`]).
    pub fn sent_by(&mut self, sent: Arc<AtomicBool>) {
        self.sent = Some(sent);
    }

    pub fn is_empty(&self) -> bool {
        self.pending.is_empty()
    }

    /// Whether a tier here settles from a response trailer (so the upstream is asked for
    /// trailers, whatever the client asked).
    pub fn reads_trailers(&self) -> bool {
        self.pending
            .iter()
            .any(|p| matches!(p.settle().source, SettleSource::ResponseTrailer(_)))
    }

    /// Whether a tier here settles on the usage the answer reports.
    pub fn reads_usage(&self) -> bool {
        self.pending
            .iter()
            .any(|p| matches!(p.settle().source, SettleSource::Usage(_)))
    }

    /// Settles every pending tier by `measure`, without waiting: at once in the local
    /// store, in a task for Redis.
    pub fn finish(mut self, measure: impl Fn(&PendingSettle) -> Measured) {
        let measured = self.measure(measure);
        let (_, remote, now) = self.count_and_settle_local(measured);
        let _detached = spawn_remote(self.shared.clone(), self.counters.clone(), remote, now);
    }

    /// What `measure` says of each pending tier, in order.
    pub fn measure(&self, measure: impl Fn(&PendingSettle) -> Measured) -> SmallVec<[Measured; 1]> {
        self.pending.iter().map(measure).collect()
    }

    /// The clock the settles read (the headers describe the settled state at its time).
    pub fn clock(&self) -> Arc<dyn crate::clock::Clock> {
        self.shared.clock.clone()
    }

    /// Settles every pending tier at its `measured` value and waits for it, so what the
    /// response says about the limit is the settled state: `(tier index, debt after)` of
    /// each tier the store answered for, and the clock reading they settled at. The Redis
    /// calls run in a task of their own, so a request dropped while it waits (its client
    /// gone) still settles every tier: a client cannot hang up at the right moment to
    /// leave a debt unpaid.
    pub async fn finish_waiting(mut self, measured: SmallVec<[Measured; 1]>) -> (Settled, u64) {
        let (mut settled, remote, now) = self.count_and_settle_local(measured);
        let counters = self.counters.clone();
        if let Some(task) = spawn_remote(self.shared.clone(), counters, remote, now) {
            match task.await {
                Ok(remote) => settled.extend(remote),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                // The runtime shutting down: nothing left to describe.
                Err(_) => {}
            }
        }
        (settled, now)
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
                Some(done) => {
                    self.counters.held(&p, done.held);
                    settled.push((p.tier, done.debt));
                }
                None => remote.push((p, units)),
            }
        }
        (settled, remote, now)
    }

    /// The units for `measured`, counted. A shadow bytes tier, paid nothing as its bytes
    /// passed, is charged at most what an enforcing one could have been: its `max_cost`,
    /// and its key's bound (else one large download left its key in debt for days, a
    /// shadow that no longer shows what enforcing would do).
    fn units(&self, p: &PendingSettle, measured: Measured) -> u64 {
        let (mut units, why) = units_for(p, measured);
        if p.policy.mode == crate::limit::Mode::Shadow && p.settle().source.measures_bytes() {
            let bound = p.bound_ns() / p.t_ns.max(1);
            units = units.min(p.settle().max_cost).min(bound);
        }
        if let Some(c) = self.counters.of(p) {
            c.units.observe(units as f64);
            let result = match units.cmp(&p.reserve) {
                std::cmp::Ordering::Equal => SettleResult::Exact,
                std::cmp::Ordering::Greater => SettleResult::Debt,
                std::cmp::Ordering::Less => SettleResult::Refund,
            };
            c.result(result).inc();
            if let Some(why) = why {
                c.fallback(why).inc();
            }
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
            counters: self.counters.clone(),
            pending: taken,
            sent: self.sent.clone(),
        }
    }
}

impl Drop for Settlement {
    fn drop(&mut self) {
        if !self.pending.is_empty() {
            let never_sent = (self.sent.as_ref()).is_some_and(|s| !s.load(Ordering::Acquire));
            let rest = Settlement {
                shared: self.shared.clone(),
                counters: self.counters.clone(),
                pending: std::mem::take(&mut self.pending),
                sent: None,
            };
            rest.finish(|_| {
                if never_sent {
                    Measured::NotSent
                } else {
                    Measured::Aborted(0)
                }
            });
        }
    }
}

/// Settles `remote` (Redis keys, with their units) in a task of its own, one tier after the
/// other: `(tier index, debt after)` of each the store answered for. `None` when there is
/// nothing to settle, or outside a runtime (a process shutting down).
fn spawn_remote(
    shared: Arc<Shared>,
    counters: Counters,
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
                Ok(done) => {
                    counters.held(&p, done.held);
                    settled.push((p.tier, done.debt));
                }
                Err(_) => counters.fallback(&p, SettleFallback::StoreError),
            }
        }
        settled
    }))
}
