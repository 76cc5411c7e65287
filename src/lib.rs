//! tollgate: a rate-limiting reverse-proxy gateway.
//!
//! # Layout
//!
//! Three layers, dependencies pointing inward (no import circles):
//!
//! 1. **Pure core** — [`limit`] (GCRA maths, tier evaluation with rollback), [`key`] (key
//!    sources, client IP, key hashing), [`request`] (canonical path and host), [`config`]
//!    (TOML → validated, immutable config; it reads only the files the config names).
//!    No network, no clock reads.
//! 2. **Adapters** — [`store`] (embedded lock-free store, Redis; [`store::Limiter`] is the one
//!    API the request path calls), [`proxy`] (the request path, forwarding, responses),
//!    [`conn`] (what one client connection shares with its requests), [`admin`] (admin API,
//!    status page), [`metrics`], [`tls`], [`clock`].
//! 3. **Wiring** — [`gateway`] (start-up, signals, shutdown), [`workers`] (thread-per-core
//!    data plane), [`server`] (accepting and serving connections under their deadlines),
//!    [`reload`], [`descriptors`], [`state`] (shared state and the per-config snapshot), [`cli`],
//!    [`health`] (the `tollgate health` probe).
//!
//! One request, top to bottom, is [`proxy::service::handle`]: load the snapshot once →
//! normalise the head → match the route → decide every tier with one `now`
//! ([`store::Limiter::check_request`]) → forward, or answer 429.
#![forbid(unsafe_code)]

pub mod admin;
pub mod cli;
pub mod clock;
pub mod config;
pub mod conn;
pub mod descriptors;
pub mod echo;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod gateway;
pub mod health;
pub mod key;
pub mod limit;
pub mod metrics;
pub mod overrides;
pub mod proxy;
pub mod reload;
pub mod reply;
pub mod request;
pub mod server;
pub mod store;
pub mod summary;
pub mod tls;
pub mod workers;
