//! Asking every Sentinel which node is the master, and believing the one whose
//! configuration is newest: after a failover the Sentinels that did not lead it name the
//! old master for a while (and the old master, not yet demoted, still says it is one),
//! so the first Sentinel to answer is not to be trusted. Each Sentinel's `SENTINEL
//! MASTER <name>` reply carries its `config-epoch`, which every failover raises; the
//! highest wins, and a gateway never goes back to an older epoch's master.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

/// One Sentinel's view of the master.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Named {
    pub host: String,
    pub port: u16,
    pub epoch: u64,
    /// The Sentinel holds the master down (`o_down`) or its failover has begun promoting
    /// a replica: what is written to the master now may be discarded when the failover
    /// demotes it. (A failover still choosing a replica is not yet a risk, and may be
    /// abandoned: writing on then loses nothing.)
    pub failing: bool,
}

/// Why no Sentinel named the master: in one word an operator acts on
/// (`health::cause`'s, or `unknown_master`: the Sentinels answer but monitor no master
/// of that name), and in the Sentinels' own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NoMaster {
    pub cause: &'static str,
    pub detail: String,
}

/// The Sentinels, each with a connection kept between turns.
pub struct Sentinels {
    clients: Vec<redis::Client>,
    connections: tokio::sync::Mutex<Vec<Option<MultiplexedConnection>>>,
    /// How many named the master when last asked (all of them until asked).
    answering: std::sync::atomic::AtomicUsize,
}

impl Sentinels {
    pub fn new(urls: &[String]) -> redis::RedisResult<Self> {
        let clients = urls
            .iter()
            .map(|u| redis::Client::open(u.as_str()))
            .collect::<redis::RedisResult<Vec<_>>>()?;
        let connections = tokio::sync::Mutex::new(vec![None; clients.len()]);
        let answering = std::sync::atomic::AtomicUsize::new(clients.len());
        Ok(Self {
            clients,
            connections,
            answering,
        })
    }

    /// How many Sentinels named the master when last asked, of how many.
    pub fn answering(&self) -> (usize, usize) {
        let answering = self.answering.load(std::sync::atomic::Ordering::Relaxed);
        (answering, self.clients.len())
    }

    /// Every Sentinel's answer for `name`, each within `limit`, and the newest of them
    /// (why none named it, when none did), `failing` when any Sentinel of that epoch
    /// holds its master down or is failing it over. Sentinels that failed are
    /// reconnected next time.
    pub async fn newest(&self, name: &str, limit: Duration) -> Result<Named, NoMaster> {
        let mut connections = self.connections.lock().await;
        let asks = self
            .clients
            .iter()
            .zip(connections.iter_mut())
            .map(|(client, slot)| ask(client, slot, name, limit));
        let (answers, failures): (Vec<_>, Vec<_>) = futures_util::future::join_all(asks)
            .await
            .into_iter()
            .partition(Result::is_ok);
        let answers: Vec<Named> = answers.into_iter().flatten().collect();
        let before = self
            .answering
            .swap(answers.len(), std::sync::atomic::Ordering::Relaxed);
        // Said once each way: with no Sentinel answering, the master still serves, but a
        // failover can no longer be followed.
        let Some(newest) = answers.iter().max_by_key(|n| n.epoch) else {
            let why = why_none(name, failures.into_iter().filter_map(Result::err));
            if before > 0 {
                tracing::warn!(cause = why.cause, "{}: decisions go on at the master last named, if any, but a failover cannot be followed until a Sentinel names one", why.detail);
            }
            return Err(why);
        };
        if before == 0 {
            tracing::info!(answering = answers.len(), "Redis Sentinels answer again");
        }
        let mut newest = newest.clone();
        newest.failing = answers.iter().any(|n| {
            n.failing && n.epoch == newest.epoch && n.host == newest.host && n.port == newest.port
        });
        Ok(newest)
    }
}

/// Why no Sentinel named master `name`, from each one's failure: what a Sentinel said
/// (it refused the credentials, it monitors no such master) before what the network did
/// (nothing listens, no answer in time), which says less.
fn why_none(name: &str, errors: impl Iterator<Item = redis::RedisError>) -> NoMaster {
    let said = |e: &redis::RedisError| !(e.is_io_error() || e.is_timeout());
    let mut errors: Vec<_> = errors.collect();
    errors.sort_by_key(|e| !said(e));
    match errors.first() {
        Some(e) if e.to_string().contains("No such master") => NoMaster {
            cause: "unknown_master",
            detail: format!("the Redis Sentinels monitor no master named {name:?}"),
        },
        Some(e) => NoMaster {
            cause: super::health::redis_cause(e),
            detail: if said(e) {
                format!("the Redis Sentinels name no master: {e}")
            } else {
                format!("no Redis Sentinel answers: {e}")
            },
        },
        None => NoMaster {
            cause: "not_connected",
            detail: "no Redis Sentinel answers".to_owned(),
        },
    }
}

async fn ask(
    client: &redis::Client,
    slot: &mut Option<MultiplexedConnection>,
    name: &str,
    limit: Duration,
) -> Result<Named, redis::RedisError> {
    let asked = async {
        if slot.is_none() {
            *slot = Some(client.get_multiplexed_async_connection().await?);
        }
        let Some(c) = slot.as_mut() else {
            return Ok(None);
        };
        let reply: redis::Value = redis::cmd("SENTINEL")
            .arg("MASTER")
            .arg(name)
            .query_async(c)
            .await?;
        Ok::<_, redis::RedisError>(parse(&reply))
    };
    match tokio::time::timeout(limit, asked).await {
        Ok(Ok(Some(named))) => Ok(named),
        Ok(Ok(None)) => Err(redis::RedisError::from((
            redis::ErrorKind::UnexpectedReturnType,
            "a Sentinel's SENTINEL MASTER reply names no address and epoch",
        ))),
        Ok(Err(e)) => {
            *slot = None;
            Err(e)
        }
        Err(_) => {
            *slot = None;
            Err(std::io::Error::new(
                std::io::ErrorKind::TimedOut,
                format!("a Sentinel did not answer within {limit:?}"),
            )
            .into())
        }
    }
}

/// `SENTINEL MASTER`'s reply: field names and values, as a flat array (RESP2) or a map.
fn parse(reply: &redis::Value) -> Option<Named> {
    let pairs: Vec<(String, String)> = match reply {
        redis::Value::Array(items) => items
            .chunks(2)
            .filter_map(|kv| Some((text(kv.first()?)?, text(kv.get(1)?)?)))
            .collect(),
        redis::Value::Map(items) => items
            .iter()
            .filter_map(|(k, v)| Some((text(k)?, text(v)?)))
            .collect(),
        _ => return None,
    };
    let field = |name: &str| {
        pairs
            .iter()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    };
    let flags = field("flags").unwrap_or_default();
    let promoting = matches!(
        field("failover-state"),
        Some("send_slaveof_noone" | "wait_promotion" | "reconf_slaves" | "update_config")
    );
    Some(Named {
        host: field("ip")?.to_owned(),
        port: field("port")?.parse().ok()?,
        epoch: field("config-epoch")?.parse().ok()?,
        failing: promoting || flags.split(',').any(|f| f == "o_down"),
    })
}

fn text(v: &redis::Value) -> Option<String> {
    match v {
        redis::Value::BulkString(b) => String::from_utf8(b.clone()).ok(),
        redis::Value::SimpleString(s) => Some(s.clone()),
        redis::Value::Int(i) => Some(i.to_string()),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &str) -> redis::Value {
        redis::Value::BulkString(s.as_bytes().to_vec())
    }

    #[test]
    fn reads_the_address_and_epoch_of_either_reply_shape() {
        let flat = redis::Value::Array(
            [
                "name",
                "mymaster",
                "ip",
                "10.0.0.2",
                "port",
                "6380",
                "config-epoch",
                "7",
                "flags",
                "master",
            ]
            .iter()
            .map(|s| bulk(s))
            .collect(),
        );
        let want = Named {
            host: "10.0.0.2".into(),
            port: 6380,
            epoch: 7,
            failing: false,
        };
        assert_eq!(parse(&flat), Some(want.clone()));
        let map = redis::Value::Map(vec![
            (bulk("ip"), bulk("10.0.0.2")),
            (bulk("port"), bulk("6380")),
            (bulk("config-epoch"), redis::Value::Int(7)),
        ]);
        assert_eq!(parse(&map), Some(want.clone()));
        for (flags, state, failing) in [
            ("master", "none", false),
            ("master,s_down", "none", false),
            ("master,s_down,o_down", "none", true),
            ("master,failover_in_progress", "select_slave", false),
            ("master,failover_in_progress", "wait_promotion", true),
        ] {
            let reply = redis::Value::Map(vec![
                (bulk("ip"), bulk("10.0.0.2")),
                (bulk("port"), bulk("6380")),
                (bulk("config-epoch"), bulk("7")),
                (bulk("flags"), bulk(flags)),
                (bulk("failover-state"), bulk(state)),
            ]);
            assert_eq!(
                parse(&reply).map(|n| n.failing),
                Some(failing),
                "{flags} {state}"
            );
        }
        assert_eq!(parse(&redis::Value::Nil), None);
        let no_epoch =
            redis::Value::Array(["ip", "h", "port", "1"].iter().map(|s| bulk(s)).collect());
        assert_eq!(parse(&no_epoch), None);
    }
}
