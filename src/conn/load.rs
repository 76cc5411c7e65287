//! Requests parked or in flight on this worker, against its share of `[server]
//! max_requests`: a counter of the worker's own (workers never share one, so counting a
//! request writes no cache line another core reads).

use std::cell::Cell;

thread_local! {
    static IN_FLIGHT: Cell<usize> = const { Cell::new(0) };
}

/// One request counted on its worker until it is dropped (with its response body).
pub struct Load(());

impl Load {
    /// Counts a request on this worker unless `cap` are already counted.
    pub fn enter(cap: usize) -> Option<Self> {
        IN_FLIGHT.with(|n| {
            let now = n.get();
            (now < cap).then(|| {
                n.set(now + 1);
                Self(())
            })
        })
    }

    /// Requests counted on this worker now.
    pub fn current() -> usize {
        IN_FLIGHT.with(Cell::get)
    }
}

impl Drop for Load {
    fn drop(&mut self) {
        IN_FLIGHT.with(|n| n.set(n.get().saturating_sub(1)));
    }
}

/// A worker's share of a gateway-wide `max_requests` over `workers` (at least one).
pub fn share(max_requests: usize, workers: usize) -> usize {
    max_requests.div_ceil(workers.max(1)).max(1)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_worker_counts_up_to_its_share_and_down_as_requests_end() {
        let cap = share(5, 2);
        assert_eq!(cap, 3);
        let held: Vec<Load> = (0..cap).filter_map(|_| Load::enter(cap)).collect();
        assert_eq!(held.len(), 3);
        assert!(Load::enter(cap).is_none(), "the share is full");
        drop(held);
        assert_eq!(Load::current(), 0);
        assert!(Load::enter(cap).is_some());
    }
}
