//! A real MCP client (rmcp) against `twinops mcp` over stdio and against `/mcp` on the
//! daemon over streamable HTTP.

mod common;

use common::Plant;
use rmcp::ServiceExt;
use rmcp::model::{CallToolRequestParams, GetPromptRequestParams, ReadResourceRequestParams};
use serde_json::{Value, json};
use twinops::accounts;
use twinops::app::{Daemon, ServeOptions};
use twinops::domain::Role;

const READ_TOOLS: [&str; 12] = [
    "get_system_summary",
    "list_assets",
    "get_asset_details",
    "list_alarms",
    "get_sensor_history",
    "search_docs",
    "read_doc",
    "get_shift_handover",
    "get_alarm_kpis",
    "get_episode",
    "find_similar_episodes",
    "get_alarm_correlations",
];

fn text_of(result: &rmcp::model::CallToolResult) -> String {
    serde_json::to_value(&result.content).unwrap()[0]["text"].as_str().unwrap_or_default().to_string()
}

/// Tools listed, read-only and no write tool by default; a tool call answers from the
/// twin and is audited with the client's identity.
async fn exercise(client: &rmcp::service::RunningService<rmcp::RoleClient, ()>, p: &Plant, identity: &str) {
    let tools = client.list_all_tools().await.unwrap();
    let mut names: Vec<String> = tools.iter().map(|t| t.name.to_string()).collect();
    names.sort();
    let mut expected: Vec<String> = READ_TOOLS.iter().map(|s| s.to_string()).collect();
    expected.sort();
    assert_eq!(names, expected, "the read tools and only those");
    for t in &tools {
        let v = serde_json::to_value(t).unwrap();
        assert_eq!(v["annotations"]["readOnlyHint"], true, "{}", t.name);
        let ours = twinops::tools::find(&t.name).unwrap();
        assert_eq!(t.description.as_deref(), Some(ours.description), "the agent's own description");
        assert_eq!(Value::Object((*t.input_schema).clone()), ours.schema, "the agent's own schema");
    }
    let args = json!({"asset_id": "PUMP-007"}).as_object().unwrap().clone();
    let result = client.call_tool(CallToolRequestParams::new("get_asset_details").with_arguments(args)).await.unwrap();
    assert_ne!(result.is_error, Some(true));
    assert!(text_of(&result).contains("PUMP-007.VIB-DE"), "{}", text_of(&result));
    let bad = json!({"asset_id": "PUMP-999"}).as_object().unwrap().clone();
    let result = client.call_tool(CallToolRequestParams::new("get_asset_details").with_arguments(bad)).await.unwrap();
    assert_eq!(result.is_error, Some(true));
    assert!(
        text_of(&result).contains("No asset with id PUMP-999. Call list_assets"),
        "the next move: {}",
        text_of(&result)
    );
    let result = client.call_tool(CallToolRequestParams::new("propose_work_order")).await.unwrap();
    assert_eq!(result.is_error, Some(true), "not offered, not run");

    let resources = client.list_all_resources().await.unwrap();
    assert!(resources.iter().any(|r| r.uri == "twinops://docs/arp-vibration.md#1"), "{} resources", resources.len());
    let doc = client.read_resource(ReadResourceRequestParams::new("twinops://docs/arp-vibration.md#1")).await.unwrap();
    assert!(serde_json::to_string(&doc).unwrap().contains("4.5 mm/s"));
    let prompt = client
        .get_prompt(
            GetPromptRequestParams::new("triage")
                .with_arguments(json!({"alarm_id": "12"}).as_object().unwrap().clone()),
        )
        .await
        .unwrap();
    assert!(serde_json::to_string(&prompt).unwrap().contains("Triage alarm 12"));

    let audited = p.count(&format!(
        "SELECT count(*) FROM agent_runs r JOIN agent_steps s ON s.run_id = r.id
         WHERE r.profile = 'mcp' AND r.trigger = 'mcp:{identity}' AND s.name = 'get_asset_details'"
    ));
    assert_eq!(audited, 2, "each call audited with the client's identity");
    assert_eq!(p.count("SELECT count(*) FROM work_orders"), 0);
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_over_stdio() {
    let p = Plant::new();
    let mut cmd = tokio::process::Command::new(env!("CARGO_BIN_EXE_twinops"));
    cmd.arg("--db").arg(p.db_path()).args(["--config", "/nonexistent/twinops.toml", "mcp"]);
    let transport = rmcp::transport::TokioChildProcess::new(cmd).unwrap();
    let client = ().serve(transport).await.unwrap();
    exercise(&client, &p, "stdio").await;
    client.cancel().await.unwrap();
}

#[tokio::test(flavor = "multi_thread")]
async fn mcp_over_http_needs_a_bearer_token() {
    use rmcp::transport::StreamableHttpClientTransport;
    use rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig;

    let p = Plant::new();
    accounts::add_user(&p.store, "operator.kaur", Role::Operator, "correct horse battery staple", "test").unwrap();
    let (_, token) = accounts::create_token(&p.store, "operator.kaur", "mcp test", "test").unwrap();
    let config = common::test_config("mcp");
    let opts = ServeOptions { config, db: p.db_path(), demo: false, seed_dir: common::seed_dir() };
    let daemon = Daemon::start_on(p.store.clone(), opts).await.unwrap();
    let url = format!("http://{}/mcp", daemon.web_addr.unwrap());

    let refused = reqwest::Client::new()
        .post(&url)
        .header("accept", "application/json, text/event-stream")
        .json(&json!({"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"protocolVersion": "2025-06-18",
               "capabilities": {}, "clientInfo": {"name": "anonymous", "version": "0"}}}))
        .send()
        .await
        .unwrap();
    assert_eq!(refused.status(), reqwest::StatusCode::UNAUTHORIZED);
    let anonymous =
        ().serve(StreamableHttpClientTransport::from_config(StreamableHttpClientTransportConfig::with_uri(
            url.clone(),
        )))
        .await;
    assert!(anonymous.is_err(), "an unauthenticated client is refused");

    let transport = StreamableHttpClientTransport::from_config(
        StreamableHttpClientTransportConfig::with_uri(url).auth_header(token),
    );
    let client = ().serve(transport).await.unwrap();
    exercise(&client, &p, "operator.kaur").await;
    client.cancel().await.unwrap();
    daemon.shutdown().await;
}

/// The official Python SDK's client (an MCP host's) connects with a bearer token, uses
/// the tools and closes its session: the DELETE that ends it is answered as the client
/// expects (204), so the host's log has no "Session termination failed".
#[tokio::test(flavor = "multi_thread")]
async fn the_python_sdk_client_ends_its_session_cleanly() {
    let Some(python) =
        common::external("TWINOPS_TEST_PYTHON_MCP", "python3 with the mcp package (pip install mcp==1.26.0)")
    else {
        return;
    };
    let p = Plant::new();
    accounts::add_user(&p.store, "operator.kaur", Role::Operator, "correct horse battery staple", "test").unwrap();
    let (_, token) = accounts::create_token(&p.store, "operator.kaur", "python sdk", "test").unwrap();
    let opts = ServeOptions {
        config: common::test_config("mcp-py"),
        db: p.db_path(),
        demo: false,
        seed_dir: common::seed_dir(),
    };
    let daemon = Daemon::start_on(p.store.clone(), opts).await.unwrap();
    let url = format!("http://{}/mcp", daemon.web_addr.unwrap());
    let script = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/mcp_client.py");
    let out = tokio::process::Command::new(&python).arg(&script).arg(&url).arg(&token).output().await.unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    assert!(stdout.contains("tools 12 error False"), "the read tools, one called: {stdout}\n{stderr}");
    assert!(!stderr.contains("Session termination failed"), "{stderr}");
    daemon.shutdown().await;
}
