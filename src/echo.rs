//! `tollgate echo`: a small upstream that answers every request with 200 and a JSON
//! description of what it received. For demos, smoke tests and benchmarks.

use std::convert::Infallible;
use std::net::SocketAddr;

use bytes::Bytes;
use http::{Request, Response};
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpListener;

async fn answer(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    let method = req.method().to_string();
    let path = req.uri().to_string();
    let forwarded_for = req
        .headers()
        .get("x-forwarded-for")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    // Read (and count) the body so a client's upload completes.
    let mut body = req.into_body();
    let mut bytes = 0usize;
    while let Some(frame) = body.frame().await {
        match frame {
            Ok(f) => bytes += f.data_ref().map_or(0, |d| d.len()),
            Err(_) => break,
        }
    }
    let text = serde_json::json!({
        "ok": true,
        "method": method,
        "path": path,
        "x_forwarded_for": forwarded_for,
        "body_bytes": bytes,
    })
    .to_string();
    let mut resp = Response::new(Full::new(Bytes::from(text)));
    resp.headers_mut().insert(
        http::header::CONTENT_TYPE,
        http::HeaderValue::from_static("application/json"),
    );
    Ok(resp)
}

/// Serves forever on `listen`. SIGHUP is ignored: a `kill -HUP` meant for the gateway
/// must not stop the demo upstream beside it.
pub async fn serve(listen: SocketAddr) -> std::io::Result<()> {
    let listener = TcpListener::bind(listen).await?;
    let mut hangups = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup())?;
    tokio::spawn(async move { while hangups.recv().await.is_some() {} });
    serve_on(listener).await
}

/// Serves forever on an already bound listener.
pub async fn serve_on(listener: TcpListener) -> std::io::Result<()> {
    tracing::info!(addr = %listener.local_addr()?, "echo upstream serving");
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(a) => a,
            Err(_) => continue,
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                .serve_connection(TokioIo::new(stream), service_fn(answer))
                .await;
        });
    }
}
