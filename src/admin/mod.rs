//! The admin listener: health, metrics, limiter inspection, runtime overrides, reload.

pub mod answer;
pub mod auth;
pub mod key_state;
pub mod listener;
pub mod overrides;
mod overrides_list;
pub mod service;
pub mod top;
