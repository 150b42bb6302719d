//! Configuration: `twinops.toml`, then `TWINOPS_*` environment variables, validated at
//! start-up. Unknown keys are refused and every error names its key. Secrets are a
//! [`Secret`] that never prints. Each part is owned by its component, which defines
//! and validates it; this module loads the file, applies the environment and assembles.

use std::path::{Path, PathBuf};

use anyhow::{Context, bail};
use serde::Deserialize;

/// Owned by the agent (the model chain and its limits); assembled here.
pub use crate::agent::config::{AgentLimits, LlmConfig, ProviderConfig, ProviderKind};
use crate::agent::openai::ToolMode;
/// Owned by the scheduler, which validates it; assembled here.
pub use crate::schedule::ScheduleConfig;

/// Owned by ingest's MQTT transport; assembled here.
pub use crate::ingest::mqtt::MqttConfig;
/// Owned by the MCP server.
pub use crate::mcp::McpConfig;
/// Owned by the outbound notes.
pub use crate::notify::NotifyConfig;
pub use crate::support::Secret;
/// Owned by the triage queue and its workers.
pub use crate::triage::TriageConfig;
/// Owned by the HMI.
pub use crate::web::WebConfig;

#[derive(Debug, Clone, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// Folder for the database and other state; `--data-dir` and `TWINOPS_DATA_DIR`
    /// take precedence (default `data`, beside where twinops runs).
    #[serde(default)]
    pub data_dir: Option<PathBuf>,
    #[serde(default)]
    pub llm: LlmConfig,
    #[serde(default)]
    pub mqtt: MqttConfig,
    #[serde(default)]
    pub triage: TriageConfig,
    #[serde(default)]
    pub notify: NotifyConfig,
    #[serde(default)]
    pub schedule: ScheduleConfig,
    #[serde(default)]
    pub web: WebConfig,
    #[serde(default)]
    pub mcp: McpConfig,
    /// Owned by its component: `src/sparkplug/mod.rs`.
    #[serde(default)]
    pub sparkplug: crate::sparkplug::SparkplugConfig,
    /// Owned by its component: `src/opcua/mod.rs`.
    #[serde(default)]
    pub opcua: crate::opcua::OpcuaConfig,
    /// Off unless set: `src/rag/embed.rs`.
    #[serde(default)]
    pub embeddings: Option<crate::rag::EmbeddingsConfig>,
    /// Directory login, off unless set: `src/accounts/directory.rs`.
    #[serde(default)]
    pub directory: Option<crate::accounts::directory::DirectoryConfig>,
    /// A redundant pair, off unless set: `src/cluster/mod.rs`.
    #[serde(default)]
    pub cluster: Option<crate::cluster::ClusterConfig>,
}

impl Config {
    /// What ingest accepts and how it queues triage, for the daemon's ingest and a
    /// replay's alike.
    pub fn ingest_policy(&self) -> crate::ingest::IngestPolicy {
        crate::ingest::IngestPolicy {
            queue: crate::alarms::QueuePolicy {
                capacity: self.triage.queue_capacity,
                backfill_after_secs: self.triage.backfill_after_secs,
            },
            max_ahead_s: (self.mqtt.max_time_ahead_s > 0).then_some(i64::from(self.mqtt.max_time_ahead_s)),
            max_behind_s: (self.mqtt.max_time_behind_s > 0).then_some(i64::from(self.mqtt.max_time_behind_s)),
            sparkplug: self.sparkplug.enabled.then(|| std::sync::Arc::new(self.sparkplug.clone())),
            episodes: crate::episodes::EpisodeRules::default(),
        }
    }

    /// The documentation search: BM25, fused with embeddings when `[embeddings]` is set.
    pub fn doc_index(&self) -> crate::rag::DocIndex {
        match &self.embeddings {
            Some(c) => crate::rag::DocIndex::with_embeddings(crate::rag::Embedder::new(c.clone())),
            None => crate::rag::DocIndex::new(),
        }
    }

    /// Reads `path` if it exists, then applies `TWINOPS_LLM_*` from `env`.
    pub fn load(path: &Path, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Config> {
        let mut config: Config = match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text).with_context(|| format!("in {}", path.display()))?,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Config::default(),
            Err(e) => return Err(e).with_context(|| format!("reading {}", path.display())),
        };
        config.apply_env(env)?;
        config.validate()?;
        Ok(config)
    }

    /// `TWINOPS_LLM_KIND` (with `_BASE_URL`, `_MODEL`, `_API_KEY`, `_API_KEY_FILE`)
    /// replaces the chain with one provider.
    fn apply_env(&mut self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        let m = &mut self.mqtt;
        if let Some(url) = env("TWINOPS_MQTT_URL") {
            m.url = url;
        }
        if let Some(user) = env("TWINOPS_MQTT_USERNAME") {
            m.username = Some(user);
        }
        if let Some(password) = env("TWINOPS_MQTT_PASSWORD") {
            m.password = Some(Secret::new(password));
        }
        if let Some(topics) = env("TWINOPS_MQTT_TOPICS") {
            m.topics = topics.split(',').map(|t| t.trim().to_string()).filter(|t| !t.is_empty()).collect();
        }
        if let Some(listen) = env("TWINOPS_MQTT_LISTEN") {
            m.embedded_listen = listen;
        }
        for (key, field) in [
            ("TWINOPS_MQTT_CA_FILE", &mut m.ca_file),
            ("TWINOPS_MQTT_CLIENT_CERT_FILE", &mut m.client_cert_file),
            ("TWINOPS_MQTT_CLIENT_KEY_FILE", &mut m.client_key_file),
        ] {
            if let Some(path) = env(key) {
                *field = Some(PathBuf::from(path));
            }
        }
        if let Some(id) = env("TWINOPS_MQTT_CLIENT_ID") {
            m.client_id = id;
        }
        if let Some(listen) = env("TWINOPS_WEB_LISTEN") {
            self.web.listen = listen;
        }
        if let Some(url) = env("TWINOPS_WEBHOOK_URL") {
            self.notify.webhook_url = Some(Secret::new(url));
        }
        self.apply_embeddings_env(env)?;
        self.apply_llm_env(env)
    }

    /// `TWINOPS_EMBEDDINGS_BASE_URL` with `_MODEL` (and `_API_KEY`) turns embeddings on.
    fn apply_embeddings_env(&mut self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        let (url, model) = (env("TWINOPS_EMBEDDINGS_BASE_URL"), env("TWINOPS_EMBEDDINGS_MODEL"));
        match (&mut self.embeddings, url, model) {
            (None, None, None) => return Ok(()),
            (None, Some(url), Some(model)) => self.embeddings = Some(crate::rag::EmbeddingsConfig::new(url, model)),
            (None, Some(_), None) => {
                bail!("TWINOPS_EMBEDDINGS_BASE_URL is set but TWINOPS_EMBEDDINGS_MODEL is not; set both")
            }
            (None, None, Some(_)) => {
                bail!("TWINOPS_EMBEDDINGS_MODEL is set but TWINOPS_EMBEDDINGS_BASE_URL is not; set both")
            }
            (Some(c), url, model) => {
                c.base_url = url.unwrap_or(std::mem::take(&mut c.base_url));
                c.model = model.unwrap_or(std::mem::take(&mut c.model));
            }
        }
        if let (Some(c), Some(key)) = (&mut self.embeddings, env("TWINOPS_EMBEDDINGS_API_KEY")) {
            c.api_key = Some(Secret::new(key));
        }
        Ok(())
    }

    fn apply_llm_env(&mut self, env: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<()> {
        fn number<T: std::str::FromStr>(value: Option<String>, key: &str, example: &str) -> anyhow::Result<Option<T>> {
            value.map(|v| v.trim().parse().map_err(|_| anyhow::anyhow!("{key}: '{v}' is not {example}"))).transpose()
        }
        let Some(kind) = env("TWINOPS_LLM_KIND") else {
            for key in ["TWINOPS_LLM_BASE_URL", "TWINOPS_LLM_MODEL", "TWINOPS_LLM_API_KEY"] {
                if env(key).is_some() {
                    bail!(
                        "{key} is set but TWINOPS_LLM_KIND is not; set TWINOPS_LLM_KIND to openai, anthropic or rules"
                    );
                }
            }
            return Ok(());
        };
        let kind = match kind.as_str() {
            "openai" => ProviderKind::Openai,
            "anthropic" => ProviderKind::Anthropic,
            "rules" => ProviderKind::Rules,
            other => bail!("TWINOPS_LLM_KIND: '{other}' is not a provider; use openai, anthropic or rules"),
        };
        self.llm.chain = vec![ProviderConfig {
            kind,
            base_url: env("TWINOPS_LLM_BASE_URL"),
            model: env("TWINOPS_LLM_MODEL"),
            api_key: env("TWINOPS_LLM_API_KEY").map(Secret::new),
            api_key_file: env("TWINOPS_LLM_API_KEY_FILE").map(PathBuf::from),
            tool_mode: match env("TWINOPS_LLM_TOOL_MODE").as_deref() {
                None | Some("native") => ToolMode::Native,
                Some("json") => ToolMode::Json,
                Some(other) => bail!("TWINOPS_LLM_TOOL_MODE: '{other}' is not a tool mode; use native or json"),
            },
            structured_output: env("TWINOPS_LLM_STRUCTURED_OUTPUT").is_some_and(|v| v == "true" || v == "1"),
            temperature: number(
                env("TWINOPS_LLM_TEMPERATURE"),
                "TWINOPS_LLM_TEMPERATURE",
                "a number such as 0 or 0.7",
            )?,
            seed: number(env("TWINOPS_LLM_SEED"), "TWINOPS_LLM_SEED", "a whole number such as 42")?,
        }];
        Ok(())
    }

    fn validate(&mut self) -> anyhow::Result<()> {
        self.sparkplug.validate().map_err(anyhow::Error::msg)?;
        self.opcua.validate()?;
        self.llm.validate()?;
        self.mqtt.validate()?;
        self.notify.validate()?;
        self.triage.validate()?;
        self.schedule.validate()?;
        self.web.validate()?;
        if let Some(e) = &self.embeddings {
            e.validate().map_err(anyhow::Error::msg)?;
        }
        if let Some(d) = &self.directory {
            d.validate()?;
        }
        if let Some(c) = &self.cluster {
            c.validate()?;
            anyhow::ensure!(
                !self.mqtt.url.is_empty(),
                "[cluster] needs mqtt.url: the pair's two nodes share the site's broker (an embedded broker would \
                 stop with its node)"
            );
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::net::SocketAddr;
    use std::time::Duration;

    use super::*;

    fn env(vars: &'static [(&'static str, &'static str)]) -> impl Fn(&str) -> Option<String> {
        move |k| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
    }

    /// The package's /etc/twinops/twinops.toml loads as shipped (the package's data
    /// folder, every other setting at its default), and with every commented setting
    /// uncommented it still parses: no key in it is misspelt or misplaced.
    #[test]
    fn the_packaged_configuration_is_valid_commented_and_uncommented() {
        let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("packaging/twinops.toml");
        let shipped = Config::load(&path, &|_| None).unwrap();
        assert_eq!(shipped.data_dir.as_deref(), Some(Path::new("/var/lib/twinops")));
        assert!(shipped.llm.chain.is_empty() && shipped.mqtt.url.is_empty());
        let text = std::fs::read_to_string(&path).unwrap();
        let uncommented: String = text
            .lines()
            .map(|l| l.strip_prefix("# ").filter(|_| !l.starts_with("##")).unwrap_or(l))
            .map(|l| format!("{l}\n"))
            .collect();
        let all: Config = toml::from_str(&uncommented).unwrap_or_else(|e| panic!("{e}\n{uncommented}"));
        assert_eq!(all.llm.chain.len(), 2);
        assert_eq!(all.mqtt.username.as_deref(), Some("twinops"));
        assert!(all.embeddings.is_some() && all.sparkplug.host_id == "twinops");
        assert_eq!(all.schedule.docs_dir.as_deref(), Some(Path::new("/var/lib/twinops/docs")));
        let directory = all.directory.expect("[directory] uncommented");
        assert_eq!(directory.roles.len(), 2);
        directory.validate().unwrap();
        let cluster = all.cluster.expect("[cluster] uncommented");
        assert_eq!((cluster.node.as_str(), cluster.lease_ms), ("a", 3000));
        cluster.validate().unwrap();
    }

    #[test]
    fn env_overrides_and_errors_name_the_key() {
        let missing = Path::new("/nonexistent/twinops.toml");
        let c = Config::load(
            missing,
            &env(&[("TWINOPS_LLM_KIND", "openai"), ("TWINOPS_LLM_MODEL", "m"), ("TWINOPS_LLM_API_KEY", "sk-1")]),
        )
        .unwrap();
        assert_eq!(c.llm.chain[0].kind, ProviderKind::Openai);
        assert_eq!(format!("{:?}", c.llm.chain[0].api_key), "Some([redacted])");
        let err = Config::load(missing, &env(&[("TWINOPS_LLM_KIND", "gpt")])).unwrap_err().to_string();
        assert!(err.contains("TWINOPS_LLM_KIND"), "{err}");
        let err = Config::load(missing, &env(&[("TWINOPS_LLM_KIND", "openai")])).unwrap_err().to_string();
        assert!(err.contains("llm.chain[0].model is required"), "{err}");
        let err = Config::load(missing, &env(&[("TWINOPS_LLM_MODEL", "m")])).unwrap_err().to_string();
        assert!(err.contains("TWINOPS_LLM_KIND is not"), "{err}");
    }

    #[test]
    fn embeddings_come_from_the_file_or_the_environment() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("twinops.toml");
        std::fs::write(&path, "[embeddings]\nbase_url = \"http://127.0.0.1:8081/v1\"\nmodel = \"minilm\"\n").unwrap();
        let c = Config::load(&path, &env(&[("TWINOPS_EMBEDDINGS_MODEL", "nomic-embed-text")])).unwrap();
        let e = c.embeddings.unwrap();
        assert_eq!(
            (e.base_url.as_str(), e.model.as_str(), e.batch),
            ("http://127.0.0.1:8081/v1", "nomic-embed-text", 32)
        );
        assert!(Config::load(Path::new("/nonexistent"), &|_| None).unwrap().embeddings.is_none(), "off by default");
        std::fs::write(&path, "[embeddings]\nbase_url = \"http://h/v1\"\nmodel = \"m\"\nbatchsize = 8\n").unwrap();
        let err = format!("{:#}", Config::load(&path, &|_| None).unwrap_err());
        assert!(err.contains("batchsize"), "{err}");
        std::fs::write(&path, "[embeddings]\nbase_url = \"http://h/v1\"\nmodel = \"m\"\nbatch = 0\n").unwrap();
        let err = format!("{:#}", Config::load(&path, &|_| None).unwrap_err());
        assert!(err.contains("embeddings.batch must be 1 to 2048"), "{err}");
    }

    #[test]
    fn unknown_keys_in_the_file_are_refused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("twinops.toml");
        std::fs::write(&path, "[llm]\nchain = [{ kind = \"openai\", model = \"m\", temprature = 0.2 }]\n").unwrap();
        let err = format!("{:#}", Config::load(&path, &|_| None).unwrap_err());
        assert!(err.contains("temprature"), "{err}");
    }

    #[test]
    fn schedules_and_capacity_are_checked() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("twinops.toml");
        for (text, says) in [
            ("[schedule]\nhandover = \"0 6 * * *\"\n", "schedule.handover: '0 6 * * *' needs six fields"),
            (
                "[schedule]\nretention = \"0 99 * * * *\"\n",
                "schedule.retention: '0 99 * * * *' is not a cron expression",
            ),
            ("[triage]\nqueue_capacity = 1\n", "triage.queue_capacity must be at least 2"),
        ] {
            std::fs::write(&path, text).unwrap();
            let err = format!("{:#}", Config::load(&path, &|_| None).unwrap_err());
            assert!(err.contains(says), "{err}");
        }
    }

    #[test]
    fn batch_ms_defaults_to_what_suits_the_broker() {
        let listen: SocketAddr = "127.0.0.1:1883".parse().unwrap();
        let mut configured = MqttConfig { url: "mqtt://broker:1883".into(), ..Default::default() };
        assert_eq!(configured.batch_wait(), Duration::from_millis(1), "a configured broker: commits of ~70");
        configured.batch_ms = Some(0);
        assert_eq!(configured.batch_wait(), Duration::ZERO, "set: as set");
        let mut embedded = MqttConfig::default();
        embedded.use_embedded(listen);
        assert_eq!((embedded.url.as_str(), embedded.batch_wait()), ("mqtt://127.0.0.1:1883", Duration::ZERO));
        let mut insisted = MqttConfig { batch_ms: Some(2), ..Default::default() };
        insisted.use_embedded(listen);
        assert_eq!(insisted.batch_wait(), Duration::from_millis(2), "set: as set, with a warning");
    }

    #[test]
    fn the_ingest_policy_takes_its_clock_allowance_from_mqtt() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("twinops.toml");
        let policy = |text: &str| {
            std::fs::write(&path, text).unwrap();
            Config::load(&path, &|_| None).unwrap().ingest_policy()
        };
        assert_eq!(policy("").max_ahead_s, Some(300));
        assert_eq!(policy("[mqtt]\nmax_time_ahead_s = 3600\n").max_ahead_s, Some(3600));
        assert_eq!(policy("[mqtt]\nmax_time_ahead_s = 0\n").max_ahead_s, None, "0: no limit");
        assert_eq!(policy("").max_behind_s, None, "backfills are late by design");
        assert_eq!(policy("[mqtt]\nmax_time_behind_s = 604800\n").max_behind_s, Some(604_800));
        assert_eq!(policy("[triage]\nqueue_capacity = 50\n").queue.capacity, 50);
    }
}
