//! The Pingora-based peer of the benchmarks: one thread, listening on `PEER_LISTEN`, forwarding
//! to `PEER_UPSTREAM` (host:port) over pooled HTTP/1.1 connections. Its routes mirror the
//! tollgate, nginx and HAProxy configurations of bench/lib.sh:
//!
//! - `/v1/search`: three `pingora_limits::rate::Rate` tiers (tenant, endpoint, tenant:user),
//!   limits so high that every request is admitted;
//! - `/v1/open`: no limits;
//! - `/deny`: tenant `hot` refused past 1 request a minute, 429 with an empty body on a kept
//!   connection;
//!
//! and, as tollgate and nginx do, the upstream request carries X-Forwarded-For/-Proto/-Host.
use std::time::Duration;

use async_trait::async_trait;
use once_cell::sync::Lazy;
use pingora_core::server::configuration::{Opt, ServerConf};
use pingora_core::server::Server;
use pingora_core::upstreams::peer::HttpPeer;
use pingora_core::Result;
use pingora_http::{RequestHeader, ResponseHeader};
use pingora_limits::rate::Rate;
use pingora_proxy::{ProxyHttp, Session};

const BIG: isize = 1_000_000;

static TENANT: Lazy<Rate> = Lazy::new(|| Rate::new(Duration::from_secs(1)));
static ENDPOINT: Lazy<Rate> = Lazy::new(|| Rate::new(Duration::from_secs(1)));
static USER: Lazy<Rate> = Lazy::new(|| Rate::new(Duration::from_secs(1)));
static HOT: Lazy<Rate> = Lazy::new(|| Rate::new(Duration::from_secs(60)));

struct Peer {
    upstream: String,
}

fn header<'a>(session: &'a Session, name: &str) -> &'a [u8] {
    session
        .req_header()
        .headers
        .get(name)
        .map(|v| v.as_bytes())
        .unwrap_or_default()
}

async fn refuse(session: &mut Session) -> Result<bool> {
    let mut head = ResponseHeader::build(429, Some(1))?;
    head.insert_header("content-length", "0")?;
    session.write_response_header(Box::new(head), true).await?;
    Ok(true)
}

#[async_trait]
impl ProxyHttp for Peer {
    type CTX = ();

    fn new_ctx(&self) {}

    async fn request_filter(&self, session: &mut Session, _ctx: &mut ()) -> Result<bool> {
        // Decided on borrowed header bytes; only the tenant:user key is built (as nginx's
        // and tollgate's third tier build theirs).
        let path = session.req_header().uri.path();
        let over = if path.starts_with("/v1/search") {
            let tenant = header(session, "x-tenant-id");
            let user = [tenant, b":", header(session, "x-user-id")].concat();
            TENANT.observe(&tenant, 1) > BIG
                || ENDPOINT.observe(&"/v1/search", 1) > BIG
                || USER.observe(&user, 1) > BIG
        } else if path.starts_with("/deny") {
            HOT.observe(&header(session, "x-tenant-id"), 1) > 1
        } else {
            false
        };
        if over {
            return refuse(session).await;
        }
        Ok(false)
    }

    async fn upstream_peer(&self, _session: &mut Session, _ctx: &mut ()) -> Result<Box<HttpPeer>> {
        Ok(Box::new(HttpPeer::new(
            self.upstream.as_str(),
            false,
            String::new(),
        )))
    }

    async fn upstream_request_filter(
        &self,
        session: &mut Session,
        upstream: &mut RequestHeader,
        _ctx: &mut (),
    ) -> Result<()> {
        let client = session
            .client_addr()
            .and_then(|a| a.as_inet())
            .map(|a| a.ip().to_string())
            .unwrap_or_default();
        upstream.insert_header("x-forwarded-for", client)?;
        upstream.insert_header("x-forwarded-proto", "http")?;
        upstream.insert_header("x-forwarded-host", header(session, "host"))?;
        Ok(())
    }
}

fn main() {
    let listen = std::env::var("PEER_LISTEN").expect("PEER_LISTEN=host:port");
    let upstream = std::env::var("PEER_UPSTREAM").expect("PEER_UPSTREAM=host:port");
    let conf = ServerConf {
        threads: 1,
        ..ServerConf::default()
    };
    let mut server = Server::new_with_opt_and_conf(Opt::default(), conf);
    server.bootstrap();
    let mut proxy = pingora_proxy::http_proxy_service(&server.configuration, Peer { upstream });
    proxy.add_tcp(&listen);
    server.add_service(proxy);
    server.run_forever();
}
