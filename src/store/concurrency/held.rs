//! A concurrency slot a request holds, wherever it lives: in this process's slot table or
//! as a lease in Redis. Dropping it gives it back.

use super::lease::Lease;
use super::slots::Slot;

pub enum Held {
    Local(Slot),
    Remote(Lease),
}

impl Held {
    /// Whether the slot is a lease in Redis (what a replica must acknowledge).
    pub fn in_store(&self) -> bool {
        matches!(self, Held::Remote(_))
    }
}
