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
number, e.g. arp-vibration.md#2), as returned by search_docs. Returns the document title, the section heading, the \
text, and the citation keys of the previous and next chunks of the same document (null at either end) so you can \
read on. Cite what you use as [arp-vibration.md#2].";

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct Args {
    /// Citation key, e.g. arp-vibration.md#2.
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
    let doc: Option<(i64, String, i64)> = ctx.db.prepare_cached(
        "SELECT d.id, d.title, (SELECT count(*) FROM chunks c WHERE c.document_id = d.id) FROM documents d WHERE d.path = ?1",
    )?
    .query_row([citation.path()], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)))
    .optional()?;
    let Some((doc_id, title, chunks)) = doc else {
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
    let Some((section, text)) = chunk else {
        return Err(ToolError::NotFound(format!(
            "{} has chunks #0 to #{}; there is no #{seq}.",
            citation.path(),
            chunks - 1
        )));
    };
    let neighbour = |s: i64| (0..chunks).contains(&s).then(|| Citation::new(citation.path(), s as u32));
    Ok(json!({
        "citation": citation,
        "document": title,
        "heading": crate::rag::heading(&title, &section),
        "text": text,
        "previous": neighbour(seq - 1),
        "next": neighbour(seq + 1),
    }))
}
