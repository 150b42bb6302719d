//! Retrieval measured: for each question, where the chunk that answers it ranks in the
//! documentation search, as recall@5 and mean reciprocal rank. The questions include
//! paraphrases that share few words with the answer.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::Context;
use serde::{Deserialize, Serialize};

use super::run::Plant;

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
    pub method: &'static str,
    pub questions: usize,
    pub recall_at_5: f64,
    pub mrr: f64,
    pub paraphrase_recall_at_5: f64,
    pub paraphrase_mrr: f64,
    pub ranked: Vec<Ranked>,
}

const DEPTH: usize = 20;

/// Measures today's search (BM25) on the questions in `path`; `None` when there is no
/// such file.
pub fn measure(plant: &Plant, path: &Path) -> anyhow::Result<Option<Retrieval>> {
    if !path.exists() {
        return Ok(None);
    }
    let text = std::fs::read_to_string(path)?;
    let file: File = toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
    let store = plant.open_template()?;
    let db = store.read()?;
    let docs = crate::rag::DocIndex::new();
    let mut ranked = Vec::new();
    for q in file.question {
        let hits = docs.search(&db, &q.text, DEPTH).with_context(|| format!("searching '{}'", q.text))?;
        let rank = hits.iter().position(|h| h.citation.as_str() == q.answer).map(|i| i + 1);
        ranked.push(Ranked { question: q.text, answer: q.answer, paraphrase: q.paraphrase, rank });
    }
    for r in &ranked {
        let exists = crate::tools::with_context(
            &store,
            &docs,
            crate::domain::Timestamp::from_unix(super::END),
            crate::approvals::Proposer::Run(0),
            |ctx| !crate::tools::call(ctx, "read_doc", serde_json::json!({"citation": r.answer})).is_error,
        )?;
        anyhow::ensure!(exists, "{}: the answer {} is not a chunk of the demo documents", path.display(), r.answer);
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
    Ok(Some(Retrieval {
        method: "bm25",
        questions: ranked.len(),
        recall_at_5,
        mrr,
        paraphrase_recall_at_5,
        paraphrase_mrr,
        ranked,
    }))
}

impl Retrieval {
    pub fn render(&self, md: bool) -> String {
        let mut out = String::new();
        let para = self.ranked.iter().filter(|r| r.paraphrase).count();
        let rows = [
            (format!("all {} questions", self.questions), self.recall_at_5, self.mrr),
            (format!("{para} paraphrases"), self.paraphrase_recall_at_5, self.paraphrase_mrr),
        ];
        if md {
            let _ = writeln!(out, "| {} | recall@5 | MRR |\n|---|---:|---:|", self.method);
            for (label, recall, mrr) in rows {
                let _ = writeln!(out, "| {label} | {recall:.2} | {mrr:.2} |");
            }
        } else {
            let _ = writeln!(out, "{:<24} {:>9} {:>6}", self.method, "recall@5", "MRR");
            for (label, recall, mrr) in rows {
                let _ = writeln!(out, "{label:<24} {recall:>9.2} {mrr:>6.2}");
            }
        }
        let missed: Vec<String> = self
            .ranked
            .iter()
            .filter(|r| r.rank.is_none_or(|k| k > 5))
            .map(|r| format!("{} ({})", r.question, r.rank.map_or("not in 20".to_string(), |k| format!("rank {k}"))))
            .collect();
        if !missed.is_empty() {
            let _ = writeln!(out, "\nnot in the first 5: {}", missed.join("; "));
        }
        out
    }
}
