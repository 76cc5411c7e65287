//! Envoy's rate limit service (RLS v3): `ShouldRateLimit` answered from the same
//! policies, store, overrides and metrics as proxied requests. `listener.rs` accepts,
//! `service.rs` speaks gRPC, `decide.rs` turns a call into one limiter decision,
//! `render.rs` turns that decision into Envoy's `RateLimitResponse` (`proto.rs`),
//! `stated.rs` states a policy's rate in Envoy's units, `log.rs` writes a call's access
//! log line and `top.rs` counts its keys for `/admin/top`.

pub mod decide;
pub mod listener;
pub mod log;
pub mod proto;
pub mod render;
pub mod service;
pub mod stated;
pub mod top;
