//! A certificate authority made at test time (rcgen), for TLS on either side of the
//! gateway.

use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, KeyPair};

/// A test CA that signs leaf certificates.
pub struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    pub fn new(name: &str) -> Self {
        let key = KeyPair::generate().expect("key");
        let mut params = CertificateParams::new(Vec::<String>::new()).expect("params");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.distinguished_name.push(DnType::CommonName, name);
        let cert = params.self_signed(&key).expect("ca");
        Self { cert, key }
    }

    /// (certificate PEM, key PEM) for `names`.
    pub fn leaf(&self, names: &[&str], cn: &str) -> (String, String) {
        let key = KeyPair::generate().expect("key");
        let mut params =
            CertificateParams::new(names.iter().map(|s| s.to_string()).collect::<Vec<_>>())
                .expect("params");
        params.distinguished_name.push(DnType::CommonName, cn);
        let cert = params.signed_by(&key, &self.cert, &self.key).expect("leaf");
        (cert.pem(), key.serialize_pem())
    }

    pub fn pem(&self) -> String {
        self.cert.pem()
    }

    pub fn roots(&self) -> rustls::RootCertStore {
        let mut roots = rustls::RootCertStore::empty();
        roots.add(self.cert.der().clone()).expect("root");
        roots
    }
}
