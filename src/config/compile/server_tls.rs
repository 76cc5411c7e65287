//! `[server.tls]` and `[rls.tls]`: the certificates, loaded at compile time, and the SNI
//! names they answer for.

use super::*;
use crate::config::raw::RawTls;

impl Compiler {
    /// `[server.tls]` (or `[rls.tls]`, named by `table`): the default certificate and the
    /// SNI ones, loaded now so that an unreadable file is a config error, not a failure at
    /// the first handshake.
    pub(super) fn server_tls(&mut self, raw: &S<RawTls>, table: &str) -> Option<ServerTls> {
        let span = raw.span();
        let t = raw.get_ref();
        let default = CertFiles {
            names: Vec::new(),
            cert: self.base.join(t.cert.get_ref()),
            key: self.base.join(t.key.get_ref()),
        };
        for name in t.sni.iter().flat_map(|s| &s.get_ref().names) {
            if let Err((message, hint)) = check_sni_name(name.get_ref()) {
                self.error(name.span(), message, Some(hint));
            }
        }
        let sni: Vec<CertFiles> = t
            .sni
            .iter()
            .map(|s| CertFiles {
                names: s
                    .get_ref()
                    .names
                    .iter()
                    .map(|n| n.get_ref().clone())
                    .collect(),
                cert: self.base.join(&s.get_ref().cert),
                key: self.base.join(&s.get_ref().key),
            })
            .collect();
        let client_ca = t.client_ca.as_ref().map(|c| self.base.join(c.get_ref()));
        match crate::tls::server_config(&default, &sni, client_ca.as_deref()) {
            Ok(config) => Some(ServerTls {
                default,
                sni,
                client_ca,
                config,
            }),
            Err(e) => {
                self.error(span, format!("{table}: {e}"), Some("point cert, key and client_ca at PEM files (relative paths start at the config file's folder)".to_owned()));
                None
            }
        }
    }
}

/// A `[[server.tls.sni]]` name with a `*` in it must be a wildcard tollgate can match:
/// `*.` then a domain of at least two labels (`*.example.com`, not `*.com`), standing for
/// exactly one label. Otherwise the message and hint to report.
fn check_sni_name(name: &str) -> Result<(), (String, String)> {
    if !name.contains('*') {
        return Ok(());
    }
    let example = "write e.g. \"*.example.com\"";
    let Some(suffix) = name.strip_prefix("*.") else {
        return Err((
            format!("`{name}` is not a usable wildcard name"),
            format!("`*` may only be the whole first label, and stands for exactly one label: {example}"),
        ));
    };
    if suffix.contains('*') {
        return Err((
            format!("`{name}` has more than one `*`"),
            format!("a wildcard stands for exactly one label, the first: {example} (and list deeper names, or another wildcard, separately)"),
        ));
    }
    let labels: Vec<&str> = suffix.split('.').collect();
    let valid_label = |l: &&str| {
        !l.is_empty()
            && l.len() <= 63
            && l.bytes()
                .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
            && !l.starts_with('-')
            && !l.ends_with('-')
    };
    if name.len() > 253 || !labels.iter().all(valid_label) {
        return Err((
            format!("`{name}`: `{suffix}` after `*.` is not a valid domain name"),
            format!("a wildcard is `*.` then a DNS name (labels of letters, digits and `-`, joined by dots, no trailing dot): {example}"),
        ));
    }
    if labels.len() < 2 {
        return Err((
            format!("`{name}` covers a whole top-level domain"),
            format!("a wildcard needs at least two labels after `*.`: {example}"),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod sni_name_tests {
    use super::check_sni_name;

    #[test]
    fn wildcards_are_a_star_label_then_a_domain_of_two_labels_or_more() {
        for good in [
            "api.example.com",
            "localhost",
            "*.example.com",
            "*.EU.Example.com",
            "*.xn--bcher-kva.example",
            "*.my-host.internal",
        ] {
            assert_eq!(check_sni_name(good), Ok(()), "{good}");
        }
        for (bad, says) in [
            ("*.com", "top-level domain"),
            ("*", "not a usable wildcard"),
            ("*example.com", "not a usable wildcard"),
            ("a*.example.com", "not a usable wildcard"),
            ("api.*.example.com", "not a usable wildcard"),
            ("*.*.example.com", "more than one `*`"),
            ("*.example.*", "more than one `*`"),
            ("*.", "not a valid domain name"),
            ("*..com", "not a valid domain name"),
            ("*.example.com.", "not a valid domain name"),
            ("*.-bad.example.com", "not a valid domain name"),
            ("*.exa mple.com", "not a valid domain name"),
        ] {
            let (message, hint) = check_sni_name(bad).expect_err(bad);
            assert!(message.contains(says), "{bad}: {message}");
            assert!(hint.contains("*.example.com"), "{bad}: {hint}");
        }
    }
}
