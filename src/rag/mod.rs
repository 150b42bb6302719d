//! Documentation for the agent: Markdown, text and HTML chunked by headings, PDFs a
//! chunk per page, stored in SQLite, and searched with BM25 through an in-memory index
//! derived from the stored chunks.

mod bm25;
mod chunk;
mod formats;
mod index;

pub use bm25::{DocIndex, Hit, SearchError};
pub use chunk::{Chunk, MAX_CHUNK_CHARS, chunk_markdown, heading};
pub use formats::{DocText, html_to_markdown, pdf_pages};
pub use index::{IndexReport, SourceDoc, index_dir, index_docs};
