//! Spend: what a request may cost before it runs and what it cost once answered, in the
//! units of a price table (`[prices.NAME]`). `price.rs` prices tokens and bounds a
//! quote; `shape/` reads what a body says of its cost beyond its bytes (media, a chain
//! or cache kept upstream, a batch, which output limits it may set); `usage.rs` finds the
//! `usage` an answer reports while it streams, in a JSON body or a `text/event-stream`,
//! without holding the answer. Pure.

mod price;
mod shape;
mod usage;

pub use price::{Estimate, TokenPrice, PRICE_SCALE};
pub use shape::body_shape;
pub use usage::{Usage, UsageScanner};
