//! What the gateway knows about one client connection, shared by the listener that
//! accepted it and the requests it carries: who the peer is, its requests in flight (for
//! the idle timeout), its slot among `max_connections`, and each HTTP/2 stream's send
//! progress (for `send_timeout`).

pub mod activity;
pub mod kept_timer;
pub mod load;
pub mod progress;
pub mod worker;

use std::net::SocketAddr;
use std::sync::Arc;

pub use activity::{Activity, InFlight};
pub use kept_timer::{HeaderTimer, KeptTimer};

/// What the accepting connection knows about itself, shared by its requests.
#[derive(Debug)]
pub struct ConnContext {
    pub peer: SocketAddr,
    /// The peer's address as an `X-Forwarded-For` item, written once per connection.
    pub peer_text: http::HeaderValue,
    pub tls: bool,
    /// Requests in flight, for the idle timeout.
    pub activity: Arc<Activity>,
    /// The listener's connection permits: a tunnel takes one of its own.
    pub permits: Arc<tokio::sync::Semaphore>,
    /// Held while the connection (or a tunnel from it) is open; the drain waits for it.
    pub open: tokio::sync::mpsc::Sender<()>,
    /// What the connection keeps between its requests upstream (affinity, deadline timer).
    pub upstream: ClientMemory,
}

pub type ConnInfo = Arc<ConnContext>;

/// What a client connection keeps between its requests upstream.
#[derive(Debug, Default)]
pub struct ClientMemory {
    /// The upstream connection its last response came over (0: none): the next request
    /// prefers it, so a keep-alive client keeps a warm path upstream.
    pub affinity: Arc<std::sync::atomic::AtomicU64>,
    /// The response deadline's timer.
    pub timer: KeptTimer,
}

/// `ip` as header text (`192.0.2.1`, `2001:db8::1`).
pub fn ip_text(ip: std::net::IpAddr) -> http::HeaderValue {
    http::HeaderValue::from_str(&ip.to_string())
        .unwrap_or_else(|_| http::HeaderValue::from_static("unknown"))
}
