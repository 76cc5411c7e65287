//! `[upstreams.NAME]`: targets, timeouts, upstream TLS.

use super::*;

impl Compiler {
    pub(super) fn upstream(&mut self, name: String, raw: S<RawUpstream>) -> Option<Upstream> {
        let raw = raw.into_inner();
        if raw.targets.get_ref().is_empty() {
            self.error(
                raw.targets.span(),
                format!("upstream `{name}` has no targets"),
                Some("add targets = [\"http://127.0.0.1:3000\"]".to_owned()),
            );
        }
        let mut targets = Vec::new();
        for t in raw.targets.get_ref() {
            match parse_target(t.get_ref()) {
                Ok(target) => targets.push(target),
                Err(why) => self.error(
                    t.span(),
                    format!("bad upstream target `{}`: {why}", t.get_ref()),
                    Some(
                        "write it as http://host:port or https://host:port, without a path"
                            .to_owned(),
                    ),
                ),
            }
        }
        if let Some(sni) = &raw.sni {
            if rustls::pki_types::ServerName::try_from(sni.get_ref().as_str()).is_err() {
                self.error(
                    sni.span(),
                    format!("`{}` is not a valid TLS server name", sni.get_ref()),
                    Some("write a DNS name such as \"api.internal\"".to_owned()),
                );
            }
        }
        let ca = raw.ca.as_ref().map(|c| self.base.join(c.get_ref()));
        let tls = match crate::tls::upstream_client_config(ca.as_deref()) {
            Ok(tls) => Some(tls),
            Err(e) => {
                let span = raw.ca.as_ref().map_or(raw.targets.span(), S::span);
                self.error(
                    span,
                    format!("upstream `{name}`: {e}"),
                    Some("ca must be a PEM file of CA certificates".to_owned()),
                );
                None
            }
        };
        let connect_timeout =
            self.duration_or(&raw.connect_timeout, DEFAULT_CONNECT_TIMEOUT, false);
        let timeout = self.duration_or(&raw.timeout, DEFAULT_UPSTREAM_TIMEOUT, false);
        let max_connections = self.count_or(
            &raw.max_connections,
            DEFAULT_UPSTREAM_MAX_CONNECTIONS as u64,
            "max_connections",
        );
        let max_idle = self.count_or(&raw.max_idle, DEFAULT_UPSTREAM_MAX_IDLE as u64, "max_idle");
        let idle_timeout =
            self.duration_or(&raw.idle_timeout, DEFAULT_UPSTREAM_IDLE_TIMEOUT, false);
        let protocol = self.protocol(&name, &raw, &targets);
        let max_streams = self.count_or(
            &raw.max_streams,
            DEFAULT_UPSTREAM_MAX_STREAMS as u64,
            "max_streams",
        );
        (!targets.is_empty() && targets.len() == raw.targets.get_ref().len()).then_some(())?;
        Some(Upstream {
            name,
            targets,
            connect_timeout: connect_timeout?,
            timeout: timeout?,
            max_connections: usize::try_from(max_connections?).ok()?,
            max_idle: usize::try_from(max_idle?).ok()?,
            idle_timeout: idle_timeout?,
            ca,
            sni: raw.sni.map(|s| s.into_inner()),
            tls: tls.as_ref()?.0.clone(),
            ca_certs: tls?.1,
            protocol: protocol?,
            max_streams: usize::try_from(max_streams?).ok()?,
        })
    }

    /// `protocol`, checked against the targets' schemes: h2c is HTTP/2 over plain TCP,
    /// h2 over TLS (it is agreed by ALPN, which only TLS carries).
    fn protocol(&mut self, name: &str, raw: &RawUpstream, targets: &[Target]) -> Option<Protocol> {
        let options = [
            ("http1", Protocol::Http1),
            ("h2c", Protocol::H2c),
            ("h2", Protocol::H2),
        ];
        let protocol = self.choice(&raw.protocol, &options, Protocol::Http1, "protocol")?;
        let wanted = match protocol {
            Protocol::Http1 => return Some(protocol),
            Protocol::H2c => Scheme::HTTP,
            Protocol::H2 => Scheme::HTTPS,
        };
        let span = raw.protocol.as_ref().map_or(raw.targets.span(), S::span);
        if let Some(odd) = targets.iter().find(|t| t.scheme != wanted) {
            let hint = match protocol {
                Protocol::H2c => "h2c is HTTP/2 without TLS: use http:// targets, or protocol = \"h2\" for https://",
                _ => "h2 is HTTP/2 over TLS: use https:// targets, or protocol = \"h2c\" for http://",
            };
            self.error(
                span,
                format!(
                    "upstream `{name}` has protocol = \"{}\" but target `{odd}` is {}://",
                    protocol.as_str(),
                    odd.scheme
                ),
                Some(hint.to_owned()),
            );
            return None;
        }
        Some(protocol)
    }
}

/// Why an upstream target is unusable.
#[derive(Debug, thiserror::Error)]
enum TargetError {
    #[error("{0}")]
    Uri(#[from] http::uri::InvalidUri),
    #[error("no scheme")]
    NoScheme,
    #[error("scheme `{0}` is not http or https")]
    Scheme(Scheme),
    #[error("no host")]
    NoHost,
    #[error("a path or query is not allowed")]
    Path,
}

fn parse_target(text: &str) -> Result<Target, TargetError> {
    let uri: Uri = text.parse()?;
    let scheme = uri.scheme().cloned().ok_or(TargetError::NoScheme)?;
    if scheme != Scheme::HTTP && scheme != Scheme::HTTPS {
        return Err(TargetError::Scheme(scheme));
    }
    let authority = uri.authority().cloned().ok_or(TargetError::NoHost)?;
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(TargetError::Path);
    }
    Ok(Target { scheme, authority })
}
