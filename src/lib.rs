//! twinops: an operations agent for an industrial site.
//!
//! # Layout
//!
//! Data flows ingest → store → alarms → triage → agent → notes → notify, one module
//! per stage (ARCHITECTURE.md has the map):
//!
//! - [`domain`]: validated types (`AssetId`, `SensorId`, `Severity`, ...). Raw strings stop
//!   at the edge.
//! - [`ingest`]: MQTT (rumqttc, manual acks after commit), payloads, dead letters;
//!   [`broker`] is the embedded rumqttd; [`sparkplug`]: Sparkplug B as a host application,
//!   on the same connection and transaction; [`opcua`]: an OPC UA client (values,
//!   Alarms & Conditions) into the same transaction; [`cluster`]: a redundant pair, which
//!   node acts, decided by a lease on the broker.
//! - [`plant`]: a site's plant from its own files (TOML, CSV, the rationalization
//!   sheet), and back.
//! - [`store`]: the SQLite twin. `schema.sql` via `user_version` migrations, one writer
//!   thread with group commit, read-only handles for everything else, online backup.
//! - [`alarms`]: the ISA-18.2 lifecycle, floods and chattering, performance figures,
//!   the master alarm database and what-if replay; [`episodes`]: alarm floods as
//!   episodes (their initiator, its consequences, the floods like them before).
//! - [`triage`]: the durable queue and its workers; [`agent`]: models, the bounded
//!   tool-call loop, guardrails; [`tools`]: the agent's tools, one file each.
//! - [`approvals`]: the only writer of `work_orders` decisions; [`decisions`]: the HMI's
//!   alarm actions, applied at once or, of a redundant pair, through its decision log.
//! - [`notify`]: notes out, and the outbox (decisions, handovers); [`handover`]: the
//!   shift handover; [`schedule`]: the timed jobs.
//! - [`web`]: the HMI and its API; [`accounts`]: users, sessions, tokens; [`mcp`]: the
//!   tools for MCP hosts; [`metrics`]: Prometheus.
//! - [`seed`] and [`sim`]: the demo plant and its simulator, which publishes through
//!   [`publish`] as tests and benchmarks do; [`rag`]: documentation
//!   search; [`app`]: `serve` ([`console`]: what it prints of the notes, [`sdnotify`]:
//!   systemd readiness); [`bench`](mod@bench): the figures; [`eval`]: the quality cases,
//!   with [`scripted`], the scripted model server; [`config`]: the configuration, part
//!   by part; [`support`]: secrets, hex, the deterministic `Rng`; [`cli`]: the command
//!   line (`main.rs` only calls it); [`check`]: a configuration and what it points at.

pub mod accounts;
pub mod agent;
pub mod alarms;
pub mod app;
pub mod approvals;
pub mod bench;
pub mod broker;
pub mod check;
pub mod cli;
pub mod cluster;
pub mod config;
pub mod console;
pub mod decisions;
pub mod domain;
pub mod episodes;
pub mod eval;
pub mod handover;
pub mod ingest;
pub mod mcp;
pub mod metrics;
pub mod notify;
pub mod opcua;
pub mod plant;
pub mod publish;
pub mod rag;
pub mod schedule;
pub mod scripted;
pub mod sdnotify;
pub mod seed;
pub mod sim;
pub mod sparkplug;
pub mod store;
pub mod support;
pub mod tools;
pub mod triage;
pub mod web;
