//! The trust store: server certificates twinops was shown and refused (`rejected/`),
//! and those an engineer accepted (`trusted/`). Nothing is trusted on first sight: a
//! man in the middle would be, too.

use std::path::{Path, PathBuf};

use async_opcua::crypto::{CertificateStore, X509};

/// Where the last refusal is kept that left no certificate in `rejected/` (the
/// certificate's names or dates, checked by twinops before async-opcua pins it).
const LAST_REFUSAL: &str = "last-refusal.txt";

/// Keeps why a connect to `endpoint` was refused for its certificate (`der`), for
/// `twinops opcua trust`; a later refusal replaces it.
pub fn note_refusal(pki: &Path, endpoint: &str, der: &[u8], why: &str) {
    let cert = X509::from_der(der).ok().map(|c| describe(PathBuf::new(), &c, false));
    let about = cert.map_or_else(String::new, |c| format!(" (certificate {}, {})", c.thumbprint, c.subject));
    let line =
        format!("{} {endpoint}{about}: {why}\n", chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true));
    if let Err(e) = std::fs::create_dir_all(pki).and_then(|_| std::fs::write(pki.join(LAST_REFUSAL), line)) {
        tracing::warn!(stage = "opcua", error = %e, "the refusal could not be kept for `twinops opcua trust`");
    }
}

/// The certificate's names and dates passed: the refusal kept, if any, is over.
pub fn clear_refusal(pki: &Path) {
    let _ = std::fs::remove_file(pki.join(LAST_REFUSAL));
}

/// The last refusal kept by [`note_refusal`], if any.
pub fn last_refusal(pki: &Path) -> Option<String> {
    std::fs::read_to_string(pki.join(LAST_REFUSAL)).ok().map(|s| s.trim().to_string()).filter(|s| !s.is_empty())
}

/// A server certificate in the store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Certificate {
    pub file: PathBuf,
    /// SHA-1 of the DER, as OPC UA servers and UaExpert show it (hex, upper case).
    pub thumbprint: String,
    pub subject: String,
    pub valid_from: String,
    pub valid_to: String,
    pub trusted: bool,
}

/// Every certificate in `rejected/` and `trusted/`, rejected first, each by name.
pub fn list(pki: &Path) -> anyhow::Result<Vec<Certificate>> {
    let mut out = Vec::new();
    for (dir, trusted) in [("rejected", false), ("trusted", true)] {
        let Ok(entries) = std::fs::read_dir(pki.join(dir)) else { continue };
        let mut files: Vec<PathBuf> = entries
            .filter_map(|e| e.ok().map(|e| e.path()))
            .filter(|p| p.extension().is_some_and(|x| x == "der" || x == "pem"))
            .collect();
        files.sort();
        for file in files {
            let cert = CertificateStore::read_cert(&file).map_err(anyhow::Error::msg)?;
            out.push(describe(file, &cert, trusted));
        }
    }
    Ok(out)
}

fn describe(file: PathBuf, cert: &X509, trusted: bool) -> Certificate {
    let date = |d: Result<chrono::DateTime<chrono::Utc>, _>| d.map(|d| d.to_rfc3339()).unwrap_or_default();
    Certificate {
        file,
        thumbprint: cert.thumbprint().as_hex_string().to_uppercase(),
        subject: cert.subject_name(),
        valid_from: date(cert.not_before()),
        valid_to: date(cert.not_after()),
        trusted,
    }
}

/// Moves the rejected certificate whose thumbprint starts with `thumbprint` (any case,
/// at least 8 characters) to `trusted/`; the next connect accepts it.
pub fn accept(pki: &Path, thumbprint: &str) -> anyhow::Result<Certificate> {
    let wanted = thumbprint.trim().to_uppercase();
    anyhow::ensure!(
        wanted.len() >= 8,
        "give at least the first 8 characters of the thumbprint `twinops opcua trust` lists"
    );
    let all = list(pki)?;
    let matching: Vec<&Certificate> = all.iter().filter(|c| c.thumbprint.starts_with(&wanted)).collect();
    let cert = match matching.as_slice() {
        [] => anyhow::bail!(
            "no certificate in {} has a thumbprint starting {wanted}; `twinops opcua trust` lists them (a server's \
             certificate appears there after twinops first tries to connect to it)",
            pki.display()
        ),
        [one] => *one,
        _ => anyhow::bail!("{} certificates have thumbprints starting {wanted}: give more of it", matching.len()),
    };
    if cert.trusted {
        return Ok(cert.clone());
    }
    let trusted_dir = pki.join("trusted");
    std::fs::create_dir_all(&trusted_dir)?;
    let to = trusted_dir.join(cert.file.file_name().expect("a file"));
    std::fs::rename(&cert.file, &to)
        .map_err(|e| anyhow::anyhow!("moving {} to {}: {e}", cert.file.display(), to.display()))?;
    Ok(Certificate { file: to, trusted: true, ..cert.clone() })
}
