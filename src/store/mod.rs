//! Where limiter state lives: the embedded memory store (default).

pub mod memory;

pub use memory::MemoryStore;
