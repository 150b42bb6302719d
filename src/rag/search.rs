//! BM25 search over the chunks. Models write questions, not keywords, so the query is
//! reduced to its content words first: stop words go, and what remains is OR-ed, each
//! word quoted so that FTS5 syntax in the text (`NEAR`, `*`, quotes, columns) is inert.

use rusqlite::{Connection, params};
use serde::Serialize;

use super::chunk::heading;
use crate::domain::Citation;

/// Most query words used; a model's paragraph-long query keeps its first 16 content words.
const MAX_TERMS: usize = 16;

#[derive(Debug, Clone, Serialize)]
pub struct Hit {
    pub citation: Citation,
    pub document: String,
    pub heading: String,
    pub snippet: String,
    /// BM25 score, higher is better.
    pub score: f64,
}

/// Why a query found nothing to search for.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    #[error("the query has no words to search for (only stop words or punctuation); use the equipment, symptom or alarm code, e.g. 'VIB-HI bearing vibration'")]
    NoTerms,
    #[error(transparent)]
    Sqlite(#[from] rusqlite::Error),
}

/// The FTS5 MATCH expression for a natural-language query, or `None` if nothing is left.
///
/// Hyphenated words (alarm codes like `PRESS-SUC-LO`, ids like `PUMP-007`) become
/// phrases, so `VIB-HI` matches "VIB-HI" and not every chunk that mentions VIB-DE.
pub fn match_expression(query: &str) -> Option<String> {
    let mut terms: Vec<String> = Vec::new();
    for word in query.split(|c: char| !(c.is_alphanumeric() || c == '-')) {
        let parts: Vec<String> = word.split('-').filter(|p| !p.is_empty()).map(str::to_lowercase).collect();
        let term = match parts.as_slice() {
            [] => continue,
            [single] => {
                let too_short = single.chars().count() < 2 && !single.chars().all(|c| c.is_ascii_digit());
                if too_short || STOP_WORDS.binary_search(&single.as_str()).is_ok() {
                    continue;
                }
                single.clone()
            }
            phrase => phrase.join(" "),
        };
        if !terms.contains(&term) {
            terms.push(term);
        }
        if terms.len() == MAX_TERMS {
            break;
        }
    }
    if terms.is_empty() {
        return None;
    }
    // Terms hold only alphanumerics and spaces, so quoting needs no escaping.
    Some(terms.iter().map(|t| format!("\"{t}\"")).collect::<Vec<_>>().join(" OR "))
}

/// Top `limit` chunks for `query`, best first.
pub fn search(conn: &Connection, query: &str, limit: usize) -> Result<Vec<Hit>, SearchError> {
    let expr = match_expression(query).ok_or(SearchError::NoTerms)?;
    let mut stmt = conn.prepare_cached(
        "WITH top AS (
             SELECT rowid AS id, rank,
                    snippet(chunks_fts, 1, '', '', ' … ', 24) AS snip
             FROM chunks_fts WHERE chunks_fts MATCH ?1 ORDER BY rank LIMIT ?2
         )
         SELECT d.path, c.seq, d.title, c.section, top.snip, top.rank
         FROM top JOIN chunks c ON c.id = top.id JOIN documents d ON d.id = c.document_id
         ORDER BY top.rank",
    )?;
    let hits = stmt
        .query_map(params![expr, limit as i64], |r| {
            let path: String = r.get(0)?;
            let seq: i64 = r.get(1)?;
            let title: String = r.get(2)?;
            let section: String = r.get(3)?;
            Ok(Hit {
                citation: Citation::new(&path, seq as u32),
                heading: heading(&title, &section),
                document: title,
                snippet: r.get(4)?,
                score: -r.get::<_, f64>(5)?,
            })
        })?
        .collect::<Result<Vec<_>, _>>()?;
    Ok(hits)
}

/// Function words that match nearly every chunk and carry no meaning. Sorted, for
/// binary search.
const STOP_WORDS: &[&str] = &[
    "a", "about", "after", "all", "also", "am", "an", "and", "any", "are", "as", "at", "be",
    "been", "before", "being", "but", "by", "can", "could", "did", "do", "does", "doing", "for",
    "from", "had", "has", "have", "having", "he", "her", "here", "his", "how", "i", "if", "in",
    "into", "is", "it", "its", "just", "me", "my", "need", "of", "on", "or", "our", "please",
    "she", "should", "so", "some", "than", "that", "the", "their", "them", "then", "there",
    "these", "they", "this", "those", "to", "up", "us", "was", "we", "were", "what", "when",
    "where", "which", "while", "who", "why", "will", "with", "would", "you", "your",
];

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stop_words_are_sorted() {
        assert!(STOP_WORDS.windows(2).all(|w| w[0] < w[1]));
    }

    #[test]
    fn questions_become_quoted_content_words() {
        assert_eq!(
            match_expression("What should I do when the VIB-HI alarm is raised on PUMP-007?").unwrap(),
            r#""vib hi" OR "alarm" OR "raised" OR "pump 007""#
        );
        assert_eq!(match_expression("\"x\" NEAR(a b) OR col:* -- -xy-").unwrap(), r#""near" OR "col" OR "xy""#);
        assert!(match_expression("what is the ?").is_none());
    }
}
