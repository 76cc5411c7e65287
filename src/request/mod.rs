//! What the gateway reads from a request before routing it: the canonical path and the
//! one host it is for. Pure functions; the request path applies them.

pub mod host;
pub mod path;
