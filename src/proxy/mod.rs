//! The data plane: the request path (`service`, drawn as its phases: `admit`, `forward`,
//! `respond`, `access_log`), what it does to heads (`head`, `hop`), bodies (`body`,
//! `settle`, `request_trailers`), tunnels (`tunnel`), the upstream pool (`pool`), the responses the gateway
//! writes itself (`response`; as gRPC for gRPC calls: `grpc`), and the config snapshot a
//! request reads (`snapshot`).

pub mod access_log;
pub mod admit;
pub mod body;
pub mod body_coding;
pub mod forward;
pub mod grpc;
pub mod head;
pub mod hop;
pub mod key_body;
pub mod pool;
pub mod record;
pub mod request_trailers;
pub mod respond;
pub mod response;
pub mod response_body;
pub mod service;
pub mod settle;
pub mod snapshot;
pub mod spans;
pub mod tunnel;
