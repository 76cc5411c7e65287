//! Whether a request left for its upstream: the pool marks it as it hands the request to
//! a connection. A settled request whose client leaves before that used nothing
//! upstream, and is charged so; one that left may be running there, and is charged as a
//! hang-up. Only settled requests carry a mark (an extension); the others pay one empty
//! look-up.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use http::Request;

/// The flag a request's settle reads, in the request's extensions.
#[derive(Clone)]
pub struct SentMark(Arc<AtomicBool>);

impl SentMark {
    /// Puts a mark on `req`; the flag it sets when the request is sent.
    pub fn on<B>(req: &mut Request<B>) -> Arc<AtomicBool> {
        let flag = Arc::new(AtomicBool::new(false));
        req.extensions_mut().insert(SentMark(flag.clone()));
        flag
    }
}

/// `req` is handed to a connection now (set before the first byte can be written: a
/// request marked sent may not have left, never the other way round).
#[inline]
pub(super) fn mark<B>(req: &Request<B>) {
    if let Some(SentMark(flag)) = req.extensions().get::<SentMark>() {
        flag.store(true, Ordering::Release);
    }
}
