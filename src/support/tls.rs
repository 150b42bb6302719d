//! TLS client settings on ring (not a process-wide default provider): the trusted roots
//! from a CA file or the system's, for the broker and the directory alike.

use std::path::Path;
use std::sync::Arc;

use anyhow::Context;
use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;

/// The certificates in a PEM file; `key` names the setting in errors.
pub fn certs(path: &Path, key: &str) -> anyhow::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(|it| it.collect::<Result<Vec<_>, _>>())
        .with_context(|| format!("{key}: reading PEM certificates from {}", path.display()))?;
    anyhow::ensure!(!certs.is_empty(), "{key}: no certificate in {}", path.display());
    Ok(certs)
}

/// The CA file's certificates (`ca_key` names its setting), or the system's roots.
pub fn roots(ca_file: Option<&Path>, ca_key: &str) -> anyhow::Result<rustls::RootCertStore> {
    let mut roots = rustls::RootCertStore::empty();
    match ca_file {
        Some(path) => {
            for cert in certs(path, ca_key)? {
                roots
                    .add(cert)
                    .with_context(|| format!("{ca_key}: a certificate in {} is not valid", path.display()))?;
            }
        }
        None => {
            roots.add_parsable_certificates(rustls_native_certs::load_native_certs().certs);
            anyhow::ensure!(!roots.is_empty(), "no system CA certificates found; set {ca_key} to the server's CA");
        }
    }
    Ok(roots)
}

/// A builder on ring with safe protocol versions and those roots.
pub fn builder(
    ca_file: Option<&Path>,
    ca_key: &str,
) -> anyhow::Result<rustls::ConfigBuilder<rustls::ClientConfig, rustls::client::WantsClientCert>> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots(ca_file, ca_key)?))
}
