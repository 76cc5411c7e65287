//! Who is limited right now: per route tier and worker, a heavy-hitter sketch
//! ([`sketch::Sketch`], a fixed number of counters) of admitted and refused decisions by
//! key, over a sliding window (`[server] top_window`, two halves: the one filling and the
//! one before). Each worker writes only its own sketches (its own lock, never contended
//! but by an admin read); a sketch is made the first time its tier decides on that
//! worker, so a route that sees no traffic costs nothing. A reload starts afresh (the
//! sketches belong to one config version). `GET /admin/top` merges them and ranks keys by
//! what was surely counted, never by a bound.

mod filter;
pub mod sketch;
mod window;

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use sketch::Sketch;
pub use window::RouteTop;
use window::{Budget, Windowed};

#[derive(Default)]
struct WorkerTop {
    /// By tier: `route_offset[route] + position`.
    tiers: Vec<Option<Box<Windowed>>>,
    budget: Budget,
}

/// Sketches one worker makes at most (about 15 KiB each): a config of thousands of busy
/// routes keeps 1,024 tiers that decide, not 15 KiB for every one of them; a tier that
/// decided nothing in the window gives its sketch to one that decides.
pub const MAX_SKETCHES: usize = 1_024;

/// Every tier's sketches, per worker, for one config version.
pub struct TopKeys {
    workers: Box<[Mutex<WorkerTop>]>,
    /// Where each route's tiers start in a worker's table.
    route_offset: Vec<usize>,
    tiers: usize,
    half_ns: u64,
    /// When the sketches began (this config version's start): the window they cover is
    /// shorter until one has passed.
    since_ns: u64,
}

/// One key in `GET /admin/top`, merged over workers and the window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopKey {
    pub policy: String,
    pub parts: Vec<String>,
    /// The text was longer than a sketch keeps.
    pub truncated: bool,
    /// Decisions counted (exact from when the key entered each sketch): the key was
    /// decided at least this many times.
    pub admitted: u64,
    pub refused: u64,
    /// How many decisions of this key may have gone uncounted: in the sketches that hold
    /// it, before it entered; in those that do not, what their filters bound.
    pub error: u64,
    /// When it was last refused (the monotonic clock; 0: not in the window).
    pub last_refused: u64,
    hash: u64,
}

impl TopKey {
    /// The store hash it was counted under.
    pub fn hash(&self) -> u64 {
        self.hash
    }
}

/// A sketch in a read: its worker, its tier, which half (0 the filling one).
type SketchId = (usize, usize, usize);

/// Separates a key's parts in a sketch's text.
pub const PART_SEPARATOR: char = '\u{1f}';

impl TopKeys {
    /// Tables for `workers` workers and routes of `tiers_per_route` tiers each; `window`
    /// in nanoseconds (0: top keys off), from `since_ns` on.
    pub fn new(workers: usize, tiers_per_route: &[usize], window_ns: u64, since_ns: u64) -> Self {
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
            since_ns,
        }
    }

    /// The seconds the counts cover at `now_ns`, rounded up: the half-window filling and
    /// the one before it (between half the window and all of it, by where `now_ns` is in
    /// its half: never more than the window), or the time since the sketches began while
    /// that is shorter (after a start or a reload).
    pub fn covered_s(&self, now_ns: u64) -> u64 {
        let halves = self.half_ns.saturating_add(now_ns % self.half_ns);
        let age = now_ns.saturating_sub(self.since_ns);
        age.min(halves).div_ceil(1_000_000_000)
    }

    /// Runs `f` with `worker`'s table for `route` (one lock for a request's tiers).
    #[inline]
    pub fn on_route(&self, worker: usize, route: usize, f: impl FnOnce(&mut RouteTop<'_>)) {
        let Some(&offset) = self.route_offset.get(route) else {
            return;
        };
        let Some(slot) = self
            .workers
            .get(crate::conn::worker::slot_of(worker, self.workers.len()))
        else {
            return;
        };
        let Ok(mut table) = slot.lock() else {
            return;
        };
        if table.tiers.len() < self.tiers {
            table.tiers.resize_with(self.tiers, || None);
        }
        let WorkerTop { tiers, budget } = &mut *table;
        f(&mut RouteTop {
            tiers,
            offset,
            budget,
            half_ns: self.half_ns,
        });
    }
}

impl TopKeys {
    /// The keys of the tiers `policy_of(route, position)` names (all when `only` is
    /// `None`), merged over workers and the window (counts and errors add), ranked by what
    /// was surely counted: most refused first, then most admitted; at most `n`.
    pub fn top(
        &self,
        only: Option<&str>,
        n: usize,
        now_ns: u64,
        policy_of: impl Fn(usize, usize) -> String,
    ) -> Vec<TopKey> {
        let half = now_ns / self.half_ns;
        let mut merged: HashMap<(String, u64), TopKey> = HashMap::new();
        let mut held: HashSet<(SketchId, u64)> = HashSet::new();
        self.each_sketch(only, half, &policy_of, |id, policy, s| {
            for (hash, e) in s.entries() {
                held.insert((id, hash));
                let text = e.text();
                let key = merged
                    .entry((policy.to_owned(), hash))
                    .or_insert_with(|| TopKey {
                        policy: policy.to_owned(),
                        parts: text.split(PART_SEPARATOR).map(str::to_owned).collect(),
                        truncated: e.cut(),
                        admitted: 0,
                        refused: 0,
                        error: 0,
                        last_refused: 0,
                        hash,
                    });
                key.admitted += u64::from(e.admitted);
                key.refused += u64::from(e.refused);
                key.error += u64::from(e.error);
                key.last_refused = key.last_refused.max(e.last_refused);
            }
        });
        let mut keys: Vec<TopKey> = merged.into_values().collect();
        keys.sort_by(|a, b| {
            (b.refused, b.admitted, &a.policy, &a.parts)
                .cmp(&(a.refused, a.admitted, &b.policy, &b.parts))
        });
        keys.truncate(n);
        // A key shown may also have been decided, uncounted, where a sketch of its policy
        // does not hold it (another worker's, the other half): add what those sketches
        // bound (the smaller of their filter's bound and their smallest total). A read is
        // no snapshot: decisions made while it runs may or may not be in it.
        let mut shown: HashMap<String, Vec<usize>> = HashMap::new();
        for (i, k) in keys.iter().enumerate() {
            shown.entry(k.policy.clone()).or_default().push(i);
        }
        self.each_sketch(only, half, &policy_of, |id, policy, s| {
            for &i in shown.get(policy).into_iter().flatten() {
                let k = &mut keys[i];
                if !held.contains(&(id, k.hash)) {
                    k.error += u64::from(s.uncounted_at_most(k.hash));
                }
            }
        });
        keys
    }

    /// Runs `f` on every sketch inside the window of the tiers of `only` (or all), one
    /// worker's lock at a time.
    fn each_sketch(
        &self,
        only: Option<&str>,
        half: u64,
        policy_of: &impl Fn(usize, usize) -> String,
        mut f: impl FnMut(SketchId, &str, &Sketch),
    ) {
        for (worker, table) in self.workers.iter().enumerate() {
            let Ok(table) = table.lock() else { continue };
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
                    for (which, s) in sketches.iter().enumerate() {
                        f((worker, offset + position, which), &policy, s);
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::sketch::TextBuf;
    use super::*;

    #[test]
    fn keys_merge_over_workers_and_leave_the_window() {
        let half = 1_000;
        let top = TopKeys::new(2, &[2, 1], 2 * half, 0);
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

    /// Issue #44 (a): a flood of keys seen once on one policy, a real offender on
    /// another. The flood's keys may carry large errors; the ranking goes by what was
    /// counted, so both offenders come first, each with an honest bound.
    #[test]
    fn offenders_outrank_a_flood_of_one_off_keys_on_another_policy() {
        let top = TopKeys::new(2, &[1, 1], 1_000_000, 0);
        let policy = |r: usize, _: usize| ["a", "b"][r].to_owned();
        let mut truth = HashMap::new();
        let mut decide = |worker: usize, route: usize, key: u64, refused: bool| {
            *truth.entry((route, key)).or_insert(0u64) += 1;
            top.on_route(worker, route, |rt| {
                rt.record(0, key, refused, 1, |t| t.push(&format!("k{key}")))
            });
        };
        // On "a": 6,000 keys admitted once and refused once, on both workers, and one key
        // refused 250 times among them (above 1/64 of the 12,250 decisions).
        for i in 0..6_000u64 {
            let key = 1_000 + i;
            decide((i % 2) as usize, 0, key, false);
            decide((i % 2) as usize, 0, key, true);
            if i % 24 == 0 {
                decide((i % 2) as usize, 0, 7, true);
            }
        }
        // On "b": one key refused 60 times (fewer than 12,250 / 64) among a few others.
        for i in 0..60u64 {
            decide(0, 1, 9, true);
            decide(1, 1, 20 + i % 3, false);
        }
        let keys = top.top(None, 20, 2, policy);
        let first: Vec<_> = keys
            .iter()
            .take(2)
            .map(|k| (k.policy.as_str(), k.hash))
            .collect();
        assert_eq!(first, [("a", 7), ("b", 9)], "{keys:#?}");
        for k in &keys {
            let route = usize::from(k.policy == "b");
            let c = truth[&(route, k.hash)];
            let counted = k.admitted + k.refused;
            assert!(counted <= c && c <= counted + k.error, "{k:?}: {c}");
            if k.policy == "a" && k.hash != 7 {
                assert!(k.refused <= 1, "a one-off key counted once: {k:?}");
            }
        }
    }

    #[test]
    fn a_worker_makes_at_most_its_share_of_sketches() {
        let routes = vec![1; MAX_SKETCHES + 10];
        let top = TopKeys::new(1, &routes, 1_000_000, 0);
        for route in 0..routes.len() {
            top.on_route(0, route, |rt| {
                rt.record(0, route as u64, true, 1, |t| t.push("k"))
            });
        }
        let keys = top.top(None, usize::MAX, 2, |r, _| format!("p{r}"));
        assert_eq!(keys.len(), MAX_SKETCHES);
    }

    /// A full budget: a tier that decided nothing in the window gives its sketch to a
    /// tier that decides now; while every sketch is in the window, a new tier has none.
    #[test]
    fn a_quiet_tiers_sketch_goes_to_a_tier_that_decides() {
        let half = 1_000;
        let routes = vec![1; MAX_SKETCHES + 2];
        let top = TopKeys::new(1, &routes, 2 * half, 0);
        let record = |route: usize, now: u64| {
            top.on_route(0, route, |rt| {
                rt.record(0, route as u64, true, now, |t| t.push("k"))
            });
        };
        let seen = |route: usize, now: u64| {
            let keys = top.top(None, usize::MAX, now, |r, _| format!("p{r}"));
            keys.iter().any(|k| k.hash == route as u64)
        };
        for route in 0..MAX_SKETCHES {
            record(route, 1);
        }
        record(MAX_SKETCHES, half + 1);
        assert!(!seen(MAX_SKETCHES, half + 1), "every sketch is in use");
        // Every tier but the first decides again; the first decided nothing for a window.
        for route in 1..MAX_SKETCHES {
            record(route, 2 * half + 1);
        }
        record(MAX_SKETCHES + 1, 2 * half + 2);
        assert!(seen(MAX_SKETCHES + 1, 2 * half + 2));
        assert!(!seen(0, 2 * half + 2));
        assert!(seen(1, 2 * half + 2));
    }

    /// A tier's window turns with the clock whether or not its half is divided for:
    /// inside a half nothing turns, the next half keeps the last one, a jump starts both
    /// halves afresh, and a reading from before the half counts in it (never turns back).
    #[test]
    fn the_window_turns_at_each_half_afresh_after_a_jump_and_never_back() {
        let half = 1_000;
        let top = TopKeys::new(1, &[1], 2 * half, 0);
        let record = |key: u64, now: u64| {
            top.on_route(0, 0, |rt| rt.record(0, key, true, now, |t| t.push("k")));
        };
        let seen = |now: u64| {
            let mut keys: Vec<u64> = top
                .top(None, 10, now, |_, _| "p".to_owned())
                .iter()
                .map(|k| k.hash)
                .collect();
            keys.sort_unstable();
            keys
        };
        record(1, 10);
        record(2, half - 1);
        assert_eq!(seen(half - 1), [1, 2]);
        record(3, half); // the next half: the first kept as the previous one
        record(4, half + 500); // inside it: nothing turns
        assert_eq!(seen(half + 500), [1, 2, 3, 4]);
        record(5, 2 * half); // the next again: the first half leaves
        assert_eq!(seen(2 * half), [3, 4, 5]);
        record(6, 5 * half + 1); // a jump: both halves afresh
        assert_eq!(seen(5 * half + 1), [6]);
        // A reading from before the filling half (a decision that waited on Redis while
        // a later one was recorded): counted in the filling half, nothing turns back.
        record(7, 4 * half);
        assert_eq!(seen(5 * half + 1), [6, 7]);
        record(8, 6 * half); // the next half
        record(9, 6 * half - 1); // late, across the turn: both halves kept
        record(10, 6 * half + 1);
        assert_eq!(seen(6 * half + 1), [6, 7, 8, 9, 10]);
    }
}
