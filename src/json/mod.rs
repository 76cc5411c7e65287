//! Reading a JSON request body without building it: RFC 6901 pointers (`pointer.rs`) and
//! one pass over the body that picks out every value a route's pointers name (`walk.rs`),
//! a JSON-RPC request's id for the answer to a refused one (`rpc.rs`), and a body in
//! UTF-16, UTF-32 or behind a byte order mark read as UTF-8 (`unicode.rs`), a strict
//! copy of a body only lenient readers take (`lenient.rs`), and how a member's name is
//! read and matched (`names.rs`).
//! Pure: bytes in, borrowed values out.

mod lenient;
mod names;
mod pointer;
pub mod rpc;
mod unicode;
mod walk;

pub use lenient::strict_copy;
pub(crate) use names::{names, Key};
pub use pointer::{JsonPointer, PointerError};
pub use unicode::to_utf8;
pub use walk::{walk, BodyFacts, NotJson, MAX_POINTERS};
