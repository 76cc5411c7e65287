//! Bytes metered as they stream: before a body passes more bytes, every bytes tier it
//! carries must have drawn the units for them from its key — a chunk at a time, never
//! taking the key past its bound (the burst and `max_debt`). At the bound the body waits
//! while the key refills (within the tier's `max_delay`), then is cut; `max_cost` cuts it
//! too. Concurrent transfers of one key share its bound, since they draw from one TAT.

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use super::Settlement;
use crate::config::{Policy, SettleSource};
pub use crate::proxy::response::{BudgetExhausted, CutReason};
use crate::store::StoreError;
use crate::store::{Draw, Need, PendingSettle};

/// A draw in Redis under way: which tier, and its answer.
pub type Call = Pin<Box<dyn Future<Output = (usize, Result<Draw, StoreError>)> + Send>>;

/// How far ahead of the bytes a tier draws.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Ahead {
    /// A chunk (64 KiB, or an eighth of the burst): a body lasts seconds, and with Redis
    /// one call moves a chunk.
    Chunk,
    /// Only what the bytes need: a tunnel lasts minutes, and units drawn ahead for it
    /// would hold its key (its other requests and tunnels) for as long.
    None,
}

/// What covering the bytes moved so far asks of the body.
pub enum Cover {
    /// Every bytes tier has paid for them.
    Paid,
    /// A tier is at its bound: its key has room for the next bytes in `wait_ns`, and
    /// the tier (`policy`) lets a body wait `max_delay_ns` at most.
    Pause {
        wait_ns: u64,
        max_delay_ns: u64,
        policy: Arc<Policy>,
    },
    /// A tier's draw is a Redis call: await it ([`Settlement::drew`]), then ask again.
    Call(Call),
    /// Cut the body.
    Cut(BudgetExhausted),
}

impl Settlement {
    /// The first enforcing bytes tier that does not let one request move `bytes` (its
    /// `max_cost`; a shadow tier refuses nothing).
    pub fn over_max_cost(&self, bytes: u64) -> Option<&Arc<Policy>> {
        self.pending.iter().find_map(|p| {
            let settle = p.settle();
            let moved = bytes.div_ceil(settle.unit.get());
            let enforced = p.policy.mode != crate::limit::Mode::Shadow;
            let over = settle.source.measures_bytes() && moved > settle.max_cost;
            (enforced && over).then_some(&p.policy)
        })
    }

    /// The most bytes one piece (a tunnel's read, a part of a body's frame) may carry for
    /// every enforcing bytes tier to pay for it: a piece larger than a key's bound could
    /// never be paid, and one after a piece of the whole bound waits the bound, so a piece
    /// is also at most what refills within `max_delay` (when that is a unit or more). A
    /// key Redis holds counts on this gateway's share of it too (its local fallback's).
    /// Of the tiers whose source `of` names; `None` when none is paid as the bytes pass.
    pub fn most_at_once(&self, of: impl Fn(&SettleSource) -> bool) -> Option<u64> {
        let share = self.shared.limiter.remote().map_or(1, |r| r.fleet_share());
        let paid = |p: &&PendingSettle| {
            let source = &p.settle().source;
            source.measures_bytes() && of(source) && p.policy.mode != crate::limit::Mode::Shadow
        };
        (self.pending.iter().filter(paid))
            .map(|p| {
                let mut units = piece_units(p);
                if p.redis_key.is_some() && share > 1 {
                    units = units.min(piece_units(&p.on_share(share)));
                }
                units.saturating_mul(p.settle().unit.get())
            })
            .min()
    }

    /// Whether any tier here is metered as the body streams.
    pub fn meters(&self) -> bool {
        self.pending
            .iter()
            .any(|p| p.settle().source.measures_bytes())
    }

    /// Makes every bytes tier pay for `bytes` moved in all (drawing a chunk ahead when
    /// it runs short), or says what stops the body.
    pub fn cover(&mut self, bytes: u64) -> Cover {
        self.cover_each(|_| bytes, Ahead::Chunk)
    }

    /// As [`cover`](Self::cover), each tier for the bytes its source has moved (a
    /// tunnel's two ways), drawing `ahead` as said. A shadow tier is not paid as the
    /// bytes pass (it never holds nor cuts them): it settles at what moved, at the end.
    pub fn cover_each(&mut self, bytes: impl Fn(&SettleSource) -> u64, ahead: Ahead) -> Cover {
        let now = self.shared.clock.now_ns();
        for (i, p) in self.pending.iter_mut().enumerate() {
            let source = &p.settle().source;
            if !source.measures_bytes() || p.policy.mode == crate::limit::Mode::Shadow {
                continue;
            }
            let (want, need) = match p.need(bytes(source)) {
                Need::Paid => continue,
                Need::OverMaxCost => {
                    let policy = p.policy.clone();
                    let why = CutReason::MaxCost;
                    return Cover::Cut(BudgetExhausted { policy, why });
                }
                Need::Draw { want, need } if ahead == Ahead::Chunk => (want, need),
                Need::Draw { need, .. } => (need, need),
            };
            let Some(drawn) = self.shared.limiter.draw_local(p, want, need, now) else {
                let (shared, pending) = (self.shared.clone(), p.clone());
                return Cover::Call(Box::pin(async move {
                    (i, shared.limiter.draw(&pending, want, need, now).await)
                }));
            };
            match drawn {
                Draw::Granted { units, ahead_ns } => p.drew(units, ahead_ns, now),
                Draw::Unchecked { units } => p.let_through(units),
                Draw::Wait { wait_ns } => return pause(p, wait_ns),
            }
        }
        Cover::Paid
    }

    /// What a Redis draw for tier `i` answered: its units are the tier's; a refusal asks
    /// the body to wait, a store that failed under `on_error = "deny"` to stop.
    pub fn drew(&mut self, i: usize, answer: Result<Draw, StoreError>) -> Option<Cover> {
        let now = self.shared.clock.now_ns();
        let p = self.pending.get_mut(i)?;
        match answer {
            Ok(Draw::Granted { units, ahead_ns }) => {
                p.drew(units, ahead_ns, now);
                None
            }
            Ok(Draw::Unchecked { units }) => {
                p.let_through(units);
                None
            }
            Ok(Draw::Wait { wait_ns }) => Some(pause(p, wait_ns)),
            Err(_) => Some(Cover::Cut(BudgetExhausted {
                policy: p.policy.clone(),
                why: CutReason::Store,
            })),
        }
    }
}

/// How long a body (or a tunnel's way) that has waited `paused` in a row waits for a
/// `Cover::Pause`: `paused` grows by it; `Err` when the wait would pass `max_delay`.
pub fn pause_for(
    paused: &mut std::time::Duration,
    (wait_ns, max_delay_ns, policy): (u64, u64, Arc<Policy>),
) -> Result<std::time::Duration, BudgetExhausted> {
    let wait = std::time::Duration::from_nanos(wait_ns.max(1));
    if paused.saturating_add(wait) > std::time::Duration::from_nanos(max_delay_ns) {
        let why = CutReason::Budget;
        return Err(BudgetExhausted { policy, why });
    }
    *paused += wait;
    Ok(wait)
}

/// The units of one piece of tier `p` (see [`Settlement::most_at_once`]).
fn piece_units(p: &PendingSettle) -> u64 {
    let t = p.t_ns.max(1);
    let bound = p.bound_ns();
    let max_delay = u64::try_from(p.policy.max_delay.as_nanos()).unwrap_or(u64::MAX);
    // Half of `max_delay`: the wait for a whole piece stays inside it, whatever rounding.
    let span = if max_delay >= t {
        bound.min((max_delay / 2).max(t))
    } else {
        bound
    };
    (span / t).max(1)
}

/// The pause tier `p` asks for: `wait_ns`, within its `max_delay`.
fn pause(p: &PendingSettle, wait_ns: u64) -> Cover {
    Cover::Pause {
        wait_ns,
        max_delay_ns: u64::try_from(p.policy.max_delay.as_nanos()).unwrap_or(u64::MAX),
        policy: p.policy.clone(),
    }
}
