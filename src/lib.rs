//! tollgate: a rate-limiting reverse-proxy gateway.
//!
//! # Layout
//!
//! Three layers, dependencies pointing inward:
//!
//! 1. **Pure core** — [`limit`] (GCRA maths, tier evaluation with rollback), [`key`] (key
//!    sources, client IP, key hashing), [`config`] (TOML → validated, immutable config;
//!    it reads only the files the config names). No network, no clock reads.
//! 2. **Adapters** — [`store`] (embedded lock-free store, Redis), [`proxy`] (the request path,
//!    forwarding, responses), [`admin`] (admin API, metrics, status page), [`tls`], [`clock`].
//! 3. **Wiring** — [`gateway`] (start-up, signals, shutdown), [`workers`] (thread-per-core
//!    data plane), [`server`] (accepting and serving connections), [`reload`], [`app`]
//!    (shared state and the per-config snapshot), [`cli`].
//!
//! One request, top to bottom, is [`proxy::service::handle`]: load the snapshot once → match
//! the route → take each tier's key → decide all tiers with one `now` → forward, or answer 429.
#![forbid(unsafe_code)]

pub mod admin;
pub mod app;
pub mod cli;
pub mod clock;
pub mod config;
pub mod conn;
pub mod descriptors;
pub mod echo;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod gateway;
pub mod key;
pub mod limit;
pub mod metrics;
pub mod proxy;
pub mod reload;
pub mod request;
pub mod server;
pub mod store;
pub mod summary;
pub mod tls;
pub mod workers;
