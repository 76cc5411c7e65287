//! The data plane runs thread-per-core, like nginx's worker processes: each worker thread
//! has its own single-threaded runtime and its own `SO_REUSEPORT` listener on the same
//! address, so the kernel spreads connections and a request never crosses threads.

use std::net::SocketAddr;
use std::sync::Arc;

use socket2::{Domain, Protocol, Socket, Type};
use tokio::sync::{oneshot, watch, Semaphore};

use crate::proxy::snapshot::Shared;

/// Pending connections the kernel queues per listener.
const LISTEN_BACKLOG: i32 = 4096;

fn bind(addr: SocketAddr) -> std::io::Result<std::net::TcpListener> {
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, Some(Protocol::TCP))?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.set_nonblocking(true)?;
    socket.bind(&addr.into())?;
    socket.listen(LISTEN_BACKLOG)?;
    Ok(socket.into())
}

/// Binds `count` listeners on `addr` (the first picks the port when it is 0).
pub fn bind_all(
    addr: SocketAddr,
    count: usize,
) -> std::io::Result<(SocketAddr, Vec<std::net::TcpListener>)> {
    // SO_REUSEPORT would let us share a port another gateway already serves, splitting its
    // traffic. A plain bind first fails with "address in use" in that case.
    if addr.port() != 0 {
        drop(std::net::TcpListener::bind(addr)?);
    }
    let first = bind(addr)?;
    let bound = first.local_addr()?;
    let mut listeners = vec![first];
    for _ in 1..count.max(1) {
        listeners.push(bind(bound)?);
    }
    Ok((bound, listeners))
}

/// A running worker: it reports on `done` once it has drained, then keeps its runtime
/// going (serving nothing) until `release` is sent or dropped: what was spawned on it may
/// include the Redis connection, which the shutdown's last calls (leased slices given
/// back) still need.
pub struct Worker {
    pub done: oneshot::Receiver<()>,
    pub release: oneshot::Sender<()>,
    pub thread: std::thread::JoinHandle<()>,
}

/// Starts one worker thread per listener.
pub fn spawn(
    listeners: Vec<std::net::TcpListener>,
    shared: &Arc<Shared>,
    shutdown: &watch::Receiver<bool>,
) -> std::io::Result<Vec<Worker>> {
    let permits = Arc::new(Semaphore::new(shared.config().server.max_connections));
    let mut workers = Vec::with_capacity(listeners.len());
    for (index, listener) in listeners.into_iter().enumerate() {
        let (shared, shutdown, permits) = (shared.clone(), shutdown.clone(), permits.clone());
        let (done_tx, done) = oneshot::channel();
        let (release, released) = oneshot::channel::<()>();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()?;
        let thread = std::thread::Builder::new()
            .name(format!("tollgate-worker-{index}"))
            .spawn(move || {
                crate::conn::worker::set(index);
                runtime.block_on(async move {
                    match tokio::net::TcpListener::from_std(listener) {
                        Ok(listener) => {
                            crate::server::serve(listener, shared, permits, shutdown).await
                        }
                        Err(e) => {
                            tracing::error!(error = %e, "worker {index} cannot use its listener")
                        }
                    }
                });
                let _ = done_tx.send(());
                let _ = runtime.block_on(released);
                // Tasks still running (tunnels) end with the runtime.
                drop(runtime);
            })?;
        workers.push(Worker {
            done,
            release,
            thread,
        });
    }
    Ok(workers)
}

#[cfg(test)]
mod tests {
    /// The config clamps `max_connections` and `max_requests` to its own copy of the bound
    /// (it stays free of the runtime): past tokio's, `Semaphore::new` would panic.
    #[test]
    fn the_configs_permit_bound_is_tokios() {
        assert_eq!(
            crate::config::MAX_PERMITS,
            tokio::sync::Semaphore::MAX_PERMITS
        );
    }
}
