//! Embeddings fused with BM25 (`[embeddings]`): chunk vectors from an OpenAI-compatible
//! `/v1/embeddings` endpoint over real HTTP, stored in SQLite, kept in step with the
//! documents, and a search that never depends on the endpoint being up. The scripted
//! server stands in for the model here; against a real one (llama.cpp's llama-server
//! serving all-MiniLM-L6-v2, `TWINOPS_TEST_EMBEDDINGS_URL`), the retrieval figures must
//! beat BM25's alone.

mod common;

use std::process::Command;

use common::Plant;
use serde_json::Value;
use twinops::approvals::Approvals;
use twinops::domain::Timestamp;
use twinops::rag::{DocIndex, Embedder, EmbeddingsConfig, SourceDoc, embed_chunks, index_docs};
use twinops::scripted::ScriptedServer;

/// A toy model: a dimension per concept, counting its words (and a constant, so that no
/// vector is zero). Enough to find a chunk by meaning when it shares no word with the query.
fn concepts(text: &str) -> Vec<f32> {
    const CONCEPTS: [&[&str]; 4] = [
        &["gravel", "marbles", "rattling", "crackling", "cavitation"],
        &["current", "amps", "overload", "motor"],
        &["level", "reservoir", "tank", "overflow"],
        &["vibration", "shaking", "bearing"],
    ];
    let lower = text.to_lowercase();
    let words: Vec<&str> = lower.split(|c: char| !c.is_alphanumeric()).collect();
    let mut v: Vec<f32> = CONCEPTS.iter().map(|c| words.iter().filter(|w| c.contains(w)).count() as f32).collect();
    v.push(0.05);
    v
}

fn embedder(server: &ScriptedServer) -> Embedder {
    Embedder::new(EmbeddingsConfig::new(server.openai_url(), "concepts"))
}

fn citations(p: &Plant, docs: &DocIndex, query: &str) -> Vec<String> {
    let db = p.store.read().unwrap();
    docs.search(&db, query, 5).unwrap().into_iter().map(|h| h.citation.to_string()).collect()
}

/// The inputs of every embeddings request the server received.
fn inputs(server: &ScriptedServer) -> Vec<Vec<String>> {
    (server.requests().iter())
        .map(|r| r["input"].as_array().unwrap().iter().map(|i| i.as_str().unwrap().to_string()).collect())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chunks_are_embedded_once_and_found_by_meaning() {
    let server = ScriptedServer::start(Vec::new()).await;
    server.serve_embeddings(concepts);
    let mut p = Plant::new();
    let chunks = p.count("SELECT count(*) FROM chunks") as usize;
    let (store, e) = (p.store.clone(), embedder(&server));
    let (first, again) =
        tokio::task::spawn_blocking(move || (embed_chunks(&store, &e).unwrap(), embed_chunks(&store, &e).unwrap()))
            .await
            .unwrap();
    assert_eq!((first.embedded, first.kept), (chunks, 0));
    assert_eq!((again.embedded, again.kept), (0, chunks), "nothing to do the second time");
    let sent = inputs(&server);
    assert_eq!(sent.len(), chunks.div_ceil(32), "a request per batch of 32");
    let first = p.text("SELECT d.title FROM chunks c JOIN documents d ON d.id = c.document_id ORDER BY c.id LIMIT 1");
    assert!(sent[0][0].starts_with(&first), "heading then body: {}", sent[0][0]);
    assert!(sent.iter().flatten().all(|t| t.chars().count() <= 1_000), "inputs cut to max_input_chars");
    assert_eq!(
        p.count("SELECT count(*) FROM chunk_vectors WHERE model = 'concepts' AND length(vector) = 20"),
        chunks as i64
    );

    // No word of the question is in the cavitation guide; its meaning is.
    let query = "marbles rattling inside";
    let lexical = citations(&p, &p.docs, query);
    assert!(lexical.iter().all(|c| !c.starts_with("cavitation-guide.md")), "{lexical:?}");
    p.docs = DocIndex::with_embeddings(embedder(&server));
    let docs = p.docs.clone();
    let (p, fused) = tokio::task::spawn_blocking(move || {
        let fused = citations(&p, &docs, query);
        (p, fused)
    })
    .await
    .unwrap();
    assert!(fused[..3].iter().any(|c| c.starts_with("cavitation-guide.md")), "{fused:?}");
    assert_eq!(inputs(&server).last().unwrap(), &[query.to_string()], "the query was embedded");

    // An alarm code the documents hold is matched by words alone: the rules model reads
    // the first hit for an alarm's code, and an embedding model reads codes as noise.
    let asked = server.requests().len();
    let (code, plain) = tokio::task::spawn_blocking(move || {
        (citations(&p, &p.docs, "VIB-HI pump"), citations(&p, &DocIndex::new(), "VIB-HI pump"))
    })
    .await
    .unwrap();
    assert_eq!(code, plain);
    assert_eq!(server.requests().len(), asked, "no embedding asked for");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_changed_document_is_re_embedded_alone() {
    let server = ScriptedServer::start(Vec::new()).await;
    server.serve_embeddings(concepts);
    let p = Plant::new();
    let (store, e) = (p.store.clone(), embedder(&server));
    tokio::task::spawn_blocking(move || {
        embed_chunks(&store, &e).unwrap();
        let text = "# Overflow drill\n\n## Steps\n\nClose the inlet valve when the tank level passes 95%.\n\n## After\n\nLog the overflow.\n";
        let report = index_docs(&store, vec![SourceDoc::markdown("om-reservoir.md", text)], Timestamp::now()).unwrap();
        assert_eq!(report.updated, 1);
        let r = embed_chunks(&store, &e).unwrap();
        assert_eq!(r.embedded, 2, "the new document's two sections, nothing else: {r:?}");
    })
    .await
    .unwrap();
    let last = inputs(&server).pop().unwrap();
    assert!(last.iter().all(|t| t.starts_with("Overflow drill")), "{last:?}");
    assert_eq!(
        p.count("SELECT count(*) FROM chunk_vectors v LEFT JOIN chunks c ON c.id = v.chunk_id WHERE c.id IS NULL"),
        0,
        "the replaced chunks' vectors went with them"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn search_answers_by_words_when_the_embeddings_server_fails() {
    // A server that serves no embeddings (llama-server without --embeddings).
    let chat_only = ScriptedServer::start(Vec::new()).await;
    let p = Plant::new();
    let (store, e) = (p.store.clone(), embedder(&chat_only));
    let err = tokio::task::spawn_blocking(move || embed_chunks(&store, &e).unwrap_err()).await.unwrap();
    let err = format!("{err:#}");
    assert!(err.contains("HTTP 501") && err.contains("--embeddings") && err.contains("concepts"), "{err}");

    // Vectors stored, then the server gone: the search is BM25's, not an error.
    let server = ScriptedServer::start(Vec::new()).await;
    server.serve_embeddings(concepts);
    let (store, e) = (p.store.clone(), embedder(&server));
    tokio::task::spawn_blocking(move || embed_chunks(&store, &e).unwrap()).await.unwrap();
    let docs = DocIndex::with_embeddings(embedder(&server));
    drop(server);
    let query = "suction strainer blocked";
    let expected = citations(&p, &p.docs, query);
    let (p, got) = tokio::task::spawn_blocking(move || {
        let got = citations(&p, &docs, query);
        (p, got)
    })
    .await
    .unwrap();
    assert_eq!(got, expected);

    // A server that takes the connection and never answers: the question's embedding
    // times out (query_timeout_ms), and BM25 answers.
    let silent = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let mut cfg = EmbeddingsConfig::new(format!("http://{}/v1", silent.local_addr().unwrap()), "concepts");
    cfg.query_timeout_ms = 300;
    let docs = DocIndex::with_embeddings(Embedder::new(cfg));
    let got = tokio::task::spawn_blocking(move || citations(&p, &docs, query)).await.unwrap();
    assert_eq!(got, expected);
    drop(silent);
}

#[test]
fn the_daemon_refuses_half_an_embeddings_setting() {
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_twinops"))
        .arg("--db")
        .arg(dir.path().join("t.db"))
        .args(["docs", "search", "pump"])
        .env("TWINOPS_EMBEDDINGS_BASE_URL", "http://127.0.0.1:9/v1")
        .env_remove("TWINOPS_EMBEDDINGS_MODEL")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success() && stderr.contains("TWINOPS_EMBEDDINGS_MODEL is not"), "{stderr}");
}

/// Against a real embedding model: the retrieval figures of `twinops eval` with BM25
/// fused with all-MiniLM-L6-v2 (served by llama.cpp's llama-server) beat BM25's alone.
#[test]
fn a_real_embedding_model_beats_bm25_alone() {
    let Some(url) = common::external(
        "TWINOPS_TEST_EMBEDDINGS_URL",
        "an OpenAI-compatible /v1/embeddings server (llama-server --embeddings with all-MiniLM-L6-v2; .ci/run starts one)",
    ) else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let out = Command::new(env!("CARGO_BIN_EXE_twinops"))
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .args(["eval", "--case", "chat-asset-status", "--out"])
        .arg(dir.path())
        .env("TWINOPS_EMBEDDINGS_BASE_URL", &url)
        .env("TWINOPS_EMBEDDINGS_MODEL", "all-MiniLM-L6-v2")
        .env_remove("TWINOPS_LLM_KIND")
        .output()
        .unwrap();
    let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    assert!(out.status.success(), "{stdout}\n{stderr}");
    let report: Value = serde_json::from_str(&std::fs::read_to_string(dir.path().join("eval.json")).unwrap()).unwrap();
    let (bm25, fused) = (&report["retrieval"][0], &report["retrieval"][1]);
    assert_eq!(fused["method"], "bm25 + all-MiniLM-L6-v2 (RRF)", "{report}");
    let f = |r: &Value, k: &str| r[k].as_f64().unwrap();
    assert!(f(fused, "paraphrase_recall_at_5") > f(bm25, "paraphrase_recall_at_5"), "{stdout}");
    assert!(f(fused, "mrr") > f(bm25, "mrr"), "{stdout}");
    assert!(f(fused, "recall_at_5") >= f(bm25, "recall_at_5"), "{stdout}");
    // And no question is answered worse: fusion only lifts.
    let rank = |r: &Value, i: usize| r["ranked"][i]["rank"].as_u64().unwrap_or(u64::MAX);
    for i in 0..bm25["ranked"].as_array().unwrap().len() {
        assert!(rank(fused, i) <= rank(bm25, i), "{}: {stdout}", bm25["ranked"][i]["question"]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn housekeeping_embeds_what_has_no_vector_and_survives_a_server_that_fails() {
    use twinops::schedule::housekeeping;
    let p = Plant::new();
    let now = common::end();
    let chat_only = ScriptedServer::start(Vec::new()).await;
    let h = housekeeping(
        &p.store,
        &Approvals::new(p.store.writer().clone()),
        None,
        &DocIndex::with_embeddings(embedder(&chat_only)),
        now,
    )
    .await
    .unwrap();
    assert_eq!(h.docs_embedded, 0, "logged, not an error: the rest of housekeeping ran");
    let server = ScriptedServer::start(Vec::new()).await;
    server.serve_embeddings(concepts);
    let index = DocIndex::with_embeddings(embedder(&server));
    let h = housekeeping(&p.store, &Approvals::new(p.store.writer().clone()), None, &index, now).await.unwrap();
    assert_eq!(h.docs_embedded as i64, p.count("SELECT count(*) FROM chunks"));
    assert_eq!(
        housekeeping(&p.store, &Approvals::new(p.store.writer().clone()), None, &index, now)
            .await
            .unwrap()
            .docs_embedded,
        0
    );
}
