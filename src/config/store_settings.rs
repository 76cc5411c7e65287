//! `[store]` as run: where limiter state lives, how long a call may take, and what a
//! request gets when the store cannot answer.

use std::time::Duration;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoreSettings {
    pub backend: Backend,
    pub timeout: Duration,
    pub on_error: OnError,
    pub max_keys: usize,
    /// `key_secret` / `key_secret_file`: what Redis key names are keyed with. `None`: a
    /// secret the fleet keeps in Redis.
    pub key_secret: Option<crate::key::KeySecret>,
    /// `fleet_size`: the gateways `on_error = "local"` divides each limit among. `None`:
    /// as many as keep a heartbeat in Redis.
    pub fleet_size: Option<u32>,
    /// `replica_ack`: replicas that must acknowledge each admission before it counts.
    pub replica_ack: Option<u32>,
    /// `state_file` (memory backend): where rate debts and quota usage survive a restart.
    pub state_file: Option<std::path::PathBuf>,
    /// `state_interval`: how often it is written (and once at shutdown).
    pub state_interval: Duration,
}

/// How often the state file is written when `state_interval` is not given.
pub const DEFAULT_STATE_INTERVAL: Duration = Duration::from_secs(10);

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Backend {
    Memory,
    /// `url` as a string: one Redis. As a list (even of one): Redis Cluster seed nodes.
    /// With `sentinel`, `urls` are the Sentinels' and the master is found through them.
    Redis {
        urls: Vec<String>,
        cluster: bool,
        sentinel: Option<SentinelMaster>,
    },
}

/// A master found through Redis Sentinel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SentinelMaster {
    /// The name the Sentinels monitor it by.
    pub name: String,
    /// The master's own credentials, database and TLS (`url`, host ignored); the
    /// Sentinels' are in their URLs.
    pub url: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OnError {
    Allow,
    Deny,
    Local,
}

impl OnError {
    /// The word the config file uses.
    pub fn as_str(self) -> &'static str {
        match self {
            OnError::Allow => "allow",
            OnError::Deny => "deny",
            OnError::Local => "local",
        }
    }
}
