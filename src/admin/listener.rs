//! The admin listener's accept loop, bounded like the data plane: a connection cap, the
//! header timeout (silent and slow clients are cut), and a graceful drain on shutdown,
//! so a slowloris against the admin port cannot stop `/healthz` answering.

use std::sync::Arc;

use hyper::service::service_fn;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use tokio::net::TcpListener;
use tokio::sync::{watch, Semaphore};

use crate::config::ADMIN_MAX_CONNECTIONS;
use crate::proxy::snapshot::Shared;
use crate::server::deadline::SendDeadline;
use crate::server::{accept_bounded, preface};

/// Admin requests are small: their headers fit in this, or in three times the data
/// plane's `max_header_bytes` if larger ([`head_bytes`]).
const ADMIN_MAX_HEADER_BYTES: usize = 16 * 1024;
const _: () = assert!(crate::config::AdminToken::MAX_LEN + 1024 < ADMIN_MAX_HEADER_BYTES);

/// The largest admin request head: room for any key a request can make, percent-encoded
/// in the path (three bytes a byte), so a key of any length a client can send can be
/// inspected and reset. Read from the running config for each connection.
fn head_bytes(server: &crate::config::Server) -> usize {
    server
        .max_header_bytes
        .saturating_mul(3)
        .saturating_add(ADMIN_MAX_HEADER_BYTES)
}

/// Serves admin connections until `shutdown` flips, then drains them for up to `drain`.
pub async fn serve(
    listener: TcpListener,
    shared: Arc<Shared>,
    mut shutdown: watch::Receiver<bool>,
) {
    let server = shared.config().server.clone();
    let permits = Arc::new(Semaphore::new(ADMIN_MAX_CONNECTIONS));
    let graceful = GracefulShutdown::new();
    let mut http = hyper::server::conn::http1::Builder::new();
    http.timer(TokioTimer::new())
        .header_read_timeout(server.header_read_timeout);
    loop {
        let Some((permit, stream, _)) =
            accept_bounded(&listener, &permits, &mut shutdown, "admin accept failed").await
        else {
            break;
        };
        let shared = shared.clone();
        let mut http = http.clone();
        http.max_buf_size(head_bytes(&shared.config().server));
        let watcher = graceful.watcher();
        let (deadline, send_timeout) = (server.header_read_timeout, server.send_timeout);
        tokio::spawn(async move {
            if let Some(io) = preface::read_start(stream, deadline).await {
                // A client that stops reading an answer is cut like on the data plane;
                // between requests the header timeout closes idle connections.
                let io = SendDeadline::new(io, send_timeout);
                let svc = service_fn(move |req| crate::admin::service::handle(shared.clone(), req));
                let _ = watcher
                    .watch(http.serve_connection(TokioIo::new(io), svc))
                    .await;
            }
            drop(permit);
        });
    }
    drop(listener);
    if tokio::time::timeout(server.drain_timeout, graceful.shutdown())
        .await
        .is_err()
    {
        tracing::warn!("admin drain deadline passed; closing remaining admin connections");
    }
}
