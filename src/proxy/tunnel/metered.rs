//! A tunnel's bytes metered as they pass: before bytes read from one side are written to
//! the other, every byte tier of that way (`request_bytes` for the client's,
//! `response_bytes` for the upstream's) has drawn the units for them from its key, as a
//! metered body's do. At the key's bound that way waits while the key refills (within
//! the tier's `max_delay`), then the tunnel is closed; `max_cost` closes it too. What
//! passed each way settles the tiers when the tunnel ends.

use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::config::SettleSource;
use crate::proxy::settle::{pause_for, Ahead, BudgetExhausted, Cover, Measured, Settlement};
use crate::store::Draw;
use crate::store::StoreError;

/// What one read may carry: the unit a way pays for at a time.
const CHUNK: usize = 16 * 1024;

/// Which way bytes move.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Way {
    /// Read from the client, written upstream.
    Up,
    /// Read from the upstream, written to the client.
    Down,
}

/// A tunnel's tiers, and what has passed each way.
pub(super) struct Meter(parking_lot::Mutex<State>);

struct State {
    settlement: Settlement,
    /// Bytes passed from the client, and from the upstream.
    up: u64,
    down: u64,
}

impl State {
    /// Makes every tier pay for what has passed plus `n` bytes more `way`.
    fn cover(&mut self, way: Way, n: u64) -> Cover {
        let (up, down) = match way {
            Way::Up => (self.up.saturating_add(n), self.down),
            Way::Down => (self.up, self.down.saturating_add(n)),
        };
        let moved = |source: &SettleSource| match source {
            SettleSource::RequestBytes => up,
            _ => down,
        };
        self.settlement.cover_each(moved, Ahead::None)
    }
}

impl Meter {
    pub(super) fn new(settlement: Settlement) -> Self {
        Self(parking_lot::Mutex::new(State {
            settlement,
            up: 0,
            down: 0,
        }))
    }

    /// Carries bytes both ways until both sides have closed, one fails, or a tier
    /// closes the tunnel (then: which, and why).
    pub(super) async fn carry<C, S>(
        &self,
        client: &mut C,
        server: &mut S,
    ) -> Option<BudgetExhausted>
    where
        C: AsyncRead + AsyncWrite + Unpin,
        S: AsyncRead + AsyncWrite + Unpin,
    {
        // Each way's reads no larger than its tiers' pieces: a larger one could never be
        // paid (`Settlement::most_at_once`).
        let (up_read, down_read) = {
            let state = self.0.lock();
            let read = |most: Option<u64>| {
                most.map_or(CHUNK, |m| {
                    usize::try_from(m).unwrap_or(CHUNK).clamp(1, CHUNK)
                })
            };
            let uploads = |s: &SettleSource| *s == SettleSource::RequestBytes;
            (
                read(state.settlement.most_at_once(uploads)),
                read(state.settlement.most_at_once(|s| !uploads(s))),
            )
        };
        let (mut client_in, mut client_out) = tokio::io::split(client);
        let (mut server_in, mut server_out) = tokio::io::split(server);
        let up = self.pump(&mut client_in, &mut server_out, (Way::Up, up_read));
        let down = self.pump(&mut server_in, &mut client_out, (Way::Down, down_read));
        match tokio::try_join!(up, down) {
            Err(Stop::Cut(cut)) => Some(cut),
            _ => None,
        }
    }

    /// Settles every tier at what passed its way, as cut short when a tier closed the
    /// tunnel (`cut`); a tier that does not count bytes as a request cut short: a tunnel
    /// reports no value.
    pub(super) fn finish(self, cut: bool) {
        let State {
            settlement,
            up,
            down,
        } = self.0.into_inner();
        settlement.finish(|p| {
            let moved = match p.settle().source {
                SettleSource::RequestBytes => up,
                SettleSource::ResponseBytes => down,
                _ => return Measured::Aborted(0),
            };
            if cut {
                Measured::Cut(moved)
            } else {
                Measured::Bytes(moved)
            }
        });
    }

    /// Copies `from` to `to`, `read` bytes at most at a time, each read paid for before it
    /// is written; at `from`'s end, `to` is shut for writing (the other way may go on).
    async fn pump<R, W>(
        &self,
        from: &mut R,
        to: &mut W,
        (way, read): (Way, usize),
    ) -> Result<(), Stop>
    where
        R: AsyncRead + Unpin,
        W: AsyncWrite + Unpin,
    {
        let mut buf = vec![0u8; read];
        let mut paused = Duration::ZERO;
        let mut next_call_at = None;
        loop {
            // A way whose last short read called the store reads again only after a
            // gap, and then whatever came meanwhile: a tunnel draws no units ahead of its
            // bytes, so a client writing a byte at a time made one Redis call each
            // (Redis working for a byte of budget a call). A full read is a backlog, not
            // a trickle: it reads on at once (a gap after each would cap a bulk tunnel
            // at a buffer per gap).
            if let Some(at) = next_call_at.take() {
                tokio::time::sleep_until(at).await;
            }
            let n = from.read(&mut buf).await.map_err(|_| Stop::Closed)?;
            if n == 0 {
                let _already_closed = to.shutdown().await;
                return Ok(());
            }
            let called = self.pay(way, n as u64, &mut paused).await?;
            if paces(called, n, buf.len()) {
                next_call_at = Some(tokio::time::Instant::now() + STORE_CALL_GAP);
            }
            // Paid for: counted as passed before the write, which may not finish (the
            // other way closing the tunnel drops it part-way).
            self.passed(way, n as u64);
            to.write_all(&buf[..n]).await.map_err(|_| Stop::Closed)?;
            to.flush().await.map_err(|_| Stop::Closed)?;
        }
    }

    /// Waits until every tier has paid for `n` more bytes `way` (`true`: it called the
    /// store), or says which closes the tunnel. `paused`: how long this way has waited
    /// for its keys, in a row.
    async fn pay(&self, way: Way, n: u64, paused: &mut Duration) -> Result<bool, Stop> {
        let mut cover = self.0.lock().cover(way, n);
        let mut called = false;
        loop {
            cover = match cover {
                Cover::Paid => {
                    *paused = Duration::ZERO;
                    return Ok(called);
                }
                Cover::Cut(cut) => return Err(Stop::Cut(cut)),
                Cover::Call(call) => {
                    called = true;
                    let (i, answer) = call.await;
                    self.drew(i, answer, way, n)
                }
                Cover::Pause {
                    wait_ns,
                    max_delay_ns,
                    policy,
                } => {
                    let wait =
                        pause_for(paused, (wait_ns, max_delay_ns, policy)).map_err(Stop::Cut)?;
                    tokio::time::sleep(wait).await;
                    self.0.lock().cover(way, n)
                }
            };
        }
    }

    /// Counts `n` bytes as passed `way`.
    fn passed(&self, way: Way, n: u64) {
        let mut state = self.0.lock();
        match way {
            Way::Up => state.up = state.up.saturating_add(n),
            Way::Down => state.down = state.down.saturating_add(n),
        }
    }

    /// What a Redis draw for tier `i` answered, and what covering `n` more bytes `way`
    /// asks next.
    fn drew(&self, i: usize, answer: Result<Draw, StoreError>, way: Way, n: u64) -> Cover {
        let mut state = self.0.lock();
        match state.settlement.drew(i, answer) {
            Some(next) => next,
            None => state.cover(way, n),
        }
    }
}

/// The least time between a store call of one way of a tunnel for a short read and its
/// next read: at most 100 such calls a second, whatever the client's writes (each other
/// call pays for a full buffer), for at most this much added to a byte's way through a
/// tunnel whose keys Redis holds (on the memory store a draw is no call, and no way
/// waits).
const STORE_CALL_GAP: Duration = Duration::from_millis(10);

/// Whether a way waits [`STORE_CALL_GAP`] before its next read: after a read of `n` bytes
/// into a buffer of `capacity` that `called` the store, when the read was short (the
/// client trickles; a full one means more is waiting).
fn paces(called: bool, n: usize, capacity: usize) -> bool {
    called && n < capacity
}

/// Why one way stopped before its end.
enum Stop {
    /// A side failed or went away.
    Closed,
    /// A tier closed the tunnel.
    Cut(BudgetExhausted),
}

#[cfg(test)]
mod tests {
    use super::paces;

    #[test]
    fn only_a_short_read_that_called_the_store_waits() {
        assert!(paces(true, 1, 16_384), "a trickle that called the store");
        assert!(!paces(true, 16_384, 16_384), "a backlog reads on at once");
        assert!(!paces(false, 1, 16_384), "no call, no wait");
    }
}
