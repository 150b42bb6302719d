//! twinops: an operations agent for an industrial site.
//!
//! # Layout
//!
//! Data flows ingest → store → alarms → triage → agent → notes → notify; these modules
//! exist so far:
//!
//! - [`domain`]: validated types (`AssetId`, `SensorId`, `Severity`, ...). Raw strings stop
//!   at the edge.
//! - [`store`]: the SQLite twin. `schema.sql` via `user_version` migrations, one writer
//!   thread with group commit, read-only handles for everything else.
//! - [`seed`]: the demo plant from `seed/plant.toml`: readings, faults, alarm history.
//! - [`rag`]: Markdown chunking, FTS5 indexing and BM25 search.
//! - [`tools`]: the agent's tools, one file each, schemas derived from argument types.
//! - [`approvals`]: the only writer of `work_orders`.
//! - [`bench`]: the `twinops bench` figures.
//! - [`cli`]: the command line; `main.rs` only calls it.

pub mod accounts;
pub mod agent;
pub mod alarms;
pub mod app;
pub mod approvals;
pub mod bench;
pub mod broker;
pub mod cli;
pub mod config;
pub mod domain;
pub mod handover;
pub mod ingest;
pub mod mcp;
pub mod metrics;
pub mod notify;
pub mod rag;
pub mod schedule;
pub mod scripted;
pub mod sdnotify;
pub mod seed;
pub mod sim;
pub mod store;
pub mod tools;
pub mod triage;
pub mod web;
