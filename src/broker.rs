//! The embedded MQTT broker (rumqttd), for sites without one. Its `start()` blocks,
//! so it runs on a thread of its own. Behind the default `embedded-broker` feature, so
//! that production builds against a real broker can leave it out.

use std::net::SocketAddr;

/// Starts the broker on `listen` (loopback by default) in a background thread.
#[cfg(feature = "embedded-broker")]
pub fn start(listen: SocketAddr) -> anyhow::Result<()> {
    // rumqttd's configuration is its TOML; ours is a small, fixed one.
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
    max_payload_size = 300000
    max_inflight_count = 2000
    dynamic_filters = true
"#
    );
    let config: rumqttd::Config = toml::from_str(&config)?;
    // Fail here, clearly, if the port is taken: rumqttd would only log it.
    drop(std::net::TcpListener::bind(listen).map_err(|e| {
        anyhow::anyhow!("embedded MQTT broker cannot listen on {listen}: {e}; set mqtt.embedded_listen or mqtt.url")
    })?);
    std::thread::Builder::new().name("twinops-broker".into()).spawn(move || {
        let mut broker = rumqttd::Broker::new(config);
        if let Err(e) = broker.start() {
            tracing::error!(stage = "broker", error = %e, "embedded MQTT broker stopped");
        }
    })?;
    Ok(())
}

#[cfg(not(feature = "embedded-broker"))]
pub fn start(listen: SocketAddr) -> anyhow::Result<()> {
    anyhow::bail!(
        "this build has no embedded MQTT broker (feature embedded-broker); set mqtt.url to your broker, not {listen}"
    )
}
