//! `[store]`: the backend (memory or Redis), its timeout, `on_error`, `max_keys`.

use super::*;
use crate::key::KeySecret;

impl Compiler {
    pub(super) fn store(&mut self, raw: Option<S<RawStore>>) -> Option<StoreSettings> {
        let Some(raw) = raw.map(S::into_inner) else {
            return Some(StoreSettings {
                backend: Backend::Memory,
                timeout: DEFAULT_STORE_TIMEOUT,
                on_error: OnError::Deny,
                max_keys: DEFAULT_MAX_KEYS,
                key_secret: None,
                fleet_size: None,
                replica_ack: None,
                state_file: None,
                state_interval: DEFAULT_STATE_INTERVAL,
            });
        };
        let backend = self.backend(&raw);
        let on_error = self.on_error(&raw);
        let timeout = self.duration_or(&raw.timeout, DEFAULT_STORE_TIMEOUT, false);
        let max_keys = self.count_or(&raw.max_keys, DEFAULT_MAX_KEYS as u64, "max_keys");
        let key_secret = self.key_secret(&raw);
        let fleet_size = self.optional_count(&raw.fleet_size, "fleet_size");
        let replica_ack = self.replica_ack(&raw, backend.as_ref());
        let state_file = self.state_file(&raw, backend.as_ref());
        let state_interval = self.duration_or(&raw.state_interval, DEFAULT_STATE_INTERVAL, false);
        Some(StoreSettings {
            backend: backend?,
            timeout: timeout?,
            on_error: on_error?,
            max_keys: usize::try_from(max_keys?).ok()?,
            key_secret: key_secret?,
            fleet_size: fleet_size?,
            replica_ack: replica_ack?,
            state_file: state_file?,
            state_interval: state_interval?,
        })
    }

    /// `state_file`: the memory backend's (with Redis the state lives in Redis).
    fn state_file(
        &mut self,
        raw: &RawStore,
        backend: Option<&Backend>,
    ) -> Option<Option<std::path::PathBuf>> {
        let Some(file) = &raw.state_file else {
            return Some(None);
        };
        if let Some(Backend::Redis { .. }) = backend {
            self.error(
                file.span(),
                "state_file keeps the memory backend's state; with backend = \"redis\" the state lives in Redis",
                Some("remove state_file".to_owned()),
            );
            return None;
        }
        if file.get_ref().trim().is_empty() {
            self.error(
                file.span(),
                "state_file is empty",
                Some("name a file, e.g. state_file = \"/var/lib/tollgate/state\"".to_owned()),
            );
            return None;
        }
        Some(Some(self.base.join(file.get_ref())))
    }

    /// An optional whole number ≥ 1.
    fn optional_count(&mut self, raw: &Option<S<i64>>, what: &str) -> Option<Option<u32>> {
        match raw {
            Some(n) => self
                .positive(n, what)
                .map(|n| Some(u32::try_from(n).unwrap_or(u32::MAX))),
            None => Some(None),
        }
    }

    /// `replica_ack`: a single Redis or Sentinel's master (a Cluster's writes go to many
    /// masters, each with its own replicas).
    fn replica_ack(&mut self, raw: &RawStore, backend: Option<&Backend>) -> Option<Option<u32>> {
        let n = self.optional_count(&raw.replica_ack, "replica_ack")?;
        match (n, backend, &raw.replica_ack) {
            (Some(_), Some(Backend::Redis { cluster: true, .. }), Some(at)) => {
                self.error(
                    at.span(),
                    "replica_ack works with one Redis or Sentinel, not with a Cluster",
                    Some("remove replica_ack, or give each Cluster master replicas and use a single master per fleet".to_owned()),
                );
                None
            }
            (Some(_), Some(Backend::Memory) | None, Some(at)) => {
                self.error(
                    at.span(),
                    "replica_ack needs backend = \"redis\"",
                    Some("the memory backend has no replicas; remove replica_ack".to_owned()),
                );
                None
            }
            _ => Some(n),
        }
    }

    /// `key_secret`, or the contents of `key_secret_file`.
    fn key_secret(&mut self, raw: &RawStore) -> Option<Option<KeySecret>> {
        let Some((text, span)) = self.secret_text(
            ("key_secret", &raw.key_secret),
            ("key_secret_file", &raw.key_secret_file),
        )?
        else {
            return Some(None);
        };
        match KeySecret::parse(&text) {
            Ok(secret) => Some(Some(secret)),
            Err(problem) => {
                self.error(
                    span,
                    problem,
                    Some("generate one with e.g. `openssl rand -hex 32`; every gateway of the fleet needs the same".to_owned()),
                );
                None
            }
        }
    }

    /// `backend`: memory (the default), or Redis as one server, a cluster or through
    /// Sentinel.
    fn backend(&mut self, raw: &RawStore) -> Option<Backend> {
        match raw
            .backend
            .as_ref()
            .map(|b| (b.get_ref().as_str(), b.span()))
        {
            None | Some(("memory", _)) => Some(Backend::Memory),
            Some(("redis", span)) if raw.sentinels.is_some() || raw.master.is_some() => {
                self.sentinel_backend(raw, span)
            }
            Some(("redis", span)) => self.redis_backend(raw, span),
            Some((other, span)) => {
                self.error(
                    span,
                    format!("unknown store backend `{other}`"),
                    Some("use \"memory\" or \"redis\"".to_owned()),
                );
                None
            }
        }
    }

    /// `url` as one string: one Redis; as a list (even of one): Redis Cluster seed nodes.
    fn redis_backend(&mut self, raw: &RawStore, span: std::ops::Range<usize>) -> Option<Backend> {
        let Some((urls, span)) = raw.url.as_ref().map(|u| (u.get_ref().to_vec(), u.span())) else {
            self.error(span, "backend = \"redis\" needs `url`", Some("add url = \"redis://127.0.0.1:6379\" (a list of node URLs means Redis Cluster)".to_owned()));
            return None;
        };
        let cluster = raw
            .url
            .as_ref()
            .is_some_and(|u| matches!(u.get_ref(), OneOrMany::Many(_)));
        if urls.is_empty() {
            self.error(
                span,
                "`url` lists no Redis node",
                Some("use redis://host:port or rediss://host:port".to_owned()),
            );
            return None;
        }
        let parsed = urls
            .iter()
            .filter(|url| !self.redis_url(url, span.clone(), "Redis URL"))
            .count();
        if parsed > 0 {
            return None;
        }
        Some(Backend::Redis {
            urls,
            cluster,
            sentinel: None,
        })
    }

    /// `on_error`: what a request gets when the store cannot answer in time.
    fn on_error(&mut self, raw: &RawStore) -> Option<OnError> {
        match raw
            .on_error
            .as_ref()
            .map(|b| (b.get_ref().as_str(), b.span()))
        {
            None | Some(("deny", _)) => Some(OnError::Deny),
            Some(("allow", _)) => Some(OnError::Allow),
            Some(("local", _)) => Some(OnError::Local),
            Some((other, span)) => {
                self.error(
                    span,
                    format!("unknown on_error `{other}`"),
                    Some("use \"allow\", \"deny\" or \"local\"".to_owned()),
                );
                None
            }
        }
    }
}

impl Compiler {
    /// Whether `url` is one the Redis client takes, read by the client's own parser (so
    /// `check` refuses what the start would); else an error at `span` naming the URL
    /// (its password hidden) and the parser's complaint.
    fn redis_url(&mut self, url: &str, span: std::ops::Range<usize>, what: &str) -> bool {
        use redis::IntoConnectionInfo;
        if !(url.starts_with("redis://") || url.starts_with("rediss://")) {
            self.error(
                span,
                format!("not a {what}: `{}`", crate::config::redact::redact_url(url)),
                Some("use redis://host:port or rediss://host:port (TLS)".to_owned()),
            );
            return false;
        }
        match url.into_connection_info() {
            Ok(_) => true,
            Err(e) => {
                self.error(
                    span,
                    format!("{what} `{}` does not parse: {}", crate::config::redact::redact_url(url), e.detail().unwrap_or(e.category())),
                    Some("redis://[user:password@]host:port[/db], the port 1-65535; percent-encode special characters in the password".to_owned()),
                );
                false
            }
        }
    }

    /// `sentinels` and `master`, with `url` (one string) as the master's credentials.
    fn sentinel_backend(
        &mut self,
        raw: &RawStore,
        span: std::ops::Range<usize>,
    ) -> Option<Backend> {
        let (Some(sentinels), Some(master)) = (&raw.sentinels, &raw.master) else {
            self.error(
                span,
                "Redis Sentinel needs both `sentinels` and `master`",
                Some("sentinels = [\"redis://10.0.0.1:26379\", …] and master = \"mymaster\" (the name in `sentinel monitor`)".to_owned()),
            );
            return None;
        };
        let urls = sentinels.get_ref().clone();
        if urls.is_empty() {
            self.error(
                sentinels.span(),
                "`sentinels` lists no Sentinel",
                Some("use redis://host:26379 (rediss:// for TLS; the Sentinels' own credentials go here)".to_owned()),
            );
            return None;
        }
        let unparsed = urls
            .iter()
            .filter(|url| !self.redis_url(url, sentinels.span(), "Sentinel URL"))
            .count();
        if unparsed > 0 {
            return None;
        }
        let url = match raw.url.as_ref().map(|u| (u.get_ref(), u.span())) {
            None => None,
            Some((OneOrMany::One(u), span)) => {
                if !self.redis_url(u, span, "master URL") {
                    return None;
                }
                Some(u.clone())
            }
            Some((_, span)) => {
                self.error(
                    span,
                    "with sentinels, `url` is one URL carrying the master's credentials",
                    Some("e.g. url = \"redis://:secret@master\" (its host is ignored: the Sentinels name the master)".to_owned()),
                );
                return None;
            }
        };
        Some(Backend::Redis {
            urls,
            cluster: false,
            sentinel: Some(SentinelMaster {
                name: master.get_ref().clone(),
                url,
            }),
        })
    }
}

#[cfg(test)]
mod tests {
    fn store(body: &str) -> Result<crate::config::model::Config, String> {
        let text =
            format!("[server]\nlisten = \"127.0.0.1:0\"\n[store]\nbackend = \"redis\"\n{body}\n");
        crate::config::compile(std::path::Path::new("t.toml"), &text).map_err(|e| e.to_string())
    }

    #[test]
    fn sentinel_settings_are_read_and_checked() {
        let c = store("sentinels = [\"redis://:spw@10.0.0.1:26379\"]\nmaster = \"m\"\nurl = \"redis://:mpw@x/2\"").expect("valid");
        match c.store.backend {
            crate::config::model::Backend::Redis {
                urls,
                cluster,
                sentinel,
            } => {
                assert_eq!(urls, ["redis://:spw@10.0.0.1:26379"]);
                assert!(!cluster);
                let s = sentinel.expect("sentinel");
                assert_eq!(s.name, "m");
                assert_eq!(s.url.as_deref(), Some("redis://:mpw@x/2"));
            }
            other => panic!("{other:?}"),
        }
        for (body, says) in [
            ("sentinels = [\"redis://h:26379\"]", "needs both `sentinels` and `master`"),
            ("master = \"m\"", "needs both `sentinels` and `master`"),
            ("sentinels = [\"h:26379\"]\nmaster = \"m\"", "not a Sentinel URL"),
            ("sentinels = []\nmaster = \"m\"", "lists no Sentinel"),
            ("sentinels = [\"redis://h:99999\"]\nmaster = \"m\"", "Sentinel URL `redis://h:99999` does not parse"),
            ("sentinels = [\"redis://h:26379\"]\nmaster = \"m\"\nurl = [\"redis://a\", \"redis://b\"]", "one URL carrying the master's credentials"),
        ] {
            let e = store(body).expect_err(body);
            assert!(e.contains(says), "{body}: expected {says:?} in {e}");
        }
    }

    #[test]
    fn redis_urls_go_through_the_clients_own_parser() {
        for (body, says) in [
            (
                "url = \"redis://127.0.0.1:63790000\"",
                "Redis URL `redis://127.0.0.1:63790000` does not parse",
            ),
            (
                "url = [\"redis://a:1\", \"redis://b:70000\"]",
                "Redis URL `redis://b:70000` does not parse",
            ),
            (
                "url = \"redis://:hunter2@h:6379999\"",
                "`redis://:***@h:6379999` does not parse",
            ),
            (
                "url = \"http://h:6379\"",
                "not a Redis URL: `http://h:6379`",
            ),
            ("url = []", "lists no Redis node"),
        ] {
            let e = store(body).expect_err(body);
            assert!(e.contains(says), "{body}: expected {says:?} in {e}");
            assert!(!e.contains("hunter2"), "{e}");
            assert!(e.contains("t.toml:"), "located: {e}");
        }
        store("url = \"rediss://u:p%40ss@h:6380/2\"").expect("a valid URL");
    }
}
