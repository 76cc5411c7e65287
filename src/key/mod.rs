//! Limiter keys: where each part comes from, who the client is, and how parts compose.

pub mod client_ip;
pub mod compose;
pub mod fleet;
pub mod headers;
pub mod redis_key;
pub mod source;

pub use client_ip::TrustedProxies;
pub use compose::KeyHasher;
pub use fleet::{FleetKey, FleetSecret, KeySecret};
pub use headers::KeyHeaders;
pub use redis_key::{RedisKey, RedisKeyBuilder};
pub use source::{KeyPart, KeySource, KeyValues, RequestView, MAX_KEY_VALUES};
