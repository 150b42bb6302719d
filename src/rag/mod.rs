//! Documentation for the agent: Markdown files chunked by headings, stored in SQLite
//! and searched with FTS5's BM25.

mod chunk;
mod index;
mod search;

pub use chunk::{Chunk, MAX_CHUNK_CHARS, chunk_markdown, heading};
pub use index::{IndexReport, SourceDoc, index_dir, index_docs};
pub use search::{Hit, SearchError, match_expression, search};
