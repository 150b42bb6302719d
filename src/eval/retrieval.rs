//! Retrieval measured: for each question, where the chunk that answers it ranks in the
//! documentation search, as recall@5 and mean reciprocal rank. The questions include
//! paraphrases that share few words with the answer.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::run::Plant;
use crate::rag::{DocIndex, Embedder, EmbeddingsConfig, embed_chunks};
use crate::store::Store;

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct File {
    question: Vec<Question>,
}

#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
struct Question {
    text: String,
    /// The citation of the chunk that answers it, e.g. `arp-vibration.md#1`.
    answer: String,
    /// Worded unlike the answer (few shared words).
    #[serde(default)]
    paraphrase: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct Ranked {
    pub question: String,
    pub answer: String,
    pub paraphrase: bool,
    /// 1-based rank of the answer among the first 20 results, if there.
    pub rank: Option<usize>,
}

#[derive(Debug, Clone, Serialize)]
pub struct Retrieval {
    pub method: String,
    pub questions: usize,
    pub recall_at_5: f64,
    pub mrr: f64,
    pub paraphrase_recall_at_5: f64,
    pub paraphrase_mrr: f64,
    pub ranked: Vec<Ranked>,
}

const DEPTH: usize = 20;

/// Measures today's search (BM25) on the questions in `path`, and BM25 fused with
/// `embeddings` when given (the plant's chunks are embedded first); empty when there is
/// no such file.
pub fn measure(plant: &Plant, path: &Path, embeddings: Option<&EmbeddingsConfig>) -> anyhow::Result<Vec<Retrieval>> {
    if !path.exists() {
        return Ok(Vec::new());
    }
    let text = std::fs::read_to_string(path)?;
    let file: File = toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
    let store = plant.open_template()?;
    let bm25 = DocIndex::new();
    for q in &file.question {
        let exists = crate::tools::with_context(
            &store,
            &bm25,
            crate::domain::Timestamp::from_unix(super::END),
            crate::approvals::Proposer::Run(0),
            |ctx| !crate::tools::call(ctx, "read_doc", serde_json::json!({"citation": q.answer})).is_error,
        )?;
        anyhow::ensure!(exists, "{}: the answer {} is not a chunk of the demo documents", path.display(), q.answer);
    }
    let mut out = vec![rank_all(&store, &bm25, "bm25".into(), &file.question)?];
    if let Some(cfg) = embeddings {
        let embedder = Embedder::new(cfg.clone());
        let report = embed_chunks(&store, &embedder).context("embedding the demo documents")?;
        eprintln!("embedded {} chunks with {} for the retrieval figures", report.embedded + report.kept, cfg.model);
        let method = format!("bm25 + {} (RRF)", cfg.model);
        out.push(rank_all(&store, &DocIndex::with_embeddings(embedder), method, &file.question)?);
    }
    Ok(out)
}

fn rank_all(store: &Store, docs: &DocIndex, method: String, questions: &[Question]) -> anyhow::Result<Retrieval> {
    let db = store.read()?;
    let mut ranked = Vec::new();
    for q in questions {
        let hits = docs.search(&db, &q.text, DEPTH).with_context(|| format!("searching '{}'", q.text))?;
        let rank = hits.iter().position(|h| h.citation.as_str() == q.answer).map(|i| i + 1);
        ranked.push(Ranked { question: q.text.clone(), answer: q.answer.clone(), paraphrase: q.paraphrase, rank });
    }
    let stats = |set: &[&Ranked]| -> (f64, f64) {
        if set.is_empty() {
            return (0.0, 0.0);
        }
        let n = set.len() as f64;
        let recall = set.iter().filter(|r| r.rank.is_some_and(|k| k <= 5)).count() as f64 / n;
        let mrr = set.iter().map(|r| r.rank.map_or(0.0, |k| 1.0 / k as f64)).sum::<f64>() / n;
        (recall, mrr)
    };
    let all: Vec<&Ranked> = ranked.iter().collect();
    let para: Vec<&Ranked> = ranked.iter().filter(|r| r.paraphrase).collect();
    let ((recall_at_5, mrr), (paraphrase_recall_at_5, paraphrase_mrr)) = (stats(&all), stats(&para));
    Ok(Retrieval { method, questions: ranked.len(), recall_at_5, mrr, paraphrase_recall_at_5, paraphrase_mrr, ranked })
}

/// The methods side by side (a row each, all questions and paraphrases), then what each
/// missed.
pub fn render(list: &[Retrieval], md: bool) -> String {
    let mut out = String::new();
    let Some(first) = list.first() else { return out };
    let para = first.ranked.iter().filter(|r| r.paraphrase).count();
    let (all, some) = (format!("recall@5 ({})", first.questions), format!("paraphrases ({para})"));
    if md {
        let _ = writeln!(out, "| method | {all} | MRR | {some} recall@5 | MRR |\n|---|---:|---:|---:|---:|");
    } else {
        let _ = writeln!(out, "{:<32} {all:>14} {:>6} {some:>17} {:>6}", "method", "MRR", "MRR");
    }
    for r in list {
        let (a, b, c, d) = (r.recall_at_5, r.mrr, r.paraphrase_recall_at_5, r.paraphrase_mrr);
        if md {
            let _ = writeln!(out, "| {} | {a:.2} | {b:.2} | {c:.2} | {d:.2} |", r.method);
        } else {
            let _ = writeln!(out, "{:<32} {a:>14.2} {b:>6.2} {c:>17.2} {d:>6.2}", r.method);
        }
    }
    for r in list {
        let missed: Vec<String> = (r.ranked.iter())
            .filter(|r| r.rank.is_none_or(|k| k > 5))
            .map(|r| format!("{} ({})", r.question, r.rank.map_or("not in 20".to_string(), |k| format!("rank {k}"))))
            .collect();
        if !missed.is_empty() {
            let _ = writeln!(out, "\n{}: not in the first 5: {}", r.method, missed.join("; "));
        }
    }
    out
}
