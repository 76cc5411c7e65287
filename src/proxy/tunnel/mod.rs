//! Upgraded connections (WebSocket and the like): bytes copied both ways until either
//! side closes or neither sends for `tunnel_idle_timeout`. A tunnel holds one of the
//! listener's connection permits and keeps the drain waiting, like any connection. A
//! route's byte tiers meter its bytes as they pass, each way, as they meter a body
//! ([`metered`]): a WebSocket would otherwise move any number of bytes for the price of
//! the request that opened it, and paying at its end would let one tunnel run a key
//! as far into debt as it likes.

mod activity;
mod metered;

use std::sync::Arc;
use std::time::Duration;

use hyper::upgrade::OnUpgrade;
use hyper_util::rt::TokioIo;
use tokio::sync::{oneshot, OwnedSemaphorePermit};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;

use crate::conn::ConnInfo;
use crate::metrics::{tunnel_end, ResultLabels};
use crate::proxy::access_log::{write_tunnel, TunnelClosed as Closed, TunnelOpened as Opened};
use crate::proxy::settle::{CutReason, Settlement};
use activity::{idle, LastActivity, Touching};

/// A tunnel about to run: both upgraded connections, and what it holds for its life.
pub struct Tunnel {
    pub client: OnUpgrade,
    pub upstream: OnUpgrade,
    /// Its connection slot (`max_connections`).
    pub permit: OwnedSemaphorePermit,
    /// The client connection's facts (and the drain's count of it).
    pub conn: ConnInfo,
    pub idle_timeout: Duration,
    pub gauge: prometheus_client::metrics::gauge::Gauge,
    /// `tollgate_tunnels_closed_total`, counted when it ends.
    pub closed: Family<ResultLabels, Counter>,
    /// The request's concurrency slots.
    pub slots: super::response_body::HeldSlots,
    /// Where the tiers its bytes settle come from ([`TunnelSettle::hand_over`]).
    pub settle: oneshot::Receiver<Settlement>,
    /// What its access log line names, taken as it opened.
    pub opened: Opened,
}

/// Where the response that opened a tunnel hands it the tiers its bytes settle (in the
/// response's extensions): `None` once handed over.
#[derive(Clone)]
pub struct TunnelSettle(Arc<parking_lot::Mutex<Option<oneshot::Sender<Settlement>>>>);

impl TunnelSettle {
    /// A tunnel's settle: the receiver for the tunnel, this for the response.
    pub fn new() -> (oneshot::Receiver<Settlement>, Self) {
        let (tx, rx) = oneshot::channel();
        (rx, Self(Arc::new(parking_lot::Mutex::new(Some(tx)))))
    }

    /// Gives the tunnel the tiers it settles. When no tunnel runs (an upgrade that
    /// failed, a gateway shutting down) they are dropped, which settles them as having
    /// moved nothing.
    pub fn hand_over(&self, settlement: Settlement) {
        if let Some(tx) = self.0.lock().take() {
            let _unsent_settles_on_drop = tx.send(settlement);
        }
    }
}

impl Tunnel {
    /// Runs the tunnel between the client's and the upstream's upgraded connections.
    pub fn spawn(self) {
        let Tunnel {
            client,
            upstream,
            permit,
            conn,
            idle_timeout,
            gauge,
            closed,
            slots,
            settle,
            opened,
        } = self;
        gauge.inc();
        tokio::spawn(async move {
            let held = (permit, conn, OpenGauge(gauge), slots);
            let ended = run((client, upstream), idle_timeout, settle, held).await;
            if let Some(ended) = ended {
                let result = ended.result;
                closed.get_or_create(&ResultLabels { result }).inc();
                write_tunnel(&opened, &ended);
            }
        });
    }
}

/// Copies both ways until either side closes or goes idle, metering the bytes its
/// settlement's tiers are paid by; `_held` lives as long. How it closed (`None`: it
/// never opened).
async fn run<H>(
    (client, upstream): (OnUpgrade, OnUpgrade),
    idle_timeout: Duration,
    mut settle: oneshot::Receiver<Settlement>,
    _held: H,
) -> Option<Closed> {
    let (Ok(client), Ok(server)) = (client.await, upstream.await) else {
        return None;
    };
    // The client's side opens once the 101 is written, which is after the response
    // handed over its settlement, if it has one: nothing to wait for.
    let settlement = settle.try_recv().ok();
    let last = Arc::new(LastActivity::new());
    let mut client = Touching::new(TokioIo::new(client), last.clone());
    let mut server = Touching::new(TokioIo::new(server), last.clone());
    // Tiers that settle on no byte (a trailer, a usage): a tunnel reports no value, so
    // they settle as a request cut short (`Measured::Aborted`) when dropped at its end.
    let (meter, _unmetered) = match settlement {
        Some(settlement) if settlement.meters() => (Some(metered::Meter::new(settlement)), None),
        other => (None, other),
    };
    let carried = async {
        let Some(meter) = &meter else {
            let _ = tokio::io::copy_bidirectional(&mut client, &mut server).await;
            return None;
        };
        meter.carry(&mut client, &mut server).await
    };
    let (result, cut) = tokio::select! {
        cut = carried => match cut {
            None => (tunnel_end::ENDED, None),
            Some(cut) => (match cut.why {
                CutReason::Budget => tunnel_end::BUDGET,
                CutReason::MaxCost => tunnel_end::MAX_COST,
                CutReason::Store => tunnel_end::STORE,
            }, Some(cut.policy)),
        },
        () = idle(&last, idle_timeout) => {
            tracing::debug!(?idle_timeout, "tunnel closed: no bytes either way");
            (tunnel_end::IDLE, None)
        }
    };
    if let Some(meter) = meter {
        meter.finish(cut.is_some());
    }
    Some(Closed {
        result,
        policy: cut,
        from_client: client.read(),
        from_upstream: server.read(),
    })
}

/// Counts the tunnel in `tollgate_open_connections` until it ends.
struct OpenGauge(prometheus_client::metrics::gauge::Gauge);

impl Drop for OpenGauge {
    fn drop(&mut self) {
        self.0.dec();
    }
}
