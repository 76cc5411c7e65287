//! Envoy's quota service (RLQS): `StreamRateLimitQuotas` answered on the `[rls]`
//! listener. Envoys report their buckets' usage; each report is charged to the bucket's
//! key and answered with the Envoy's share of the key as a token bucket it enforces on
//! its own. `stream.rs` speaks the gRPC stream (`grpc_frames` cuts its messages),
//! `assign.rs` turns a usage into an action (`keys.rs`: what a bucket is kept as;
//! `tracked.rs`: the buckets a stream holds and the bounds on them;
//! `render.rs`: a decided charge as the action Envoy applies; `resize.rs`: buckets answered
//! again between reports, and a stream's buckets of one key sized together),
//! `holders.rs` knows which Envoys share which
//! key (`fleet.rs`: across the servers of one Redis), `share.rs` is the arithmetic of a
//! share (`together.rs`: one stream's buckets of one key splitting the stream's), `top.rs` counts who is limited, `proto.rs` the messages.

pub mod assign;
pub mod fleet;
pub mod holders;
pub mod keys;
pub mod proto;
pub mod render;
pub mod resize;
pub mod share;
pub mod stream;
pub mod together;
pub mod top;
pub mod tracked;
pub mod wire_bounds;
