//! TLS with rustls: the data-plane certificate (re-read on reload) and the client
//! configuration used to reach `https://` upstreams.

use std::io::BufReader;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::pki_types::{CertificateDer, PrivateKeyDer};

#[derive(Debug, thiserror::Error)]
pub enum TlsError {
    #[error("cannot read {}: {source}", path.display())]
    Read {
        path: PathBuf,
        #[source]
        source: std::io::Error,
    },
    #[error("{} holds no PEM certificate", .0.display())]
    NoCertificate(PathBuf),
    #[error("{} holds no PEM private key (PKCS#8, PKCS#1 or SEC1)", .0.display())]
    NoKey(PathBuf),
    #[error("certificate and key do not make a usable TLS config: {0}")]
    Rustls(#[from] rustls::Error),
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

/// Loads a PEM chain and key into a server config offering h2 and http/1.1 by ALPN.
pub fn server_config(cert: &Path, key: &Path) -> Result<Arc<rustls::ServerConfig>, TlsError> {
    let cert_pem = read(cert)?;
    let certs: Vec<CertificateDer<'static>> =
        rustls_pemfile::certs(&mut BufReader::new(&cert_pem[..]))
            .filter_map(Result::ok)
            .collect();
    if certs.is_empty() {
        return Err(TlsError::NoCertificate(cert.to_owned()));
    }
    let key_pem = read(key)?;
    let key_der: PrivateKeyDer<'static> =
        rustls_pemfile::private_key(&mut BufReader::new(&key_pem[..]))
            .ok()
            .flatten()
            .ok_or_else(|| TlsError::NoKey(key.to_owned()))?;
    let mut config = rustls::ServerConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_no_client_auth()
        .with_single_cert(certs, key_der)?;
    config.alpn_protocols = vec![b"h2".to_vec(), b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// Client config for `https://` upstreams: the bundled web roots.
pub fn upstream_client_config() -> Result<rustls::ClientConfig, TlsError> {
    let roots = rustls::RootCertStore {
        roots: webpki_roots::TLS_SERVER_ROOTS.to_vec(),
    };
    Ok(rustls::ClientConfig::builder_with_provider(provider())
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth())
}
