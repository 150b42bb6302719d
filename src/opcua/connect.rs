//! The client and its session: our certificate (created on first start), the trust
//! store, the endpoint matching the configured security, the user's identity, and
//! what each way a connect fails means to the engineer setting it up.

use std::path::{Path, PathBuf};
use std::str::FromStr;
use std::sync::Arc;
use std::time::Duration;

use async_opcua::client::transport::TcpConnector;
use async_opcua::client::{
    Client, ClientBuilder, IdentityToken, Password, Session, SessionEventLoop, SessionPollResult,
};
use async_opcua::crypto::{CertificateStore, SecurityPolicy};
use async_opcua::types::{MessageSecurityMode, StatusCode};
use futures_util::StreamExt;

use super::OpcuaConfig;

/// Where the client keeps its certificates.
pub fn pki_dir(cfg: &OpcuaConfig, data_dir: &Path) -> PathBuf {
    cfg.pki_dir.clone().unwrap_or_else(|| data_dir.join("opcua-pki"))
}

/// A session not yet connected, and the loop that connects it and keeps it.
pub struct Pending {
    pub session: Arc<Session>,
    pub events: SessionEventLoop<TcpConnector>,
}

/// Builds the client and its session for the configured endpoint, security and
/// identity; nothing is connected until `events` is polled. Fails when the endpoint
/// does not answer the endpoint list, or offers no endpoint with our security.
pub async fn session(
    cfg: &OpcuaConfig,
    data_dir: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> anyhow::Result<Pending> {
    let pki = pki_dir(cfg, data_dir);
    let mut client = client(cfg, &pki)?;
    let identity = identity(cfg, env)?;
    let timeout = Duration::from_secs(cfg.timeout_secs);
    let endpoints = tokio::time::timeout(timeout, client.get_server_endpoints_from_url(cfg.endpoint.as_str()))
        .await
        .map_err(|_| anyhow::anyhow!("{}: no answer in {} s; {}", cfg.endpoint, cfg.timeout_secs, UNREACHABLE))?
        .map_err(|e| anyhow::anyhow!("{}: {}", cfg.endpoint, explain(e.status(), cfg, &pki)))?;
    let policy = SecurityPolicy::from_str(&cfg.security_policy).unwrap_or(SecurityPolicy::Unknown);
    let mode = security_mode(&cfg.security_mode);
    let Some(mut endpoint) = Client::find_matching_endpoint(&endpoints, &cfg.endpoint, policy, mode) else {
        let offered: Vec<String> = endpoints
            .iter()
            .map(|e| {
                let policy = SecurityPolicy::from_uri(e.security_policy_uri.as_ref());
                format!("{} {:?}", policy.to_str(), e.security_mode)
            })
            .collect();
        anyhow::bail!(
            "{} offers no endpoint with security_policy {} and security_mode {}; it offers: {}",
            cfg.endpoint,
            cfg.security_policy,
            cfg.security_mode,
            offered.join(", ")
        );
    };
    // The address we were given, not the one the server advertises: behind NAT, a
    // port forward or a proxy, the server's own idea of its address does not reach it.
    endpoint.endpoint_url = cfg.endpoint.as_str().into();
    // A user token policy without a security policy uses the endpoint's (OPC UA Part 4,
    // UserTokenPolicy); async-opcua 0.19 takes it as None, and signs an X.509 user's
    // token with nothing.
    let endpoint_policy = endpoint.security_policy_uri.clone();
    for token in endpoint.user_identity_tokens.iter_mut().flatten() {
        if token.security_policy_uri.is_empty() {
            token.security_policy_uri = endpoint_policy.clone();
        }
    }
    if policy != SecurityPolicy::None {
        let host = reqwest::Url::parse(&cfg.endpoint.replacen("opc.tcp://", "http://", 1))
            .ok()
            .and_then(|u| u.host_str().map(|h| h.trim_matches(['[', ']']).to_string()))
            .unwrap_or_default();
        let der = endpoint.server_certificate.value.clone().unwrap_or_default();
        if let Err(status) = server_certificate_names(&der, &host, endpoint.server.application_uri.as_ref()) {
            // Refused before async-opcua keeps the certificate: `opcua trust` says why.
            let why = explain(status, cfg, &pki);
            super::trust::note_refusal(&pki, &cfg.endpoint, &der, &why);
            anyhow::bail!("{}: {why}", cfg.endpoint);
        }
        super::trust::clear_refusal(&pki);
    }
    let (session, events) = client.connect_to_endpoint_directly(endpoint, identity)?;
    Ok(Pending { session, events })
}

/// Checks the server certificate's validity dates, that a subject alternative name is
/// the endpoint's host (DNS name or IP address), and that one is the server's
/// application URI, wherever they stand among the names.
pub fn server_certificate_names(der: &[u8], host: &str, application_uri: &str) -> Result<(), StatusCode> {
    use x509_cert::der::Decode;
    use x509_cert::ext::pkix::SubjectAltName;
    use x509_cert::ext::pkix::name::GeneralName;
    let cert = x509_cert::Certificate::from_der(der).map_err(|_| StatusCode::BadCertificateInvalid)?;
    let validity = &cert.tbs_certificate.validity;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap_or_default();
    if now < validity.not_before.to_unix_duration() || now > validity.not_after.to_unix_duration() {
        return Err(StatusCode::BadCertificateTimeInvalid);
    }
    let names: Vec<GeneralName> = match cert.tbs_certificate.get::<SubjectAltName>() {
        Ok(Some((_, san))) => san.0,
        _ => Vec::new(),
    };
    let host_ip: Option<std::net::IpAddr> = host.parse().ok();
    let host_ok = names.iter().any(|n| match n {
        GeneralName::DnsName(d) => d.as_str().eq_ignore_ascii_case(host),
        GeneralName::IpAddress(ip) => match (ip.as_bytes().len(), host_ip) {
            (4, Some(std::net::IpAddr::V4(h))) => ip.as_bytes() == h.octets(),
            (16, Some(std::net::IpAddr::V6(h))) => ip.as_bytes() == h.octets(),
            _ => false,
        },
        _ => false,
    });
    if !host_ok {
        return Err(StatusCode::BadCertificateHostNameInvalid);
    }
    let uri_ok = application_uri.is_empty()
        || names
            .iter()
            .any(|n| matches!(n, GeneralName::UniformResourceIdentifier(u) if u.as_str() == application_uri));
    if !uri_ok {
        return Err(StatusCode::BadCertificateUriInvalid);
    }
    Ok(())
}

fn security_mode(text: &str) -> MessageSecurityMode {
    match text {
        "Sign" => MessageSecurityMode::Sign,
        "SignAndEncrypt" => MessageSecurityMode::SignAndEncrypt,
        _ => MessageSecurityMode::None,
    }
}

/// Our application instance certificate, made on first start: CN twinops, the
/// application URI and this host's names, and nothing else in the subject
/// (async-opcua's own would say O=twinops, C=IE, ST=Dublin, which no site is).
fn own_certificate(cfg: &OpcuaConfig, pki: &Path) -> anyhow::Result<()> {
    let (cert, key) = (pki.join("own/cert.der"), pki.join("private/private.pem"));
    if cert.exists() && key.exists() {
        return Ok(());
    }
    let description = async_opcua::types::ApplicationDescription {
        application_uri: cfg.application_uri.as_str().into(),
        application_name: async_opcua::types::LocalizedText::new("", "twinops"),
        ..Default::default()
    };
    let data = async_opcua::crypto::X509Data {
        organization: String::new(),
        organizational_unit: String::new(),
        country: String::new(),
        state: String::new(),
        ..async_opcua::crypto::X509Data::from((description, None))
    };
    async_opcua::crypto::CertificateStore::create_certificate_and_key(&data, false, &cert, &key)
        .map(drop)
        .map_err(|e| anyhow::anyhow!("making twinops' OPC UA certificate in {}: {e}", pki.display()))
}

fn client(cfg: &OpcuaConfig, pki: &Path) -> anyhow::Result<Client> {
    own_certificate(cfg, pki)?;
    // async-opcua's reconnects double from the first wait to the cap without jitter:
    // the first wait drawn from 0.5-1.5 s (and the cap from 90-110%) spreads the
    // clients of a restarted server over their attempts.
    let label = format!("{} {} {:?}", cfg.endpoint, std::process::id(), std::time::SystemTime::now());
    let mut rng = crate::support::Rng::from_label(&label);
    let first = Duration::from_millis(500 + rng.below(1001));
    let cap = Duration::from_millis(cfg.reconnect_max_secs * 1000 * (90 + rng.below(21)) / 100).max(first);
    ClientBuilder::new()
        .application_name("twinops")
        .application_uri(cfg.application_uri.as_str())
        .product_uri("urn:twinops")
        .create_sample_keypair(true)
        .pki_dir(pki)
        .trust_server_certs(false)
        // async-opcua still pins the certificate (trusted/ or refused); its validity
        // and names are checked in `server_certificate_names`.
        .verify_server_certs(false)
        .session_retry_limit(-1)
        .session_retry_initial(first)
        .session_retry_max(cap)
        .request_timeout(Duration::from_secs(cfg.timeout_secs))
        // twinops re-creates its subscriptions itself on a new session: the node ids
        // are resolved again, since a restarted server may have renumbered them.
        .recreate_subscriptions(false)
        .session_name("twinops")
        .session_timeout(60_000)
        .keep_alive_interval(Duration::from_secs(5))
        .max_failed_keep_alive_count(2)
        .client()
        .map_err(|problems| anyhow::anyhow!("the OPC UA client's settings: {}", problems.join("; ")))
}

fn identity(cfg: &OpcuaConfig, env: &(dyn Fn(&str) -> Option<String> + Sync)) -> anyhow::Result<IdentityToken> {
    if let (Some(cert), Some(key)) = (&cfg.user_certificate, &cfg.user_private_key) {
        let cert = CertificateStore::read_cert(cert)
            .map_err(|e| anyhow::anyhow!("opcua.user_certificate {}: {e}", cert.display()))?;
        let key = CertificateStore::read_pkey(key)
            .map_err(|e| anyhow::anyhow!("opcua.user_private_key {}: {e}", key.display()))?;
        return Ok(IdentityToken::X509(Box::new(cert), Box::new(key)));
    }
    Ok(match cfg.password(env)? {
        Some(password) => IdentityToken::UserName(cfg.user.clone(), Password::new(password.expose())),
        None => IdentityToken::Anonymous,
    })
}

const UNREACHABLE: &str = "check opcua.endpoint's host and port, that the server runs, and the firewall between";

/// What a failed connect means, and what to do about it.
pub fn explain(status: StatusCode, cfg: &OpcuaConfig, pki: &Path) -> String {
    let rejected = pki.join("rejected");
    match status {
        StatusCode::BadCertificateUntrusted | StatusCode::BadSecurityChecksFailed => format!(
            "the server's certificate is not trusted ({status}); it was kept in {}: review it with `twinops opcua trust` \
             and accept it with `twinops opcua trust --accept <thumbprint>`",
            rejected.display()
        ),
        StatusCode::BadCertificateHostNameInvalid => format!(
            "the server's certificate does not name the host in opcua.endpoint ({status}): use the host name the \
             certificate was issued for"
        ),
        StatusCode::BadCertificateTimeInvalid => {
            format!("the server's certificate has expired or is not yet valid ({status}): check both clocks")
        }
        StatusCode::BadCertificateUriInvalid => {
            format!("the server's certificate does not carry its application URI ({status})")
        }
        StatusCode::BadUserAccessDenied
        | StatusCode::BadIdentityTokenRejected
        | StatusCode::BadIdentityTokenInvalid
        | StatusCode::BadUserSignatureInvalid => format!(
            "the server refused the login as {} ({status}): check opcua.user and its password, or user_certificate",
            match (&cfg.user_certificate, cfg.user.is_empty()) {
                (Some(cert), _) => format!("the X.509 user of {}", cert.display()),
                (None, true) => "anonymous".to_string(),
                (None, false) => format!("user '{}'", cfg.user),
            }
        ),
        StatusCode::BadSecurityPolicyRejected | StatusCode::BadSecurityModeRejected => format!(
            "the server refused security_policy {} / security_mode {} ({status})",
            cfg.security_policy, cfg.security_mode
        ),
        StatusCode::BadTooManySessions => format!("the server has no session left for us ({status})"),
        _ => format!("{status}: {UNREACHABLE}"),
    }
}

/// Connects once, for a command (`opcua browse`, `check`): polls the session's loop
/// until it is connected, then keeps polling it in a task. Fails on the first refusal,
/// with what to do, or after `timeout_secs`.
pub async fn once(
    cfg: &OpcuaConfig,
    data_dir: &Path,
    env: &(dyn Fn(&str) -> Option<String> + Sync),
) -> anyhow::Result<(Arc<Session>, tokio::task::JoinHandle<()>)> {
    let Pending { session, events } = session(cfg, data_dir, env).await?;
    let pki = pki_dir(cfg, data_dir);
    let mut stream = Box::pin(events.enter());
    let connected = tokio::time::timeout(Duration::from_secs(cfg.timeout_secs), async {
        while let Some(step) = stream.next().await {
            match step {
                Ok(SessionPollResult::Reconnected(_)) => return Ok(()),
                Ok(SessionPollResult::ReconnectFailed(status)) | Err(status) => {
                    return Err(anyhow::anyhow!("{}: {}", cfg.endpoint, explain(status, cfg, &pki)));
                }
                Ok(_) => {}
            }
        }
        Err(anyhow::anyhow!("{}: the session ended before it connected", cfg.endpoint))
    })
    .await
    .map_err(|_| anyhow::anyhow!("{}: not connected in {} s; {UNREACHABLE}", cfg.endpoint, cfg.timeout_secs))?;
    connected?;
    let task = tokio::spawn(async move { while stream.next().await.is_some() {} });
    Ok((session, task))
}
