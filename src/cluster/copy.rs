//! Catching up from the other node. A node away longer than the broker kept its
//! sessions (the broker restarted without persistence, or expired them; or the node's
//! twin is new) has missed decisions, alarms and notes that the broker no longer holds
//! for it. Before it opens its twin, it asks the broker whether its log session is
//! still there ([`hold_session`], which also opens the sessions again so that from then
//! on nothing more is missed); when it is not and the other node is ahead, it takes a
//! consistent copy of the other's twin over its HMI ([`fetch`]: `GET /api/backup`,
//! what `twinops backup` writes) and starts on it. What comes after the copy comes
//! through the sessions; what both have is applied once (decisions by id).

use std::path::Path;
use std::time::Duration;

use anyhow::Context;
use rumqttc::{AsyncClient, Event, Incoming, QoS};

use super::{ClusterConfig, NodeState, Progress};
use crate::ingest::mqtt::MqttConfig;

/// How long the broker has to answer.
const BROKER_WAIT: Duration = Duration::from_secs(10);

/// Connects as `client_id` on a persistent session, subscribes it to `filters`, and
/// leaves it: from now on the broker keeps for it what is published there. Whether the
/// broker still had the session.
pub async fn hold_session(mqtt: &MqttConfig, client_id: &str, filters: &[String]) -> anyhow::Result<bool> {
    let mut opts = crate::ingest::mqtt::options(mqtt, client_id)?;
    opts.set_clean_session(false);
    let (client, mut events) = AsyncClient::new(opts, 16);
    let deadline = tokio::time::Instant::now() + BROKER_WAIT;
    let mut present = None;
    loop {
        let event = tokio::time::timeout_at(deadline, events.poll())
            .await
            .map_err(|_| anyhow::anyhow!("the broker did not answer within {} s", BROKER_WAIT.as_secs()))??;
        match event {
            Event::Incoming(Incoming::ConnAck(ack)) => {
                present = Some(ack.session_present);
                let filters = filters.iter().map(|f| rumqttc::SubscribeFilter::new(f.clone(), QoS::AtLeastOnce));
                client.try_subscribe_many(filters)?;
            }
            Event::Incoming(Incoming::SubAck(_)) => break,
            _ => {}
        }
    }
    client.try_disconnect()?;
    // Until the broker has the disconnect: a dropped connection would fire no will
    // here, but the session must be left whole.
    let _ = tokio::time::timeout(Duration::from_secs(1), async { while events.poll().await.is_ok() {} }).await;
    Ok(present.unwrap_or(false))
}

/// Downloads a consistent copy of the twin of the node whose HMI is `hmi` (an admin's
/// API `token`) to `to`; its size. `timeout` bounds the whole transfer.
pub async fn fetch(hmi: &str, token: &str, to: &Path, timeout: Duration) -> anyhow::Result<u64> {
    use std::io::Write;
    let url = format!("{}/api/backup", hmi.trim_end_matches('/'));
    crate::support::install_tls_provider();
    let client = reqwest::Client::builder().connect_timeout(Duration::from_secs(10)).timeout(timeout).build()?;
    let mut response = client.get(&url).bearer_auth(token).send().await.with_context(|| format!("GET {url}"))?;
    let status = response.status();
    if !status.is_success() {
        let why = response.text().await.unwrap_or_default();
        anyhow::bail!("GET {url}: {status}: {why}");
    }
    let mut file = std::fs::File::create(to).with_context(|| format!("creating {}", to.display()))?;
    let mut bytes = 0;
    while let Some(chunk) = response.chunk().await.with_context(|| format!("GET {url}: the copy broke off"))? {
        file.write_all(&chunk)?;
        bytes += chunk.len() as u64;
    }
    file.sync_all()?;
    Ok(bytes)
}

/// What [`catch_up`] found and did.
#[derive(Debug, PartialEq, Eq)]
pub enum CaughtUp {
    /// The broker still had this node's session: the log brings what it missed.
    SessionKept,
    /// The session was gone, but the other node is not ahead (or not online).
    NothingToCopy,
    /// The session was gone and node `peer` is ahead, but no token to copy its twin
    /// with is set: this node starts on its own, missing what it missed.
    NoToken { peer: String },
    /// The twin is now a copy of the other node's (`bytes`); this node's own was kept
    /// beside it as `kept`.
    Copied { bytes: u64, kept: Option<std::path::PathBuf> },
}

/// Of a pair, before this node opens its twin `db` (`ours` reads how far it has come):
/// holds its sessions again (the log's, and `sessions`: client id and filters), and
/// when the broker no longer had the log's session and the other node is ahead, takes
/// a copy of the other's twin with `token` ([`ClusterConfig::peer_token`]) in place of
/// this one, which is kept beside it.
pub async fn catch_up(
    (cfg, mqtt): (&ClusterConfig, &MqttConfig),
    db: &Path,
    ours: impl FnOnce() -> anyhow::Result<Progress>,
    sessions: &[(String, Vec<String>)],
    token: Option<Result<String, String>>,
) -> anyhow::Result<CaughtUp> {
    let kept = hold_session(mqtt, &cfg.log_client(), &[cfg.log_topic()]).await?;
    for (client, filters) in sessions {
        hold_session(mqtt, client, filters).await?;
    }
    if kept {
        return Ok(CaughtUp::SessionKept);
    }
    // Long enough for the other node's state to say what it applied before the session
    // was held again: its progress is read once a second and said at most once a second.
    let seen = super::observe(cfg, mqtt, 3 * super::PROGRESS_EVERY).await?;
    let me = NodeState { node: cfg.node.clone(), online: true, progress: Some(ours()?) };
    let ahead = seen.nodes.iter().filter(|n| n.node != cfg.node && n.online).find_map(|n| {
        let behind = me.behind(n.progress?)?;
        (behind.decisions > 0 || behind.alarms_s.is_some_and(|s| s > 0)).then(|| n.node.clone())
    });
    let Some(peer) = ahead else { return Ok(CaughtUp::NothingToCopy) };
    let token = match token {
        Some(t) => t.map_err(anyhow::Error::msg)?,
        None => return Ok(CaughtUp::NoToken { peer }),
    };
    anyhow::ensure!(!cfg.peer_hmi.is_empty(), "cluster.peer_hmi is not set: this node cannot copy node {peer}'s twin");
    let partial = db.with_extension("from-peer.partial");
    let bytes = fetch(&cfg.peer_hmi, &token, &partial, Duration::from_secs(600))
        .await
        .with_context(|| format!("copying node {peer}'s twin from {}", cfg.peer_hmi))?;
    crate::store::check_copy(&partial).context("the copy of the other node's twin")?;
    let kept = if db.exists() {
        let aside = db.with_extension(format!("before-copy-{}.db", crate::domain::Timestamp::now().unix()));
        crate::store::backup(db, &aside).context("keeping this node's own twin aside")?;
        for ending in ["", "-wal", "-shm"] {
            let mut path = db.as_os_str().to_owned();
            path.push(ending);
            let _ = std::fs::remove_file(path);
        }
        Some(aside)
    } else {
        None
    };
    std::fs::rename(&partial, db).with_context(|| format!("putting the copy in place as {}", db.display()))?;
    Ok(CaughtUp::Copied { bytes, kept })
}
