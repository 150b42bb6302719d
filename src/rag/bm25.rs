//! The search index: BM25 over the chunks, held in memory and rebuilt from SQLite
//! when `rag_generation` says the chunks changed; with an embedder, the chunks' stored
//! vectors beside it, the two rankings fused by reciprocal rank.
//!
//! Why not FTS5: ranking every match with FTS5's `bm25()` costs 10-20 ms a query over
//! 10,000 chunks when a model's question shares common words ("pump", "bearing") with
//! most of them; scoring flat posting lists here costs well under a millisecond. SQLite
//! stays the one source of truth: this index is derived, disposable state.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use rusqlite::Connection;

use super::chunk::heading;
use super::embed::{Embedder, from_blob};
use crate::domain::Citation;

/// BM25 parameters: the usual ones.
const K1: f32 = 1.2;
const B: f32 = 0.75;
/// Field weights: a term in the section heading counts four times one in the body;
/// the document title, shared by all its chunks, counts half.
const SECTION_WEIGHT: f32 = 4.0;
const BODY_WEIGHT: f32 = 1.0;
const TITLE_WEIGHT: f32 = 0.5;
/// Most query terms used; a paragraph-long question keeps its first 16 content words.
const MAX_QUERY_TERMS: usize = 16;
/// Words in a snippet.
const SNIPPET_WORDS: usize = 28;
/// With embeddings: how deep each ranking is read before fusing, and the reciprocal
/// rank fusion constant (Cormack et al. 2009: 60 works across collections).
const FUSE_DEPTH: usize = 50;
const RRF_K: f32 = 60.0;

#[derive(Debug, Clone, serde::Serialize)]
pub struct Hit {
    pub citation: Citation,
    pub document: String,
    pub heading: String,
    pub snippet: String,
    /// Higher is better: BM25's score, or with embeddings the fused reciprocal-rank score.
    pub score: f64,
}

#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error(
        "the query has no words to search for (only stop words or punctuation); use the equipment, symptom or alarm code, e.g. 'VIB-HI bearing vibration'"
    )]
    NoTerms,
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

/// A shared, lazily rebuilt search index. Cheap to clone.
#[derive(Clone, Default)]
pub struct DocIndex {
    // A std mutex: held only to swap the Arc; a rebuild happens under it so that two
    // searches do not both rebuild.
    built: Arc<Mutex<Option<Arc<Built>>>>,
    embedder: Option<Arc<Embedder>>,
}

struct Built {
    generation: i64,
    terms: HashMap<String, u32>,
    /// Per term: (document number, weighted term frequency).
    postings: Vec<Vec<(u32, f32)>>,
    doc_len: Vec<f32>,
    avg_len: f32,
    chunk_ids: Vec<i64>,
    /// The embedder's vectors, `dim` floats each, for the documents in `vector_docs`.
    dim: usize,
    vector_docs: Vec<u32>,
    vectors: Vec<f32>,
}

impl DocIndex {
    pub fn new() -> DocIndex {
        DocIndex::default()
    }

    /// An index that also ranks by `embedder`'s vectors, where chunks have them.
    pub fn with_embeddings(embedder: Embedder) -> DocIndex {
        DocIndex { built: Arc::default(), embedder: Some(Arc::new(embedder)) }
    }

    pub fn embedder(&self) -> Option<&Embedder> {
        self.embedder.as_deref()
    }

    /// The best `limit` chunks for `query`, best first.
    pub fn search(&self, conn: &Connection, query: &str, limit: usize) -> Result<Vec<Hit>, SearchError> {
        let query_terms = query_terms(query);
        if query_terms.is_empty() {
            return Err(SearchError::NoTerms);
        }
        let index = self.current(conn)?;
        // A query naming an identifier the documents hold (an alarm code such as VIB-HI,
        // a tag, an asset id) is answered by words alone: identifiers match exactly, and
        // an embedding model reads them as noise (with fusion, the VIB-HIHI procedure fell
        // from first to third on the retrieval questions).
        let names_identifier = query_terms.iter().any(|t| t.whole.contains('-') && index.terms.contains_key(&t.whole));
        let semantic = if names_identifier { None } else { self.semantic(&index, query) };
        let ranked = match semantic {
            Some(by_meaning) => fuse(&[index.rank(&query_terms, FUSE_DEPTH), by_meaning], limit),
            None => index.rank(&query_terms, limit),
        };
        let mut stmt = conn.prepare_cached(
            "SELECT d.path, c.seq, d.title, c.section, c.body
             FROM chunks c JOIN documents d ON d.id = c.document_id WHERE c.id = ?1",
        )?;
        let mut hits = Vec::with_capacity(ranked.len());
        for (chunk_id, score) in ranked {
            let (path, seq, title, section, body): (String, i64, String, String, String) =
                stmt.query_row([chunk_id], |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?)))?;
            hits.push(Hit {
                citation: Citation::new(&path, seq as u32),
                heading: heading(&title, &section),
                document: title,
                snippet: snippet(&body, &query_terms),
                score: f64::from(score),
            });
        }
        Ok(hits)
    }

    /// The chunks nearest `query` in meaning, when there is an embedder and vectors from
    /// it; `None` sends the search to BM25 alone (an embedder that fails is logged).
    fn semantic(&self, index: &Built, query: &str) -> Option<Vec<(i64, f32)>> {
        let embedder = self.embedder.as_ref().filter(|_| !index.vector_docs.is_empty())?;
        match embedder.embed_query(query) {
            Ok(v) => Some(index.nearest(&v, FUSE_DEPTH)),
            Err(e) => {
                tracing::warn!(stage = "rag", error = %e, "query embedding failed; searching with BM25 alone");
                None
            }
        }
    }

    /// The index for the chunks as they are now, rebuilt if they changed.
    fn current(&self, conn: &Connection) -> Result<Arc<Built>, SearchError> {
        let generation: i64 =
            conn.prepare_cached("SELECT generation FROM rag_generation WHERE id = 1")?.query_row([], |r| r.get(0))?;
        let mut slot = self.built.lock().expect("doc index lock poisoned");
        if let Some(built) = slot.as_ref().filter(|b| b.generation == generation) {
            return Ok(Arc::clone(built));
        }
        let model = self.embedder.as_ref().map(|e| e.model());
        let built = Arc::new(Built::load(conn, generation, model)?);
        *slot = Some(Arc::clone(&built));
        Ok(built)
    }
}

impl Built {
    fn load(conn: &Connection, generation: i64, model: Option<&str>) -> rusqlite::Result<Built> {
        let mut built = Built {
            generation,
            terms: HashMap::new(),
            postings: Vec::new(),
            doc_len: Vec::new(),
            avg_len: 0.0,
            chunk_ids: Vec::new(),
            dim: 0,
            vector_docs: Vec::new(),
            vectors: Vec::new(),
        };
        let mut stmt = conn.prepare(
            "SELECT c.id, c.section, c.body, d.title FROM chunks c JOIN documents d ON d.id = c.document_id ORDER BY c.id",
        )?;
        let mut rows = stmt.query([])?;
        let mut tf: HashMap<String, f32> = HashMap::new();
        while let Some(row) = rows.next()? {
            let doc = built.chunk_ids.len() as u32;
            built.chunk_ids.push(row.get(0)?);
            tf.clear();
            let mut len = 0.0;
            for (col, weight) in [(1, SECTION_WEIGHT), (2, BODY_WEIGHT), (3, TITLE_WEIGHT)] {
                let text: String = row.get(col)?;
                for_each_term(&text, |t| {
                    *tf.entry(t).or_default() += weight;
                    len += weight;
                });
            }
            for (term, f) in tf.drain() {
                let next = built.postings.len() as u32;
                let id = *built.terms.entry(term).or_insert(next);
                if id == next {
                    built.postings.push(Vec::new());
                }
                built.postings[id as usize].push((doc, f));
            }
            built.doc_len.push(len);
        }
        let n = built.doc_len.len().max(1) as f32;
        built.avg_len = (built.doc_len.iter().sum::<f32>() / n).max(1.0);
        if let Some(model) = model {
            built.load_vectors(conn, model)?;
        }
        Ok(built)
    }

    fn load_vectors(&mut self, conn: &Connection, model: &str) -> rusqlite::Result<()> {
        let doc_of: HashMap<i64, u32> = self.chunk_ids.iter().enumerate().map(|(d, id)| (*id, d as u32)).collect();
        let mut stmt = conn.prepare("SELECT chunk_id, vector FROM chunk_vectors WHERE model = ?1 ORDER BY chunk_id")?;
        let mut rows = stmt.query([model])?;
        while let Some(row) = rows.next()? {
            let v = from_blob(row.get_ref(1)?.as_blob()?);
            // A vector of another length (the model behind the name changed) waits to be replaced.
            if self.dim == 0 {
                self.dim = v.len();
            }
            if let (Some(&doc), true) = (doc_of.get(&row.get::<_, i64>(0)?), v.len() == self.dim) {
                self.vector_docs.push(doc);
                self.vectors.extend_from_slice(&v);
            }
        }
        Ok(())
    }

    /// The `limit` chunks with the largest cosine similarity to `query` (all vectors are
    /// unit length), best first.
    fn nearest(&self, query: &[f32], limit: usize) -> Vec<(i64, f32)> {
        if query.len() != self.dim {
            tracing::warn!(
                stage = "rag",
                query = query.len(),
                stored = self.dim,
                "query vector length differs from the stored vectors'; re-run `twinops docs index`"
            );
            return Vec::new();
        }
        let mut scored: Vec<(u32, f32)> = (self.vector_docs.iter())
            .zip(self.vectors.chunks_exact(self.dim))
            .map(|(&doc, v)| (doc, v.iter().zip(query).map(|(a, b)| a * b).sum()))
            .collect();
        let by_rank = |a: &(u32, f32), b: &(u32, f32)| b.1.total_cmp(&a.1).then(a.0.cmp(&b.0));
        if scored.len() > limit {
            scored.select_nth_unstable_by(limit, by_rank);
            scored.truncate(limit);
        }
        scored.sort_by(by_rank);
        scored.into_iter().map(|(d, s)| (self.chunk_ids[d as usize], s)).collect()
    }

    fn rank(&self, query: &[QueryTerm], limit: usize) -> Vec<(i64, f32)> {
        let n = self.doc_len.len() as f32;
        let mut scores = vec![0f32; self.doc_len.len()];
        let mut touched: Vec<u32> = Vec::new();
        for term in query {
            // A compound ("vib-hi") the corpus does not have falls back to its parts.
            let ids: Vec<u32> = match self.terms.get(&term.whole) {
                Some(&id) => vec![id],
                None => term.parts.iter().filter_map(|p| self.terms.get(p).copied()).collect(),
            };
            for id in ids {
                let postings = &self.postings[id as usize];
                let df = postings.len() as f32;
                let idf = (1.0 + (n - df + 0.5) / (df + 0.5)).ln();
                for &(doc, tf) in postings {
                    let norm = K1 * (1.0 - B + B * self.doc_len[doc as usize] / self.avg_len);
                    let slot = &mut scores[doc as usize];
                    if *slot == 0.0 {
                        touched.push(doc);
                    }
                    *slot += idf * tf * (K1 + 1.0) / (tf + norm);
                }
            }
        }
        // Ties go to the earlier chunk, so results are stable.
        let by_rank = |a: &u32, b: &u32| scores[*b as usize].total_cmp(&scores[*a as usize]).then(a.cmp(b));
        if touched.len() > limit {
            touched.select_nth_unstable_by(limit, by_rank);
            touched.truncate(limit);
        }
        touched.sort_by(by_rank);
        touched.into_iter().map(|d| (self.chunk_ids[d as usize], scores[d as usize])).collect()
    }
}

/// Reciprocal rank fusion: a chunk scores the sum of 1/(60 + rank) over the rankings
/// it is in. Ties keep the order of the first ranking.
fn fuse(rankings: &[Vec<(i64, f32)>], limit: usize) -> Vec<(i64, f32)> {
    let mut fused: Vec<(i64, f32)> = Vec::new();
    for ranking in rankings {
        for (rank, (chunk, _)) in ranking.iter().enumerate() {
            let add = 1.0 / (RRF_K + rank as f32 + 1.0);
            match fused.iter_mut().find(|(c, _)| c == chunk) {
                Some(slot) => slot.1 += add,
                None => fused.push((*chunk, add)),
            }
        }
    }
    // Stable: equal scores keep first-seen order.
    fused.sort_by(|a, b| b.1.total_cmp(&a.1));
    fused.truncate(limit);
    fused
}

/// A query word: `whole` is the indexed term; a compound also keeps its parts.
#[derive(Debug, PartialEq)]
struct QueryTerm {
    whole: String,
    parts: Vec<String>,
}

fn query_terms(query: &str) -> Vec<QueryTerm> {
    let mut out: Vec<QueryTerm> = Vec::new();
    for word in words(query) {
        let parts: Vec<String> = word.split('-').filter_map(normalize).collect();
        let whole = if word.contains('-') && parts.len() > 1 {
            word.to_string()
        } else {
            match parts.first() {
                Some(p) => p.clone(),
                None => continue,
            }
        };
        if out.iter().all(|t| t.whole != whole) {
            out.push(QueryTerm { whole, parts });
        }
        if out.len() == MAX_QUERY_TERMS {
            break;
        }
    }
    out
}

/// Lower-cased words, hyphens kept inside them.
fn words(text: &str) -> impl Iterator<Item = String> + '_ {
    text.split(|c: char| !(c.is_alphanumeric() || c == '-'))
        .map(|w| w.trim_matches('-').to_lowercase())
        .filter(|w| !w.is_empty())
}

/// Index terms of a text: each word, stemmed, stop words dropped; a hyphenated word
/// also yields the whole compound, so alarm codes like VIB-HI match exactly.
fn for_each_term(text: &str, mut emit: impl FnMut(String)) {
    for word in words(text) {
        let mut parts = 0;
        for part in word.split('-') {
            if let Some(t) = normalize(part) {
                emit(t);
                parts += 1;
            }
        }
        if word.contains('-') && parts > 1 {
            emit(word);
        }
    }
}

/// A word as an index term, or None for stop words and lone letters.
fn normalize(word: &str) -> Option<String> {
    let lone_letter = word.chars().count() < 2 && !word.chars().all(|c| c.is_ascii_digit());
    if word.is_empty() || lone_letter || STOP_WORDS.binary_search(&word).is_ok() {
        return None;
    }
    Some(stem(word))
}

/// The S-stemmer (Harman 1991): folds English plurals only, so it never merges words
/// of different meaning ("bearing" stays apart from "bear").
fn stem(w: &str) -> String {
    if w.len() <= 3 || !w.bytes().all(|b| b.is_ascii_lowercase()) {
        return w.to_string();
    }
    if let Some(base) = w.strip_suffix("ies").filter(|_| !w.ends_with("eies") && !w.ends_with("aies")) {
        return format!("{base}y");
    }
    if w.ends_with("es") && !(w.ends_with("aes") || w.ends_with("ees") || w.ends_with("oes")) {
        return w[..w.len() - 1].to_string();
    }
    if w.ends_with('s') && !(w.ends_with("us") || w.ends_with("ss")) {
        return w[..w.len() - 1].to_string();
    }
    w.to_string()
}

/// The stretch of `body` with the most query terms in it, about 28 words.
fn snippet(body: &str, query: &[QueryTerm]) -> String {
    let words: Vec<&str> = body.split_whitespace().collect();
    if words.len() <= SNIPPET_WORDS {
        return words.join(" ");
    }
    let hit: Vec<u32> = words
        .iter()
        .map(|w| {
            let mut found = false;
            for_each_term(w, |t| found |= query.iter().any(|q| q.whole == t || q.parts.contains(&t)));
            u32::from(found)
        })
        .collect();
    let mut best = (0, 0);
    let mut sum: u32 = hit[..SNIPPET_WORDS].iter().sum();
    for start in 1..=words.len() - SNIPPET_WORDS {
        sum = sum + hit[start + SNIPPET_WORDS - 1] - hit[start - 1];
        if sum > best.1 {
            best = (start, sum);
        }
    }
    let (start, end) = (best.0, best.0 + SNIPPET_WORDS);
    let mut out = words[start..end].join(" ");
    if start > 0 {
        out.insert_str(0, "… ");
    }
    if end < words.len() {
        out.push_str(" …");
    }
    out
}

/// Function words that match nearly every chunk and carry no meaning. Sorted, for
/// binary search.
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be", "been", "before", "being",
    "but", "by", "can", "could", "did", "do", "does", "doing", "for", "from", "had", "has", "have", "having", "he",
    "her", "here", "his", "how", "i", "if", "in", "into", "is", "it", "its", "just", "me", "my", "need", "of", "on",
    "or", "our", "please", "she", "should", "so", "some", "than", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "those", "to", "up", "us", "was", "we", "were", "what", "when", "where", "which", "while",
    "who", "why", "will", "with", "would", "you", "your",
];

#[cfg(test)]
mod tests {
    use super::*;

    fn terms(text: &str) -> Vec<String> {
        let mut out = Vec::new();
        for_each_term(text, |t| out.push(t));
        out
    }

    #[test]
    fn stop_words_are_sorted() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn codes_index_as_parts_and_compound() {
        assert_eq!(terms("The VIB-HI alarm on pumps"), ["vib", "hi", "vib-hi", "alarm", "pump"]);
        assert_eq!(terms("ISO 10816-3, zone C"), ["iso", "10816", "3", "10816-3", "zone"]);
        assert_eq!(terms("\"x\" NEAR(a b) OR col:* -- -xy-"), ["near", "col", "xy"]);
    }

    #[test]
    fn the_s_stemmer_folds_plurals_only() {
        for (w, s) in [
            ("valves", "valve"),
            ("bearings", "bearing"),
            ("batteries", "battery"),
            ("gas", "gas"),
            ("glass", "glass"),
            ("status", "status"),
            ("bearing", "bearing"),
        ] {
            assert_eq!(stem(w), s, "{w}");
        }
    }

    #[test]
    fn questions_keep_their_content_words() {
        let q = query_terms("What should I do when the VIB-HI alarm is raised on PUMP-007?");
        let wholes: Vec<_> = q.iter().map(|t| t.whole.as_str()).collect();
        assert_eq!(wholes, ["vib-hi", "alarm", "raised", "pump-007"]);
        assert_eq!(q[0].parts, ["vib", "hi"]);
        assert!(query_terms("what is the ?").is_empty());
    }

    #[test]
    fn fusion_favours_chunks_both_rankings_place_high() {
        let lexical = vec![(1, 9.0), (2, 8.0), (3, 7.0)];
        let semantic = vec![(3, 0.9), (4, 0.8), (1, 0.7)];
        let fused: Vec<i64> = fuse(&[lexical, semantic], 3).into_iter().map(|(c, _)| c).collect();
        // 1: 1/61 + 1/63; 3: 1/63 + 1/61; both beat 2 (1/62) and 4 (1/62); 1 came first.
        assert_eq!(fused, [1, 3, 2]);
    }

    #[test]
    fn snippets_centre_on_the_matches() {
        let body = format!("{} suction strainer blocked {}", "filler ".repeat(50), "more ".repeat(50));
        let s = snippet(&body, &query_terms("blocked strainer"));
        assert!(s.contains("suction strainer blocked") && s.starts_with("… ") && s.ends_with(" …"), "{s}");
    }
}
