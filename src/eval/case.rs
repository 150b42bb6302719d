//! An eval case: one TOML file in `eval/cases/`, the format `eval/README.md` documents.
//! What it sets up on the pinned plant, what it asks, and what must hold of the answer.

use std::path::Path;

use anyhow::{Context, bail, ensure};
use serde::{Deserialize, Serialize};

/// What a case measures; the report has a line per category.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Deserialize, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Category {
    Triage,
    NormalBand,
    Flood,
    Chat,
    Hostile,
}

impl Category {
    pub fn as_str(self) -> &'static str {
        match self {
            Category::Triage => "triage",
            Category::NormalBand => "normal_band",
            Category::Flood => "flood",
            Category::Chat => "chat",
            Category::Hostile => "hostile",
        }
    }
}

#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Case {
    /// The file's stem, e.g. `triage-bearing-wear`.
    #[serde(skip)]
    pub id: String,
    pub category: Category,
    pub description: String,
    /// Readings that replace a sensor's last hours before the run.
    #[serde(default)]
    pub series: Vec<Series>,
    /// Alarm events applied through ingest before the run, oldest first.
    #[serde(default)]
    pub events: Vec<EventSpec>,
    /// A shift handover note stored before the run, as if written at the last shift change.
    pub handover: Option<String>,
    pub task: Task,
    #[serde(default)]
    pub expect: Expect,
    /// For `eval --scripted`: what an adversarial model says and calls, in order.
    #[serde(default)]
    pub script: Vec<ScriptStep>,
    /// For `eval --scripted`: what must hold even against that model (our guarantees).
    pub script_expect: Option<Expect>,
    /// For the judge model, when one is configured: what a good answer does.
    pub rubric: Option<String>,
}

/// A sensor's readings over its last `hours`, one a minute up to the plant's end:
/// a line from `from` to `to`, with `noise` (a fixed pattern, not random) and an
/// optional `spike` at a minute counted back from the end.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Series {
    pub sensor: String,
    pub hours: u32,
    pub from: f64,
    pub to: f64,
    #[serde(default)]
    pub noise: f64,
    /// (minutes before the end, value)
    pub spike: Option<(u32, f64)>,
    /// The value steps from `from` to `to` this many minutes before the end, instead of
    /// moving in a line.
    pub step_at: Option<u32>,
}

/// An alarm event as SCADA sends it, `minutes_ago` before the plant's end.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct EventSpec {
    pub asset: String,
    pub sensor: Option<String>,
    pub code: String,
    pub severity: String,
    #[serde(default = "raised")]
    pub state: String,
    #[serde(default)]
    pub minutes_ago: u32,
    pub value: Option<f64>,
    pub threshold: Option<f64>,
    #[serde(default)]
    pub message: String,
    /// The triage note already written for this occurrence (its summary), as an
    /// earlier triage would have left it: what a repeat of the point points back to.
    pub triage_note: Option<String>,
}

fn raised() -> String {
    "raised".into()
}

/// What the agent is asked: triage of one alarm point's latest occurrence
/// (`ASSET/CODE`), of several together (a grouped flood run), or a chat question.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Task {
    pub triage: Option<String>,
    #[serde(default)]
    pub group: Vec<String>,
    pub ask: Option<String>,
}

/// What must hold; every field is optional and each given one is one check.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Expect {
    /// The run's outcome: final, degraded, budget_exceeded (default: any but failed).
    pub outcome: Option<String>,
    /// The note's urgency is one of these.
    #[serde(default)]
    pub urgency: Vec<String>,
    /// One of these words names the likely cause (in likely_causes, or the answer).
    #[serde(default)]
    pub cause: Vec<String>,
    /// Each citation prefix is cited, e.g. `arp-vibration.md`.
    #[serde(default)]
    pub cites: Vec<String>,
    /// Each phrase is in the answer (any case).
    #[serde(default)]
    pub mentions: Vec<String>,
    /// No phrase is in the answer (any case).
    #[serde(default)]
    pub forbid: Vec<String>,
    /// Figures quoted with their unit, within a tolerance.
    #[serde(default)]
    pub figures: Vec<Figure>,
    /// `none`, `any`, or the action of the proposal the run must make.
    pub work_order: Option<String>,
    /// Each tool is called.
    #[serde(default)]
    pub tools: Vec<String>,
    /// No tool of these is called.
    #[serde(default)]
    pub tools_not: Vec<String>,
    pub max_steps: Option<u32>,
    pub max_tokens: Option<u64>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Figure {
    pub value: f64,
    pub unit: String,
    pub tolerance: f64,
}

/// One scripted model reply: a final text, or tool calls.
#[derive(Debug, Clone, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptStep {
    pub text: Option<String>,
    pub call: Option<String>,
    #[serde(default)]
    pub args: toml::Table,
}

impl Case {
    fn check(&self) -> anyhow::Result<()> {
        let t = &self.task;
        let asks = usize::from(t.triage.is_some()) + usize::from(!t.group.is_empty()) + usize::from(t.ask.is_some());
        ensure!(asks == 1, "[task] takes exactly one of triage, group and ask");
        for point in t.triage.iter().chain(&t.group) {
            ensure!(point.contains('/'), "task point '{point}' is not ASSET/CODE, e.g. PUMP-007/VIB-HI");
        }
        for step in &self.script {
            ensure!(
                step.text.is_some() != step.call.is_some(),
                "a [[script]] step has either text or call (with args)"
            );
        }
        ensure!(self.script.is_empty() == self.script_expect.is_none(), "[[script]] and [script_expect] go together");
        Ok(())
    }
}

/// Every case in `dir`, in file-name order.
pub fn load(dir: &Path) -> anyhow::Result<Vec<Case>> {
    let mut paths: Vec<_> = std::fs::read_dir(dir)
        .with_context(|| format!("reading the cases in {} (--cases picks another folder)", dir.display()))?
        .filter_map(|e| e.ok().map(|e| e.path()))
        .filter(|p| p.extension().is_some_and(|e| e == "toml"))
        .collect();
    paths.sort();
    if paths.is_empty() {
        bail!("no case files (*.toml) in {}", dir.display());
    }
    paths
        .iter()
        .map(|path| {
            let text = std::fs::read_to_string(path)?;
            let mut case: Case = toml::from_str(&text).with_context(|| format!("in {}", path.display()))?;
            case.id = path.file_stem().unwrap_or_default().to_string_lossy().to_string();
            case.check().with_context(|| format!("in {}", path.display()))?;
            Ok(case)
        })
        .collect()
}
