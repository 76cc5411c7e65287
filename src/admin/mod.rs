//! The admin listener: health, metrics, limiter inspection, reload.

pub mod listener;
pub mod service;
