//! MCP (the official `rmcp` SDK): the agent's read-only tools, offered to any MCP host.
//! `twinops mcp` speaks it over stdio; `twinops serve` at `/mcp` over streamable HTTP,
//! behind the API's bearer tokens, with the SDK's host check on.
//!
//! Architecture Invariant: the tools, their descriptions and schemas are the agent's
//! own (`tools::all`); `propose_work_order` is offered only when `mcp.allow_propose` is
//! set, and then still only parks a proposal. Every call is audited like an agent step.

use std::sync::Arc;
use std::time::Instant;

use rmcp::ErrorData as McpError;
use rmcp::handler::server::ServerHandler;
use rmcp::model::{
    CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, GetPromptRequestParams, GetPromptResponse,
    GetPromptResult, ListPromptsResult, ListResourcesResult, ListToolsResult, PaginatedRequestParams, Prompt,
    PromptArgument, PromptMessage, ReadResourceRequestParams, ReadResourceResponse, ReadResourceResult, Resource,
    ResourceContents, ServerCapabilities, ServerConfig, Tool, ToolAnnotations,
};
use rmcp::service::{RequestContext, RoleServer};
use serde_json::{Map, Value};

use crate::agent::audit::{Audit, Step, StepKind};
use crate::approvals::{Approvals, Proposer};
use crate::domain::{Access, Timestamp};
use crate::rag::DocIndex;
use crate::store::Store;
use crate::tools::{self, ToolDef};

/// The `[mcp]` part: what MCP hosts get (`twinops mcp`, and `/mcp` on the HMI's listener).
#[derive(Debug, Clone, Default, serde::Deserialize)]
#[serde(deny_unknown_fields, default)]
pub struct McpConfig {
    /// Offer `propose_work_order` too (it only parks a proposal for a supervisor).
    pub allow_propose: bool,
    /// Host names `/mcp` answers to besides localhost, 127.0.0.1 and ::1 (the SDK's
    /// DNS-rebinding check), e.g. the name of the TLS proxy in front.
    pub allowed_hosts: Vec<String>,
}

const RESOURCE_PREFIX: &str = "twinops://docs/";
/// Most documentation chunks listed as resources (read any by its citation key).
const MAX_RESOURCES: i64 = 1000;

/// One MCP session's server: the twin, and who is calling (for the audit).
#[derive(Clone)]
pub struct TwinMcp {
    store: Store,
    docs: DocIndex,
    /// Where proposals go: this twin, or the pair's decision log.
    approvals: Approvals,
    allow_propose: bool,
    /// `stdio`, or the user name of the bearer token.
    client: String,
}

impl TwinMcp {
    pub fn new(store: Store, docs: DocIndex, approvals: Approvals, allow_propose: bool, client: &str) -> TwinMcp {
        TwinMcp { store, docs, approvals, allow_propose, client: client.to_string() }
    }

    fn offered(&self) -> impl Iterator<Item = &'static ToolDef> + '_ {
        tools::all().iter().filter(|t| t.access == Access::Read || self.allow_propose)
    }

    /// The caller: the bearer token's user over HTTP, else this session's client.
    fn caller(&self, context: &RequestContext<RoleServer>) -> String {
        context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|p| p.extensions.get::<crate::accounts::User>())
            .map_or_else(|| self.client.clone(), |u| u.name.clone())
    }

    /// Runs one tool and audits it as a one-step run (`profile` mcp, trigger `mcp:<caller>`).
    async fn run_tool(&self, def: &'static ToolDef, args: Value, caller: &str) -> Result<(String, bool), McpError> {
        let internal = |e: &dyn std::fmt::Display| McpError::internal_error(e.to_string(), None);
        let mut audit =
            Audit::start(self.store.writer().clone(), "mcp", &format!("mcp:{caller}"), None, Timestamp::now())
                .await
                .map_err(|e| internal(&e))?
                .with_caller("mcp");
        let (store, docs, approvals, who, arguments) =
            (self.store.clone(), self.docs.clone(), self.approvals.clone(), caller.to_string(), args.to_string());
        let started = Instant::now();
        let out = tokio::task::spawn_blocking(move || -> anyhow::Result<tools::ToolOutput> {
            let caller = Proposer::User(format!("mcp:{who}"));
            let ctx = tools::Context { store: &store, docs: &docs, approvals: &approvals };
            Ok(tools::with(ctx, Timestamp::now(), caller, |ctx| def.call(ctx, args))?)
        })
        .await
        .map_err(|e| internal(&e))?
        .map_err(|e| internal(&e))?;
        let step = Step {
            kind: StepKind::ToolCall,
            name: def.name.to_string(),
            arguments: Some(arguments),
            result: Some(out.content.clone()),
            is_error: out.is_error,
            latency: started.elapsed(),
            tokens: None,
        };
        audit.record(step);
        audit.finish("final", None, (0, 0), None, &[]).await.map_err(|e| internal(&e))?;
        Ok((out.content, out.is_error))
    }
}

impl ServerHandler for TwinMcp {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().enable_resources().enable_prompts().build())
            .with_instructions(
                "twinops: the digital twin of Riverside Water's pumping district 4. Read-only tools over assets \
                 (PUMP-007), sensors (PUMP-007.VIB-DE), alarms and documentation (citation keys like \
                 arp-vibration.md#1, also readable as resources twinops://docs/<key>). Nothing here operates the plant.",
            )
    }

    async fn list_tools(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListToolsResult, McpError> {
        let tools = self
            .offered()
            .map(|d| {
                let schema: Map<String, Value> = d.schema.as_object().cloned().unwrap_or_default();
                let read = d.access == Access::Read;
                Tool::new(d.name, d.description, Arc::new(schema)).annotate(
                    ToolAnnotations::new().read_only(read).destructive(false).idempotent(true).open_world(false),
                )
            })
            .collect();
        Ok(ListToolsResult::with_all_items(tools))
    }

    async fn call_tool(
        &self,
        request: CallToolRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, McpError> {
        let Some(def) = self.offered().find(|d| d.name == request.name) else {
            let names: Vec<&str> = self.offered().map(|d| d.name).collect();
            return Ok(CallToolResult::error(vec![ContentBlock::text(format!(
                "There is no tool named '{}' here. Available tools: {}.",
                request.name,
                names.join(", ")
            ))])
            .into());
        };
        let caller = self.caller(&context);
        let args = Value::Object(request.arguments.unwrap_or_default());
        let (content, is_error) = self.run_tool(def, args, &caller).await?;
        let result = if is_error {
            CallToolResult::error(vec![ContentBlock::text(content)])
        } else {
            CallToolResult::success(vec![ContentBlock::text(content)])
        };
        Ok(result.into())
    }

    async fn list_resources(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListResourcesResult, McpError> {
        let db = self.store.read().map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let rows: Vec<(String, String)> = (|| -> rusqlite::Result<_> {
            let mut stmt = db.prepare_cached(
                "SELECT d.path || '#' || c.seq, d.title || ' > ' || c.section FROM chunks c JOIN documents d ON d.id = c.document_id
                 ORDER BY d.path, c.seq LIMIT ?1",
            )?;
            let rows = stmt.query_map([MAX_RESOURCES], |r| Ok((r.get(0)?, r.get(1)?)))?;
            rows.collect()
        })()
        .map_err(|e| McpError::internal_error(e.to_string(), None))?;
        let resources = rows
            .into_iter()
            .map(|(key, heading)| {
                Resource::new(format!("{RESOURCE_PREFIX}{key}"), key)
                    .with_description(heading)
                    .with_mime_type("text/markdown")
            })
            .collect();
        Ok(ListResourcesResult::with_all_items(resources))
    }

    async fn read_resource(
        &self,
        request: ReadResourceRequestParams,
        context: RequestContext<RoleServer>,
    ) -> Result<ReadResourceResponse, McpError> {
        let Some(citation) = request.uri.strip_prefix(RESOURCE_PREFIX) else {
            return Err(McpError::invalid_params(
                format!("resources are twinops://docs/<citation key>, e.g. {RESOURCE_PREFIX}arp-vibration.md#1"),
                None,
            ));
        };
        let def = tools::find("read_doc").expect("read_doc is a tool");
        let caller = self.caller(&context);
        let (content, is_error) = self.run_tool(def, serde_json::json!({"citation": citation}), &caller).await?;
        if is_error {
            return Err(McpError::invalid_params(content, None));
        }
        let text = serde_json::from_str::<Value>(&content)
            .ok()
            .and_then(|v| v["text"].as_str().map(str::to_string))
            .unwrap_or(content);
        Ok(ReadResourceResult::new(vec![ResourceContents::text(text, request.uri.clone())]).into())
    }

    async fn list_prompts(
        &self,
        _request: Option<PaginatedRequestParams>,
        _context: RequestContext<RoleServer>,
    ) -> Result<ListPromptsResult, McpError> {
        Ok(ListPromptsResult::with_all_items(vec![
            Prompt::new(
                "triage",
                Some("Triage an alarm occurrence the way twinops does: read, look up the procedure, write the note."),
                Some(vec![
                    PromptArgument::new("alarm_id")
                        .with_description("The alarm occurrence id (a number, from list_alarms)")
                        .with_required(true),
                ]),
            ),
            Prompt::new("shift_handover", Some("Write the shift handover from the twin's current state."), None),
        ]))
    }

    async fn get_prompt(
        &self,
        request: GetPromptRequestParams,
        _context: RequestContext<RoleServer>,
    ) -> Result<GetPromptResponse, McpError> {
        let text = match request.name.as_str() {
            "triage" => {
                let id = request
                    .arguments
                    .as_ref()
                    .and_then(|a| a.get("alarm_id"))
                    .and_then(|v| v.as_i64().or_else(|| v.as_str().and_then(|s| s.trim().parse().ok())))
                    .ok_or_else(|| {
                        McpError::invalid_params("triage needs alarm_id, a number from list_alarms", None)
                    })?;
                format!(
                    "{}\n\nTriage alarm {id}. Start with list_alarms to read its record.",
                    crate::agent::TRIAGE_PROMPT
                )
            }
            "shift_handover" => crate::agent::HANDOVER_PROMPT.to_string(),
            other => {
                return Err(McpError::invalid_params(
                    format!("no prompt '{other}'; use triage or shift_handover"),
                    None,
                ));
            }
        };
        Ok(GetPromptResult::new(vec![PromptMessage::new_text(rmcp::model::Role::User, text)]).into())
    }
}

/// `twinops mcp`: serves MCP on stdin/stdout until the host closes it.
pub async fn serve_stdio(store: Store, docs: DocIndex, allow_propose: bool) -> anyhow::Result<()> {
    use rmcp::ServiceExt;
    let approvals = Approvals::new(store.writer().clone());
    let server = TwinMcp::new(store, docs, approvals, allow_propose, "stdio").serve(rmcp::transport::stdio()).await?;
    server.waiting().await?;
    Ok(())
}
