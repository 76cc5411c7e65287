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

/// One certificate chain and key on disk, served for `names` (empty: the default).
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
    std::fs::read(path).map_err(|source| TlsError::Read {
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

/// Picks the certificate by SNI, falling back to the default one.
#[derive(Debug)]
struct SniResolver {
    by_name: HashMap<String, Arc<CertifiedKey>>,
    default: Arc<CertifiedKey>,
}

impl ResolvesServerCert for SniResolver {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        let named = hello
            .server_name()
            .and_then(|n| self.by_name.get(&n.to_ascii_lowercase()));
        Some(named.unwrap_or(&self.default).clone())
    }
}

/// A server config offering h2 and http/1.1 by ALPN, TLS 1.2 and 1.3 only.
pub fn server_config(
    default: &CertFiles,
    by_sni: &[CertFiles],
) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let mut by_name = HashMap::new();
    for files in by_sni {
        let key = certified_key(files)?;
        for name in &files.names {
            by_name.insert(name.to_ascii_lowercase(), key.clone());
        }
    }
    let resolver = SniResolver {
        by_name,
        default: certified_key(default)?,
    };
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_cert_resolver(Arc::new(resolver));
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
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
}
