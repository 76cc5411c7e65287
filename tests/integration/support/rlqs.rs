//! A real gRPC client (tonic's channel) of Envoy's quota service, one bidirectional
//! stream at a time, with the messages written out here by hand from Envoy 1.40's
//! descriptors — apart from the gateway's own, so a wrong field number on either side
//! shows as a failing test.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::Duration;

use http::uri::PathAndQuery;
use tokio::sync::mpsc;
use tonic_prost::ProstCodec;

#[derive(Clone, PartialEq, prost::Message)]
pub struct Reports {
    #[prost(string, tag = "1")]
    pub domain: String,
    #[prost(message, repeated, tag = "2")]
    pub usages: Vec<Usage>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Usage {
    #[prost(message, optional, tag = "1")]
    pub bucket_id: Option<Bucket>,
    #[prost(message, optional, tag = "2")]
    pub time_elapsed: Option<prost_types::Duration>,
    #[prost(uint64, tag = "3")]
    pub allowed: u64,
    #[prost(uint64, tag = "4")]
    pub denied: u64,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Bucket {
    #[prost(map = "string, string", tag = "1")]
    pub bucket: HashMap<String, String>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct QuotaResponse {
    #[prost(message, repeated, tag = "1")]
    pub actions: Vec<BucketAction>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct BucketAction {
    #[prost(message, optional, tag = "1")]
    pub bucket_id: Option<Bucket>,
    #[prost(message, optional, tag = "2")]
    pub assignment: Option<Assignment>,
    #[prost(message, optional, tag = "3")]
    pub abandon: Option<Abandon>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Abandon {}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Assignment {
    #[prost(message, optional, tag = "2")]
    pub ttl: Option<prost_types::Duration>,
    #[prost(message, optional, tag = "3")]
    pub strategy: Option<Strategy>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct Strategy {
    /// 0 ALLOW_ALL, 1 DENY_ALL, when set.
    #[prost(int32, optional, tag = "1")]
    pub blanket_rule: Option<i32>,
    #[prost(message, optional, tag = "3")]
    pub token_bucket: Option<TokenBucket>,
}

#[derive(Clone, PartialEq, prost::Message)]
pub struct TokenBucket {
    #[prost(uint32, tag = "1")]
    pub max_tokens: u32,
    #[prost(message, optional, tag = "2")]
    pub tokens_per_fill: Option<u32>,
    #[prost(message, optional, tag = "3")]
    pub fill_interval: Option<prost_types::Duration>,
}

/// What an action said, flattened for assertions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Told {
    /// max tokens, tokens per fill, fill seconds, TTL seconds.
    Bucket(u32, u32, i64, i64),
    AllowAll(i64),
    DenyAll(i64),
    Abandon,
}

impl BucketAction {
    pub fn told(&self) -> Told {
        if self.abandon.is_some() {
            return Told::Abandon;
        }
        let a = self.assignment.as_ref().expect("an assignment");
        let ttl = a.ttl.as_ref().map_or(0, |d| d.seconds);
        let s = a.strategy.as_ref().expect("a strategy");
        match (s.blanket_rule, &s.token_bucket) {
            (_, Some(tb)) => Told::Bucket(
                tb.max_tokens,
                tb.tokens_per_fill.unwrap_or(0),
                tb.fill_interval.as_ref().map_or(0, |d| d.seconds),
                ttl,
            ),
            (Some(1), None) => Told::DenyAll(ttl),
            (_, None) => Told::AllowAll(ttl),
        }
    }

    pub fn tenant(&self) -> String {
        self.bucket_id.as_ref().expect("id").bucket["tenant"].clone()
    }
}

/// `actions` with each `DENY_ALL` that comes just before a token bucket for the same
/// bucket left out: the pair is how tollgate starts that bucket full.
pub fn started_full(actions: Vec<BucketAction>) -> Vec<BucketAction> {
    let mut out: Vec<BucketAction> = Vec::with_capacity(actions.len());
    for action in actions {
        let folds = matches!(action.told(), Told::Bucket(..))
            && out.last().is_some_and(|last| {
                matches!(last.told(), Told::DenyAll(_)) && last.bucket_id == action.bucket_id
            });
        if folds {
            out.pop();
        }
        out.push(action);
    }
    out
}

pub fn bucket(pairs: &[(&str, &str)]) -> Bucket {
    Bucket {
        bucket: pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
    }
}

pub fn usage(pairs: &[(&str, &str)], allowed: u64, denied: u64, elapsed_s: i64) -> Usage {
    Usage {
        bucket_id: Some(bucket(pairs)),
        time_elapsed: Some(prost_types::Duration {
            seconds: elapsed_s,
            nanos: 0,
        }),
        allowed,
        denied,
    }
}

/// One open `StreamRateLimitQuotas` stream.
pub struct RlqsStream {
    send: Option<mpsc::Sender<Reports>>,
    answers: tonic::codec::Streaming<QuotaResponse>,
}

impl RlqsStream {
    pub async fn open(addr: SocketAddr) -> Self {
        Self::open_with(addr, None).await
    }

    /// A stream whose metadata carries `traceparent`, when given.
    pub async fn open_with(addr: SocketAddr, traceparent: Option<&str>) -> Self {
        Self::try_open(addr, traceparent)
            .await
            .expect("the stream opens")
    }

    /// A stream, or the status the service refused it with.
    pub async fn try_open(
        addr: SocketAddr,
        traceparent: Option<&str>,
    ) -> Result<Self, tonic::Status> {
        let channel = tonic::transport::Channel::from_shared(format!("http://{addr}"))
            .expect("url")
            .connect()
            .await
            .expect("connect to the quota service");
        let mut grpc = tonic::client::Grpc::new(channel);
        grpc.ready().await.expect("channel ready");
        let (send, rx) = mpsc::channel::<Reports>(16);
        let outgoing =
            futures_util::stream::unfold(
                rx,
                |mut rx| async move { rx.recv().await.map(|m| (m, rx)) },
            );
        let path = PathAndQuery::from_static(
            "/envoy.service.rate_limit_quota.v3.RateLimitQuotaService/StreamRateLimitQuotas",
        );
        let mut request = tonic::Request::new(outgoing);
        if let Some(tp) = traceparent {
            request
                .metadata_mut()
                .insert("traceparent", tp.parse().expect("ascii"));
        }
        let answers = grpc
            .streaming(request, path, ProstCodec::default())
            .await?
            .into_inner();
        Ok(Self {
            send: Some(send),
            answers,
        })
    }

    pub async fn report(&mut self, domain: &str, usages: Vec<Usage>) {
        let reports = Reports {
            domain: domain.to_owned(),
            usages,
        };
        self.send
            .as_ref()
            .expect("open")
            .send(reports)
            .await
            .expect("sent");
    }

    /// The next response as Envoy applies it, within 30 s: a bucket's `DENY_ALL` just
    /// before its token bucket (which makes Envoy start that bucket full) is folded
    /// into the token bucket it precedes.
    pub async fn next(&mut self) -> Result<QuotaResponse, tonic::Status> {
        let mut response = self.next_raw().await?;
        response.actions = started_full(std::mem::take(&mut response.actions));
        Ok(response)
    }

    /// The next response as sent, within 30 s.
    pub async fn next_raw(&mut self) -> Result<QuotaResponse, tonic::Status> {
        self.next_within(Duration::from_secs(30)).await
    }

    /// The next response as sent, within `limit`.
    pub async fn next_within(&mut self, limit: Duration) -> Result<QuotaResponse, tonic::Status> {
        match tokio::time::timeout(limit, self.answers.message()).await {
            Ok(Ok(Some(m))) => Ok(m),
            Ok(Ok(None)) => Err(tonic::Status::unknown("the stream ended")),
            Ok(Err(status)) => Err(status),
            Err(_) => panic!("no answer within {limit:?}"),
        }
    }

    /// The actions of the responses that come next until there are at least `n` (as
    /// Envoy applies them): a large answer comes in several responses.
    pub async fn next_actions(&mut self, n: usize) -> Vec<BucketAction> {
        let mut actions = Vec::new();
        while actions.len() < n {
            actions.extend(self.next().await.expect("an answer").actions);
        }
        actions
    }

    /// Reports `usages` and returns the answer's actions.
    pub async fn ask(&mut self, domain: &str, usages: Vec<Usage>) -> Vec<BucketAction> {
        self.report(domain, usages).await;
        self.next().await.expect("an answer").actions
    }

    /// Ends the client's side of the stream.
    pub fn close(&mut self) {
        self.send = None;
    }
}
