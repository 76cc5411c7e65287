//! Test harness: a real upstream HTTP server, a real gateway on 127.0.0.1:0, real HTTP/1.1
//! and HTTP/2 clients, the real binary and real Redis servers. Nothing is mocked.
//!
//! Everything is re-exported here: tests `use crate::support::*;`.

#![allow(dead_code)]

mod alloc;
mod answers;
mod certs;
mod client;
mod envoy;
mod fixture;
mod gateway;
mod grpc;
mod key_state;
mod llm;
mod llm_responses;
mod poll;
mod process;
mod redis_monitor;
mod redis_server;
mod rlqs;
mod rls;
mod script_upstream;
mod sentinel;
mod upstream;

pub use alloc::*;
pub use certs::*;
pub use client::*;
pub use envoy::*;
pub use fixture::*;
pub use gateway::*;
pub use grpc::*;
pub use key_state::*;
pub use llm::*;
pub use poll::*;
pub use process::*;
pub use redis_monitor::*;
pub use redis_server::*;
pub use rlqs::*;
pub use rls::*;
pub use script_upstream::*;
pub use sentinel::*;
pub use upstream::*;
