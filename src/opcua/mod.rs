//! OPC UA: twinops as a client of the servers sites already run (SCADA, historians,
//! PLCs), beside MQTT. `browse` writes the plant files a site reviews and imports;
//! `link` keeps one session: data-change subscriptions for the twin's sensors that
//! have a node, and an event subscription for Alarms & Conditions, both committed
//! through ingest's transaction and limit alarming as MQTT events are.
//!
//! Node ids are kept by namespace URI (`node::NodeRef`) and resolved at each connect.
//! The server's certificate must be trusted (`trust`) before a secure channel opens.
//!
//! Architecture Invariant: twinops never writes a value or calls a method on the
//! server, with one exception a site turns on: `acknowledge = true` passes an
//! operator's acknowledgement in the HMI on to the server's Acknowledge method.

pub mod acks;
pub mod browse;
pub mod conditions;
pub mod connect;
pub mod intake;
pub mod interop;
pub mod link;
pub mod node;
pub mod trust;

use std::path::PathBuf;

use serde::Deserialize;

pub use crate::domain::NodeRef;
use crate::domain::Severity;
use crate::support::Secret;

/// `[opcua]` in `twinops.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct OpcuaConfig {
    pub enabled: bool,
    /// `opc.tcp://host:4840`, as the server's endpoint list gives it.
    pub endpoint: String,
    /// None, Basic256Sha256, Aes128-Sha256-RsaOaep or Aes256-Sha256-RsaPss.
    pub security_policy: String,
    /// None, Sign or SignAndEncrypt.
    pub security_mode: String,
    /// Empty: anonymous. Else a user name, with `password` (or `password_file`, or
    /// `TWINOPS_OPCUA_PASSWORD`).
    pub user: String,
    pub password: Option<Secret>,
    pub password_file: Option<PathBuf>,
    /// An X.509 user identity instead of a name: the certificate (DER or PEM) and its key.
    pub user_certificate: Option<PathBuf>,
    pub user_private_key: Option<PathBuf>,
    /// The client's certificates: `own/cert.der` (created on first start),
    /// `trusted/` and `rejected/` server certificates. Default `<data_dir>/opcua-pki`.
    pub pki_dir: Option<PathBuf>,
    /// Our application URI, written into our certificate.
    pub application_uri: String,
    /// Where `opcua browse` starts, and what `auto_register` walks: default the
    /// Objects folder.
    pub root: NodeRef,
    /// At each connect, add to the twin what `root`'s tree has and the twin lacks,
    /// through the plant import's checks, audited as `opcua`.
    pub auto_register: bool,
    /// The station of assets found by browsing and of the server's own asset.
    pub station: String,
    /// The asset standing for the server: its communication loss is raised on it.
    pub server_asset: String,
    /// How often the server samples each value, ms.
    pub sampling_interval_ms: u64,
    /// How often the server publishes what changed, ms.
    pub publishing_interval_ms: u64,
    /// Changes the server keeps per value between publishes: a link cut for
    /// `queue_size` samples loses none.
    pub queue_size: u32,
    /// `none`, `absolute` (in the value's unit) or `percent` (of its EURange).
    pub deadband: String,
    pub deadband_value: f64,
    /// Where Alarms & Conditions events are subscribed: default the Server object.
    pub event_notifiers: Vec<NodeRef>,
    /// The lowest OPC UA severity (1-1000) of each priority above low.
    pub severity_medium: u16,
    pub severity_high: u16,
    pub severity_critical: u16,
    /// Pass an operator's acknowledgement on to the server (its Acknowledge method).
    pub acknowledge: bool,
    /// The priority of the communication-loss alarm raised while the server is away.
    pub comm_loss_priority: Severity,
    /// Each request to the server, and the first connect's, seconds.
    pub timeout_secs: u64,
    /// The longest wait between reconnects, seconds (the first is 0.5-1.5 s, doubling;
    /// both drawn at random per start, so that clients do not return in step).
    pub reconnect_max_secs: u64,
}

impl Default for OpcuaConfig {
    fn default() -> Self {
        OpcuaConfig {
            enabled: false,
            endpoint: String::new(),
            security_policy: "None".into(),
            security_mode: "None".into(),
            user: String::new(),
            password: None,
            password_file: None,
            user_certificate: None,
            user_private_key: None,
            pki_dir: None,
            application_uri: "urn:twinops:client".into(),
            root: NodeRef::parse("i=85").expect("the Objects folder"),
            auto_register: false,
            station: "OPCUA".into(),
            server_asset: "OPCUA-SERVER".into(),
            sampling_interval_ms: 1000,
            publishing_interval_ms: 1000,
            queue_size: 60,
            deadband: "none".into(),
            deadband_value: 0.0,
            event_notifiers: vec![NodeRef::parse("i=2253").expect("the Server object")],
            severity_medium: 401,
            severity_high: 601,
            severity_critical: 801,
            acknowledge: false,
            comm_loss_priority: Severity::High,
            timeout_secs: 10,
            reconnect_max_secs: 5,
        }
    }
}

/// The security policies twinops offers (Basic128Rsa15 and Basic256 are deprecated).
pub const POLICIES: [&str; 4] = ["None", "Basic256Sha256", "Aes128-Sha256-RsaOaep", "Aes256-Sha256-RsaPss"];

impl OpcuaConfig {
    /// Checks what serde cannot.
    pub fn validate(&self) -> anyhow::Result<()> {
        if !self.enabled && self.endpoint.is_empty() {
            return Ok(());
        }
        anyhow::ensure!(
            self.endpoint.starts_with("opc.tcp://"),
            "opcua.endpoint '{}' must be an opc.tcp:// URL, e.g. opc.tcp://scada1:4840",
            self.endpoint
        );
        anyhow::ensure!(
            POLICIES.contains(&self.security_policy.as_str()),
            "opcua.security_policy '{}' is not one of {}",
            self.security_policy,
            POLICIES.join(", ")
        );
        let mode_ok = match self.security_policy.as_str() {
            "None" => self.security_mode == "None",
            _ => matches!(self.security_mode.as_str(), "Sign" | "SignAndEncrypt"),
        };
        anyhow::ensure!(
            mode_ok,
            "opcua.security_mode '{}' does not go with security_policy '{}': None with None, else Sign or SignAndEncrypt",
            self.security_mode,
            self.security_policy
        );
        anyhow::ensure!(
            self.user_certificate.is_some() == self.user_private_key.is_some(),
            "opcua: set both user_certificate and user_private_key, or neither"
        );
        anyhow::ensure!(
            self.user.is_empty() || self.user_certificate.is_none(),
            "opcua: log in with user (and a password) or with user_certificate, not both"
        );
        anyhow::ensure!(
            matches!(self.deadband.as_str(), "none" | "absolute" | "percent"),
            "opcua.deadband '{}' must be none, absolute or percent",
            self.deadband
        );
        anyhow::ensure!(
            self.deadband_value >= 0.0 && (self.deadband != "percent" || self.deadband_value <= 100.0),
            "opcua.deadband_value must be 0 or more (at most 100 for percent)"
        );
        anyhow::ensure!(
            (1..=1000).contains(&self.severity_medium)
                && self.severity_medium < self.severity_high
                && self.severity_high < self.severity_critical
                && self.severity_critical <= 1000,
            "opcua severities must rise within 1-1000: severity_medium < severity_high < severity_critical"
        );
        anyhow::ensure!(self.sampling_interval_ms <= 3_600_000, "opcua.sampling_interval_ms is at most an hour");
        anyhow::ensure!(
            (50..=3_600_000).contains(&self.publishing_interval_ms),
            "opcua.publishing_interval_ms must be 50 to 3600000"
        );
        anyhow::ensure!((1..=10_000).contains(&self.queue_size), "opcua.queue_size must be 1 to 10000");
        anyhow::ensure!((1..=300).contains(&self.timeout_secs), "opcua.timeout_secs must be 1 to 300");
        anyhow::ensure!((1..=3600).contains(&self.reconnect_max_secs), "opcua.reconnect_max_secs must be 1 to 3600");
        crate::domain::AssetId::parse(&self.server_asset)
            .map_err(|e| anyhow::anyhow!("opcua.server_asset '{}': {e}", self.server_asset))?;
        Ok(())
    }

    /// The priority an OPC UA severity (1-1000) maps to.
    pub fn priority(&self, severity: u16) -> Severity {
        match severity {
            s if s >= self.severity_critical => Severity::Critical,
            s if s >= self.severity_high => Severity::High,
            s if s >= self.severity_medium => Severity::Medium,
            _ => Severity::Low,
        }
    }

    /// The password, from `TWINOPS_OPCUA_PASSWORD`, `password` or `password_file`.
    pub fn password(&self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Option<Secret>> {
        if self.user.is_empty() {
            return Ok(None);
        }
        crate::support::secret_from(
            env("TWINOPS_OPCUA_PASSWORD"),
            self.password.as_ref(),
            self.password_file.as_deref(),
            "opcua.password",
        )
        .map(Some)
        .map_err(anyhow::Error::msg)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn severities_map_onto_priorities_by_the_settable_bands() {
        let cfg = OpcuaConfig::default();
        let got: Vec<Severity> = [1, 400, 401, 600, 601, 800, 801, 1000].map(|s| cfg.priority(s)).to_vec();
        use Severity::*;
        assert_eq!(got, [Low, Low, Medium, Medium, High, High, Critical, Critical]);
    }

    #[test]
    fn a_bad_setting_is_refused_with_what_to_write() {
        let on = OpcuaConfig { enabled: true, endpoint: "opc.tcp://scada:4840".into(), ..OpcuaConfig::default() };
        on.validate().unwrap();
        for (cfg, said) in [
            (OpcuaConfig { endpoint: "http://x".into(), ..on.clone() }, "opc.tcp://"),
            (OpcuaConfig { security_policy: "Basic128Rsa15".into(), ..on.clone() }, "Basic256Sha256"),
            (OpcuaConfig { security_policy: "Basic256Sha256".into(), ..on.clone() }, "SignAndEncrypt"),
            (OpcuaConfig { deadband: "relative".into(), ..on.clone() }, "absolute"),
            (OpcuaConfig { severity_high: 300, ..on.clone() }, "severity_medium < severity_high"),
            (OpcuaConfig { server_asset: "bad id!".into(), ..on.clone() }, "server_asset"),
        ] {
            let e = cfg.validate().unwrap_err().to_string();
            assert!(e.contains(said), "{e}");
        }
    }
}
