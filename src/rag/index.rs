//! Indexing a folder of documents (Markdown, text, HTML, PDF): unchanged files (same
//! SHA-256) are skipped, changed ones have their chunks replaced, all in one write
//! transaction; files that cannot be indexed are reported with the reason.

use std::collections::HashMap;
use std::path::Path;

use anyhow::Context;
use rusqlite::{Connection, OptionalExtension, params};
use sha2::{Digest, Sha256};

use super::chunk::{Chunk, chunk_markdown};
use super::formats::{DocText, KINDS, read};
use crate::domain::{Citation, Timestamp};
use crate::store::{Store, StoreError};
use crate::support::hex;

#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct IndexReport {
    pub added: usize,
    pub updated: usize,
    pub unchanged: usize,
    pub chunks_written: usize,
    /// Files left out, with why (a scanned PDF, a format the search does not read).
    pub not_indexed: Vec<(String, String)>,
}

/// A document to index: its path relative to the indexed folder (with `/`), and text.
pub struct SourceDoc {
    pub path: String,
    pub text: DocText,
    /// SHA-256 of the file as read, for a PDF: what tells a changed file, so that an
    /// unchanged one is not extracted again. Of the text otherwise.
    pub file_sha: Option<String>,
}

impl SourceDoc {
    pub fn markdown(path: impl Into<String>, text: impl Into<String>) -> SourceDoc {
        SourceDoc { path: path.into(), text: DocText::Markdown(text.into()), file_sha: None }
    }
}

/// Indexes every document under `dir` (hidden files aside): Markdown, text, HTML and
/// PDF; anything else, and a PDF without a text layer, is reported as not indexed.
pub fn index_dir(store: &Store, dir: &Path, now: Timestamp) -> anyhow::Result<IndexReport> {
    let known: HashMap<String, String> = {
        let db = store.read()?;
        let mut stmt = db.prepare("SELECT path, sha256 FROM documents")?;
        stmt.query_map([], |r| Ok((r.get(0)?, r.get(1)?)))?.collect::<Result<_, _>>()?
    };
    let mut found = Found { known, docs: Vec::new(), not_indexed: Vec::new(), unchanged: 0 };
    collect(dir, dir, &mut found).with_context(|| format!("reading documents under {}", dir.display()))?;
    anyhow::ensure!(
        !found.docs.is_empty() || !found.not_indexed.is_empty() || found.unchanged > 0,
        "no documents ({KINDS}) under {}",
        dir.display()
    );
    for (path, why) in &found.not_indexed {
        tracing::warn!(stage = "rag", document = %path, reason = %why, "document not indexed");
    }
    let mut report = index_docs(store, found.docs, now)?;
    report.unchanged += found.unchanged;
    report.not_indexed = found.not_indexed;
    Ok(report)
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
    let sha = match (&doc.file_sha, &doc.text) {
        (Some(sha), _) => sha.clone(),
        (None, DocText::Markdown(text)) => hex(&Sha256::digest(text.as_bytes())),
        // Pages joined with form feeds: a page break moved is a change.
        (None, DocText::Pages(pages)) => hex(&Sha256::digest(pages.join("\u{c}").as_bytes())),
    };
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
    let (title, chunks) = match &doc.text {
        DocText::Markdown(text) => {
            let (title, chunks) = chunk_markdown(text, file_name);
            (title, chunks.into_iter().enumerate().map(|(seq, c)| (seq as i64, c)).collect::<Vec<_>>())
        }
        DocText::Pages(pages) => paged(pages, file_name),
    };
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
    for (seq, chunk) in &chunks {
        insert.execute(params![doc_id, seq, chunk.section, chunk.body])?;
    }
    report.chunks_written += chunks.len();
    Ok(())
}

/// A paged document's chunks: one per page with text, numbered by page from 1; its
/// title is its first line.
fn paged(pages: &[String], file_name: &str) -> (String, Vec<(i64, Chunk)>) {
    let title = pages
        .iter()
        .flat_map(|p| p.lines())
        .map(str::trim)
        .find(|l| !l.is_empty())
        .map_or(file_name.to_string(), |l| l.chars().take(120).collect());
    let chunks = (pages.iter().enumerate())
        .filter(|(_, text)| !text.trim().is_empty())
        .map(|(i, text)| (i as i64 + 1, Chunk { section: format!("page {}", i + 1), body: text.clone() }))
        .collect();
    (title, chunks)
}

/// What a walk of the folder found.
struct Found {
    /// Indexed documents' SHA-256 by path, to skip an unchanged PDF without extracting it.
    known: HashMap<String, String>,
    docs: Vec<SourceDoc>,
    not_indexed: Vec<(String, String)>,
    unchanged: usize,
}

fn collect(root: &Path, dir: &Path, found: &mut Found) -> std::io::Result<()> {
    let mut entries: Vec<_> = std::fs::read_dir(dir)?.collect::<Result<_, _>>()?;
    entries.sort_by_key(|e| e.file_name());
    for entry in entries {
        let path = entry.path();
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        if entry.file_type()?.is_dir() {
            collect(root, &path, found)?;
            continue;
        }
        let rel = path.strip_prefix(root).expect("walked from root");
        let rel = rel.components().map(|c| c.as_os_str().to_string_lossy()).collect::<Vec<_>>().join("/");
        let file_sha = Citation::paged(&rel).then(|| std::fs::read(&path).map(|b| hex(&Sha256::digest(&b))));
        let file_sha = file_sha.transpose()?;
        if file_sha.is_some() && found.known.get(&rel) == file_sha.as_ref() {
            found.unchanged += 1;
            continue;
        }
        match read(&path) {
            Ok(text) => found.docs.push(SourceDoc { path: rel, text, file_sha }),
            Err(why) => found.not_indexed.push((rel, why)),
        }
    }
    Ok(())
}
