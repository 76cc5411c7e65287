//! The admin listener: health, metrics, limiter inspection, runtime overrides, reload.

pub mod answer;
pub mod auth;
pub mod key_state;
pub mod listener;
pub mod overrides;
pub mod service;
pub mod top;

/// The header every answer of the admin listener carries (value `1`), refusals included;
/// nothing the gateway writes on the data plane carries it. `tollgate reload` and
/// `tollgate top` see it on a token-less `GET /healthz` before they send the admin token,
/// so a command pointed at another port does not hand the token to an upstream.
pub const IDENTITY_HEADER: &str = "tollgate-admin";
