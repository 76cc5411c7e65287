//! A request body's fate on its way to an HTTP/2 upstream. hyper sends such a body from
//! a task of its own and tells the response only that the stream was reset, so the body
//! notes here why it failed — too large, stalled, cut by a bytes tier, broken by the
//! client — for the failure to be answered as the client's (413, 408, 400), not as the
//! upstream's (502). HTTP/1.1 upstreams need none of it: hyper hands the body's error
//! back with the response's.

use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::task::{Context, Poll};

use bytes::Bytes;
use http::Request;
use http_body::{Body as HttpBody, Frame, SizeHint};
use http_body_util::BodyExt;

use super::error::BodyFault;
use crate::reply::{Body, BoxError};

/// Where a watched body leaves the cause of its failure.
pub type Fate = Arc<OnceLock<BodyFault>>;

pin_project_lite::pin_project! {
    struct Watched {
        #[pin]
        body: Body,
        fate: Fate,
    }
}

impl HttpBody for Watched {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        let this = self.project();
        let polled = this.body.poll_frame(cx);
        if let Poll::Ready(Some(Err(e))) = &polled {
            let e: &(dyn std::error::Error + 'static) = &**e;
            if let Some(fault) = BodyFault::of(e) {
                let _ = this.fate.set(fault);
            }
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

/// `req` with its body watched, when it has one (a request without a body cannot fail
/// this way and costs nothing).
pub fn watch(req: Request<Body>) -> (Request<Body>, Option<Fate>) {
    if req.body().is_end_stream() {
        return (req, None);
    }
    let fate = Fate::default();
    let (parts, body) = req.into_parts();
    let body = Watched {
        body,
        fate: fate.clone(),
    };
    (Request::from_parts(parts, body.boxed_unsync()), Some(fate))
}
