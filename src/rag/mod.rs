//! Documentation for the agent: Markdown, text and HTML chunked by headings, PDFs a
//! chunk per page, stored in SQLite, and searched with BM25 through an in-memory index
//! derived from the stored chunks; optionally fused with embeddings from an
//! OpenAI-compatible endpoint.

mod bm25;
mod chunk;
mod embed;
mod formats;
mod index;

pub use bm25::{DocIndex, Hit, SearchError};
pub use chunk::{Chunk, MAX_CHUNK_CHARS, chunk_markdown, heading};
pub use embed::{EmbedError, EmbedReport, Embedder, EmbeddingsConfig, embed_chunks};
pub use formats::{DocText, KINDS as DOCUMENT_KINDS, html_to_markdown, is_document, pdf_pages};
pub use index::{IndexReport, SourceDoc, index_dir, index_docs};
