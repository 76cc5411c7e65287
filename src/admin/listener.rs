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

/// Admin requests are small: their headers fit in this, beside a request target of up
/// to [`MAX_TARGET_BYTES`].
const ADMIN_MAX_HEADER_BYTES: usize = 16 * 1024;
const _: () = assert!(crate::config::AdminToken::MAX_LEN + 1024 < ADMIN_MAX_HEADER_BYTES);

/// The longest request target hyper reads (a longer one is `414` whatever the head's
/// room): a key path up to it can be inspected and reset, a key of up to 64 KiB of
/// plain bytes (a third of that where every byte is percent-encoded).
const MAX_TARGET_BYTES: usize = 64 * 1024;

/// The largest admin request head: the target's room and the headers'. Past it is `431`.
const ADMIN_MAX_HEAD_BYTES: usize = MAX_TARGET_BYTES + ADMIN_MAX_HEADER_BYTES;

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
        .header_read_timeout(server.header_read_timeout)
        .max_buf_size(ADMIN_MAX_HEAD_BYTES);
    loop {
        let Some((permit, stream, _)) =
            accept_bounded(&listener, &permits, &mut shutdown, "admin accept failed").await
        else {
            break;
        };
        let shared = shared.clone();
        let http = http.clone();
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
