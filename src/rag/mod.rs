//! Documentation for the agent: Markdown files chunked by headings, stored in SQLite,
//! and searched with BM25 through an in-memory index derived from the stored chunks.

mod bm25;
mod chunk;
mod index;

pub use bm25::{DocIndex, Hit, SearchError};
pub use chunk::{Chunk, MAX_CHUNK_CHARS, chunk_markdown, heading};
pub use index::{IndexReport, SourceDoc, index_dir, index_docs};
