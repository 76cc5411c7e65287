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
    pub(super) tiers: &'a mut [Option<Box<Windowed>>],
    pub(super) made: &'a mut usize,
    pub(super) half_ns: u64,
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
        let Some(tier) = self.tiers.get_mut(position) else {
            return;
        };
        if tier.is_none() {
            if *self.made >= MAX_SKETCHES {
                return;
            }
            *self.made += 1;
        }
        let half_ns = self.half_ns;
        let w = tier.get_or_insert_with(|| {
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
}
