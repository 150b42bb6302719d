//! `twinops eval`: a provider scored on the plant's own cases, with checks that are
//! code. Cases are files in `eval/cases/` (format: `eval/README.md`); they run on the
//! demo plant seeded to a fixed end, so scores compare across days and machines.
//! Retrieval is measured beside them: recall@5 and MRR of the documentation search over
//! `eval/retrieval.toml`.

mod case;
mod check;
mod report;
mod retrieval;
mod run;
pub mod upsets;

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context;

use crate::agent::config::LlmConfig;

pub use case::{Case, Category};
pub use report::Summary;
pub use run::{CaseResult, END, Plant, Provider};

#[derive(clap::Args)]
pub struct EvalArgs {
    /// Folder of case files.
    #[arg(long, default_value = "eval/cases")]
    cases: PathBuf,
    /// Questions and the chunk that answers each, for the retrieval figures.
    #[arg(long, default_value = "eval/retrieval.toml")]
    retrieval: PathBuf,
    /// Folder holding the demo plant (plant.toml and docs/).
    #[arg(long, default_value = "seed")]
    from: PathBuf,
    /// Only cases of these categories: triage, normal_band, flood, chat, hostile.
    #[arg(long, value_delimiter = ',')]
    category: Vec<String>,
    /// Only the case with this id (its file name without .toml).
    #[arg(long)]
    case: Option<String>,
    /// A second provider to run on the same cases, side by side: a config file whose
    /// [llm] chain is that provider.
    #[arg(long, value_name = "CONFIG")]
    pub compare: Option<PathBuf>,
    /// Run each case that has a [[script]] against the scripted model server playing
    /// that script (an adversarial model), checked against its [script_expect].
    #[arg(long)]
    scripted: bool,
    /// A judge model (a config file whose [llm] chain is the judge) grades answers
    /// against each case's rubric; its grade is reported apart from the checks.
    #[arg(long, value_name = "CONFIG")]
    pub judge: Option<PathBuf>,
    /// Where eval.json and eval.md are written, and the plant is seeded.
    #[arg(long, default_value = "target/eval")]
    out: PathBuf,
    /// Fail (exit 1) when the score is below the one in this file (e.g. eval/floor.toml,
    /// the rules model's score).
    #[arg(long, value_name = "FILE")]
    floor: Option<PathBuf>,
    /// Score the alarm episodes instead (grouping, initiator, consequences, similar past
    /// floods) on upsets generated from this catalogue's answers; `--floor` then takes
    /// eval/episodes-floor.toml.
    #[arg(long, value_name = "CATALOGUE", num_args = 0..=1, default_missing_value = "eval/upsets.toml")]
    episodes: Option<PathBuf>,
}

/// The provider of an [llm] chain (the rules model when it has none).
fn provider_from(llm: &LlmConfig) -> Provider {
    let models = crate::agent::models_from_config(llm);
    let name = match models.first() {
        Some(m) if models.len() > 1 => format!("{} (+{} fallback)", m.name(), models.len() - 1),
        Some(m) => m.name().to_string(),
        None => "rules".into(),
    };
    Provider { name, models }
}

/// The chains to run: the provider under test, the one it is compared with
/// (`--compare`), and the judge (`--judge`).
pub struct Chains {
    pub tested: LlmConfig,
    pub compare: Option<LlmConfig>,
    pub judge: Option<LlmConfig>,
    /// `[embeddings]`: when set, retrieval is also measured with BM25 fused with them.
    pub embeddings: Option<crate::rag::EmbeddingsConfig>,
}

/// Runs the eval. Returns whether the score held the floor.
pub fn main(args: &EvalArgs, chains: &Chains) -> anyhow::Result<bool> {
    if let Some(catalogue) = &args.episodes {
        return upsets::main(catalogue, &args.from, &args.out, args.floor.as_deref());
    }
    let mut cases = case::load(&args.cases)?;
    cases.retain(|c| {
        (args.category.is_empty() || args.category.iter().any(|k| k == c.category.as_str()))
            && args.case.as_ref().is_none_or(|id| *id == c.id)
            && (!args.scripted || !c.script.is_empty())
    });
    anyhow::ensure!(
        !cases.is_empty(),
        "no case matches --category / --case{}",
        if args.scripted { " with a [[script]]" } else { "" }
    );
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().build()?;
    eprintln!(
        "seeding the pinned demo plant (end {}) in {} ...",
        crate::domain::Timestamp::from_unix(END).to_rfc3339(),
        args.out.display()
    );
    let plant = Plant::seed(&args.from, &args.out)?;
    let judge = chains.judge.as_ref().map(provider_from);
    let mut runs =
        vec![rt.block_on(run_all(&plant, &cases, provider_from(&chains.tested), args.scripted, judge.as_ref()))?];
    if let Some(other) = &chains.compare {
        runs.push(rt.block_on(run_all(&plant, &cases, provider_from(other), args.scripted, judge.as_ref()))?);
    }
    let retrieval = retrieval::measure(&plant, &args.retrieval, chains.embeddings.as_ref())?;
    let summaries: Vec<Summary> = runs.iter().map(|(name, results)| Summary::of(name, results)).collect();
    report::print(&summaries, &runs, &retrieval);
    report::write(&args.out, &summaries, &runs, &retrieval)?;
    eprintln!("wrote {} and {}", args.out.join("eval.json").display(), args.out.join("eval.md").display());
    if args.scripted {
        // Against an adversarial model, what is checked is what our code guarantees:
        // every case must hold.
        let failed: Vec<&str> = runs[0].1.iter().filter(|r| !r.passed).map(|r| r.id.as_str()).collect();
        if !failed.is_empty() {
            eprintln!("a guarantee failed against the adversarial model: {}", failed.join(", "));
            return Ok(false);
        }
    }
    match &args.floor {
        Some(path) => report::holds_floor(&summaries[0], path),
        None => Ok(true),
    }
}

/// Every case under one provider, one after another (runs share the machine's two cores).
async fn run_all(
    plant: &Plant,
    cases: &[Case],
    provider: Provider,
    scripted: bool,
    judge: Option<&Provider>,
) -> anyhow::Result<(String, Vec<CaseResult>)> {
    let mut results = Vec::new();
    let name = if scripted { "scripted (adversarial)".to_string() } else { provider.name.clone() };
    for case in cases {
        let (server, provider) = if scripted {
            let server = crate::scripted::ScriptedServer::start(run::script_replies(&case.script)).await;
            let model: Arc<dyn crate::agent::Model> = Arc::new(crate::agent::openai::OpenAi::new(
                &server.openai_url(),
                "scripted",
                None,
                crate::agent::openai::ToolMode::Native,
                false,
            ));
            (Some(server), Provider { name: name.clone(), models: vec![model] })
        } else {
            (None, Provider { name: provider.name.clone(), models: provider.models.clone() })
        };
        let expect = if scripted { case.script_expect.clone().unwrap_or_default() } else { case.expect.clone() };
        let mut result =
            run::run_case(plant, case, &provider, &expect).await.with_context(|| format!("case {}", case.id))?;
        if let (Some(judge), Some(rubric)) = (judge, &case.rubric) {
            result.judge = report::grade(judge, case, rubric, &result.answer).await;
        }
        eprintln!("  {:<36} {}", case.id, if result.passed { "pass".to_string() } else { report::failures(&result) });
        drop(server);
        results.push(result);
    }
    Ok((name, results))
}
