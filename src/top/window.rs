//! One request's part in the top keys: each decision counted in its tier's sketch on the
//! worker that made it, over a window of two halves that turns with the clock.

use super::sketch::{Sketch, TextBuf};
use super::MAX_SKETCHES;

/// One tier's sketches on one worker: the half-window filling and the one before it.
pub(super) struct Windowed {
    /// The filling half's number: `now / half_ns` when it began.
    pub(super) half: u64,
    pub(super) current: Sketch,
    pub(super) previous: Sketch,
}

impl Windowed {
    /// Turns the window to the half holding `now_ns`: the next half keeps the filling one
    /// as the one before; a jump starts both afresh. A reading from before the filling
    /// half (a decision that waited on Redis, recorded after one decided later) is counted
    /// in the filling half: the window never turns back, which would have wiped both
    /// halves at every turn on a busy worker. A decision inside the filling half is told
    /// by one compare, not a division (a runtime divisor's `div` costs tens of cycles,
    /// once a tier of every request).
    #[inline]
    fn turn_to(&mut self, now_ns: u64, half_ns: u64) {
        // `half` came from a reading divided by `half_ns`: the product does not overflow.
        let end = self.half.saturating_add(1).saturating_mul(half_ns);
        if now_ns < end {
            return;
        }
        let half = now_ns / half_ns;
        if half == self.half + 1 {
            std::mem::swap(&mut self.current, &mut self.previous);
        } else {
            self.previous.clear();
        }
        self.current.clear();
        self.half = half;
    }
}

/// One worker's sketches of one route's tiers, for one request.
pub struct RouteTop<'a> {
    /// The worker's whole table: a full budget is made room in from any route's tiers.
    pub(super) tiers: &'a mut [Option<Box<Windowed>>],
    /// Where this route's tiers start in it.
    pub(super) offset: usize,
    pub(super) budget: &'a mut Budget,
    pub(super) half_ns: u64,
}

/// A worker's sketches made, and when its table was last found without a stale one.
#[derive(Default)]
pub(super) struct Budget {
    /// Sketches made so far (at most [`MAX_SKETCHES`]).
    pub(super) made: usize,
    /// No sketch is looked for to take over before this half: the table was searched in
    /// the one before and every sketch was in use (one search a half-window at most, so
    /// new tiers deciding cannot make each request scan the table).
    no_stale_before: u64,
}

impl RouteTop<'_> {
    /// Counts one decision of the tier at `position` for the key `hash`, at `now_ns`;
    /// `text` writes the key's parts when the key enters.
    #[inline]
    pub fn record(
        &mut self,
        position: usize,
        hash: u64,
        refused: bool,
        now_ns: u64,
        text: impl FnOnce(&mut TextBuf),
    ) {
        let index = self.offset.saturating_add(position);
        let half_ns = self.half_ns;
        match self.tiers.get(index) {
            None => return,
            Some(None) if self.budget.made >= MAX_SKETCHES => {
                let Some(taken) = self.take_stale(now_ns / half_ns) else {
                    return;
                };
                self.tiers[index] = Some(taken);
            }
            Some(None) => self.budget.made += 1,
            Some(Some(_)) => {}
        }
        let w = self.tiers[index].get_or_insert_with(|| {
            // One draw from the system per tier and worker, when it first decides.
            let salt = u64::from_le_bytes(crate::random::bytes());
            Box::new(Windowed {
                half: now_ns / half_ns,
                current: Sketch::new(salt),
                previous: Sketch::new(salt.rotate_left(32)),
            })
        });
        w.turn_to(now_ns, half_ns);
        w.current.record(hash, (refused, now_ns), text);
    }

    /// A full budget: the sketch of a tier that decided nothing in the window (both of
    /// its halves out of it), emptied for a tier that decides now. The first tiers to
    /// decide after a reload do not keep the budget once they go quiet; a tier still
    /// deciding keeps its sketch.
    #[cold]
    fn take_stale(&mut self, half: u64) -> Option<Box<Windowed>> {
        if half < self.budget.no_stale_before {
            return None;
        }
        let stale = self
            .tiers
            .iter_mut()
            .find(|t| t.as_ref().is_some_and(|w| w.half.saturating_add(2) <= half));
        let Some(mut w) = stale.and_then(Option::take) else {
            self.budget.no_stale_before = half.saturating_add(1);
            return None;
        };
        w.half = half;
        w.current.clear();
        w.previous.clear();
        Some(w)
    }
}
