//! Who is limited right now: per route tier and worker, a heavy-hitter sketch
//! ([`sketch::Sketch`], a fixed number of counters) of admitted and refused decisions by
//! key, over a sliding window (`[server] top_window`, two halves: the one filling and the
//! one before). Each worker writes only its own sketches (its own lock, never contended
//! but by an admin read); a sketch is made the first time its tier decides on that
//! worker, so a route that sees no traffic costs nothing. A reload starts afresh (the
//! sketches belong to one config version). `GET /admin/top` merges them.

mod filter;
pub mod sketch;

use std::collections::HashMap;
use std::sync::Mutex;

use sketch::{Sketch, TextBuf};

/// One tier's sketches on one worker: the half-window filling and the one before it.
struct Windowed {
    half: u64,
    current: Sketch,
    previous: Sketch,
}

#[derive(Default)]
struct WorkerTop {
    /// By tier: `route_offset[route] + position`.
    tiers: Vec<Option<Box<Windowed>>>,
    /// Sketches made so far (at most [`MAX_SKETCHES`]).
    made: usize,
}

/// Sketches one worker makes at most (about 15 KiB each): a config of thousands of busy
/// routes keeps the first 1,024 tiers to decide, not 15 KiB for every one of them.
pub const MAX_SKETCHES: usize = 1_024;

/// Every tier's sketches, per worker, for one config version.
pub struct TopKeys {
    workers: Box<[Mutex<WorkerTop>]>,
    /// Where each route's tiers start in a worker's table.
    route_offset: Vec<usize>,
    tiers: usize,
    half_ns: u64,
}

/// One key in `GET /admin/top`, merged over workers and the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopKey {
    pub policy: String,
    pub parts: Vec<String>,
    /// The text was longer than a sketch keeps.
    pub truncated: bool,
    pub admitted: u64,
    pub refused: u64,
    /// How many decisions of this key may have gone uncounted.
    pub error: u64,
    /// When it was last refused (the monotonic clock; 0: not in the window).
    pub last_refused: u64,
}

/// Separates a key's parts in a sketch's text.
pub const PART_SEPARATOR: char = '\u{1f}';

impl TopKeys {
    /// Tables for `workers` workers and routes of `tiers_per_route` tiers each; `window`
    /// in nanoseconds (0: top keys off).
    pub fn new(workers: usize, tiers_per_route: &[usize], window_ns: u64) -> Self {
        let mut route_offset = Vec::with_capacity(tiers_per_route.len());
        let mut tiers = 0;
        for n in tiers_per_route {
            route_offset.push(tiers);
            tiers += n;
        }
        Self {
            workers: (0..workers.max(1)).map(|_| Mutex::default()).collect(),
            route_offset,
            tiers,
            half_ns: (window_ns / 2).max(1),
        }
    }

    /// Runs `f` with `worker`'s table for `route` (one lock for a request's tiers).
    #[inline]
    pub fn on_route(&self, worker: usize, route: usize, f: impl FnOnce(&mut RouteTop<'_>)) {
        let Some(&offset) = self.route_offset.get(route) else {
            return;
        };
        let Some(slot) = self.workers.get(worker % self.workers.len()) else {
            return;
        };
        let Ok(mut table) = slot.lock() else {
            return;
        };
        if table.tiers.len() < self.tiers {
            table.tiers.resize_with(self.tiers, || None);
        }
        let WorkerTop { tiers, made } = &mut *table;
        f(&mut RouteTop {
            tiers: &mut tiers[offset..],
            made,
            half_ns: self.half_ns,
        });
    }
}

/// One worker's sketches of one route's tiers, for one request.
pub struct RouteTop<'a> {
    tiers: &'a mut [Option<Box<Windowed>>],
    made: &'a mut usize,
    half_ns: u64,
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
        let half = now_ns / self.half_ns;
        if tier.is_none() {
            if *self.made >= MAX_SKETCHES {
                return;
            }
            *self.made += 1;
        }
        let w = tier.get_or_insert_with(|| {
            // One draw from the system per tier and worker, when it first decides.
            let salt = u64::from_le_bytes(crate::random::bytes());
            Box::new(Windowed {
                half,
                current: Sketch::new(salt),
                previous: Sketch::new(salt.rotate_left(32)),
            })
        });
        if w.half != half {
            if half == w.half + 1 {
                std::mem::swap(&mut w.current, &mut w.previous);
            } else {
                w.previous.clear();
            }
            w.current.clear();
            w.half = half;
        }
        w.current.record(hash, (refused, now_ns), text);
    }
}

impl TopKeys {
    /// The keys of the tiers `policy_of(route, position)` names (all when `only` is
    /// `None`), merged over workers and the window, most refused first, at most `n`.
    pub fn top(
        &self,
        only: Option<&str>,
        n: usize,
        now_ns: u64,
        policy_of: impl Fn(usize, usize) -> String,
    ) -> Vec<TopKey> {
        let half = now_ns / self.half_ns;
        let mut merged: HashMap<(String, u64), TopKey> = HashMap::new();
        for worker in self.workers.iter() {
            let Ok(table) = worker.lock() else { continue };
            for (route, &offset) in self.route_offset.iter().enumerate() {
                let end = self
                    .route_offset
                    .get(route + 1)
                    .copied()
                    .unwrap_or(self.tiers);
                for position in 0..end - offset {
                    let Some(Some(w)) = table.tiers.get(offset + position) else {
                        continue;
                    };
                    let policy = policy_of(route, position);
                    if only.is_some_and(|p| p != policy) {
                        continue;
                    }
                    // The halves still inside the window.
                    let sketches: &[&Sketch] = match half.saturating_sub(w.half) {
                        0 => &[&w.current, &w.previous],
                        1 => &[&w.current],
                        _ => &[],
                    };
                    for s in sketches {
                        for (hash, e) in s.entries() {
                            let text = e.text();
                            let key =
                                merged
                                    .entry((policy.clone(), hash))
                                    .or_insert_with(|| TopKey {
                                        policy: policy.clone(),
                                        parts: text
                                            .split(PART_SEPARATOR)
                                            .map(str::to_owned)
                                            .collect(),
                                        truncated: text.len() >= sketch::TEXT_BYTES - 4,
                                        admitted: 0,
                                        refused: 0,
                                        error: 0,
                                        last_refused: 0,
                                    });
                            key.admitted += u64::from(e.admitted);
                            key.refused += u64::from(e.refused);
                            key.error += u64::from(e.error);
                            key.last_refused = key.last_refused.max(e.last_refused);
                        }
                    }
                }
            }
        }
        let mut keys: Vec<TopKey> = merged.into_values().collect();
        keys.sort_by(|a, b| {
            (b.refused, b.admitted, &a.policy, &a.parts)
                .cmp(&(a.refused, a.admitted, &b.policy, &b.parts))
        });
        keys.truncate(n);
        keys
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_merge_over_workers_and_leave_the_window() {
        let half = 1_000;
        let top = TopKeys::new(2, &[2, 1], 2 * half);
        let name = |r: usize, p: usize| ["a", "b", "a"][[0, 1, 2][r * 2 + p]].to_owned();
        let text = |s: &'static str| move |t: &mut TextBuf| t.push(s);
        let record = |(w, r, p): (usize, usize, usize), h, refused, now, t: &'static str| {
            top.on_route(w, r, |rt| rt.record(p, h, refused, now, text(t)));
        };
        record((0, 0, 0), 7, true, 10, "acme");
        record((1, 0, 0), 7, true, 20, "acme");
        record((1, 1, 0), 7, false, 30, "acme");
        record((0, 0, 1), 9, true, 40, "other");
        let keys = top.top(Some("a"), 10, 50, name);
        assert_eq!(keys.len(), 1, "{keys:?}");
        assert_eq!((keys[0].refused, keys[0].admitted), (2, 1));
        assert_eq!(keys[0].parts, ["acme"]);
        // Two halves later, nothing is left.
        assert!(top.top(None, 10, 3 * half + 50, name).is_empty());
    }

    #[test]
    fn a_worker_makes_at_most_its_share_of_sketches() {
        let routes = vec![1; MAX_SKETCHES + 10];
        let top = TopKeys::new(1, &routes, 1_000_000);
        for route in 0..routes.len() {
            top.on_route(0, route, |rt| {
                rt.record(0, route as u64, true, 1, |t| t.push("k"))
            });
        }
        let keys = top.top(None, usize::MAX, 2, |r, _| format!("p{r}"));
        assert_eq!(keys.len(), MAX_SKETCHES);
    }
}
