//! The embedded MQTT broker (rumqttd), for sites without one. Its `start()` blocks,
//! so it runs on a thread of its own. Behind the default `embedded-broker` feature, so
//! that production builds against a real broker can leave it out.

use std::net::SocketAddr;

/// Starts the broker on `listen` (loopback by default) in a background thread.
#[cfg(feature = "embedded-broker")]
pub fn start(listen: SocketAddr) -> anyhow::Result<()> {
    let mut broker = bind(listen, "set mqtt.embedded_listen, or mqtt.url to use a broker of your own")?;
    std::thread::Builder::new().name("twinops-broker".into()).spawn(move || {
        if let Err(e) = broker.start() {
            tracing::error!(stage = "broker", error = %e, "embedded MQTT broker stopped");
        }
    })?;
    Ok(())
}

/// Runs the broker on `listen` in this thread, until the process ends: `twinops
/// broker`, for a daemon that must be able to restart (or crash) without the broker
/// losing its session and the messages not yet acknowledged.
#[cfg(feature = "embedded-broker")]
pub fn run(listen: SocketAddr) -> anyhow::Result<()> {
    let mut broker = bind(listen, "pass another --listen")?;
    eprintln!("twinops broker: MQTT on {listen} (in memory: what it holds is lost if it stops)");
    broker.start().map_err(|e| anyhow::anyhow!("embedded MQTT broker stopped: {e}"))
}

/// The broker, configured for `listen`, which is checked to be free (else the error
/// ends with `hint`).
#[cfg(feature = "embedded-broker")]
fn bind(listen: SocketAddr, hint: &str) -> anyhow::Result<rumqttd::Broker> {
    // rumqttd's configuration is its TOML; ours is a small, fixed one. The payload limit
    // leaves room for the longest topic and the packet id, so that every message it
    // takes is a packet ingest can read (and dead-letter, if over its own limit).
    let max_payload = crate::ingest::payload::MAX_PACKET_BYTES - (2 + 65_535 + 2);
    let config = format!(
        r#"
id = 0
[router]
id = 0
max_connections = 1000
max_outgoing_packet_count = 2000
max_segment_size = 104857600
max_segment_count = 10

[v4.1]
name = "twinops-embedded"
listen = "{listen}"
next_connection_delay_ms = 1
    [v4.1.connections]
    connection_timeout_ms = 60000
    max_payload_size = {max_payload}
    max_inflight_count = 2000
    dynamic_filters = true
"#
    );
    let config: rumqttd::Config = toml::from_str(&config)?;
    // Fail here, clearly, if the port is taken: rumqttd would only log it.
    drop(
        std::net::TcpListener::bind(listen)
            .map_err(|e| anyhow::anyhow!("embedded MQTT broker cannot listen on {listen}: {e}; {hint}"))?,
    );
    Ok(rumqttd::Broker::new(config))
}

#[cfg(not(feature = "embedded-broker"))]
pub fn start(listen: SocketAddr) -> anyhow::Result<()> {
    anyhow::bail!(
        "this build has no embedded MQTT broker (feature embedded-broker); set mqtt.url to your broker, not {listen}"
    )
}

#[cfg(not(feature = "embedded-broker"))]
pub fn run(listen: SocketAddr) -> anyhow::Result<()> {
    start(listen)
}

/// Drops one message of rumqttd's: the ERROR that a connection "is already gone",
/// logged when a client sends DISCONNECT and then closes its socket, as MQTT clients
/// should (rumqttd's own comment says as much). In an operator's log it would read as
/// a fault at every clean disconnect, ours included. Everything else of rumqttd's is
/// kept.
pub struct QuietCleanDisconnects;

impl<S: tracing::Subscriber> tracing_subscriber::Layer<S> for QuietCleanDisconnects {
    fn event_enabled(&self, event: &tracing::Event<'_>, _: tracing_subscriber::layer::Context<'_, S>) -> bool {
        struct Gone(bool);
        impl tracing::field::Visit for Gone {
            fn record_debug(&mut self, field: &tracing::field::Field, value: &dyn std::fmt::Debug) {
                if field.name() == "message" {
                    self.0 = format!("{value:?}").ends_with("is already gone");
                }
            }
        }
        if event.metadata().target() != "rumqttd::router::routing" {
            return true;
        }
        let mut gone = Gone(false);
        event.record(&mut gone);
        !gone.0
    }
}
