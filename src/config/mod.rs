//! Configuration in two stages: `raw` mirrors the TOML, `compile` validates it into
//! the immutable `model` (with its `policy` types) that the gateway runs on.

mod admin_token;
pub mod changes;
pub mod compile;
pub mod error;
pub mod model;
pub mod override_spec;
pub mod policy;
pub mod prices;
pub mod raw;
mod redact;
pub mod reload_report;
pub mod rlqs;
pub mod rls;
mod rls_tree;
pub mod route_index;
mod store_settings;
pub mod telemetry;

pub use admin_token::AdminToken;
pub use compile::{compile, load, ADMIN_MAX_CONNECTIONS, MAX_PERMITS};
pub use error::ConfigError;
pub use model::*;
pub use policy::*;
pub use prices::{Prices, Quote, Unpriced};
pub use redact::redact_url;
