//! Reading a JSON request body without building it: RFC 6901 pointers (`pointer.rs`) and
//! one pass over the body that picks out every value a route's pointers name (`walk.rs`),
//! and a JSON-RPC request's id for the answer to a refused one (`rpc.rs`).
//! Pure: bytes in, borrowed values out.

mod pointer;
pub mod rpc;
mod walk;

pub use pointer::{JsonPointer, PointerError};
pub use walk::{walk, BodyFacts, NotJson, MAX_POINTERS};
