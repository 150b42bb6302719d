//! Embeddings for the documentation search, off unless `[embeddings]` is configured:
//! a vector per chunk from an OpenAI-compatible `POST /v1/embeddings` endpoint (llama.cpp's
//! llama-server with `--embeddings`, Ollama, vLLM, OpenAI), stored in SQLite beside the
//! chunk, and a query's vector fused with BM25 by reciprocal rank (`bm25.rs`).
//!
//! Search never depends on the endpoint: a chunk without a vector still ranks by BM25,
//! and a query whose embedding fails is answered by BM25 alone, with a warning logged.

use std::time::Duration;

use rusqlite::params;
use serde::Deserialize;

use super::chunk::heading;
use crate::store::{Store, StoreError};
use crate::support::Secret;

/// The `[embeddings]` part of `twinops.toml`.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EmbeddingsConfig {
    /// The API root, e.g. `http://127.0.0.1:8081/v1`; `/embeddings` is appended.
    pub base_url: String,
    /// The model name sent with each request; vectors are stored per model, so changing
    /// it re-embeds every chunk.
    pub model: String,
    #[serde(default)]
    pub api_key: Option<Secret>,
    /// Per request when indexing (a batch of chunks).
    #[serde(default = "default_timeout_secs")]
    pub timeout_secs: u64,
    /// Per query when searching: kept well inside the agent's tool timeout (5 s by
    /// default), so that a slow server costs the semantic half of a search, not the search.
    #[serde(default = "default_query_timeout_ms")]
    pub query_timeout_ms: u64,
    /// Chunks per request when indexing.
    #[serde(default = "default_batch")]
    pub batch: usize,
    /// A chunk's text is cut to this many characters before it is sent: small embedding
    /// models read 256 to 512 tokens, and llama-server refuses a longer input outright.
    #[serde(default = "default_max_input_chars")]
    pub max_input_chars: usize,
}

fn default_timeout_secs() -> u64 {
    10
}
fn default_query_timeout_ms() -> u64 {
    1_500
}
fn default_batch() -> usize {
    32
}
fn default_max_input_chars() -> usize {
    1_000
}

impl EmbeddingsConfig {
    pub fn new(base_url: impl Into<String>, model: impl Into<String>) -> EmbeddingsConfig {
        EmbeddingsConfig {
            base_url: base_url.into(),
            model: model.into(),
            api_key: None,
            timeout_secs: default_timeout_secs(),
            query_timeout_ms: default_query_timeout_ms(),
            batch: default_batch(),
            max_input_chars: default_max_input_chars(),
        }
    }

    pub fn validate(&self) -> Result<(), String> {
        let url = reqwest::Url::parse(&self.base_url).map_err(|e| {
            format!("embeddings.base_url '{}' is not a URL ({e}); e.g. http://127.0.0.1:8081/v1", self.base_url)
        })?;
        if !matches!(url.scheme(), "http" | "https") {
            return Err(format!("embeddings.base_url must be http or https, not {}", url.scheme()));
        }
        if self.model.trim().is_empty() {
            return Err("embeddings.model is required (the name the server knows the model by)".into());
        }
        if !(1..=600).contains(&self.timeout_secs) {
            return Err(format!("embeddings.timeout_secs must be 1 to 600, not {}", self.timeout_secs));
        }
        if !(100..=60_000).contains(&self.query_timeout_ms) {
            return Err(format!("embeddings.query_timeout_ms must be 100 to 60000, not {}", self.query_timeout_ms));
        }
        if !(1..=2048).contains(&self.batch) {
            return Err(format!("embeddings.batch must be 1 to 2048, not {}", self.batch));
        }
        if !(100..=100_000).contains(&self.max_input_chars) {
            return Err(format!("embeddings.max_input_chars must be 100 to 100000, not {}", self.max_input_chars));
        }
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
#[error("embeddings from {model} at {url}: {reason}")]
pub struct EmbedError {
    model: String,
    url: String,
    reason: String,
}

/// A client of one embeddings endpoint. Its calls block, from any thread.
pub struct Embedder {
    cfg: EmbeddingsConfig,
    url: String,
    client: reqwest::Client,
}

impl Embedder {
    pub fn new(cfg: EmbeddingsConfig) -> Embedder {
        crate::support::install_tls_provider();
        let client = reqwest::Client::builder()
            .connect_timeout(Duration::from_secs(5))
            // Each call runs on a runtime of its own (see `embed`): a pooled connection
            // would outlive the runtime that drives it.
            .pool_max_idle_per_host(0)
            .build()
            .expect("HTTP client with the ring provider");
        let url = format!("{}/embeddings", cfg.base_url.trim_end_matches('/'));
        Embedder { cfg, url, client }
    }

    pub fn model(&self) -> &str {
        &self.cfg.model
    }

    /// Unit-length vectors for `inputs` (chunks), in order, within `timeout_secs`.
    pub fn embed(&self, inputs: &[String]) -> Result<Vec<Vec<f32>>, EmbedError> {
        self.blocking(inputs, Duration::from_secs(self.cfg.timeout_secs))
    }

    /// A search question's vector, within `query_timeout_ms`.
    pub fn embed_query(&self, query: &str) -> Result<Vec<f32>, EmbedError> {
        let mut v = self.blocking(&[query.to_string()], Duration::from_millis(self.cfg.query_timeout_ms))?;
        Ok(v.remove(0))
    }

    /// Blocking, and callable anywhere: from a tool (a `spawn_blocking` thread), the
    /// CLI, or a test. The request runs on a current-thread runtime in a scoped thread,
    /// so it neither needs nor disturbs the caller's runtime.
    fn blocking(&self, inputs: &[String], timeout: Duration) -> Result<Vec<Vec<f32>>, EmbedError> {
        std::thread::scope(|s| {
            s.spawn(|| {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .map_err(|e| self.error(format!("no runtime for the request: {e}")))?;
                rt.block_on(self.request(inputs, timeout))
            })
            .join()
            .unwrap_or_else(|_| Err(self.error("the request thread panicked".into())))
        })
    }

    fn error(&self, reason: String) -> EmbedError {
        EmbedError { model: self.cfg.model.clone(), url: self.url.clone(), reason }
    }

    async fn request(&self, inputs: &[String], timeout: Duration) -> Result<Vec<Vec<f32>>, EmbedError> {
        let body = serde_json::json!({ "model": self.cfg.model, "input": inputs });
        let mut req = self.client.post(&self.url).timeout(timeout).json(&body);
        if let Some(key) = &self.cfg.api_key {
            req = req.bearer_auth(key.expose());
        }
        let response = req.send().await.map_err(|e| {
            let what = if e.is_timeout() {
                format!("timed out after {} ms", timeout.as_millis())
            } else if e.is_connect() {
                "connection failed (is the embeddings server running?)".to_string()
            } else {
                format!("request failed: {}", e.without_url())
            };
            self.error(what)
        })?;
        let status = response.status();
        let text = response.text().await.map_err(|e| self.error(format!("reading the reply: {}", e.without_url())))?;
        if !status.is_success() {
            let mut text: String = text.chars().take(300).collect();
            if let Some(key) = self.cfg.api_key.as_ref().map(Secret::expose).filter(|k| !k.is_empty()) {
                text = text.replace(key, "[redacted]");
            }
            return Err(self.error(format!("HTTP {}: {text}", status.as_u16())));
        }
        parse_reply(&text, inputs.len()).map_err(|reason| self.error(reason))
    }
}

#[derive(Deserialize)]
struct Reply {
    data: Vec<Datum>,
}

#[derive(Deserialize)]
struct Datum {
    #[serde(default)]
    index: Option<usize>,
    embedding: Vec<f32>,
}

/// The vectors of an OpenAI-shaped reply, in input order and of unit length; refused when
/// their number, length or values are not what `n` inputs should give.
fn parse_reply(text: &str, n: usize) -> Result<Vec<Vec<f32>>, String> {
    let reply: Reply = serde_json::from_str(text).map_err(|e| {
        format!("the reply is not an embeddings list ({e}); expected {{\"data\": [{{\"embedding\": [...]}}]}}")
    })?;
    if reply.data.len() != n {
        return Err(format!("{n} inputs sent, {} vectors returned", reply.data.len()));
    }
    let mut out: Vec<Option<Vec<f32>>> = vec![None; n];
    for (i, d) in reply.data.into_iter().enumerate() {
        let at = d.index.unwrap_or(i);
        let slot = out.get_mut(at).ok_or_else(|| format!("vector index {at} is out of range for {n} inputs"))?;
        if slot.replace(d.embedding).is_some() {
            return Err(format!("vector index {at} appears twice"));
        }
    }
    let vectors: Vec<Vec<f32>> = out.into_iter().map(|v| v.expect("n distinct indexes below n")).collect();
    let dim = vectors.first().map_or(0, Vec::len);
    for v in &vectors {
        if v.is_empty() || v.len() != dim {
            return Err(format!("vectors of different lengths ({} and {})", dim, v.len()));
        }
    }
    vectors.into_iter().map(unit).collect()
}

fn unit(mut v: Vec<f32>) -> Result<Vec<f32>, String> {
    let norm = v.iter().map(|x| x * x).sum::<f32>().sqrt();
    if !norm.is_finite() || norm == 0.0 {
        return Err("a vector is zero or not finite".into());
    }
    v.iter_mut().for_each(|x| *x /= norm);
    Ok(v)
}

pub(super) fn to_blob(v: &[f32]) -> Vec<u8> {
    v.iter().flat_map(|x| x.to_le_bytes()).collect()
}

pub(super) fn from_blob(b: &[u8]) -> Vec<f32> {
    b.chunks_exact(4).map(|c| f32::from_le_bytes([c[0], c[1], c[2], c[3]])).collect()
}

/// What [`embed_chunks`] did.
#[derive(Debug, Default, Clone, PartialEq, Eq, serde::Serialize)]
pub struct EmbedReport {
    /// Chunks that got a vector now.
    pub embedded: usize,
    /// Chunks that already had one from this model.
    pub kept: usize,
}

/// Gives every chunk without a vector from `embedder`'s model one, a batch per request,
/// each batch written (and the search index told) as it arrives: an interrupted run
/// keeps what it finished, and the next run does the rest.
pub fn embed_chunks(store: &Store, embedder: &Embedder) -> anyhow::Result<EmbedReport> {
    let (todo, kept) = {
        let db = store.read()?;
        let kept: i64 = db.query_row(
            "SELECT count(*) FROM chunk_vectors v JOIN chunks c ON c.id = v.chunk_id WHERE v.model = ?1",
            [embedder.model()],
            |r| r.get(0),
        )?;
        let mut stmt = db.prepare(
            "SELECT c.id, d.title, c.section, c.body FROM chunks c JOIN documents d ON d.id = c.document_id
             WHERE NOT EXISTS (SELECT 1 FROM chunk_vectors v WHERE v.chunk_id = c.id AND v.model = ?1)
             ORDER BY c.id",
        )?;
        let max = embedder.cfg.max_input_chars;
        let todo = stmt
            .query_map([embedder.model()], |r| {
                let text = format!(
                    "{}\n{}",
                    heading(&r.get::<_, String>(1)?, &r.get::<_, String>(2)?),
                    r.get::<_, String>(3)?
                );
                Ok((r.get::<_, i64>(0)?, text.chars().take(max).collect::<String>()))
            })?
            .collect::<rusqlite::Result<Vec<(i64, String)>>>()?;
        (todo, kept as usize)
    };
    let mut report = EmbedReport { embedded: 0, kept };
    for batch in todo.chunks(embedder.cfg.batch) {
        let texts: Vec<String> = batch.iter().map(|(_, t)| t.clone()).collect();
        let vectors = embedder.embed(&texts)?;
        let rows: Vec<(i64, Vec<u8>)> = batch.iter().zip(&vectors).map(|((id, _), v)| (*id, to_blob(v))).collect();
        let model = embedder.model().to_string();
        report.embedded += store.writer().call(move |conn| -> Result<usize, StoreError> {
            // A chunk replaced since it was read is skipped; its successor waits for the next run.
            let mut insert = conn.prepare_cached(
                "INSERT OR REPLACE INTO chunk_vectors (chunk_id, model, vector)
                 SELECT ?1, ?2, ?3 WHERE EXISTS (SELECT 1 FROM chunks WHERE id = ?1)",
            )?;
            let mut n = 0;
            for (id, blob) in &rows {
                n += insert.execute(params![id, model, blob])?;
            }
            conn.execute("UPDATE rag_generation SET generation = generation + 1 WHERE id = 1", [])?;
            Ok(n)
        })?;
    }
    Ok(report)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn replies_are_put_in_input_order_and_made_unit_length() {
        let v = parse_reply(r#"{"data":[{"index":1,"embedding":[0,2]},{"index":0,"embedding":[3,4]}]}"#, 2).unwrap();
        assert_eq!(v, vec![vec![0.6, 0.8], vec![0.0, 1.0]]);
        assert_eq!(from_blob(&to_blob(&v[0])), v[0]);
    }

    #[test]
    fn a_reply_that_does_not_fit_the_inputs_is_refused() {
        for (reply, n, why) in [
            (r#"{"data":[{"embedding":[1,0]}]}"#, 2, "2 inputs sent, 1 vectors returned"),
            (r#"{"data":[{"embedding":[1,0]},{"embedding":[1]}]}"#, 2, "different lengths"),
            (r#"{"data":[{"index":0,"embedding":[1]},{"index":0,"embedding":[1]}]}"#, 2, "appears twice"),
            (r#"{"data":[{"index":5,"embedding":[1]}]}"#, 1, "out of range"),
            (r#"{"data":[{"embedding":[0,0]}]}"#, 1, "zero"),
            (r#"{"error":"model not loaded"}"#, 1, "not an embeddings list"),
        ] {
            let err = parse_reply(reply, n).unwrap_err();
            assert!(err.contains(why), "{reply}: {err}");
        }
    }

    #[test]
    fn the_config_names_what_is_wrong() {
        let mut c = EmbeddingsConfig::new("localhost:8081", "minilm");
        assert!(c.validate().unwrap_err().contains("http or https"), "{:?}", c.validate());
        c.base_url = "http://127.0.0.1:8081/v1".into();
        c.validate().unwrap();
        c.model = " ".into();
        assert!(c.validate().unwrap_err().contains("embeddings.model is required"));
    }
}
