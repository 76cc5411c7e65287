//! tollgate: a rate-limiting reverse-proxy gateway.
#![forbid(unsafe_code)]

pub mod admin;
pub mod app;
pub mod cli;
pub mod clock;
pub mod config;
pub mod echo;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod gateway;
pub mod key;
pub mod limit;
pub mod proxy;
pub mod reload;
pub mod server;
pub mod store;
pub mod summary;
pub mod tls;
pub mod workers;
