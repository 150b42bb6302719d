//! Indexing a folder of Markdown: unchanged files (same SHA-256) are skipped, changed
//! ones have their chunks replaced, all in one write transaction.

use std::path::Path;

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use super::chunk::chunk_markdown;
use crate::domain::Timestamp;
use crate::store::{Store, StoreError};
use crate::support::hex;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IndexReport {
    pub added: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub chunks_written: usize,
}

/// A document to index: its path relative to the indexed folder (with `/`), and text.
pub struct SourceDoc {
    pub path: String,
    pub text: String,
}

/// Indexes every `.md` file under `dir`.
pub fn index_dir(store: &Store, dir: &Path, now: Timestamp) -> anyhow::Result<IndexReport> {
    let mut docs = Vec::new();
    collect(dir, dir, &mut docs).with_context(|| format!("reading documents under {}", dir.display()))?;
    anyhow::ensure!(!docs.is_empty(), "no .md files under {}", dir.display());
    index_docs(store, docs, now)
}

/// Indexes the given documents in one transaction.
pub fn index_docs(store: &Store, mut docs: Vec<SourceDoc>, now: Timestamp) -> anyhow::Result<IndexReport> {
    docs.sort_by(|a, b| a.path.cmp(&b.path));
    let report = store.writer().call(move |conn| -> Result<IndexReport, StoreError> {
        let mut report = IndexReport::default();
        for doc in &docs {
            apply(conn, doc, now, &mut report)?;
        }
        if report.added + report.updated > 0 {
            conn.execute("UPDATE rag_generation SET generation = generation + 1 WHERE id = 1", [])?;
        }
        Ok(report)
    })?;
    Ok(report)
}

fn apply(conn: &Connection, doc: &SourceDoc, now: Timestamp, report: &mut IndexReport) -> rusqlite::Result<()> {
    let sha = hex(&Sha256::digest(doc.text.as_bytes()));
    let existing: Option<(i64, String)> = conn
        .prepare_cached("SELECT id, sha256 FROM documents WHERE path = ?1")?
        .query_row([&doc.path], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    if let Some((id, old_sha)) = &existing {
        if *old_sha == sha {
            report.unchanged += 1;
            return Ok(());
        }
        conn.prepare_cached("DELETE FROM chunks WHERE document_id = ?1")?.execute([id])?;
    }
    let file_name = doc.path.rsplit('/').next().unwrap_or(&doc.path);
    let (title, chunks) = chunk_markdown(&doc.text, file_name);
    let doc_id: i64 = match existing {
        Some((id, _)) => {
            conn.prepare_cached("UPDATE documents SET title = ?2, sha256 = ?3, indexed_at = ?4 WHERE id = ?1")?
                .execute(params![id, title, sha, now.unix()])?;
            report.updated += 1;
            id
        }
        None => {
            conn.prepare_cached("INSERT INTO documents (path, title, sha256, indexed_at) VALUES (?1, ?2, ?3, ?4)")?
                .execute(params![doc.path, title, sha, now.unix()])?;
            report.added += 1;
            conn.last_insert_rowid()
        }
    };
    let mut insert =
        conn.prepare_cached("INSERT INTO chunks (document_id, seq, section, body) VALUES (?1, ?2, ?3, ?4)")?;
    for (seq, chunk) in chunks.iter().enumerate() {
        insert.execute(params![doc_id, seq as i64, chunk.section, chunk.body])?;
    }
    report.chunks_written += chunks.len();
    Ok(())
}

fn collect(root: &Path, dir: &Path, out: &mut Vec<SourceDoc>) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        if entry.file_type()?.is_dir() {
            collect(root, &path, out)?;
        } else if path.extension().is_some_and(|e| e == "md") {
            let rel = path.strip_prefix(root).expect("walked from root");
            let rel = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
            out.push(SourceDoc { path: rel, text: std::fs::read_to_string(&path)? });
        }
    }
    Ok(())
}
