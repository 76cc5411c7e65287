//! tollgate: a rate-limiting reverse-proxy gateway.
//!
//! # Layout
//!
//! Three layers, every import pointing down (no import circles; docs/architecture.md is
//! the map):
//!
//! 1. **Pure core** — [`limit`] (GCRA maths, tier evaluation with rollback), [`key`] (key
//!    sources, client IP, key hashing), [`request`] (canonical path and host), [`config`]
//!    (TOML → validated, immutable config; it reads only the files the config names),
//!    [`reply`] (the body type and JSON answers every listener writes), [`clock`], [`tls`],
//!    [`random`].
//!    No network, no clock reads.
//! 2. **Adapters** — [`metrics`], [`store`] (embedded lock-free store, Redis;
//!    [`store::Limiter`] is the one door the request path calls, one room per limit kind
//!    behind it), [`overrides`] (runtime per-key limits), [`files`] (every file the gateway
//!    writes, safely), [`conn`] (what one client
//!    connection shares with its requests), [`proxy`] (the request path as its phases, the
//!    upstream pool, the config snapshot), [`server`] (accepting and serving connections
//!    under their deadlines), [`admin`] (admin API, status page).
//! 3. **Wiring** — [`gateway`] (start-up, background tasks, signals, shutdown), [`workers`]
//!    (thread-per-core data plane), [`reload`], [`descriptors`], [`cli`], [`summary`],
//!    [`health`] (the `tollgate health` probe), [`control`] (`tollgate reload`: the command
//!    line as a client of a running gateway's admin API), [`log_format`] (the JSON log's
//!    lines).
//!
//! One request, top to bottom, is [`proxy::service::handle`]: load the snapshot once →
//! normalise the head → match the route → decide every tier with one `now`
//! ([`store::Limiter::check_request`]) → forward, or answer 429.
#![forbid(unsafe_code)]

pub mod admin;
pub mod cli;
pub mod clock;
pub mod coalesce;
pub mod config;
pub mod conn;
pub mod control;
pub mod descriptors;
pub mod echo;
pub mod files;
#[doc(hidden)]
pub mod fuzz_targets;
pub mod gateway;
pub mod grpc_frames;
pub mod health;
pub mod json;
pub mod key;
pub mod limit;
pub mod log_format;
pub mod metrics;
pub mod overrides;
pub mod proto_wire;
pub mod proxy;
pub mod random;
pub mod reload;
pub mod reply;
pub mod request;
pub mod rlqs;
pub mod rls;
pub mod server;
pub mod spend;
pub mod store;
pub mod summary;
pub mod telemetry;
pub mod tls;
pub mod top;
pub mod wire_text;
pub mod workers;
