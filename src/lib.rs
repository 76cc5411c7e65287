//! tollgate: a rate-limiting reverse-proxy gateway.
//!
//! # Layout
//!
//! Three layers (no import circles; docs/architecture.md is the map, with the few uses
//! across a row it allows):
//!
//! 1. **Pure core** — [`limit`] (GCRA maths, tier evaluation with rollback), [`key`] (key
//!    sources, client IP, key hashing), [`json`] (a JSON body read without building it),
//!    [`spend`] (prices, a body's cost beyond its bytes, usage found in an answer),
//!    [`request`] (canonical path and host, bodies read as frameworks read them),
//!    [`config`] (TOML → validated, immutable config; it reads only the files the config
//!    names, through [`read_file`]), [`reply`] (the body type and JSON answers every
//!    listener writes), [`clock`], [`tls`], [`random`], [`read_file`], [`clip`] (client
//!    text cut at a bound, at a character).
//!    No network, no clock reads, no tokio.
//! 2. **Adapters** — [`metrics`], [`store`] (embedded lock-free store, Redis;
//!    [`store::Limiter`] is the one door the request path calls, one room per limit kind
//!    behind it), [`top`] (who is limited), [`overrides`] (runtime per-key limits),
//!    [`files`] (every file the gateway writes, safely), [`coalesce`], [`conn`] (what one
//!    client connection shares with its requests), [`proxy`] (the request path as its
//!    phases, the upstream pool, the config snapshot), the gRPC front doors [`rls`] and
//!    [`rlqs`] with what they share ([`wire_text`], [`grpc_frames`], [`proto_wire`]),
//!    [`telemetry`] (OpenTelemetry traces), [`server`] (accepting and serving connections
//!    under their deadlines), [`admin`] (admin API, status page).
//! 3. **Wiring** — [`gateway`] (start-up, background tasks, signals, shutdown), [`workers`]
//!    (thread-per-core data plane), [`reload`], [`descriptors`], [`cli`], [`summary`],
//!    [`health`] (the `tollgate health` probe), [`control`] (`tollgate reload` and
//!    `tollgate top`: the command line as a client of a running gateway's admin API),
//!    [`log_format`] (the JSON log's lines), [`echo`] (`tollgate echo`, a demo upstream),
//!    [`fuzz_targets`] (the fuzzers' entry points).
//!
//! One request, top to bottom, is [`proxy::service::handle`]: load the snapshot once →
//! pass the overload gate → normalise the head → match the route → read the body's key
//! fields when a tier needs them → decide every tier with one `now`
//! ([`store::Limiter::check_request`]) → hold (`max_delay`), forward, or answer 429.
#![forbid(unsafe_code)]

pub mod admin;
pub mod cli;
pub mod clip;
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
pub mod read_file;
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
