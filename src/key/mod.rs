//! Limiter keys: where each part comes from, who the client is, and how parts compose.

pub mod client_ip;
pub mod compose;
pub mod source;

pub use client_ip::TrustedProxies;
pub use compose::KeyHasher;
pub use source::{KeyPart, KeySource, KeySourceError, RequestView};
