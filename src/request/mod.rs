//! What the gateway reads from a request before routing it: the canonical path and the
//! one host it is for; and, for keys, the parameters frameworks read from its body and the
//! charset some read them in. Pure
//! functions; the request path applies them.

pub mod charset;
pub mod form;
pub mod host;
pub mod path;
