//! Small types every stage may use, importing nothing from the crate, so that using
//! them makes no dependency between stages.

use serde::Deserialize;

mod rng;
pub mod tls;

pub use rng::Rng;

/// Installs ring as the process's TLS provider, once: reqwest and rumqttc are built
/// without a default one.
pub fn install_tls_provider() {
    static PROVIDER: std::sync::Once = std::sync::Once::new();
    PROVIDER.call_once(|| {
        let _ = rustls::crypto::ring::default_provider().install_default();
    });
}

/// Lowercase hex of `bytes` (SHA-256 digests of documents, sessions and tokens).
pub fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// `N` bytes from the operating system's random source (secrets, salts, unique ids).
pub fn random_bytes<const N: usize>() -> [u8; N] {
    let mut bytes = [0u8; N];
    getrandom::fill(&mut bytes).expect("the operating system's random source");
    bytes
}

/// A secret value (an API key). Debug and Display print `[redacted]`.
#[derive(Clone, Deserialize)]
#[serde(transparent)]
pub struct Secret(String);

impl Secret {
    pub fn new(s: impl Into<String>) -> Secret {
        Secret(s.into())
    }

    pub fn expose(&self) -> &str {
        &self.0
    }
}

impl std::fmt::Debug for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

impl std::fmt::Display for Secret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("[redacted]")
    }
}

/// A password from, in this order, the environment, the configuration, or a file
/// (trimmed): the form every `*_password` / `*_password_file` pair takes. `what` names
/// the setting in errors.
pub fn secret_from(
    env: Option<String>,
    inline: Option<&Secret>,
    file: Option<&std::path::Path>,
    what: &str,
) -> Result<Secret, String> {
    match (env, inline, file) {
        (Some(p), _, _) => Ok(Secret::new(p)),
        (None, Some(p), _) => Ok(p.clone()),
        (None, None, Some(path)) => std::fs::read_to_string(path)
            .map(|p| Secret::new(p.trim()))
            .map_err(|e| format!("{what}_file {}: {e}", path.display())),
        (None, None, None) => Err(format!("{what}: not set; set {what}_file (or {what})")),
    }
}
