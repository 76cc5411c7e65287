//! OpenTelemetry traces: a sampled request's server span (and its upstream call's client
//! span) exported over OTLP, and W3C `traceparent` carried upstream. `context.rs` reads
//! and writes `traceparent`, `sampler.rs` decides which requests are sampled (nothing is
//! built for the others), `span.rs` turns what a request's trace recorded into spans,
//! `export.rs` batches them to the collector on a task of its own, `proto.rs` is OTLP's
//! messages.

pub mod context;
pub mod export;
pub mod proto;
pub mod sampler;
pub mod span;
