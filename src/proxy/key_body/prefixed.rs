//! The body upstream: what was read before the decision, then the rest as it comes.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

use super::{Held, KeyBody};

pin_project_lite::pin_project! {
    /// The body upstream: what was read before the decision, then the rest as it comes.
    pub struct Prefixed<B> {
        prefix: Option<Bytes>,
        #[pin]
        rest: Option<B>,
        held: Option<Held>,
    }
}

impl<B> Prefixed<B> {
    pub fn new(read: KeyBody, rest: B) -> Self {
        Self {
            prefix: Some(read.bytes).filter(|b| !b.is_empty()),
            rest: (!read.ended).then_some(rest),
            held: Some(read.held),
        }
    }
}

impl<B> http_body::Body for Prefixed<B>
where
    B: http_body::Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let this = self.project();
        if let Some(prefix) = this.prefix.take() {
            return Poll::Ready(Some(Ok(Frame::data(prefix))));
        }
        // The buffer is on its way: no longer held here.
        this.held.take();
        match this.rest.as_pin_mut() {
            Some(rest) => rest.poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        self.prefix.is_none() && self.rest.as_ref().is_none_or(|r| r.is_end_stream())
    }

    fn size_hint(&self) -> SizeHint {
        let prefix = self.prefix.as_ref().map_or(0, |p| p.len() as u64);
        let rest = self
            .rest
            .as_ref()
            .map_or_else(|| SizeHint::with_exact(0), |r| r.size_hint());
        let mut hint = SizeHint::new();
        hint.set_lower(rest.lower() + prefix);
        if let Some(upper) = rest.upper() {
            hint.set_upper(upper + prefix);
        }
        hint
    }
}
