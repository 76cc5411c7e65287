//! The test upstream's answers other than its echo: bodies streamed in chunks, held
//! back, broken mid-way, and the answers that report a cost (a header, a trailer, a size).

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::{HeaderMap, Response};
use http_body_util::{BodyExt, Full};

use super::upstream::Seen;

pub(super) type Answer = Response<http_body_util::combinators::BoxBody<Bytes, std::io::Error>>;

/// `/big`: 8 MiB streamed in 64 KiB chunks.
pub(super) fn big_answer() -> Answer {
    let chunk = Bytes::from(vec![b'x'; 64 * 1024]);
    let stream = futures_util::stream::iter(
        (0..128).map(move |_| Ok::<_, std::io::Error>(hyper::body::Frame::data(chunk.clone()))),
    );
    Response::new(BodyExt::boxed(http_body_util::StreamBody::new(stream)))
}

/// `/drip`: headers and one chunk, then the last chunk once the test releases it.
pub(super) fn drip_answer(seen: Arc<Seen>) -> Answer {
    let frames = futures_util::stream::unfold(0, move |step| {
        let seen = seen.clone();
        async move {
            if step == 1 {
                let _ =
                    tokio::time::timeout(Duration::from_secs(30), seen.release.notified()).await;
            }
            let chunk = Bytes::from(if step == 0 { "first " } else { "last" });
            (step < 2).then(|| (Ok(hyper::body::Frame::data(chunk)), step + 1))
        }
    });
    Response::new(BodyExt::boxed(http_body_util::StreamBody::new(frames)))
}

/// `/reset`: headers and one chunk, then the connection breaks mid-body.
pub(super) fn reset_answer() -> Answer {
    let frames = futures_util::stream::unfold(0, |step| async move {
        match step {
            0 => Some((
                Ok(hyper::body::Frame::data(Bytes::from(vec![b'y'; 1024]))),
                1,
            )),
            1 => {
                // Let the headers and the first chunk reach the gateway first.
                tokio::time::sleep(Duration::from_millis(300)).await;
                Some((Err(std::io::Error::other("upstream died mid-body")), 2))
            }
            _ => None,
        }
    });
    let mut resp = Response::new(BodyExt::boxed(http_body_util::StreamBody::new(Box::pin(
        frames,
    ))));
    resp.headers_mut()
        .insert("content-length", http::HeaderValue::from_static("1000000"));
    resp
}

/// The answers that report a cost, chosen by the path's last segment:
/// `usage` sends the request's `x-usage` value as the `x-usage-tokens` header, with the
/// status in `x-status` (default 200); `usage-trailer` sends it as a trailer after a
/// short body; `bytes?n=N` sends a body of N bytes.
pub(super) fn usage_answer(path: &str, query: Option<&str>, headers: &HeaderMap) -> Option<Answer> {
    let usage = headers.get("x-usage").cloned();
    let status = headers
        .get("x-status")
        .and_then(|v| v.to_str().ok()?.parse::<u16>().ok())
        .and_then(|s| http::StatusCode::from_u16(s).ok())
        .unwrap_or(http::StatusCode::OK);
    let mut resp = if path.ends_with("/usage") {
        let mut resp = Response::new(
            Full::new(Bytes::from_static(b"used"))
                .map_err(|never| match never {})
                .boxed(),
        );
        if let Some(u) = usage {
            resp.headers_mut().insert("x-usage-tokens", u);
        }
        resp
    } else if path.ends_with("/usage-trailer") {
        let mut trailers = HeaderMap::new();
        if let Some(u) = usage {
            trailers.insert("x-usage-tokens", u);
        }
        let frames = vec![
            Ok::<_, std::io::Error>(hyper::body::Frame::data(Bytes::from_static(
                b"streamed answer",
            ))),
            Ok(hyper::body::Frame::trailers(trailers)),
        ];
        let mut resp = Response::new(BodyExt::boxed(http_body_util::StreamBody::new(
            futures_util::stream::iter(frames),
        )));
        // HTTP/1.1 sends only the trailers a response announces.
        resp.headers_mut()
            .insert("trailer", http::HeaderValue::from_static("x-usage-tokens"));
        resp
    } else if path.ends_with("/usage-trailer-late") {
        // The body at once, the trailer only after `x-trailer-delay-ms` (default 2 s): a
        // client can hang up in between.
        let delay = headers
            .get("x-trailer-delay-ms")
            .and_then(|v| v.to_str().ok()?.parse::<u64>().ok())
            .unwrap_or(2_000);
        let mut trailers = HeaderMap::new();
        if let Some(u) = usage {
            trailers.insert("x-usage-tokens", u);
        }
        let body = futures_util::stream::iter([Ok::<_, std::io::Error>(hyper::body::Frame::data(
            Bytes::from_static(b"answer before its trailer"),
        ))])
        .chain(futures_util::stream::once(async move {
            tokio::time::sleep(Duration::from_millis(delay)).await;
            Ok(hyper::body::Frame::trailers(trailers))
        }));
        let mut resp = Response::new(BodyExt::boxed(http_body_util::StreamBody::new(Box::pin(
            body,
        ))));
        resp.headers_mut()
            .insert("trailer", http::HeaderValue::from_static("x-usage-tokens"));
        resp
    } else if path.ends_with("/bytes") {
        let n: usize = query
            .and_then(|q| q.strip_prefix("n="))
            .and_then(|n| n.parse().ok())
            .unwrap_or(0);
        Response::new(
            Full::new(Bytes::from(vec![b'b'; n]))
                .map_err(|never| match never {})
                .boxed(),
        )
    } else {
        return None;
    };
    *resp.status_mut() = status;
    Some(resp)
}
