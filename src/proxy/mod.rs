//! The data plane: the request path, forwarding, and the responses the gateway writes.

pub mod body;
pub mod forward;
pub mod head;
pub mod pool;
pub mod response;
pub mod service;
pub mod settle;
pub mod tunnel;
