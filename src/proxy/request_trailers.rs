//! A client's request trailers stop at the gateway. A trailer arrives after the decision
//! and is never read by it, yet an upstream may read it as a header: tonic merges a
//! request's trailers into the call's metadata whatever its content type, replacing the
//! header of the same name, so `x-tenant-id: r1234` in the head and `x-tenant-id: acme`
//! in the trailers would be charged to a fresh key and served as `acme`; the same goes for
//! `X-Forwarded-For`, `Authorization`, `traceparent` and any name an upstream trusts. A
//! list of names to hold back always misses one (and `_` spellings), and a hop-by-hop
//! name makes an HTTP/2 upstream refuse the whole block, hanging the stream until its
//! timeout. So none passes, as with nginx and Envoy's HTTP/1.1 codec by default.

use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use http_body::{Frame, SizeHint};

pin_project_lite::pin_project! {
    /// A request body as it goes upstream: its data, without its trailers.
    pub struct WithoutTrailers<B> {
        #[pin]
        body: B,
    }
}

impl<B> WithoutTrailers<B> {
    pub fn new(body: B) -> Self {
        Self { body }
    }
}

impl<B> http_body::Body for WithoutTrailers<B>
where
    B: http_body::Body<Data = Bytes>,
{
    type Data = Bytes;
    type Error = B::Error;

    fn poll_frame(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, B::Error>>> {
        let mut body = self.project().body;
        loop {
            match body.as_mut().poll_frame(cx) {
                // Trailers end a body: what follows is its end.
                Poll::Ready(Some(Ok(frame))) if frame.is_trailers() => continue,
                other => return other,
            }
        }
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.body.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use http_body_util::BodyExt;

    #[tokio::test]
    async fn the_data_passes_and_the_trailers_stop() {
        let mut trailers = http::HeaderMap::new();
        trailers.insert("x-tenant-id", "acme".parse().expect("value"));
        let frames: Vec<Result<Frame<Bytes>, std::convert::Infallible>> = vec![
            Ok(Frame::data(Bytes::from_static(b"hel"))),
            Ok(Frame::data(Bytes::from_static(b"lo"))),
            Ok(Frame::trailers(trailers)),
        ];
        let body = http_body_util::StreamBody::new(futures_util::stream::iter(frames));
        let collected = WithoutTrailers::new(body).collect().await.expect("body");
        assert!(collected.trailers().is_none(), "no trailers upstream");
        assert_eq!(collected.to_bytes(), "hello");
    }
}
