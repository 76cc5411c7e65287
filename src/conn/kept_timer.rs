//! Per-request deadlines (the upstream's response `timeout`, hyper's header-read timeout)
//! on timers the client connection keeps from request to request. A fresh tokio timer per
//! request is entered into the timer wheel on its first poll and taken out again when
//! dropped, which under callgrind cost more than the rest of the deadline. A kept timer is
//! never pushed later on the way in: one that fires before the request's own deadline is
//! moved to it then, so on a busy connection the timer is reset about once per timeout,
//! not once per request. Deadlines stay exact either way.

use std::future::Future;
use std::ops::Deref;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use parking_lot::Mutex;
use tokio::time::{Instant, Sleep};

/// A client connection's spare timer. HTTP/2 streams in flight at once take turns: a
/// stream that finds it taken uses a timer of its own.
#[derive(Debug, Default)]
pub struct KeptTimer(Mutex<Option<Pin<Box<Sleep>>>>);

impl KeptTimer {
    /// Runs `fut` until `deadline`; `None` if the deadline came first.
    pub fn within<F: Future>(&self, deadline: Instant, fut: F) -> Within<'_, F> {
        Within {
            fut,
            held: Held::new(self),
            deadline,
        }
    }

    /// The spare timer (or a new one), due no later than `deadline`.
    fn take(&self, deadline: Instant) -> Pin<Box<Sleep>> {
        match self.0.lock().take() {
            Some(mut timer) => {
                if timer.deadline() > deadline {
                    timer.as_mut().reset(deadline);
                }
                timer
            }
            None => Box::pin(tokio::time::sleep_until(deadline)),
        }
    }

    fn put(&self, timer: Pin<Box<Sleep>>) {
        *self.0.lock() = Some(timer);
    }
}

/// Ready once `deadline` has passed, on `timer` (due no later than `deadline`).
fn poll_deadline(timer: &mut Pin<Box<Sleep>>, deadline: Instant, cx: &mut Context<'_>) -> Poll<()> {
    while timer.as_mut().poll(cx).is_ready() {
        // Set for an earlier request: not this request's deadline yet.
        if Instant::now() >= deadline {
            return Poll::Ready(());
        }
        timer.as_mut().reset(deadline);
    }
    Poll::Pending
}

pin_project_lite::pin_project! {
    /// [`KeptTimer::within`]'s future (a struct, not an `async fn`, so the request's
    /// future is moved into it once).
    pub struct Within<'a, F> {
        #[pin]
        fut: F,
        held: Held<&'a KeptTimer>,
        deadline: Instant,
    }
}

impl<F: Future> Future for Within<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.project();
        if let Poll::Ready(out) = this.fut.poll(cx) {
            return Poll::Ready(Some(out));
        }
        let deadline = *this.deadline;
        poll_deadline(this.held.timer(deadline), deadline, cx).map(|()| None)
    }
}

/// A connection's kept timer while one deadline uses it: taken from its slot at the first
/// poll, put back when the deadline is done with (or dropped).
struct Held<S: Deref<Target = KeptTimer>> {
    slot: S,
    timer: Option<Pin<Box<Sleep>>>,
}

impl<S: Deref<Target = KeptTimer>> Held<S> {
    fn new(slot: S) -> Self {
        Self { slot, timer: None }
    }

    /// The timer, due no later than `deadline`.
    fn timer(&mut self, deadline: Instant) -> &mut Pin<Box<Sleep>> {
        self.timer.get_or_insert_with(|| self.slot.take(deadline))
    }
}

impl<S: Deref<Target = KeptTimer>> Drop for Held<S> {
    fn drop(&mut self) {
        if let Some(timer) = self.timer.take() {
            self.slot.put(timer);
        }
    }
}

/// hyper's timer for one HTTP/1 client connection, used for its header-read timeout:
/// hyper drops that timer once a request's head is read and asks for a new one for the
/// next, and each of them runs on the connection's kept timer.
#[derive(Clone, Default)]
pub struct HeaderTimer(Arc<KeptTimer>);

impl hyper::rt::Timer for HeaderTimer {
    fn sleep(&self, duration: std::time::Duration) -> Pin<Box<dyn hyper::rt::Sleep>> {
        self.sleep_until((Instant::now() + duration).into_std())
    }

    fn sleep_until(&self, deadline: std::time::Instant) -> Pin<Box<dyn hyper::rt::Sleep>> {
        Box::pin(KeptSleep {
            held: Held::new(self.0.clone()),
            deadline: deadline.into(),
        })
    }

    fn reset(&self, sleep: &mut Pin<Box<dyn hyper::rt::Sleep>>, new_deadline: std::time::Instant) {
        match sleep.as_mut().downcast_mut_pin::<KeptSleep>() {
            Some(mut kept) => kept.move_to(new_deadline.into()),
            None => *sleep = self.sleep_until(new_deadline),
        }
    }

    fn now(&self) -> std::time::Instant {
        Instant::now().into_std()
    }
}

/// One of hyper's timers, on the connection's kept timer.
struct KeptSleep {
    held: Held<Arc<KeptTimer>>,
    deadline: Instant,
}

impl KeptSleep {
    fn move_to(&mut self, deadline: Instant) {
        self.deadline = deadline;
        if let Some(timer) = self.held.timer.as_mut() {
            if timer.deadline() > deadline {
                timer.as_mut().reset(deadline);
            }
        }
    }
}

impl Future for KeptSleep {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = &mut *self;
        poll_deadline(this.held.timer(this.deadline), this.deadline, cx)
    }
}

impl hyper::rt::Sleep for KeptSleep {}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::clock::paused_runtime;

    const SECOND: Duration = Duration::from_secs(1);

    #[test]
    fn a_timer_kept_from_an_earlier_request_does_not_cut_a_later_one_short() {
        paused_runtime().block_on(async {
            let kept = KeptTimer::default();
            let start = Instant::now();
            // Leaves a timer due at 10 s in the slot.
            assert_eq!(kept.within(start + 10 * SECOND, async { 1 }).await, Some(1));
            tokio::time::advance(5 * SECOND).await;
            // Due at 15 s, done at 12 s: the kept timer fires at 10 s and is moved on.
            let slow = tokio::time::sleep_until(start + 12 * SECOND);
            assert_eq!(kept.within(start + 15 * SECOND, slow).await, Some(()));
            assert_eq!(Instant::now() - start, 12 * SECOND);
        });
    }

    #[test]
    fn a_request_that_outlasts_its_deadline_ends_at_the_deadline() {
        paused_runtime().block_on(async {
            let kept = KeptTimer::default();
            let start = Instant::now();
            assert_eq!(kept.within(start + 10 * SECOND, async {}).await, Some(()));
            tokio::time::advance(5 * SECOND).await;
            let never = std::future::pending::<()>();
            assert_eq!(kept.within(start + 15 * SECOND, never).await, None);
            assert_eq!(Instant::now() - start, 15 * SECOND);
        });
    }

    #[test]
    fn a_kept_timer_due_later_is_brought_forward_to_a_shorter_deadline() {
        paused_runtime().block_on(async {
            let kept = KeptTimer::default();
            let start = Instant::now();
            assert_eq!(kept.within(start + 100 * SECOND, async {}).await, Some(()));
            let never = std::future::pending::<()>();
            assert_eq!(kept.within(start + 5 * SECOND, never).await, None);
            assert_eq!(Instant::now() - start, 5 * SECOND);
        });
    }

    #[test]
    fn the_timer_goes_back_when_a_request_is_dropped_half_way() {
        paused_runtime().block_on(async {
            let kept = KeptTimer::default();
            let start = Instant::now();
            let never = std::future::pending::<()>();
            let cut = tokio::time::timeout(SECOND, kept.within(start + 60 * SECOND, never)).await;
            assert!(cut.is_err(), "the request was still waiting");
            let back = kept.0.lock().as_ref().map(|t| t.deadline());
            assert_eq!(back, Some(start + 60 * SECOND));
        });
    }

    #[test]
    fn streams_in_flight_at_once_each_keep_their_own_deadline() {
        paused_runtime().block_on(async {
            let kept = KeptTimer::default();
            let start = Instant::now();
            let never = || std::future::pending::<()>();
            let (a, b) = tokio::join!(
                kept.within(start + 3 * SECOND, never()),
                kept.within(start + 7 * SECOND, async {
                    tokio::time::sleep(5 * SECOND).await;
                    7
                }),
            );
            assert_eq!((a, b), (None, Some(7)));
            assert_eq!(Instant::now() - start, 5 * SECOND);
        });
    }

    #[test]
    fn hyper_header_timers_fire_at_their_own_deadlines() {
        use hyper::rt::Timer as _;
        paused_runtime().block_on(async {
            let timer = HeaderTimer::default();
            let start = Instant::now();
            // A first head read, done at once: leaves a timer due at 10 s.
            let mut first = timer.sleep_until((start + 10 * SECOND).into_std());
            assert!(futures_poll_once(first.as_mut()).await.is_pending());
            drop(first);
            tokio::time::advance(5 * SECOND).await;
            // The next, due at 15 s, is not cut when the kept timer fires at 10 s.
            timer.sleep_until((start + 15 * SECOND).into_std()).await;
            assert_eq!(Instant::now() - start, 15 * SECOND);
            // Reset to an earlier deadline than the one it was made with: that one counts.
            let mut third = timer.sleep_until((start + 100 * SECOND).into_std());
            assert!(futures_poll_once(third.as_mut()).await.is_pending());
            timer.reset(&mut third, (start + 20 * SECOND).into_std());
            third.await;
            assert_eq!(Instant::now() - start, 20 * SECOND);
        });
    }

    /// Polls `fut` once.
    async fn futures_poll_once<F: Future + ?Sized>(mut fut: Pin<&mut F>) -> Poll<F::Output> {
        std::future::poll_fn(|cx| Poll::Ready(fut.as_mut().poll(cx))).await
    }
}
