//! Integration tests: the real gateway, real sockets, a real upstream.

// Tests may read the real clock (timeouts, deadlines); the gateway itself may not.
#![allow(clippy::disallowed_methods)]

mod support;

mod access_log;
mod admin;
mod admin_overrides;
mod admin_overrides_kept;
mod answers;
mod bounds;
mod browser;
mod budget_bodies;
mod budget_fleet;
mod budgets;
mod concurrency;
mod concurrency_fleet;
mod config;
mod config_reload;
mod config_warnings;
mod container;
mod container_podman;
mod control;
mod cookbook;
mod dashboard;
mod docs;
mod faults;
mod fuzz_corpus;
mod grpc;
mod header_truth;
mod health;
mod hostile;
mod key_secret;
mod kubernetes;
mod kubernetes_security;
mod lease;
mod limits;
mod operations;
mod parked;
mod pool;
mod problem;
mod proxy;
mod quota_fleet;
mod quota_integrity;
mod quota_redis;
mod quotas;
mod readme;
mod redis;
mod rls;
mod rls_envoy;
mod rls_hostile;
mod rls_redis;
mod settle;
mod settle_fleet;
mod silent_clients;
mod spellings;
mod spellings_keys;
mod store_calls;
mod store_health;
mod store_outage;
mod tls;
mod tls_names;
mod top;
mod top_adversarial;
mod upstream_http2;
mod upstream_http2_life;
