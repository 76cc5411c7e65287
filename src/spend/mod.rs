//! Spend: what a request may cost before it runs and what it cost once answered, in the
//! units of a price table (`[prices.NAME]`). `price.rs` prices tokens (and bounds a
//! request's cost from its body); `usage.rs` finds the `usage` an answer reports while it
//! streams, in a JSON body or a `text/event-stream`, without holding the answer. Pure.

mod price;
mod shape;
mod usage;

pub use price::{Estimate, TokenPrice, PRICE_SCALE};
pub use shape::{body_shape, BodyShape, CHAT_LIMITS, RESPONSES_LIMIT};
pub use usage::{Usage, UsageScanner};
