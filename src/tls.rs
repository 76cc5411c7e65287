//! TLS with rustls: the data-plane certificates (several chosen by SNI, re-read on
//! reload) and the client configurations used to reach `https://` upstreams.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{}: malformed PEM: {reason}", path.display())]
    BadPem { path: PathBuf, reason: String },
    #[error("{} holds no PEM certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("{} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)", .0.display())]
    NoKey(PathBuf),
    #[error("{}: unsupported private key type", .0.display())]
    BadKey(PathBuf),
    #[error("{}: not a usable CA certificate: {reason}", path.display())]
    BadCa { path: PathBuf, reason: String },
    #[error("certificate and key do not make a usable TLS config: {0}")]
    Rustls(#[from] rustls::Error),
}

/// One certificate chain and key on disk, served for `names` (empty: the default). A name
/// `*.example.com` is a wildcard for one label (`a.example.com`); exact names beat it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CertFiles {
    pub names: Vec<String>,
    pub cert: PathBuf,
    pub key: PathBuf,
}

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

fn read(path: &Path) -> Result<Vec<u8>, TlsError> {
    crate::read_file::read_bounded(path).map_err(|source| TlsError::Read {
        path: path.to_owned(),
        source,
    })
}

fn certificates(path: &Path) -> Result<Vec<CertificateDer<'static>>, TlsError> {
    let pem = read(path)?;
    // A malformed block is an error, not something to skip: the file is not what its
    // operator thinks it is.
    let certs = CertificateDer::pem_slice_iter(&pem)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| TlsError::BadPem {
            path: path.to_owned(),
            reason: e.to_string(),
        })?;
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(path.to_owned()));
    }
    Ok(certs)
}

fn certified_key(files: &CertFiles) -> Result<Arc<CertifiedKey>, TlsError> {
    let certs = certificates(&files.cert)?;
    let pem = read(&files.key)?;
    let key = match PrivateKeyDer::from_pem_slice(&pem) {
        Ok(key) => key,
        Err(rustls::pki_types::pem::Error::NoItemsFound) => {
            return Err(TlsError::NoKey(files.key.clone()))
        }
        Err(e) => {
            return Err(TlsError::BadPem {
                path: files.key.clone(),
                reason: e.to_string(),
            })
        }
    };
    let signing = provider()
        .key_provider
        .load_private_key(key)
        .map_err(|_| TlsError::BadKey(files.key.clone()))?;
    let certified = CertifiedKey::new(certs, signing);
    certified.keys_match().map_err(TlsError::Rustls)?;
    Ok(Arc::new(certified))
}

/// Server names to values: exact names, and wildcards (`*.example.com`) that stand for
/// exactly one more label. Names are kept in lower case; lookups ignore case.
#[derive(Debug)]
struct SniNames<T> {
    exact: HashMap<String, T>,
    /// By the suffix after `*.`: `example.com` for `*.example.com`.
    wildcard: HashMap<String, T>,
}

impl<T> Default for SniNames<T> {
    fn default() -> Self {
        Self {
            exact: HashMap::new(),
            wildcard: HashMap::new(),
        }
    }
}

impl<T> SniNames<T> {
    /// Adds `name` (`*.` in front makes it a wildcard); a name given twice keeps the
    /// value given last.
    fn insert(&mut self, name: &str, value: T) {
        let name = name.to_ascii_lowercase();
        match name.strip_prefix("*.") {
            Some(suffix) => self.wildcard.insert(suffix.to_owned(), value),
            None => self.exact.insert(name, value),
        };
    }

    /// The value for a client asking for `name`: an exact name first, else the wildcard
    /// for its parent domain (`a.example.com` → `*.example.com`, never
    /// `a.b.example.com` nor `example.com`).
    fn get(&self, name: &str) -> Option<&T> {
        let lower;
        let name = if name.bytes().any(|b| b.is_ascii_uppercase()) {
            lower = name.to_ascii_lowercase();
            lower.as_str()
        } else {
            name
        };
        if let Some(value) = self.exact.get(name) {
            return Some(value);
        }
        match name.split_once('.') {
            Some((label, parent)) if !label.is_empty() && !self.wildcard.is_empty() => {
                self.wildcard.get(parent)
            }
            _ => None,
        }
    }
}

/// Picks the certificate by SNI, falling back to the default one.
#[derive(Debug)]
struct SniResolver {
    by_name: SniNames<Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let named = hello.server_name().and_then(|n| self.by_name.get(n));
        Some(named.unwrap_or(&self.default).clone())
    }
}

/// A server config offering h2 and http/1.1 by ALPN, TLS 1.2 and 1.3 only; with
/// `client_ca`, only to clients whose certificate that CA signed (mutual TLS).
pub fn server_config(
    default: &CertFiles,
    by_sni: &[CertFiles],
    client_ca: Option<&Path>,
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut by_name = SniNames::default();
    for files in by_sni {
        let key = certified_key(files)?;
        for name in &files.names {
            by_name.insert(name, key.clone());
        }
    }
    let resolver = SniResolver {
        by_name,
        default: certified_key(default)?,
    };
    let builder = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?;
    let builder = match client_ca {
        None => builder.with_no_client_auth(),
        Some(path) => builder.with_client_cert_verifier(client_verifier(path)?),
    };
    let mut config = builder.with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Accepts only client certificates `path`'s CAs signed.
fn client_verifier(
    path: &Path,
) -> Result<Arc<dyn rustls::server::danger::ClientCertVerifier>, TlsError> {
    let bad = |reason: String| TlsError::BadCa {
        path: path.to_owned(),
        reason,
    };
    let mut roots = rustls::RootCertStore::empty();
    for cert in certificates(path)? {
        roots.add(cert).map_err(|e| bad(e.to_string()))?;
    }
    rustls::server::WebPkiClientVerifier::builder_with_provider(Arc::new(roots), provider())
        .build()
        .map_err(|e| bad(e.to_string()))
}

/// The certificates a client config trusts, as DER: lets a reload notice a CA file that was
/// rotated in place.
pub type TrustedCerts = Vec<CertificateDer<'static>>;

/// Client config for `https://` upstreams: the bundled web roots, or only the CAs in `ca`
/// (returned too, to compare across reloads).
pub fn upstream_client_config(
    ca: Option<&Path>,
) -> Result<(Arc<rustls::ClientConfig>, TrustedCerts), TlsError> {
    let mut roots = rustls::RootCertStore::empty();
    let mut trusted = Vec::new();
    match ca {
        None => roots.extend(webpki_roots::TLS_SERVER_ROOTS.iter().cloned()),
        Some(path) => {
            trusted = certificates(path)?;
            for cert in trusted.iter().cloned() {
                roots.add(cert).map_err(|e| TlsError::BadCa {
                    path: path.to_owned(),
                    reason: e.to_string(),
                })?;
            }
        }
    }
    let config = rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok((Arc::new(config), trusted))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_pem_is_an_error_not_skipped() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("broken.pem");
        std::fs::write(
            &path,
            "-----BEGIN CERTIFICATE-----\n!!not base64!!\n-----END CERTIFICATE-----\n",
        )
        .expect("write");
        assert!(
            matches!(certificates(&path), Err(TlsError::BadPem { .. })),
            "{:?}",
            certificates(&path)
        );
        std::fs::write(&path, "no PEM here\n").expect("write");
        assert!(matches!(
            certificates(&path),
            Err(TlsError::NoCertificate(_))
        ));
    }

    fn names(entries: &[(&str, &'static str)]) -> SniNames<&'static str> {
        let mut names = SniNames::default();
        for (name, value) in entries {
            names.insert(name, *value);
        }
        names
    }

    #[test]
    fn a_wildcard_stands_for_exactly_one_label() {
        let n = names(&[("*.example.com", "wild")]);
        assert_eq!(n.get("a.example.com"), Some(&"wild"));
        assert_eq!(n.get("xn--bcher-kva.example.com"), Some(&"wild"));
        assert_eq!(n.get("example.com"), None, "not the domain itself");
        assert_eq!(n.get("a.b.example.com"), None, "not two labels");
        assert_eq!(n.get(".example.com"), None, "not an empty label");
        assert_eq!(n.get("a.example.org"), None);
        assert_eq!(n.get("aexample.com"), None);
        assert_eq!(n.get("com"), None);
    }

    #[test]
    fn exact_names_beat_wildcards_in_any_order() {
        for entries in [
            [("*.example.com", "wild"), ("api.example.com", "api")],
            [("api.example.com", "api"), ("*.example.com", "wild")],
        ] {
            let n = names(&entries);
            assert_eq!(n.get("api.example.com"), Some(&"api"));
            assert_eq!(n.get("www.example.com"), Some(&"wild"));
        }
        // A deeper wildcard is its own entry: it does not cover its parent's names.
        let n = names(&[("*.example.com", "one"), ("*.eu.example.com", "eu")]);
        assert_eq!(n.get("a.eu.example.com"), Some(&"eu"));
        assert_eq!(n.get("eu.example.com"), Some(&"one"));
        assert_eq!(n.get("a.b.eu.example.com"), None);
    }

    #[test]
    fn names_match_whatever_their_case() {
        let n = names(&[("*.Example.COM", "wild"), ("API.example.com", "api")]);
        assert_eq!(n.get("api.EXAMPLE.com"), Some(&"api"));
        assert_eq!(n.get("WWW.example.Com"), Some(&"wild"));
        assert_eq!(n.get("www.example.com"), Some(&"wild"));
    }
}
