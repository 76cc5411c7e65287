//! Reading a JSON request body without building it: RFC 6901 pointers (`pointer.rs`) and
//! one pass over the body that picks out every value a route's pointers name (`walk.rs`).
//! Pure: bytes in, borrowed values out.

mod pointer;
mod walk;

pub use pointer::{JsonPointer, PointerError};
pub use walk::{walk, BodyFacts, NotJson, MAX_POINTERS};
