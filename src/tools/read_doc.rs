//! `read_doc`: one documentation chunk in full, by citation key.

use rusqlite::{OptionalExtension, params};
use schemars::JsonSchema;
use serde::Deserialize;
use serde_json::{Value, json};

use super::hints::{closest, id_error};
use super::{ToolContext, ToolDef, ToolError, define, parse_args};
use crate::domain::{Access, Citation};

const NAME: &str = "read_doc";
const DESCRIPTION: &str = "Read one documentation chunk in full by its citation key (document path, '#', chunk \
number, e.g. arp-vibration.md#2; a PDF manual's chunks are its pages, e.g. blower-om.pdf#p3), as returned by \
search_docs. Returns the document title, the section heading, the \
text, and the citation keys of the previous and next chunks of the same document (null at either end) so you can \
read on. Cite what you use as [arp-vibration.md#2].";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Citation key, e.g. arp-vibration.md#2, or blower-om.pdf#p3 for a PDF's page 3.
    citation: String,
}

pub fn def() -> ToolDef {
    define::<Args>(
        NAME,
        DESCRIPTION,
        Access::Read,
        "The chunk was cut; read the next chunk for the rest.",
        |ctx, args| run(ctx, parse_args(args)?),
    )
}

fn run(ctx: &ToolContext, args: Args) -> Result<Value, ToolError> {
    let citation = Citation::parse(&args.citation).map_err(|e| id_error("citation", e))?;
    let doc: Option<(i64, String)> = ctx
        .db
        .prepare_cached("SELECT id, title FROM documents WHERE path = ?1")?
        .query_row([citation.path()], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let Some((doc_id, title)) = doc else {
        let mut stmt = ctx.db.prepare_cached("SELECT path FROM documents")?;
        let paths: Vec<String> = stmt.query_map([], |r| r.get(0))?.collect::<Result<_, _>>()?;
        let near = closest(citation.path(), paths.iter().map(String::as_str), 3);
        let near = if near.is_empty() { String::new() } else { format!(" Closest documents: {}.", near.join(", ")) };
        return Err(ToolError::NotFound(format!(
            "No document {}.{near} Call search_docs to find citation keys.",
            citation.path()
        )));
    };
    let seq = citation.seq() as i64;
    let chunk: Option<(String, String)> = ctx
        .db
        .prepare_cached("SELECT section, body FROM chunks WHERE document_id = ?1 AND seq = ?2")?
        .query_row(params![doc_id, seq], |r| Ok((r.get(0)?, r.get(1)?)))
        .optional()?;
    let (first, last): (Option<i64>, Option<i64>) = ctx
        .db
        .prepare_cached("SELECT min(seq), max(seq) FROM chunks WHERE document_id = ?1")?
        .query_row([doc_id], |r| Ok((r.get(0)?, r.get(1)?)))?;
    let key = |s: i64| Citation::new(citation.path(), s as u32);
    let Some((section, text)) = chunk else {
        let (unit, mark) = if Citation::paged(citation.path()) { ("pages", "p") } else { ("chunks", "#") };
        let range = match (first, last) {
            (Some(a), Some(b)) => format!("has {unit} {mark}{a} to {mark}{b}"),
            _ => format!("has no {unit} with text"),
        };
        return Err(ToolError::NotFound(format!(
            "{} {range}; there is no {mark}{seq}. Call search_docs to find citation keys.",
            citation.path()
        )));
    };
    // Pages without text have no chunk: the neighbours are the nearest that exist.
    let neighbour = |sql: &str| -> Result<Option<Citation>, ToolError> {
        let s: Option<i64> = ctx.db.prepare_cached(sql)?.query_row(params![doc_id, seq], |r| r.get(0))?;
        Ok(s.map(key))
    };
    let previous = neighbour("SELECT max(seq) FROM chunks WHERE document_id = ?1 AND seq < ?2")?;
    let next = neighbour("SELECT min(seq) FROM chunks WHERE document_id = ?1 AND seq > ?2")?;
    Ok(json!({
        "citation": citation,
        "document": title,
        "heading": crate::rag::heading(&title, &section),
        "text": text,
        "previous": previous,
        "next": next,
    }))
}
