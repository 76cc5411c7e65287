//! tollgate: a rate-limiting reverse-proxy gateway.
#![forbid(unsafe_code)]

pub mod clock;
pub mod limit;
pub mod store;
